"""eobatch.airflow: the Airflow side: thin declarations over the protocol.

``operators`` (the tasks of a pipeline's DAG: plan, stage, verify, commit, abort, recover,
maintain), ``dag_factory`` (a DAG per pipeline file), ``hooks`` (AWS credentials from an Airflow
connection, and whether they may travel to spark-submit), ``connections`` (the reader of
Airflow connections that ``eobatch.storage.credentials`` uses), ``assets``, ``alerts``,
``metrics`` and ``params`` (what a run's trigger may say).

May import: anything of ``eobatch`` but ``ui`` and ``cli``, and Apache Airflow (``import airflow``
here is an absolute import: Apache Airflow, not this package).
Must not import: pyspark, ``eobatch.ui``, ``eobatch.cli`` (tests/unit/test_packages.py).

A DAG folder needs one file of two lines to build a DAG per pipeline file of a folder::

    from eobatch.airflow import pipeline_dags
    pipeline_dags(globals(), "/path/to/pipelines")

Airflow imports this package whenever it lists providers (``provider``): the DAG factory and
Airflow's configuration are imported only when these functions are called.
"""

from __future__ import annotations

from typing import Any

from .. import settings


def airflow_option(section: str, option: str) -> str | None:
    """An option as Airflow reads it (airflow.cfg, the environment, the ``_cmd`` and ``_secret``
    forms): the reader of ``eobatch.settings`` in every process that imports this package."""
    from airflow.configuration import conf  # only when asked (see the module docstring)

    found = conf.get(section, option, fallback=None)
    return None if found is None else str(found)


settings.register_reader(airflow_option)


def pipelines_dir() -> str:
    """The folder of pipeline files (``eobatch.config.loader.pipelines_dir``: the setting
    ``[eobatch] pipelines_dir`` of ``eobatch.settings``, else a checkout's demo folder)."""
    from ..config.loader import pipelines_dir as loader_pipelines_dir  # pydantic: only when asked (the module docstring)

    return loader_pipelines_dir()


def pipeline_dags(namespace: dict[str, Any], directory: str | None = None) -> dict[str, Any]:
    """Build a DAG per pipeline file of ``directory`` (default ``pipelines_dir()``) into
    ``namespace`` (a DAG file's ``globals()``), as ``dag_<name>``, and the maintenance DAG of each.
    A file that fails validation never stops the others: its error becomes an import error of the
    DAG file, naming the file and the key (the UI and ``airflow dags list-import-errors`` show it).
    Returns the DAGs by id."""
    from .dag_factory import build_all, invalid_pipelines_dag  # Airflow's DAG classes: a DAG file only

    dags, errors = build_all(directory or pipelines_dir())
    namespace.update({f"dag_{name}": dag for name, dag in dags.items()})
    if errors:
        namespace["dag_invalid_pipelines"] = invalid_pipelines_dag(errors)
    return dags
