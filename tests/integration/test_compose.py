"""A pipeline's tasks in a user's own DAG (``eobatch.airflow.pipeline_tasks``), through the real
`airflow dags test`, real spark-submit and real Delta tables read with delta-rs.

The bug this guards: the tasks found each other's XComs by fixed task ids ("plan", "stage", ...);
inside a TaskGroup the ids are ``group.plan`` etc., every pull returned None, every task believed
there was nothing to do and the run was green with nothing published."""

from __future__ import annotations

import os

import pytest

from support.checks import assert_exactly_once, read_rows
from support.harness import orders, write_pipeline

pytestmark = pytest.mark.integration

# The user's DAG: its own task before (moves the inbox's files into the landing folder: the plan
# must see them), the pipeline's group nested in the user's group, its own task after (counts
# the sink table's rows with delta-rs: the commit must be done), its own param.
USER_DAG = """\
import datetime as dt
import os

from airflow.sdk import DAG, TaskGroup, task

from eobatch.airflow import pipeline_params, pipeline_tasks

PIPELINE, INBOX, LANDING, SINK, OUT = {pipeline!r}, {inbox!r}, {landing!r}, {sink!r}, {out!r}

with DAG("my_etl", schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), catchup=False,
         params={{"region": "eu", **pipeline_params(PIPELINE)}}):

    @task
    def extract(**context):
        for name in sorted(os.listdir(INBOX)):
            os.replace(os.path.join(INBOX, name), os.path.join(LANDING, name))

    @task
    def report(**context):
        from deltalake import DeltaTable

        rows = DeltaTable(SINK).to_pyarrow_table().num_rows
        with open(os.path.join(OUT, context["run_id"].replace(":", "_")), "w") as f:
            f.write(f"{{context['params']['region']}} {{rows}}")

    with TaskGroup("ingest") as ingest:
        pipeline_tasks(PIPELINE)  # group "orders" in group "ingest": ingest.orders.plan, ...
    extract() >> ingest >> report()
"""

# Misuse: a pipeline's operator alone in a DAG (no plan task before it).
LONELY_DAG = """\
import datetime as dt

from airflow.sdk import DAG

from eobatch.airflow.operators import StageOperator

with DAG("lonely_stage", schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)):
    StageOperator(task_id="stage", pipeline_file={pipeline!r})
"""


@pytest.fixture
def user_dags(tmp_path):
    p = write_pipeline(tmp_path)
    folder, inbox, out = tmp_path / "user_dags", tmp_path / "inbox", tmp_path / "reports"
    for d in (folder, inbox, out):
        d.mkdir()
    (folder / "my_etl.py").write_text(USER_DAG.format(pipeline=str(p.yaml_path), inbox=str(inbox),
                                                      landing=str(p.landing), sink=str(p.sink), out=str(out)))
    (folder / "lonely.py").write_text(LONELY_DAG.format(pipeline=str(p.yaml_path)))
    return p, {"AIRFLOW__CORE__DAGS_FOLDER": str(folder)}, inbox, out


def _to_inbox(p, inbox, name, records):
    """Land a file, then move it to the inbox: the DAG's own first task lands it."""
    path = p.land(name, records)
    os.replace(path, inbox / name)


def _lines(run, task: str) -> str:
    return "\n".join(line for line in run.log.splitlines() if task in line)[-6000:]


def _ok(run):
    assert run.rc == 0 and run.state == "success", run.log[-6000:]


def test_a_user_dag_with_the_pipeline_group_nested_in_its_own_publishes_each_record_once(user_dags, airflow):
    p, env, inbox, out = user_dags
    _to_inbox(p, inbox, "a.jsonl", orders("a", 40))
    r1 = airflow(p, extra_env=env, dag_id="my_etl")
    _ok(r1)
    assert "plan: batch 1 PLANNED: 1 files" in r1.log and "commit: batch 1 COMMITTED" in r1.log, r1.log[-6000:]
    assert_exactly_once(p, batches=1)
    assert [f.read_text() for f in out.iterdir()] == ["eu 40"], ("the user's task after the group saw the commit",
                                                                 _lines(r1, "report"))

    # the next file, the run triggered with the user's own param and one of the pipeline's
    _to_inbox(p, inbox, "b.jsonl", orders("b", 25))
    r2 = airflow(p, extra_env=env, dag_id="my_etl", conf={"region": "us", "max_records_per_batch": 1000})
    _ok(r2)
    assert "plan: batch 2 PLANNED: 1 files" in r2.log, r2.log[-6000:]
    assert_exactly_once(p, batches=2)
    assert len(read_rows(p.sink)) == 65
    assert sorted(f.read_text() for f in out.iterdir()) == ["eu 40", "us 65"]


def test_an_operator_alone_in_a_dag_fails_its_task_and_says_how_to_use_the_group(user_dags, airflow):
    p, env, _inbox, _out = user_dags
    p.land("a.jsonl", orders("a", 5))
    r = airflow(p, extra_env=env, dag_id="lonely_stage")
    assert r.rc != 0 or r.state != "success", r.log[-6000:]
    assert r.state == "failed", r.log[-6000:]
    assert "pipeline_tasks" in r.log and "'plan'" in r.log, r.log[-6000:]
    assert not (p.sink / "_eo_ledger" / "attempts").exists() and not (p.sink / "_delta_log").exists()

