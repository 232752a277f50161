"""A table holds a batch whose PREPARED record is gone (a power loss before the ledger's folder
reached the disk, a ledger copied without it): recover completes the ledger from the Delta
commit info when every table carries the same fingerprint, and stops with a LedgerMismatch
naming the batch, the tables and the repair when they do not. Real local storage and real
delta-rs; the stage job is the pyarrow stager."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eobatch import cli
from eobatch.protocol import FingerprintMismatch, LedgerMismatch, Protocol
from support.pyarrow_stager import stage


def _land(cfg, name: str, ids: range) -> None:
    path = Path(cfg.source.path) / name
    path.write_text("".join(json.dumps({"order_id": f"o{i}", "amount": float(i)}) + "\n" for i in ids))


def _published(proto: Protocol) -> list[str]:
    from deltalake import DeltaTable

    return sorted(r["order_id"] for r in DeltaTable(proto.cfg.sink_table).to_pyarrow_table().to_pylist())


def _run_batch(proto: Protocol, ids: range, name: str):
    _land(proto.cfg, name, ids)
    plan, _ = proto.plan()
    assert plan is not None, "nothing to plan"
    attempt = stage(proto, plan.batch_id)
    prepared = proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    return plan.batch_id, prepared


def _lose_prepared_and_committed(proto: Protocol, batch_id: int) -> None:
    """What a power loss can leave: the tables hold the batch, its two last ledger names are gone."""
    for path in (proto.layout.committed(batch_id), proto.layout.prepared(batch_id)):
        os.unlink(path)


def _edit_commit_info(table: str, batch_id: int, edit) -> None:
    """Rewrite the commitInfo of the Delta commit that carried ``batch_id`` (another writer's commit)."""
    for f in sorted((Path(table) / "_delta_log").glob("*.json")):
        lines = f.read_text().splitlines()
        for i, line in enumerate(lines):
            action = json.loads(line)
            info = action.get("commitInfo")
            if info and str(info.get("eo.batchId")) == str(batch_id):
                edit(info)
                lines[i] = json.dumps(action)
                f.write_text("\n".join(lines) + "\n")
                return
    raise AssertionError(f"no commit of batch {batch_id} in {table}")


def test_crash_lost_prepared_record_recover_completes_ledger_from_delta_commit_info(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    b, prepared = _run_batch(proto, range(5), "a.jsonl")
    versions = proto.ledger.committed(b).delta_versions
    _lose_prepared_and_committed(proto, b)

    rec = Protocol(cfg).recover()

    assert any(f"PREPARED record of batch {b} was missing (lost by a crash?); completed from the Delta "
               f"commit info" in a for a in rec.actions), rec.actions
    committed = proto.ledger.committed(b)
    assert committed is not None and committed.recovered
    assert committed.fingerprint == prepared.fingerprint
    assert committed.delta_versions == versions
    assert rec.committed == b and rec.pending is None
    # the sweep kept the published files (no PREPARED set to judge them by: nothing is removed)
    assert _published(proto) == sorted(f"o{i}" for i in range(5))
    # and the pipeline goes on
    b2, _ = _run_batch(Protocol(cfg), range(5, 8), "b.jsonl")
    assert b2 == b + 1 and _published(proto) == sorted(f"o{i}" for i in range(8))


def test_crash_lost_prepared_record_ledger_rows_show_the_batch_committed(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    b, _ = _run_batch(proto, range(3), "a.jsonl")
    _lose_prepared_and_committed(proto, b)
    row, = cli.ledger_rows(Protocol(cfg))
    assert row["state"] == "COMMITTED" and row["rows_published"] is None
    assert any("ledger entry missing" in n for n in row["notes"])
    Protocol(cfg).recover()
    row, = cli.ledger_rows(Protocol(cfg))
    assert row["state"] == "COMMITTED" and row["recovered"] is True and row["delta_version"] is not None


def _other_fingerprint(info):
    info["eo.fingerprint"] = "0" * 64


def _no_fingerprint(info):
    del info["eo.fingerprint"]


def _no_eo_metadata(info):  # a commit without this pipeline's metadata (another writer)
    for k in [k for k in info if k.startswith("eo.")]:
        del info[k]


@pytest.mark.parametrize("edit,table", [(_other_fingerprint, "quarantine"), (_no_fingerprint, "sink"),
                                        (_no_eo_metadata, "quarantine")],
                         ids=["fingerprints_disagree", "fingerprint_absent", "commit_info_absent"])
def test_crash_lost_prepared_record_and_tables_cannot_tell_raises_ledger_mismatch(make_cfg, edit, table):
    cfg = make_cfg()
    proto = Protocol(cfg)
    b, prepared = _run_batch(proto, range(4), "a.jsonl")
    _lose_prepared_and_committed(proto, b)
    _edit_commit_info(proto.layout.table(table), b, edit)

    with pytest.raises(LedgerMismatch) as e:
        Protocol(cfg).recover()

    msg = str(e.value)
    assert f"batch {b}" in msg
    assert cfg.sink_table in msg and cfg.quarantine_table in msg
    assert "Repair:" in msg and proto.layout.prepared(b) in msg
    assert proto.ledger.committed(b) is None  # nothing was made up
    assert _published(proto) == sorted(f"o{i}" for i in range(4))
    # the repair it names: write PREPARED again from the attempt's staged files, run again
    attempt, = proto.ledger.attempts(b)
    assert f"python -m eobatch.cli verify {cfg.name} {b} <attempt>" in msg and attempt in msg
    assert Protocol(cfg).verify(b, attempt).fingerprint == prepared.fingerprint
    if edit is _no_eo_metadata:  # nothing contradicts it: completed (the table's info is gone)
        Protocol(cfg).recover()
        assert proto.ledger.committed(b).fingerprint == prepared.fingerprint
    else:  # a table says another file set: stop
        with pytest.raises(FingerprintMismatch):
            Protocol(cfg).recover()
        assert proto.ledger.committed(b) is None
