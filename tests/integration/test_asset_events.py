"""Asset events that a killed task lost, emitted again exactly once: real `airflow dags test` runs
(the Task SDK's inlet_events read Airflow's own metadata database), real spark-submit and Delta.
The events are read back from that database with SQL, as Airflow stored them."""

from __future__ import annotations

import configparser
import json
import sqlite3

import pytest

from support.harness import orders

pytestmark = pytest.mark.integration


def stored_events(home, table) -> list[tuple[int, str, bool]]:
    """(batch id, source task, emitted late) of every event Airflow stored on ``table``'s asset (in
    the database the home's airflow.cfg names: the fixture's homes share the session's template's)."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(home / "airflow.cfg")
    path = cfg.get("database", "sql_alchemy_conn").removeprefix("sqlite:///")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT e.extra, e.source_task_id FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                          "WHERE a.uri = ? ORDER BY e.id", ("file://" + str(table),)).fetchall()
    finally:
        db.close()
    return [(json.loads(x)["batch_id"], task, bool(json.loads(x).get("emitted_late"))) for x, task in rows]


def test_crash_after_ledger_commit_before_task_success_emits_the_event_once_later(pipeline, airflow):
    """The commit task dies after the batch's COMMITTED record and its events were added, before
    Airflow stored its success: Airflow holds no event of batch 1. The next run's recover dies the
    same way after adding them again: still none. The run after it emits them (its recover), once
    per table. (That a later task then emits none is tests/unit/airflow/test_operators.py's.)"""
    p = pipeline
    p.land("a.jsonl", orders("a", 20), bad=["{oops"])
    crashed = airflow(p, extra_env={"EOBATCH_CRASH": "commit.before_task_success"})
    assert crashed.rc != 0 and "injected crash at commit.before_task_success" in crashed.log, crashed.log[-3000:]
    assert (p.sink / "_eo_ledger" / "committed" / "0000000001.json").exists()
    assert stored_events(airflow.home, p.sink) == []

    again = airflow(p, extra_env={"EOBATCH_CRASH": "recover.before_task_success"})
    assert again.rc != 0 and "injected crash at recover.before_task_success" in again.log, again.log[-3000:]
    assert "asset event (late" in again.log
    assert stored_events(airflow.home, p.sink) == []

    r = airflow(p)  # nothing new: skipped after plan; its recover emits batch 1's events
    assert r.rc == 0 and r.state == "success", r.log[-6000:]
    assert stored_events(airflow.home, p.sink) == [(1, "recover", True)]
    assert stored_events(airflow.home, p.quarantine) == [(1, "recover", True)]
