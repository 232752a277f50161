"""eobatch: exactly-once micro-batches into Delta Lake, driven by Airflow, computed by Spark.

The packages say where their code runs (each ``__init__`` says what it may import and what it
must not; tests/unit/test_packages.py checks every import statement):

* ``errors``: the one error taxonomy (wait, retry, terminal) that every layer raises; imports
  nothing of eobatch.
* ``core``: the vocabulary (the ledger, its records and checkpoints, table files, the kinds'
  registry): plain Python, pyarrow and deltalake; no Airflow, no pyspark.
* ``config``: the pipeline file: a loaded pipeline, its typed models' building blocks, the job's
  side of it without pydantic.
* ``storage``: local and S3 files, S3 settings, connection credentials without Airflow.
* ``sources``, ``sinks``: the plug-in kinds, each one package (planner, Spark reader or step).
* ``pipelines``: the pipeline files read (the loader, with each kind's section; the JSON Schema).
* ``protocol``: the exactly-once protocol above the kinds (verbs, repairs, verify, a run's
  batches, replay, backlog, maintenance); no Airflow, no pyspark.
* ``job``: what builds and launches the Spark job (``launch.SHIPPED``: the code it ships).
* ``airflow``: operators, DAG factory, hooks, assets, alerts, metrics, params.
* ``ui``: the ledger page; ``cli``: the command line (``python -m eobatch.cli``).

Nothing here imports pyspark at module level.
"""

__version__ = "0.3.0"
