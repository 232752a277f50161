"""Runs of one pipeline that overlap (interval mode, backfills), on real files, no Spark:

* sweep only touches decided batches, so it never removes the files of a live attempt
  (another run's, or a zombie's that may still become PREPARED);
* a run that plans while another run's batch is PREPARED but not yet committed waits
  (BatchInFlight) instead of failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from eobatch.formats import BatchPlan, PreparedBatch, fingerprint_of
from eobatch.protocol import BatchInFlight, Protocol, ProtocolError


def _plan(batch_id: int, run_id: str | None = None, interval: dict | None = None) -> BatchPlan:
    return BatchPlan(pipeline="orders", batch_id=batch_id, source_kind="files", range={"files": []},
                     rows_in=1, config_fingerprint="f", planned_at="2026-01-01T00:00:00Z",
                     run_id=run_id, interval=interval)


def _stage(proto: Protocol, batch_id: int, attempt: str, n: int = 2) -> list[str]:
    """Files as an attempt leaves them in both tables' staging folders; their paths relative to the table."""
    rels = []
    for participant in ("sink", "quarantine"):
        table = Path(proto.layout.table(participant))
        for i in range(n):
            rel = f"{proto.layout.attempt_staging_rel(batch_id, attempt)}/part-{i}.parquet"
            (table / rel).parent.mkdir(parents=True, exist_ok=True)
            (table / rel).write_bytes(b"x" * (i + 1))
            rels.append(f"{participant}:{rel}")
    return rels


def _left(proto: Protocol) -> set[str]:
    out = set()
    for participant in ("sink", "quarantine"):
        table = Path(proto.layout.table(participant))
        out |= {f"{participant}:{p.relative_to(table)}" for p in (table / "eo_batches").rglob("*") if p.is_file()}
    return out


def _prepare(proto: Protocol, batch_id: int, attempt: str, rels: list[str]) -> None:
    adds = {p: [{"path": r.split(":", 1)[1], "size": 1, "partition_values": {}, "modification_time": 0,
                 "stats": "{}"} for r in rels if r.startswith(p + ":")] for p in ("sink", "quarantine")}
    assert proto.ledger.put_prepared(PreparedBatch(
        pipeline="orders", batch_id=batch_id, attempt=attempt, adds=adds, arrow_schema={}, partition_by={},
        fingerprint=fingerprint_of(adds), rows_in=1, rows_valid=1, rows_quarantined=0, rows_published=1,
        bytes=1, files=1, prepared_at="t", verify_seconds=0.0, stage_seconds=0.0))


def test_live_attempts_of_an_undecided_batch_are_left_alone(make_cfg):
    proto = Protocol(make_cfg())
    assert proto.ledger.put_plan(_plan(1))
    live = _stage(proto, 1, "a-live")
    assert proto.sweep() == [] and proto.sweep(recent=None) == []
    assert _left(proto) == set(live)
    # a batch planned after the sweep read the ledger (its plan not visible yet): left alone too
    later = _stage(proto, 2, "a-next")
    assert proto.sweep() == [] and _left(proto) == set(live + later)


def test_aborted_attempts_of_an_undecided_batch_go(make_cfg):
    proto = Protocol(make_cfg())
    assert proto.ledger.put_plan(_plan(1))
    live = _stage(proto, 1, "a-live")
    dead = _stage(proto, 1, "a-dead")  # e.g. a zombie that wrote after its attempt was aborted
    proto.ledger.decide(1, "a-dead", "abort", {"reason": "stage failed"})
    assert len(proto.sweep()) == len(dead)
    assert _left(proto) == set(live)


def test_a_prepared_batch_keeps_exactly_its_prepared_files(make_cfg):
    proto = Protocol(make_cfg())
    assert proto.ledger.put_plan(_plan(1))
    winner = _stage(proto, 1, "a-win")
    _stage(proto, 1, "a-lost")
    _stage(proto, 1, "a-crashed")
    _prepare(proto, 1, "a-win", winner)
    proto.sweep()
    assert _left(proto) == set(winner)


def test_an_abandoned_batch_loses_everything(make_cfg):
    proto = Protocol(make_cfg(mode="interval", schedule="@hourly"))
    assert proto.ledger.put_plan(_plan(1))
    _stage(proto, 1, "a1")
    assert proto.abandon(1, "run failed")
    proto.sweep()
    assert _left(proto) == set()


def test_reset_removes_the_staged_files_of_the_batches_it_forgets(make_cfg):
    proto = Protocol(make_cfg())
    for b in (1, 2):
        assert proto.ledger.put_plan(_plan(b))
    _stage(proto, 1, "a1")
    _stage(proto, 2, "a2")
    assert proto.reset(2) == [2]
    assert _left(proto) == set(_stage(proto, 1, "a1"))  # batch 1 is undecided: kept
    assert proto.ledger.latest_batch_id() == 1


H0 = {"start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T01:00:00+00:00"}
H1 = {"start": "2026-01-01T01:00:00+00:00", "end": "2026-01-01T02:00:00+00:00"}


@pytest.mark.parametrize("mode", ["interval", "continuous"])
def test_a_run_planning_while_another_runs_batch_is_prepared_waits(make_cfg, mode):
    extra = {"mode": "interval", "schedule": "@hourly"} if mode == "interval" else {}
    proto = Protocol(make_cfg(**extra))
    assert proto.ledger.put_plan(_plan(1, run_id="run-b", interval=H1 if mode == "interval" else None))
    files = _stage(proto, 1, "a1")
    if mode == "interval":  # PLANNED by another run: wait (continuous mode re-stages it instead)
        with pytest.raises(BatchInFlight, match="run run-b"):
            proto.plan(interval=H0, run_id="run-a")
    else:
        assert proto.plan(run_id="run-a") == (proto.ledger.plan(1), False)
    _prepare(proto, 1, "a1", files)
    # between run-b's verify and the end of its commit: wait, do not fail
    with pytest.raises(BatchInFlight, match="PREPARED and not yet committed"):
        proto.plan(interval=H0 if mode == "interval" else None, run_id="run-a")
    # its own run's PREPARED batch (a plan task cleared alone): fail fast, say what to clear
    with pytest.raises(ProtocolError, match="of this run is PREPARED") as e:
        proto.plan(interval=H1 if mode == "interval" else None, run_id="run-b")
    assert not isinstance(e.value, BatchInFlight)
