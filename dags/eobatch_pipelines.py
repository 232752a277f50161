"""DAG factory: one exactly-once DAG per pipeline YAML of the pipelines folder ($PIPELINES_DIR,
the Airflow option [eobatch] pipelines_dir, or include/pipelines/ of this checkout).

A YAML that fails validation never stops the valid ones: it becomes an import error of this
file, naming the YAML and the key, visible in the UI and in `airflow dags list-import-errors`.
With eobatch installed, a DAG folder needs only the last two lines (`pipeline_dags(globals(),
"/path/to/pipelines")`).
"""

import os
import sys

_PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins")
if _PLUGINS not in sys.path:  # Airflow adds plugins/ itself; `python dags/...` and tests may not
    sys.path.insert(0, _PLUGINS)

from eobatch.airflow import pipeline_dags  # noqa: E402

pipeline_dags(globals())
