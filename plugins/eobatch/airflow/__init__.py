"""eobatch.airflow: the Airflow side: thin declarations over the protocol.

``operators`` (the tasks of a pipeline's DAG: plan, stage, verify, commit, abort, recover,
maintain), ``dag_factory`` (a DAG per pipeline file), ``hooks`` (AWS credentials from an Airflow
connection, and whether they may travel to spark-submit), ``connections`` (the reader of
Airflow connections that ``eobatch.storage.credentials`` uses), ``assets``, ``alerts``,
``metrics`` and ``params`` (what a run's trigger may say).

May import: anything of ``eobatch`` but ``ui`` and ``cli``, and Apache Airflow (``import airflow``
here is an absolute import: Apache Airflow, not this package).
Must not import: pyspark, ``eobatch.ui``, ``eobatch.cli`` (tests/unit/test_packages.py).
"""
