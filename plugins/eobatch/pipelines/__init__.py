"""eobatch.pipelines: the pipeline files read: from a YAML file to a ``config.pipeline.PipelineConfig``.

``loader`` reads and checks a pipeline YAML (pydantic and PyYAML) on the typed section models of
``config.model``, the ``source:`` section of each source kind and the keys each sink kind adds
under ``sink:`` (the kind's own model), and puts the configuration contract together from each
kind's part (``config.contract``); it fills in what the sink's kind answers for the pipeline (its
mode, its participants). ``json_schema`` writes the JSON Schema of the file (``make schema``).

Above the kinds, since it asks them for their sections, and under the protocol, which compares a
plan with the file (``loader.config_values``, ``config_edits``). The Spark job never imports it
(tests/unit/job/test_launch.py): what the job needs of the configuration is ``config``'s.

May import: ``eobatch.errors``, ``eobatch.settings``, ``eobatch.paths``, ``eobatch.config``,
``eobatch.sources`` and ``eobatch.sinks`` (the kinds contribute their own sections), pydantic and PyYAML.
Must not import: Apache Airflow, pyspark, ``eobatch.protocol``, ``eobatch.job``, ``eobatch.airflow``,
``eobatch.ui``, ``eobatch.cli`` (tests/unit/test_packages.py checks every import statement).
"""
