"""``eobatch run`` (``make run``): n runs of a pipeline's DAG, one after another, each with
``airflow dags test`` of the Airflow installed here, whose DAG folder must build the pipeline's DAG
(``pipeline_dags``). Each run's task lines are shown as they are logged; a run that does not end
in ``success`` stops the loop (exit 1) with the log's last errors and the log's path.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys

from ..pipelines.loader import PipelineConfig, find_pipeline

# the lines of a run's log worth showing: the protocol's steps and the job's progress
SHOWN = re.compile(r"\] (recover|plan|stage|verify|commit|abort): |\[eobatch\]|AirflowSkipException|nothing new")
FINISHED = re.compile(r"DagRun Finished: .*state=([a-z_]+)")


def run_date(cfg: PipelineConfig, date: str) -> str:
    """The logical date ``airflow dags test`` needs so that the run covers ``date`` (ISO): in
    interval mode the end of the interval that starts at ``date`` (a manual run gets the interval
    that *ends* at its date; a backfill's run the interval that *starts* at its logical date).
    ValueError for a date that is not ISO."""
    when = dt.datetime.fromisoformat(date.replace("Z", "+00:00"))
    if cfg.mode != "interval":
        return date
    _start, end = cfg.interval_starting(when)
    return end.isoformat()


def airflow_bin() -> str:
    """The ``airflow`` command of this environment: on PATH, else beside this Python."""
    return shutil.which("airflow") or os.path.join(os.path.dirname(sys.executable), "airflow")


def run_dags_test(pipeline: str, runs: int = 1, conf: str | None = None, date: str | None = None) -> int:
    if runs < 1:
        print(f"error: RUNS must be a positive integer, got {runs}", file=sys.stderr)
        return 2
    if conf:
        try:
            json.loads(conf)
        except ValueError as e:
            print(f"error: --conf is not JSON: {e}", file=sys.stderr)
            return 2
    airflow = airflow_bin()
    cfg = find_pipeline(pipeline)  # the pipeline exists and loads (KeyError, ConfigError otherwise)
    try:
        when = run_date(cfg, date) if date else None
    except ValueError as e:
        print(f"error: DATE {date!r}: {e}", file=sys.stderr)
        return 2
    home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    log_path = os.path.join(home, f"last-run-{pipeline}.log")
    for i in range(1, runs + 1):
        args = [airflow, "dags", "test", pipeline] + ([when] if when else []) + (["-c", conf] if conf else [])
        print(f"== run {i}/{runs} of {pipeline} (log: {log_path})", file=sys.stderr)
        with open(log_path, "w") as log:
            rc = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT).returncode
        with open(log_path, errors="replace") as f:
            text = f.read()
        for line in text.splitlines():
            if SHOWN.search(line):
                line = re.sub(r"^[0-9TZ:.-]+ \[[a-z ]+\] ", "", line)
                print("   " + re.sub(r" \[(airflow|eobatch)[^]]*\].*$", "", line), file=sys.stderr)
        states = FINISHED.findall(text)
        state = states[-1] if states else "unknown"
        if rc != 0 or state != "success":
            print(f"error: run {i} of {pipeline} ended with state '{state}' (exit {rc}); see {log_path}", file=sys.stderr)
            errors = [ln for ln in text.splitlines() if re.search(r"ParamValidationError|Error|Exception", ln)
                      and not ln.lstrip().startswith("at ")]
            for ln in errors[-5:]:
                print(ln, file=sys.stderr)
            return 1
    return 0
