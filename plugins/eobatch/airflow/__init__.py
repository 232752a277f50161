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

A DAG of your own holds a pipeline's tasks as a TaskGroup (``pipeline_tasks``; docs/site/compose.md)::

    with DAG("my_etl", schedule=pipeline_schedule("orders"), params=pipeline_params("orders")):
        extract() >> pipeline_tasks("orders") >> report()

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
    """The folder of pipeline files (``eobatch.pipelines.loader.pipelines_dir``: the setting
    ``[eobatch] pipelines_dir`` of ``eobatch.settings``, else a checkout's demo folder)."""
    from ..pipelines.loader import pipelines_dir as loader_pipelines_dir  # pydantic: only when asked (the module docstring)

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


def _folder(pipeline: str, directory: str | None) -> str | None:
    """The folder in which a pipeline given by name is looked up: ``directory``, else ``pipelines_dir()``
    (a path needs none)."""
    from .dag_factory import names_a_file  # the DAG factory: a DAG file only (module docstring)

    if directory or names_a_file(pipeline):
        return directory
    return pipelines_dir()


def pipeline_tasks(pipeline: str, group_id: str | None = None, *, directory: str | None = None, **kwargs: Any) -> Any:
    """A pipeline's tasks (recover >> plan >> stage >> verify >> commit, abort on failure) as a TaskGroup
    of the DAG or group being defined: ``pipeline`` is its file's path or its name in ``pipelines_dir()``
    (``directory=`` another folder); ``group_id`` default the pipeline's name. The generated DAGs are
    built of the same group's tasks (``dag_factory.add_pipeline_tasks``). docs/site/compose.md."""
    from .dag_factory import pipeline_tasks as build  # Airflow's DAG classes: a DAG file only (module docstring)

    return build(pipeline, group_id, directory=_folder(pipeline, directory), **kwargs)


def pipeline_params(pipeline: str, directory: str | None = None) -> dict[str, Any]:
    """The params of the pipeline's trigger form (its generated DAG's ``params``), for a DAG of your own:
    ``params={**pipeline_params("orders"), "region": "eu"}``. A run of a DAG that declares none of them
    still takes them from the trigger's conf; a key neither the pipeline nor the DAG declares is refused."""
    from .dag_factory import resolve_pipeline, run_params  # Airflow's Param: a DAG file only (module docstring)

    return run_params(resolve_pipeline(pipeline, _folder(pipeline, directory)).mode)


def pipeline_schedule(pipeline: str, directory: str | None = None) -> Any:
    """The pipeline's own schedule (its generated DAG's: cron, data-interval timetable, or Asset)."""
    from .dag_factory import pipeline_schedule as schedule  # Airflow's timetables: a DAG file only (docstring)

    return schedule(pipeline, _folder(pipeline, directory))
