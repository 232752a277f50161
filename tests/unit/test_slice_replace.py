"""Interval mode: a republish replaces exactly the files its slice's last batch published.

The commit of a batch that publishes an interval again (a late file, a re-run, a backfill with
reprocessing) removes, in the same Delta transaction, the files the newest committed batch of
that interval published, named one by one from its PREPARED record. When another writer
rewrote them (an OPTIMIZE compaction merged them into files that also hold other intervals'
rows), no replace can remove exactly the interval's earlier records: the product refuses,
loudly, at plan time, at verify time or in the commit's own snapshot, and never publishes the
interval twice. Real local files and real delta-rs; the stage job is the pyarrow stager."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from deltalake import DeltaTable
from test_late_files import iv, land, published, run

from eobatch.errors import SliceRewritten, TerminalError
from eobatch.protocol import Protocol
from support.pyarrow_stager import stage


@pytest.fixture
def by_prefix(make_cfg):
    return make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "max_records_per_batch": 100,
        "interval_prefix": "dt={ds}/hour={hh}", "settle_seconds": 0})


def compact(cfg) -> None:
    """A foreign writer's OPTIMIZE: merges the small files of every interval into one."""
    m = DeltaTable(cfg.sink_table).optimize.compact()
    assert m["numFilesRemoved"] >= 2


def test_a_late_file_of_a_compacted_interval_is_refused_loudly_never_published_twice(by_prefix):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1", "a2"])
    land(by_prefix, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    run(proto, 0), run(proto, 1)
    compact(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])
    land(by_prefix, "dt=2026-01-01/hour=02/c.jsonl", ["c1"])
    with pytest.raises(SliceRewritten, match=r"(?s)iv=20260101T000000Z.*OPTIMIZE.*twice.*later interval.*hour=00/late\.jsonl") as e:
        run(proto, 2)
    assert isinstance(e.value, TerminalError)
    assert proto.ledger.latest_batch_id() == 2  # nothing planned
    assert published(proto) == collections.Counter(["a1", "a2", "b1"])
    # the remedy the message gives: move the late file into a later interval's folder
    src = Path(by_prefix.source.path)
    (src / "dt=2026-01-01/hour=00/late.jsonl").rename(src / "dt=2026-01-01/hour=02/late.jsonl")
    run(proto, 2)
    assert published(proto) == collections.Counter(["a1", "a2", "b1", "late1", "c1"])


def test_a_rerun_of_a_compacted_interval_is_refused(by_prefix):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    land(by_prefix, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    run(proto, 0), run(proto, 1)
    compact(by_prefix)
    with pytest.raises(SliceRewritten, match="iv=20260101T000000Z"):
        run(proto, 0, run_id="h0-again")
    assert published(proto) == collections.Counter(["a1", "b1"])


def test_a_compaction_between_verify_and_commit_blocks_the_commit_and_publishes_nothing(by_prefix):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    land(by_prefix, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    run(proto, 0), run(proto, 1)
    proto.recover(run_id="h0-again")
    plan, _ = proto.plan(interval=iv(0), run_id="h0-again")
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    before = DeltaTable(by_prefix.sink_table).version()
    compact(by_prefix)  # after the PREPARED record: the commit's own snapshot sees it
    with pytest.raises(SliceRewritten, match=r"reset-batch"):
        proto.commit(plan.batch_id)
    assert DeltaTable(by_prefix.sink_table).version() == before + 1  # only the compaction
    assert published(proto) == collections.Counter(["a1", "b1"])


def test_a_compaction_of_other_intervals_does_not_stop_a_republish(by_prefix):
    """Only the files of the slices a batch replaces matter: a compaction that left them alone
    (here: it ran before they were published) changes nothing."""
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    land(by_prefix, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    run(proto, 0), run(proto, 1)
    compact(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=02/c.jsonl", ["c1"])
    run(proto, 2)
    land(by_prefix, "dt=2026-01-01/hour=02/late.jsonl", ["late2"])
    land(by_prefix, "dt=2026-01-01/hour=03/d.jsonl", ["d1"])
    run(proto, 3)  # republishes hour 02, whose files the compaction never saw
    run(proto, 2, run_id="h2-again")
    assert published(proto) == collections.Counter(["a1", "b1", "c1", "late2", "d1"])


def test_a_dry_run_verify_after_a_compaction_refuses_like_the_real_one(by_prefix):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    land(by_prefix, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    run(proto, 0), run(proto, 1)
    proto.recover(run_id="h0-again")
    plan, _ = proto.plan(interval=iv(0), run_id="h0-again")
    attempt = stage(proto, plan.batch_id)
    compact(by_prefix)  # between the plan and the verify
    for dry_run in (True, False):
        with pytest.raises(SliceRewritten, match="was not PREPARED"):
            proto.verify(plan.batch_id, attempt, dry_run=dry_run)
    assert proto.ledger.prepared(plan.batch_id) is None
    assert published(proto) == collections.Counter(["a1", "b1"])
