"""DAG factory: one exactly-once DAG per pipeline YAML in include/pipelines/ (or $PIPELINES_DIR).

A YAML that fails validation never stops the valid ones: it becomes an import error of this
file, naming the YAML and the key, visible in the UI and in `airflow dags list-import-errors`.
"""

import os
import sys

_PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins")
if _PLUGINS not in sys.path:  # Airflow adds plugins/ itself; `python dags/...` and tests may not
    sys.path.insert(0, _PLUGINS)

from eobatch.airflow.dag_factory import build_all, invalid_pipelines_dag  # noqa: E402

_dags, _errors = build_all()
globals().update({f"dag_{name}": dag for name, dag in _dags.items()})
if _errors:
    dag_invalid_pipelines = invalid_pipelines_dag(_errors)
