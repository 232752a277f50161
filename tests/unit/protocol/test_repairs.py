"""eobatch.protocol.repairs: rewind, reset and sweep, on real local storage; where batches are
published, real delta-rs tables and the pyarrow stager as the stage job."""

from __future__ import annotations

from pathlib import Path

import pytest

from eobatch.core import checkpoint as ckpt
from eobatch.protocol import ConcurrentPlan, Protocol, ProtocolError
from eobatch.protocol.verify import VerifyFailed
from support.protocol_runs import empty_plan as _plan
from support.protocol_runs import land_ids as _land
from support.protocol_runs import prepare_by_hand as _prepare
from support.protocol_runs import published_ids as _published
from support.protocol_runs import run_next as _batch
from support.protocol_runs import stage_by_hand as _stage
from support.protocol_runs import staged_left as _left

# -- rewind: it reserves the next batch, put-if-absent ------------------------------------------------
# A rewind and a plan are exclusive through the ledger itself: the rewind reserves batch L+1
# (put-if-absent) as the first batch that reads again from K's start. A plan that got there first
# wins and the rewind does nothing; a rewind that got there first makes every later plan continue
# after its replay.


def _drain(proto: Protocol) -> None:
    while _batch(proto) is not None:
        pass


def test_a_plan_that_wins_the_race_makes_the_rewind_do_nothing(make_cfg, monkeypatch):
    cfg = make_cfg()
    proto = Protocol(cfg)
    for i in range(3):
        _land(cfg, f"f{i}.jsonl", range(10 * i, 10 * i + 3))
        assert _batch(proto) == i + 1
    _land(cfg, "late.jsonl", range(100, 102))
    other = Protocol(cfg)
    real = proto.ledger.fs.put_if_absent
    raced = []

    def another_run_plans_first(path, data):  # between the rewind's checks and its first ledger write
        if not raced:
            raced.append(other.plan(run_id="scheduled")[0].batch_id)
        return real(path, data)

    monkeypatch.setattr(proto.ledger.fs, "put_if_absent", another_run_plans_first)
    with pytest.raises(ConcurrentPlan, match="batch 4 was planned by run scheduled.*nothing was rewound"):
        proto.rewind(2, run_id="ui")
    monkeypatch.undo()
    assert raced == [4] and proto.ledger.rewinds() == []
    assert _published(proto) == sorted(f"o{i}" for i in (0, 1, 2, 10, 11, 12, 20, 21, 22))  # not restored
    _drain(proto)
    # asked again once batch 4 is committed: the rewind happens, and everything ends exactly once
    proto.rewind(2, run_id="ui-again")
    _drain(proto)
    assert _published(proto) == sorted(f"o{i}" for i in (0, 1, 2, 10, 11, 12, 20, 21, 22, 100, 101))


def test_a_rewind_that_wins_the_race_makes_the_plan_continue_after_its_replay(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    for i in range(3):
        _land(cfg, f"f{i}.jsonl", range(10 * i, 10 * i + 3))
        assert _batch(proto) == i + 1
    proto.rewind(2, run_id="ui")
    replay = proto.ledger.plan(4)
    assert replay.rewind["to_batch"] == 2 and replay.run_id == "ui"
    assert [f["path"].rsplit("/", 1)[-1] for f in replay.range["files"]] == ["f1.jsonl", "f2.jsonl"]
    # another run planning now finds batch 4 reserved: it re-stages that very range
    plan, new = Protocol(cfg).plan(run_id="scheduled")
    assert (plan.batch_id, new) == (4, False)
    _drain(proto)
    assert _published(proto) == sorted(f"o{i}" for i in (0, 1, 2, 10, 11, 12, 20, 21, 22))
    assert [proto.state(b) for b in (1, 2, 3, 4)] == ["COMMITTED", "REWOUND", "REWOUND", "COMMITTED"]


def test_a_rewind_that_died_after_its_reservation_is_finished_by_recover(make_cfg, monkeypatch):
    cfg = make_cfg()
    proto = Protocol(cfg)
    for i in range(2):
        _land(cfg, f"f{i}.jsonl", range(10 * i, 10 * i + 2))
        assert _batch(proto) == i + 1

    class Died(BaseException):
        pass

    def die(rec):
        raise Died

    monkeypatch.setattr(proto.ledger, "put_rewind", die)  # the process dies right after the reservation
    with pytest.raises(Died):
        proto.rewind(1, run_id="ui")
    monkeypatch.undo()
    fresh = Protocol(cfg)
    rec = fresh.recover()
    assert any("restored" in a for a in rec.actions), rec.actions
    assert [r.key for r in fresh.ledger.rewinds()] == ["2-1"]
    _drain(fresh)
    assert _published(fresh) == sorted(f"o{i}" for i in (0, 1, 10, 11))


# -- sweep and reset with runs that overlap (interval mode, backfills) ----------------------------------
# Sweep only touches decided batches, so it never removes the files of a live attempt (another
# run's, or a zombie's that may still become PREPARED). The staged files are written by hand.


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


def test_sweep_lists_the_staging_folders_of_the_newest_batches_only(make_cfg):
    from eobatch.protocol import Protocol

    proto = Protocol(make_cfg())
    for b in range(1, 13):
        (Path(proto.layout.staging_root("sink")) / f"b{b:010d}").mkdir(parents=True)
    assert proto.sweeper.staged_batches() == list(range(1, 13))
    assert proto.sweeper.staged_batches(after=7) == [8, 9, 10, 11, 12]


# -- reset and the ledger's checkpoints -----------------------------------------------------------------


def test_a_reset_after_the_tables_were_recreated_removes_the_checkpoints_of_the_forgotten_batches(
        make_cfg, monkeypatch):
    import shutil

    from eobatch.protocol import Protocol

    monkeypatch.setattr(ckpt, "INTERVAL", 2)
    cfg = make_cfg()
    proto = Protocol(cfg)
    for i in range(4):
        _land(cfg, f"f{i}.jsonl", range(10 * i, 10 * i + 2))
        assert _batch(proto) == i + 1
    assert proto.ledger.checkpoint_files()
    for table in (cfg.sink_table, cfg.quarantine_table):  # both tables dropped: the ledger is ahead
        shutil.rmtree(Path(table) / "_delta_log")
    assert proto.reset(1) == [1, 2, 3, 4]
    assert proto.ledger.checkpoint_files() == []
    assert _batch(proto) == 1
    assert _published(proto) == sorted(f"o{i}" for i in range(40) if i % 10 < 2)


def test_a_rewinds_restore_is_known_done_after_the_log_is_cleaned_up(make_cfg):
    """Was: whether a table's RESTORE for a rewind was done was looked for in its last 200 commits
    only; after a log cleanup (or 200 maintenance commits) the next recover restored it again,
    taking every commit since (here another writer's append) away. The restore now carries its
    own txn, which the table's state keeps through checkpoints and log cleanup."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    cfg = make_cfg()
    proto = Protocol(cfg)
    for i in range(3):
        _land(cfg, f"f{i}.jsonl", range(10 * i, 10 * i + 3))
        assert _batch(proto) == i + 1
    proto.rewind(2, run_id="ui")  # the tables are restored to before batch 2; batch 4 is reserved
    for table in (cfg.sink_table, cfg.quarantine_table):  # a log cleanup: the RESTORE commit is forgotten
        DeltaTable(table).alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
        DeltaTable(table).create_checkpoint()
        DeltaTable(table).cleanup_metadata()
        assert all(h.get("operation") != "RESTORE" for h in DeltaTable(table).history())
    schema = DeltaTable(cfg.sink_table).schema().to_arrow()
    write_deltalake(cfg.sink_table, pa.Table.from_pylist([{"order_id": "other-writer"}], schema=pa.schema(schema)),
                    mode="append")
    version = DeltaTable(cfg.sink_table).version()
    actions = Protocol(cfg).recover().actions
    assert not [a for a in actions if "restored" in a], actions  # nothing restored again
    assert DeltaTable(cfg.sink_table).version() == version
    _drain(proto)
    assert _published(proto) == sorted(["other-writer"] + [f"o{i}" for i in (0, 1, 2, 10, 11, 12, 20, 21, 22)])


# -- repairs over a landing zone whose consumed files were expired --------------------------------
def _losses(proto: Protocol) -> list[dict]:
    import json

    folder = Path(proto.layout.ledger) / "losses"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def test_a_reset_of_a_batch_whose_files_were_expired_is_refused_naming_them_unless_the_loss_is_accepted(make_cfg):
    """Was: reset-batch forgot batch 2 and the next plan simply did not find its expired file:
    its records were never published, and nothing said so."""
    cfg = make_cfg()
    proto = Protocol(cfg)
    _land(cfg, "f0.jsonl", range(0, 2))
    assert _batch(proto) == 1
    _land(cfg, "f1.jsonl", range(10, 12))
    _land(cfg, "f2.jsonl", range(20, 22))
    plan, _ = proto.plan(max_records=2)
    assert plan.batch_id == 2
    (Path(cfg.source.path) / "f1.jsonl").unlink()  # expired from the landing zone, as docs/site/concepts.md (Limits) recommends
    with pytest.raises(ProtocolError, match=r"f1\.jsonl.*ACCEPT_LOSS=1"):
        proto.reset(2)
    assert proto.ledger.plan(2) is not None and _losses(proto) == []
    assert proto.reset(2, accept_loss=True) == [2]
    [loss] = _losses(proto)
    assert loss["verb"] == "reset-batch" and loss["batches"] == [2]
    assert [f.rsplit("/", 1)[-1] for f in loss["files"]] == ["f1.jsonl"]
    _drain(proto)
    assert _published(proto) == ["o0", "o1", "o20", "o21"]


def test_a_rewind_over_expired_files_is_refused_naming_them_unless_the_loss_is_accepted(make_cfg):
    """Was: the rewind restored the tables to before batch 2 and re-planned from the landing zone,
    where batch 2's file had been expired: its published records were taken back for good."""
    cfg = make_cfg()
    proto = Protocol(cfg)
    for i in range(3):
        _land(cfg, f"f{i}.jsonl", range(10 * i, 10 * i + 2))
        assert _batch(proto) == i + 1
    (Path(cfg.source.path) / "f1.jsonl").unlink()
    with pytest.raises(ProtocolError, match=r"f1\.jsonl.*ACCEPT_LOSS=1"):
        proto.rewind(2, run_id="ui")
    assert proto.ledger.rewinds() == [] and len(_published(proto)) == 6
    proto.rewind(2, run_id="ui", accept_loss=True)
    [loss] = _losses(proto)
    assert loss["verb"] == "rewind" and loss["batches"] == [2, 3] and loss["run_id"] == "ui"
    assert "accepted the loss" in " ".join(proto.ledger.plan(4).notes)
    _drain(proto)
    assert _published(proto) == ["o0", "o1", "o20", "o21"]


# -- a reset while a run plans several batches: the plans after a forgotten one are void --------------
# A run of several batches writes plan n+1 from where its plan n ends. A reset that forgets plan n
# meanwhile (an operator's reset-batch, another run's replan_pending) makes plan n+1 void: whichever
# of the two looks last forgets it, and a recover forgets one a crash left behind.


def _three_batches(make_cfg):
    cfg = make_cfg(source={"kind": "files", "path": str(Path(make_cfg().source.path)), "max_records_per_batch": 3})
    for i in range(3):
        _land(cfg, f"f{i}.jsonl", range(10 * i, 10 * i + 3))
    return cfg


_ALL = sorted(f"o{i}" for i in (0, 1, 2, 10, 11, 12, 20, 21, 22))


def test_a_reset_between_two_plans_of_a_run_makes_the_run_forget_the_plan_it_wrote_after_it(make_cfg, monkeypatch):
    cfg = _three_batches(make_cfg)
    proto, operator = Protocol(cfg), Protocol(cfg)
    real = proto.ledger.put_plan

    def reset_first(plan):  # the run wrote plan 1 and is about to write plan 2: the operator's reset
        if plan.batch_id == 2:
            assert operator.reset(1) == [1]
        return real(plan)

    monkeypatch.setattr(proto.ledger, "put_plan", reset_first)
    with pytest.raises(ConcurrentPlan, match="a reset forgot batch 1 while this run planned .* planned nothing"):
        proto.plan_batches(run_id="r1", max_batches=3)
    monkeypatch.undo()
    assert proto.ledger.batch_ids() == []  # no gap: plan 2 was forgotten by the run that wrote it
    _drain(proto)
    assert _published(proto) == _ALL


def test_a_reset_that_looked_before_a_runs_next_plan_forgets_that_plan_after_its_own(make_cfg, monkeypatch):
    cfg = _three_batches(make_cfg)
    proto, operator = Protocol(cfg), Protocol(cfg)
    first, _ = proto.plan(run_id="r1")
    real = operator.ledger.latest_batch_id
    calls = []

    def the_run_plans_on(*a, **k):  # the reset read the newest batch (1); then the run writes plan 2
        latest = real(*a, **k)
        if not calls:
            calls.append(latest)
            nxt = _plan(2, run_id="r1")
            nxt.base = proto.ledger.record_digest(first)
            assert proto.ledger.put_plan(nxt) and not proto.ledger.is_void(nxt)  # the run's check passes
        return latest

    monkeypatch.setattr(operator.ledger, "latest_batch_id", the_run_plans_on)
    assert operator.reset(1) == [1, 2]
    monkeypatch.undo()
    assert calls == [1] and proto.ledger.batch_ids() == []
    _drain(proto)
    assert _published(proto) == _ALL


def test_a_void_plan_a_crash_left_is_never_prepared_and_the_next_recover_forgets_it(make_cfg):
    cfg = _three_batches(make_cfg)
    proto = Protocol(cfg)
    plans, _ = proto.plan_batches(run_id="r1", max_batches=3)
    assert [p.batch_id for p in plans] == [1, 2, 3] and plans[1].base == proto.ledger.record_digest(plans[0])
    staged = _stage(proto, 2, "a2")
    proto.repairs.forget(1, 1)  # a reset forgot batch 1 and died before it looked for plans after it
    assert proto.ledger.batch_ids() == [2, 3] and proto.ledger.is_void(proto.ledger.plan(2))
    with pytest.raises(VerifyFailed, match="batch 2's plan is void"):
        proto.verify(2, "a2")
    assert proto.ledger.decision(2, "a2")["decision"] == "abort"
    rec = proto.recover(run_id="r2")
    assert any("batches 2..3 were planned after a batch that a reset forgot" in a for a in rec.actions), rec.actions
    assert proto.ledger.batch_ids() == [] and not (set(staged) & _left(proto))
    _drain(proto)
    assert _published(proto) == _ALL
