"""eobatch.config: the pipeline file: what it may say and what a loaded pipeline is.

``pipeline`` holds the loaded ``PipelineConfig``, ``sections`` the bases of the kinds' sections
(``SourceConfig``, ``SinkConfig``), each kind's own subclass of them; ``model`` the building
blocks of the typed section models (pydantic); ``yamlfile`` a file's bytes read into a YAML
mapping (every cost bounded, whatever the file holds); ``policy`` the ``${VAR}`` and spark-conf rules; ``schedule``
the cron and interval rules. The loader that reads a file into a ``PipelineConfig``, with each
kind's section, and the JSON Schema of the file are ``eobatch.pipelines``' (above the kinds). The
Spark job's side of the configuration needs neither pydantic nor YAML: ``contract`` (the keys a
batch depends on), ``ddl`` (the schema's DDL), ``schemas`` (Arrow schemas as the job records
them), ``lines`` (what a record, a line, is) and ``sections``.

This ``__init__`` imports nothing: the Spark job imports ``config.contract``, ``ddl``,
``schemas``, ``lines`` and ``sections`` and must never load pydantic or PyYAML
(tests/unit/job/test_launch.py).

May import: ``eobatch.errors`` (the exception types), ``eobatch.settings``, ``eobatch.paths``.
Must not import: Apache Airflow, pyspark, the rest of ``eobatch.core``, ``eobatch.storage``, the
kinds (``eobatch.sources``, ``eobatch.sinks``: the layer above), ``eobatch.pipelines``,
``eobatch.protocol``, ``eobatch.airflow``, ``eobatch.job``, ``eobatch.ui``, ``eobatch.cli``
(tests/unit/test_packages.py checks every import statement).
"""
