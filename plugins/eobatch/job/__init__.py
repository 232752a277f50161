"""eobatch.job: what builds and launches the Spark stage job, without Airflow.

``launch`` makes a stage attempt's spark-submit: the job spec, the code zip of ``--py-files``
(the modules of ``launch.SHIPPED``, and only those), the jars and the ``--conf``; the Airflow
stage operator and the tests run the same command. ``driver_jvm`` chooses the driver JVM's
collector and class-data archive; ``jvm`` finds the job's own JVM classes from the Spark
driver (the one module of this package shipped to Spark). The job itself is
``spark_jobs/stage_batch.py``.

May import: ``eobatch.core``, ``eobatch.config``, ``eobatch.storage``, ``eobatch.sources``,
``eobatch.sinks``, ``eobatch.pipelines``, ``eobatch.protocol``.
Must not import: Apache Airflow, pyspark, ``eobatch.airflow``, ``eobatch.ui``, ``eobatch.cli``
(tests/unit/test_packages.py checks every import statement).
"""
