"""A run that carries several batches (``Protocol.plan_batches``): each batch keeps its own plan
record, attempt, PREPARED record and Delta commit; they commit strictly in order; a crash between
any two of them leaves what the next run's recover and plan finish, each batch once.

Real verbs, real local ledger and real delta-rs tables; the stage job is the pyarrow stager.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eobatch.core.protocol import BatchInFlight, LedgerMismatch, Protocol, ProtocolError
from eobatch.errors import ConfigError
from support.protocol_runs import land_ids, published_ids, run_next
from support.pyarrow_stager import stage


@pytest.fixture
def cfg(make_cfg):
    """Batches of at most 3 records (one landing file of 3 records is one batch)."""
    c = make_cfg()
    return make_cfg(source={"kind": "files", "path": c.source.path, "max_records_per_batch": 3})


def _land(cfg, files: int, first: int = 0) -> None:
    for i in range(first, first + files):
        land_ids(cfg, f"f{i:03d}.jsonl", range(3 * i, 3 * i + 3))


def _ids(files: int) -> list[str]:
    return sorted(f"o{i}" for i in range(3 * files))


def _txn(cfg) -> list[int]:
    """The sink's txn version of each Delta commit of this pipeline, from the raw log, in order."""
    out = []
    for f in sorted(Path(cfg.sink_table, "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            a = json.loads(line)
            if "txn" in a and a["txn"]["appId"] == cfg.app_id:
                out.append(a["txn"]["version"])
    return out


def test_a_run_plans_several_batches_each_its_own_record_and_range(cfg):
    _land(cfg, 5)
    proto = Protocol(cfg)
    plans, new = proto.plan_batches(max_batches=3, run_id="r1")
    assert new and [p.batch_id for p in plans] == [1, 2, 3] and {p.run_first for p in plans} == {1}
    files = [[Path(f["path"]).name for f in p.range["files"]] for p in plans]
    assert files == [["f000.jsonl"], ["f001.jsonl"], ["f002.jsonl"]], "consecutive ranges, each read once"
    for p in plans:  # each one's put-if-absent record, as written
        assert json.loads(Path(proto.layout.plan(p.batch_id)).read_text())["range"] == p.range
    again, new = Protocol(cfg).plan_batches(max_batches=3, run_id="r2")
    assert not new and [p.batch_id for p in again] == [1, 2, 3], "never planned past undecided batches"
    for p in plans:
        Protocol(cfg).verify(p.batch_id, stage(Protocol(cfg), p.batch_id))
    for p in plans:
        Protocol(cfg).commit(p.batch_id)
    assert _txn(cfg) == [1, 2, 3], "one Delta commit per batch, in order"
    assert published_ids(proto) == _ids(3)
    plans, new = Protocol(cfg).plan_batches(max_batches=3)
    assert new and [p.batch_id for p in plans] == [4, 5], "as many as the source has"
    assert Protocol(cfg).plan_batches(max_batches=3) == ([plans[0], plans[1]], False)


def test_batches_of_a_run_commit_strictly_in_order(cfg):
    _land(cfg, 3)
    proto = Protocol(cfg)
    plans, _ = proto.plan_batches(max_batches=3)
    for p in plans:
        proto.verify(p.batch_id, stage(proto, p.batch_id))
    with pytest.raises(BatchInFlight, match="batch 3 commits after batch 2 of its run, which the sink table does not "
                                            "hold yet .*: batch 1 commits first"):
        proto.commit(3)
    assert _txn(cfg) == []
    proto.commit(1)
    with pytest.raises(BatchInFlight, match="batch 2 commits first"):
        proto.commit(3)
    proto.commit(2)
    proto.commit(3)
    proto.commit(2)  # a retried commit of a committed batch: a no-op
    assert _txn(cfg) == [1, 2, 3] and published_ids(proto) == _ids(3)


@pytest.mark.parametrize("prepared, staged, pending", [
    ((), (), [1, 2, 3]),  # died after planning
    ((1,), (2,), [2, 3]),  # died while verifying: 1 PREPARED, 2 STAGED
    ((1, 2), (3,), [3]),
    ((1, 2, 3), (), []),  # died before the commits: recover commits all three
    ((2,), (3,), [1, 2, 3]),  # batch 1's attempt failed verify and was aborted; 2 PREPARED commits after it
])
def test_recover_commits_the_prepared_batches_in_order_and_hands_back_the_rest(cfg, prepared, staged, pending):
    _land(cfg, 3)
    proto = Protocol(cfg)
    proto.plan_batches(max_batches=3, run_id="r1")
    for b in prepared:
        proto.verify(b, stage(proto, b))
    for b in staged:
        stage(proto, b)
    rec = Protocol(cfg).recover(run_id="r2")
    done = 3 - len(pending)
    assert rec.committed == done and rec.pending_batches == pending and rec.pending == (pending[0] if pending else None)
    assert _txn(cfg) == list(range(1, done + 1))
    plans, new = Protocol(cfg).plan_batches(max_batches=3, run_id="r2")
    assert not new or not pending
    assert [p.batch_id for p in plans][:len(pending)] == pending
    # the next run finishes them: stages what is neither STAGED nor PREPARED, verifies, commits in order
    proto = Protocol(cfg)
    for b in pending:
        if proto.ledger.prepared(b) is None:
            proto.verify(b, stage(proto, b))
    for b in pending:
        proto.commit(b)
    assert published_ids(proto) == _ids(3) and _txn(cfg) == [1, 2, 3]


def test_a_commit_that_died_after_its_delta_commit_is_recorded_and_the_run_goes_on(cfg):
    _land(cfg, 3)
    proto = Protocol(cfg)
    proto.plan_batches(max_batches=3)
    for b in (1, 2, 3):
        proto.verify(b, stage(proto, b))
    proto.commit(1)
    Path(proto.layout.committed(1)).unlink()  # the crash: Delta committed, the ledger record never written
    rec = Protocol(cfg).recover()
    assert any("batch 1 was committed in every table but its ledger entry was missing" in a for a in rec.actions)
    assert Protocol(cfg).ledger.committed(1) is not None and rec.committed == 3 and _txn(cfg) == [1, 2, 3]


def test_a_table_restored_behind_the_run_is_a_gap_not_a_pending_batch(cfg, tmp_path):
    _land(cfg, 2)
    assert run_next(Protocol(cfg)) == 1
    log = Path(cfg.sink_table, "_delta_log")
    shutil.copytree(log, tmp_path / "log-at-1")
    assert run_next(Protocol(cfg)) == 2
    _land(cfg, 2, first=2)
    Protocol(cfg).plan_batches(max_batches=2)  # batches 3 and 4: the tables hold 2
    shutil.rmtree(log)
    shutil.copytree(tmp_path / "log-at-1", log)  # the sink restored to batch 1 (its ledger is not)
    with pytest.raises(LedgerMismatch, match=r"sink table .* holds only up to batch 1; batches 2 are missing"):
        Protocol(cfg).recover()


def test_interval_mode_carries_one_batch_per_run(by_prefix, make_cfg):
    assert by_prefix.max_batches_per_run == 1
    with pytest.raises(ConfigError, match="max_batches_per_run: interval mode: a run's batch is its data interval"):
        make_cfg(mode="interval", schedule="@hourly", max_batches_per_run=3)
    with pytest.raises(ProtocolError, match="interval mode: a run's batch is its data interval; it plans one batch"):
        Protocol(by_prefix).plan_batches(max_batches=2, interval={"start": "2026-01-01T00:00:00+00:00",
                                                                  "end": "2026-01-01T01:00:00+00:00"})
