"""sweep over real files: it only touches decided batches, so it never removes the files of a
live attempt (another run's, or a zombie's that may still become PREPARED) — the race that let
a concurrent run's recover delete an interval batch while it was being staged."""

from __future__ import annotations

from pathlib import Path

from eobatch.formats import BatchPlan, PreparedBatch, fingerprint_of
from eobatch.protocol import Protocol


def _plan(batch_id: int) -> BatchPlan:
    return BatchPlan(pipeline="orders", batch_id=batch_id, source_kind="files", range={"files": []},
                     rows_in=1, config_fingerprint="f", planned_at="2026-01-01T00:00:00Z")


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
    proto.ledger.put_aborted(1, "a-dead", {"reason": "stage failed"})
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
