"""Each attempt is decided once, put-if-absent: verify must win "prepare" before it writes PREPARED,
abort must win "abort" before it removes files. So a verify and an abort that interleave (a
zombie verify, a verify marked failed in the UI while it still runs) can never leave a PREPARED
batch whose files are gone. Attempt and batch ids are checked by one function wherever they
become paths. Real local storage and real delta-rs; the stage job is the pyarrow stager."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import eobatch
from eobatch.formats import InvalidId, Layout, check_attempt, check_batch_id
from eobatch.protocol import AttemptPrepared, Protocol
from eobatch.protocol import verbs as protocol_module
from eobatch.verify import VerifyFailed
from support.pyarrow_stager import stage


def _land(cfg, name: str, ids: range) -> None:
    path = Path(cfg.source.path) / name
    path.write_text("".join(json.dumps({"order_id": f"o{i}", "amount": float(i)}) + "\n" for i in ids))


def _published(proto: Protocol) -> list[str]:
    from deltalake import DeltaTable

    return sorted(r["order_id"] for r in DeltaTable(proto.cfg.sink_table).to_pyarrow_table().to_pylist())


def _staged_files(proto: Protocol, batch_id: int, attempt: str) -> list[Path]:
    return [f for p in ("sink", "quarantine")
            for f in (Path(proto.layout.table(p)) / proto.layout.attempt_staging_rel(batch_id, attempt)).rglob("*")
            if f.is_file()]


def test_an_abort_between_verify_checks_and_prepared_wins_and_nothing_is_prepared(make_cfg, monkeypatch):
    cfg = make_cfg()
    _land(cfg, "a.jsonl", range(5))
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    attempt = stage(proto, plan.batch_id)
    real = protocol_module.verify_attempt

    def checks_then_abort_runs(*args, **kw):  # verify has checked every file ... then abort runs
        out = real(*args, **kw)
        Protocol(cfg).abort(plan.batch_id, attempt, "the verify task was marked failed")
        return out

    monkeypatch.setattr(protocol_module, "verify_attempt", checks_then_abort_runs)
    with pytest.raises(VerifyFailed, match="ABORTED while it was verified"):
        proto.verify(plan.batch_id, attempt)
    monkeypatch.setattr(protocol_module, "verify_attempt", real)
    assert proto.ledger.prepared(plan.batch_id) is None  # never PREPARED without its files
    assert _staged_files(proto, plan.batch_id, attempt) == []
    # the batch keeps its range; the next attempt publishes it once
    assert proto.recover().pending == plan.batch_id
    again = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, again)
    proto.commit(plan.batch_id)
    assert _published(proto) == sorted(f"o{i}" for i in range(5))


def test_an_abort_after_verify_won_the_decision_removes_nothing_and_recover_prepares_it(make_cfg):
    cfg = make_cfg()
    _land(cfg, "a.jsonl", range(4))
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    attempt = stage(proto, plan.batch_id)
    # a verify won the attempt's decision and died before writing PREPARED
    assert proto.ledger.decide(plan.batch_id, attempt, "prepare", {})["decision"] == "prepare"
    files = _staged_files(proto, plan.batch_id, attempt)
    with pytest.raises(AttemptPrepared, match="decided for PREPARE first"):
        proto.abort(plan.batch_id, attempt, "run failed")
    assert _staged_files(proto, plan.batch_id, attempt) == files and files
    assert proto.sweep(recent=None) == []
    rec = Protocol(cfg).recover()
    assert any("PREPARED now" in a for a in rec.actions), rec.actions
    assert rec.committed == plan.batch_id and _published(proto) == sorted(f"o{i}" for i in range(4))


def test_a_verify_after_the_abort_won_fails_and_prepares_nothing(make_cfg):
    cfg = make_cfg()
    _land(cfg, "a.jsonl", range(3))
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    attempt = stage(proto, plan.batch_id)
    proto.abort(plan.batch_id, attempt, "stage task failed")
    with pytest.raises(VerifyFailed, match="ABORTED"):
        proto.verify(plan.batch_id, attempt)
    assert proto.ledger.prepared(plan.batch_id) is None


BAD_ATTEMPTS = ["../../..", "..", "a/b", "", ".hidden", "a b", "x" * 65, None, 7, "a\x00b", "t1-abc/../../x"]


@pytest.mark.parametrize("attempt", BAD_ATTEMPTS)
def test_attempt_ids_are_checked_wherever_they_become_paths(attempt):
    lay = Layout("/lake/t", "/lake/q")
    with pytest.raises(InvalidId):
        check_attempt(attempt)
    for build in (lay.attempt_dir, lay.attempt_staging_rel, lay.stage_summary, lay.decision):
        with pytest.raises(InvalidId):
            build(1, attempt)


@pytest.mark.parametrize("batch_id", [0, -1, True, "1", 1.0, None, 10**10])
def test_batch_ids_are_positive_integers(batch_id):
    with pytest.raises(InvalidId):
        check_batch_id(batch_id)


def test_abort_with_a_path_as_attempt_deletes_nothing(make_cfg, tmp_path):
    cfg = make_cfg()
    _land(cfg, "a.jsonl", range(3))
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    stage(proto, plan.batch_id)
    before = sorted(p for p in (tmp_path / "lake").rglob("*") if p.is_file())
    assert any("_eo_ledger" in str(p) for p in before)
    with pytest.raises(InvalidId):
        proto.abort(plan.batch_id, "../../..", "from a forged XCom")
    with pytest.raises(InvalidId):
        proto.verify(plan.batch_id, "../../..")
    assert sorted(p for p in (tmp_path / "lake").rglob("*") if p.is_file()) == before
    r = subprocess.run([sys.executable, "-m", "eobatch.cli", "abort", "orders", "1", "../../.."],
                       env={"PIPELINES_DIR": str(Path(cfg.file).parent), "PYTHONPATH": str(Path(eobatch.__file__).parents[1]),
                            "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert r.returncode == 2 and "invalid attempt id '../../..'" in r.stderr, r.stderr
    assert sorted(p for p in (tmp_path / "lake").rglob("*") if p.is_file()) == before
