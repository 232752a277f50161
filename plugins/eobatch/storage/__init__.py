"""eobatch.storage: where files live: local folders and S3, and the credentials to reach them.

``fs`` is the one file-system interface of the product (local and S3, conditional writes, no
link followed); ``s3conf`` the S3 settings of a process and of the Spark job (endpoint, keys
from the environment, never on a command line); ``credentials`` reads an Airflow connection's
extra through the reader the Airflow side registers, and scrubs secrets from text, without
importing Airflow. Shipped to the Spark job whole.

May import: ``eobatch.errors`` (the exception types), pyarrow,
boto3 (inside functions).
Must not import: Apache Airflow, pyspark, the rest of ``eobatch.core``, ``eobatch.config``,
``eobatch.sources``, ``eobatch.sinks``, ``eobatch.pipelines``, ``eobatch.protocol``, ``eobatch.airflow``, ``eobatch.job``, ``eobatch.ui``,
``eobatch.cli`` (tests/unit/test_packages.py checks every import statement).
"""
