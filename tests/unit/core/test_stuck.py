"""eobatch.core.stuck: the one definition of a stuck pipeline, from a real ledger on local disk
driven by the real protocol (``BatchRun``, the pyarrow stager in place of Spark)."""

from __future__ import annotations

import os
import time

from eobatch import cli
from eobatch.core.stuck import find_stuck, first_open
from eobatch.errors import ConfigChanged
from eobatch.protocol import Protocol
from eobatch.protocol.batch_run import BatchRun, RunParams
from support.protocol_runs import failing_run, land_ids, run_next
from support.pyarrow_stager import stage


def test_a_batch_that_three_runs_failed_is_stuck_with_the_error_and_the_reset_repair(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    land_ids(cfg, "a.jsonl", range(5))
    assert run_next(proto, "manual__ok") == 1
    land_ids(cfg, "b.jsonl", range(5, 9))
    assert failing_run(proto, "manual__1") == 2
    assert failing_run(proto, "manual__2") == 2  # re-staged: the same batch
    assert first_open(proto.ledger) == 2 and find_stuck(proto.ledger, cfg) is None  # two runs: not yet
    assert failing_run(proto, "manual__3") == 2
    s = find_stuck(proto.ledger, cfg)
    assert s is not None and (s.batch_id, s.state, s.cause) == (2, "PLANNED", "runs")
    assert (s.runs, s.run_ids, s.attempts, s.aborted) == (3, ["manual__1", "manual__2", "manual__3"], 3, 3)
    assert s.since == proto.ledger.plan(2).planned_at and "limit 3 runs" in s.why
    assert s.last_error == "attempt t1-0003 aborted: run manual__3 failed"
    assert s.repair.command == "make reset-batch PIPELINE=orders BATCH=2"
    assert "fails the same way" in s.repair.name and "pause the pipeline" in s.repair.text
    text = "\n".join(s.lines())
    assert "batch 2 is PLANNED since" in text and "command: make reset-batch PIPELINE=orders BATCH=2" in text
    # a limit of 4 runs: not yet
    assert find_stuck(proto.ledger, make_cfg(alerts={"stuck_after_runs": 4})) is None


def test_a_refused_configuration_edit_is_the_last_error_and_its_own_repair_applies(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    land_ids(cfg, "a.jsonl", range(5))
    for i in (1, 2):
        failing_run(proto, f"manual__{i}")
    edited = make_cfg(schema="order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP, note STRING")
    try:
        BatchRun(Protocol(edited), run_id="manual__3").recover()
        raise AssertionError("the edit was not refused")
    except ConfigChanged:
        pass
    s = find_stuck(Protocol(edited).ledger, edited)
    assert s is not None and s.runs == 3 and s.run_ids[-1] == "manual__3"
    assert s.last_error.startswith("ConfigChanged: ") and "changed schema" in s.last_error
    assert s.repair.name == "configuration edit refused while the batch is pending"
    assert s.repair.text.startswith("put the old value(s) back and let a run commit batch 1")  # the error's own words
    assert s.repair.command == """make run PIPELINE=orders CONF='{"replan_pending": true}'"""
    # the repair, done: the batch is forgotten, planned again under the new file, and nothing is stuck
    proto = Protocol(edited)
    BatchRun(proto, run_id="manual__4", params=RunParams(replan_pending=True)).recover()
    assert first_open(proto.ledger) is None and find_stuck(proto.ledger, edited) is None
    assert run_next(proto, "manual__4") == 1
    assert find_stuck(proto.ledger, edited) is None


def test_dry_runs_do_not_count_and_a_committed_batch_is_not_stuck(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    land_ids(cfg, "a.jsonl", range(5))
    for i in (1, 2, 3):
        failing_run(proto, f"manual__dry{i}", dry_run=True)
    assert first_open(proto.ledger) == 1 and find_stuck(proto.ledger, cfg) is None
    failing_run(proto, "manual__4")
    failing_run(proto, "manual__5")
    assert find_stuck(proto.ledger, cfg) is None  # two real tries
    failing_run(proto, "manual__6")
    assert find_stuck(proto.ledger, cfg).run_ids == ["manual__4", "manual__5", "manual__6"]
    BatchRun(proto, run_id="manual__7").recover()
    attempt = stage(proto, 1)
    proto.verify(1, attempt)
    assert find_stuck(proto.ledger, cfg).state == "PREPARED"  # still not committed: its repair is the commit's
    assert find_stuck(proto.ledger, cfg).repair.command == "eobatch commit orders 1"
    proto.commit(1)
    assert first_open(proto.ledger) is None and find_stuck(proto.ledger, cfg) is None


def test_a_stage_attempt_older_than_its_bound_is_stuck_and_its_abort_command_unsticks_it(make_cfg, monkeypatch,
                                                                                          capsys):
    cfg = make_cfg(alerts={"stuck_attempt_hours": 2})
    monkeypatch.setenv("PIPELINES_DIR", os.path.dirname(cfg.file))
    proto = Protocol(cfg)
    land_ids(cfg, "a.jsonl", range(5))
    run = BatchRun(proto, run_id="scheduled__1")
    run.recover()
    [batch] = run.plan().value
    run.stage_attempts([batch], lambda: "t1-hangs")  # the stage task starts it; its Spark job never ends
    started = proto.ledger.attempt_started(batch, "t1-hangs")
    assert started["run_id"] == "scheduled__1"
    assert find_stuck(proto.ledger, cfg, now=time.time() + 3600) is None  # 1 h: within its bound
    s = find_stuck(proto.ledger, cfg, now=time.time() + 3 * 3600)
    assert s is not None and (s.cause, s.attempt, s.since, s.runs) == ("attempt", "t1-hangs", started["started_at"], 1)
    assert "has no stage summary (limit 2 h)" in s.why
    assert s.repair.command == "eobatch abort orders 1 t1-hangs"
    # the command is the real one: the attempt is aborted and the batch is no longer stuck by it
    assert cli.main(s.repair.command.split()[1:]) == 0, capsys.readouterr().err
    assert proto.ledger.aborted_info(batch, "t1-hangs") is not None
    assert find_stuck(proto.ledger, cfg, now=time.time() + 3 * 3600) is None
