"""A rewind and a plan are exclusive through the ledger itself: the rewind reserves batch L+1
(put-if-absent) as the first batch that reads again from K's start. A plan that got there first
wins and the rewind does nothing; a rewind that got there first makes every later plan continue
after its replay. Real local storage and real delta-rs; the stage job is the pyarrow stager."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eobatch.protocol import ConcurrentPlan, Protocol
from support.pyarrow_stager import stage


def _land(cfg, name: str, ids: range) -> None:
    (Path(cfg.source.path) / name).write_text("".join(json.dumps({"order_id": f"o{i}"}) + "\n" for i in ids))


def _batch(proto: Protocol, run_id: str | None = None) -> int | None:
    proto.recover(run_id=run_id)
    plan, _ = proto.plan(run_id=run_id)
    if plan is None:
        return None
    attempt = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    return plan.batch_id


def _published(proto: Protocol) -> list[str]:
    from deltalake import DeltaTable

    return sorted(r["order_id"] for r in DeltaTable(proto.cfg.sink_table).to_pyarrow_table().to_pylist())


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
