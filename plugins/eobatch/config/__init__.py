"""eobatch.config: the pipeline file: what it may say and what a loaded pipeline is.

``loader`` reads and checks a pipeline YAML (pydantic and PyYAML), on the typed section models
of ``model``, its bytes read by ``yamlfile`` (every cost bounded, whatever the file holds); ``pipeline`` holds the loaded ``PipelineConfig``; ``policy`` the ``${VAR}`` and
spark-conf rules; ``schedule`` the cron and interval rules; ``json_schema`` writes the JSON
Schema of the file (``make schema``). The Spark job's side of the configuration needs neither
pydantic nor YAML: ``contract`` (the keys a batch depends on), ``ddl`` (the schema's DDL),
``schemas`` (Arrow schemas as the job records them) and ``lines`` (what a record, a line, is).

This ``__init__`` imports nothing: the Spark job imports ``config.contract``, ``ddl``,
``schemas`` and ``lines`` and must never load pydantic or PyYAML (tests/unit/job/test_launch.py).

May import: ``eobatch.errors`` (the exception types),
``eobatch.sources`` and ``eobatch.sinks`` (the kinds contribute their own sections).
Must not import: Apache Airflow, pyspark, the rest of ``eobatch.core``, ``eobatch.storage``,
``eobatch.protocol``, ``eobatch.airflow``, ``eobatch.job``, ``eobatch.ui``, ``eobatch.cli``
(tests/unit/test_packages.py checks every import statement).
"""
