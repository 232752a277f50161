"""eobatch.protocol.verbs: plan, verify, commit, abort and recover, as scenarios of batches on real
local storage and real delta-rs tables; the stage job is the pyarrow stager (it writes the same
per-slice folders the Spark job writes)."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

import eobatch
from eobatch.core.formats import InvalidId
from eobatch.errors import ConfigChanged, ConfigError, SliceRewritten, TerminalError
from eobatch.pipelines.loader import config_values
from eobatch.protocol import (
    AttemptPrepared,
    BatchInFlight,
    FingerprintMismatch,
    IntervalNotSettled,
    LedgerMismatch,
    Protocol,
    ProtocolError,
)
from eobatch.protocol import verify as verify_module
from eobatch.protocol.verify import VerifyFailed
from eobatch.sources.files import LateFiles
from support.protocol_runs import T0, H, iv, land, land_ids, published, published_ids, run, run_next
from support.protocol_runs import empty_plan as _plan
from support.protocol_runs import land_and_run as _run_batch
from support.protocol_runs import land_ids as _land
from support.protocol_runs import lose_prepared_and_committed as _lose_prepared_and_committed
from support.protocol_runs import prepare_by_hand as _prepare
from support.protocol_runs import published_ids as _published
from support.protocol_runs import stage_by_hand as _stage
from support.pyarrow_stager import JobRefused, stage

# -- verify and abort: each attempt is decided once ------------------------------------------------
# Each attempt is decided once, put-if-absent: verify must win "prepare" before it writes PREPARED,
# abort must win "abort" before it removes files. So a verify and an abort that interleave (a
# zombie verify, a verify marked failed in the UI while it still runs) can never leave a PREPARED
# batch whose files are gone.


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
    real = verify_module.verify_attempt

    def checks_then_abort_runs(*args, **kw):  # verify has checked every file ... then abort runs
        out = real(*args, **kw)
        Protocol(cfg).abort(plan.batch_id, attempt, "the verify task was marked failed")
        return out

    monkeypatch.setattr(verify_module, "verify_attempt", checks_then_abort_runs)
    with pytest.raises(VerifyFailed, match="ABORTED while it was verified"):
        proto.verify(plan.batch_id, attempt)
    monkeypatch.setattr(verify_module, "verify_attempt", real)
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


def test_an_edit_while_a_verify_decided_prepare_offers_only_the_repair_that_works(make_cfg):
    """Found by the protocol model (CI): a verify won an attempt's "prepare" decision and died before
    PREPARED; then a PENDING key changed. The refusal offered replan_pending and reset-batch, which
    refuse a batch a verify decided for PREPARE (its late PREPARED could publish a forgotten plan):
    every repair the message named failed. Now it names the one that works (the old value back,
    then a run's recover finishes the PREPARE and commits)."""
    cfg = make_cfg()
    _land(cfg, "a.jsonl", range(4))
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    attempt = stage(proto, plan.batch_id)
    assert proto.ledger.decide(plan.batch_id, attempt, "prepare", {})["decision"] == "prepare"
    edited = make_cfg(max_record_bytes=4096)
    with pytest.raises(ConfigChanged) as e:
        Protocol(edited).recover()
    msg = str(e.value)
    assert "max_record_bytes was 1048576 when batch 1 was planned and is now 4096" in msg, msg
    assert f"a verify decided attempt {attempt} for PREPARE" in msg and "Repair: put the old value(s) back" in msg
    assert "reset-batch" not in msg and "replan_pending" not in msg, msg
    with pytest.raises(ProtocolError, match="decided for PREPARE by a verify that has not written PREPARED"):
        Protocol(edited).reset(plan.batch_id)  # what the message no longer offers
    rec = Protocol(cfg).recover()  # the old value back
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


# -- recover: a batch the tables hold whose PREPARED record is gone ----------------------------------
# A power loss before the ledger's folder reached the disk, a ledger copied without it: recover
# completes the ledger from the Delta commit info when every table carries the same fingerprint,
# and stops with a LedgerMismatch naming the batch, the tables and the repair when they do not.


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


# -- plan: runs that overlap (interval mode, backfills) ----------------------------------------------
# A run that plans while another run's batch is PREPARED but not yet committed waits
# (BatchInFlight) instead of failing.


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


# -- plan in interval mode: no file under a landing zone is ever skipped silently ------------------------
# A file that lands in an interval after that interval was planned (a producer's rename keeps the
# mtime; clock skew; an S3 multipart upload's LastModified is its start; a file dropped late into a
# dt=/hour= folder; an interval that was empty when it ran) is found by the next run, which looks
# back over the intervals already planned. By default that interval is published again, whole,
# as another slice of the run's batch, and its commit replaces the slice: still exactly once.


@pytest.fixture
def by_mtime(make_cfg):
    return make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "max_records_per_batch": 100, "settle_seconds": 0})


def test_a_file_dropped_late_into_a_published_hour_folder_is_published_by_the_next_run(by_prefix):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1", "a2"])
    assert run(proto, 0).batch_id == 1
    land(by_prefix, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])  # after hour 00 was published
    land(by_prefix, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    plan = run(proto, 1)
    assert sorted(plan.slices()) == ["iv=20260101T000000Z", "iv=20260101T010000Z"]
    assert [n for n in plan.notes if "late files" in n and "late.jsonl" in n and "re-published whole" in n]
    assert published(proto) == collections.Counter(["a1", "a2", "late1", "b1"])  # hour 00 replaced, not added
    assert run(proto, 2) is None  # nothing late any more, nothing new: no batch


def test_an_interval_emptied_after_it_was_published_plans_nothing_and_says_its_rows_stay(by_prefix, caplog):
    import logging

    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1", "a2"])
    run(proto, 0)
    (Path(by_prefix.source.path) / "dt=2026-01-01/hour=00/a.jsonl").unlink()
    with caplog.at_level(logging.WARNING, logger="eobatch.protocol.verbs"):
        assert run(proto, 0, run_id="again") is None
    assert published(proto) == collections.Counter(["a1", "a2"])  # the documented limit (docs/site/concepts.md)
    assert "was published with 1 file(s) and none is in the landing zone now" in caplog.text
    assert "make rewind" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="eobatch.protocol.verbs"):
        assert run(proto, 1) is None  # an hour never published and empty: nothing to say
    assert "none is in the landing zone" not in caplog.text


def test_a_file_renamed_into_place_after_the_plan_keeps_its_mtime_and_is_not_lost(by_mtime):
    proto = Protocol(by_mtime)
    land(by_mtime, "a.jsonl", ["a1"], mtime=T0 + 10)
    assert run(proto, 0).batch_id == 1
    land(by_mtime, "x.jsonl", ["x1"], mtime=T0 + H - 1)  # written at 00:59:59, renamed in at 01:00:05
    land(by_mtime, "b.jsonl", ["b1"], mtime=T0 + H + 10)
    run(proto, 1)
    assert published(proto) == collections.Counter(["a1", "x1", "b1"])


def test_an_interval_empty_when_it_ran_is_published_when_its_files_arrive(by_prefix):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    assert run(proto, 1) is None  # hour 01 is empty when it runs
    land(by_prefix, "dt=2026-01-01/hour=01/late.jsonl", ["late1"])
    land(by_prefix, "dt=2026-01-01/hour=02/c.jsonl", ["c1"])
    run(proto, 2)
    assert published(proto) == collections.Counter(["a1", "late1", "c1"])


def test_a_rerun_of_an_interval_after_its_republish_replaces_the_whole_slice(by_prefix):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    land(by_prefix, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])
    land(by_prefix, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    run(proto, 1)  # republishes hour 00 inside batch 2
    land(by_prefix, "dt=2026-01-01/hour=00/later.jsonl", ["later1"])
    run(proto, 0, run_id="h0-manual")  # a manual re-run of hour 00: replaces its slice everywhere
    run(proto, 1, run_id="h1-again")  # and hour 01 again: its own slice only
    assert published(proto) == collections.Counter(["a1", "late1", "later1", "b1"])


def test_late_files_policy_fail_names_the_files_and_plans_nothing(make_cfg):
    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "interval_prefix": "dt={ds}/hour={hh}",
        "settle_seconds": 0, "late_files": "fail"})
    proto = Protocol(cfg)
    land(cfg, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    land(cfg, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])
    with pytest.raises(LateFiles, match=r"late\.jsonl.*late_files: fail"):
        proto.plan(interval=iv(1), run_id="h1")
    assert proto.ledger.latest_batch_id() == 1


def test_late_files_policy_ignore_logs_them_every_time_and_publishes_nothing_of_them(make_cfg, caplog):
    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "interval_prefix": "dt={ds}/hour={hh}",
        "settle_seconds": 0, "late_files": "ignore"})
    proto = Protocol(cfg)
    land(cfg, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    land(cfg, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])
    land(cfg, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    plan = run(proto, 1)
    assert [n for n in plan.notes if "late.jsonl" in n and "not published" in n]
    assert published(proto) == collections.Counter(["a1", "b1"])
    caplog.clear()
    assert run(proto, 2) is None
    assert "late.jsonl" in caplog.text and "NOT published" in caplog.text  # logged again, every run


def test_the_look_back_is_bounded_and_starts_at_the_pipelines_first_interval(make_cfg):
    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "interval_prefix": "dt={ds}/hour={hh}",
        "settle_seconds": 0, "late_lookback_intervals": 2})
    proto = Protocol(cfg)
    land(cfg, "dt=2025-12-31/hour=23/before.jsonl", ["before"])  # before the pipeline's first interval
    land(cfg, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    for i in (1, 2, 3):
        land(cfg, f"dt=2026-01-01/hour=0{i}/f.jsonl", [f"f{i}"])
        run(proto, i)
    land(cfg, "dt=2026-01-01/hour=00/too-late.jsonl", ["too-late"])  # 4 intervals back: beyond the look-back
    land(cfg, "dt=2026-01-01/hour=02/late.jsonl", ["late2"])  # 2 back: inside
    land(cfg, "dt=2026-01-01/hour=04/g.jsonl", ["g"])
    run(proto, 4)
    assert published(proto) == collections.Counter(["a1", "f1", "f2", "f3", "late2", "g"])
    assert proto.planning.lookback(iv(4)["start"])[-1][0] == (T0 + 2 * H) * 1000


def test_an_interval_is_planned_only_settle_seconds_after_its_end(make_cfg):
    import time

    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "settle_seconds": 120})
    now_hour = int(time.time()) // H * H
    import datetime as dt

    just_ended = {"start": dt.datetime.fromtimestamp(now_hour - H, dt.timezone.utc).isoformat(),
                  "end": dt.datetime.fromtimestamp(now_hour, dt.timezone.utc).isoformat()}
    if time.time() - now_hour < 110:  # the hour ended less than the settle delay ago
        with pytest.raises(IntervalNotSettled, match="settle_seconds"):
            Protocol(cfg).plan(interval=just_ended, run_id="r")
    future = {"start": just_ended["end"], "end": dt.datetime.fromtimestamp(now_hour + H, dt.timezone.utc).isoformat()}
    with pytest.raises(IntervalNotSettled, match="to go"):
        Protocol(cfg).plan(interval=future, run_id="r")
    assert Protocol(cfg).plan(interval=iv(0), run_id="past") == (None, False)  # long past: planned


# -- commit in interval mode: a republish replaces exactly the files its slice's last batch published ----
# The commit of a batch that publishes an interval again (a late file, a re-run, a backfill with
# reprocessing) removes, in the same Delta transaction, the files the newest committed batch of
# that interval published, named one by one from its PREPARED record. When another writer
# rewrote them (an OPTIMIZE compaction merged them into files that also hold other intervals'
# rows), no replace can remove exactly the interval's earlier records: the product refuses,
# loudly, at plan time, at verify time or in the commit's own snapshot, and never publishes the
# interval twice.


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


# -- a configuration edit is an event of the protocol (config.contract): a pending batch commits under
# the configuration that planned it, or the edit is refused, naming the key, the old value and the new one

EDIT_SCHEMA = "order_id STRING NOT NULL, seq BIGINT NOT NULL, seq2 BIGINT NOT NULL, status STRING, op STRING"


def edit_merge_cfg(make_cfg, tmp_path, **merge):
    return make_cfg(schema=EDIT_SCHEMA, sink={"table": str(tmp_path / "lake" / "orders"), "mode": "merge",
                                         "merge": {"keys": ["order_id"], "sequence_by": "seq",
                                                   "delete_when": "op = 'd'", **merge}})


def land_edit(cfg, name: str, records: list[tuple]) -> None:
    lines = [json.dumps({"order_id": k, "seq": s, "seq2": s, "status": st, "op": "d" if st == "DELETE" else "u"})
             for k, s, st in records]
    (Path(cfg.source.path) / name).write_text("".join(x + "\n" for x in lines))


def test_a_changed_sequence_by_is_refused_at_plan_naming_the_key_the_old_and_the_new_value(make_cfg, tmp_path):
    """Was: sink.merge.sequence_by was not in the sink contract, the edit was accepted, and the
    next batch was PREPARED and never committed (ArrowInvalid: No match for FieldRef.Name(seq2):
    the tombstones table has the old sequence column), every retry and recover failing alike."""
    before = edit_merge_cfg(make_cfg, tmp_path)
    land_edit(before, "a.jsonl", [("o1", 1, "new"), ("o2", 1, "DELETE")])
    assert run_next(Protocol(before)) == 1
    after = edit_merge_cfg(make_cfg, tmp_path, sequence_by="seq2")
    land_edit(after, "b.jsonl", [("o1", 2, "paid")])
    proto = Protocol(after)
    for verb in (proto.recover, proto.plan):
        with pytest.raises(ConfigChanged, match=r"sink\.merge\.sequence_by was 'seq' when batch 1 was planned and "
                                                r"is now 'seq2'.*cannot change under an existing table"):
            verb()
    assert not Path(proto.layout.plan(2)).exists()
    assert run_next(Protocol(edit_merge_cfg(make_cfg, tmp_path))) == 2  # put back: it goes on


def test_a_pending_batch_refuses_an_edit_of_a_key_it_depends_on_until_it_is_committed(make_cfg, tmp_path):
    """Batch 2 is PREPARED; then max_record_bytes changes: recover and plan refuse, naming the key,
    both values and the two ways on; with the old value back the batch commits, and then the edit
    is taken by the next batch."""
    cfg = make_cfg()
    land_ids(cfg, "a.jsonl", range(0, 3))
    assert run_next(Protocol(cfg)) == 1
    land_ids(cfg, "b.jsonl", range(3, 5))
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    edited = make_cfg(max_record_bytes=4096)
    for verb in (Protocol(edited).recover, Protocol(edited).plan, lambda: Protocol(edited).commit(2)):
        with pytest.raises(ConfigChanged) as e:
            verb()
        msg = str(e.value)
        assert "max_record_bytes was 1048576 when batch 2 was planned and is now 4096" in msg, msg
        assert "Batch 2 is PREPARED" in msg and "Repair: put the old value(s) back" in msg, msg
        assert "make reset-batch PIPELINE=orders BATCH=2" in msg, msg
    assert DeltaTable(cfg.sink_table).transaction_version("orders") == 1
    assert run_next(Protocol(cfg)) is None  # the old value back: recover commits batch 2
    assert published_ids(proto) == [f"o{i}" for i in range(5)]
    land_ids(cfg, "c.jsonl", range(5, 6))
    assert run_next(Protocol(edited)) == 3  # nothing pending: the edit is taken
    assert Protocol(edited).ledger.plan(3).config == config_values(edited)
    # a late commit or stage task of batch 2, which every table holds, is not refused (putting the old
    # value back, as a refusal would say, would hold up the batches planned under the edit)
    assert Protocol(edited).commit(2).batch_id == 2
    assert Protocol(edited).check_stage(2) is not None
    with pytest.raises(JobRefused, match="is not staged"):  # the job: nothing written
        stage(Protocol(edited), 2)


def test_a_batch_is_staged_and_verified_only_under_its_plans_configuration(make_cfg):
    """Batch 2 is planned; the schema gains a column. The stage task refuses (ConfigChanged), the
    job refuses its spec (JobRefused: nothing written), and an attempt a job staged under the edit
    anyway (one that did not check) is refused by verify even once the old schema is back: its
    recorded configuration is not the plan's. Aborted, the batch is staged again and commits
    without the edited column; the next batch verifies."""
    cfg = make_cfg()
    land_ids(cfg, "a.jsonl", range(0, 3))
    assert run_next(Protocol(cfg)) == 1
    land_ids(cfg, "b.jsonl", range(3, 5))
    plan, _ = Protocol(cfg).plan()
    edited = make_cfg(schema=cfg.schema + ", note9 STRING")
    with pytest.raises(ConfigChanged, match=r"schema was .* when batch 2 was planned and is now .*note9.*Repair: "):
        Protocol(edited).check_stage(2)
    with pytest.raises(JobRefused, match=r"batch 2 attempt a1 .* is not staged: .*schema was .* when batch 2 was "
                                         r"planned and the job has .*note9.*Nothing was staged"):
        stage(Protocol(edited), 2, "a1")
    staged = Path(cfg.sink_table, "eo_batches", "b0000000002")  # nothing of batch 2 written
    assert not staged.exists() or not any(staged.iterdir())
    attempt = stage(Protocol(edited), 2, checks=False)
    make_cfg(schema=cfg.schema)  # the old value back, as a refusal advises
    proto = Protocol(cfg)
    with pytest.raises(VerifyFailed, match=r"not staged under its plan's configuration: schema was .* when batch 2 "
                                           r"was planned and the job ran with .*note9"):
        proto.verify(2, attempt)
    proto.abort(2, attempt, "verify failed")
    assert run_next(proto) == 2  # the next run stages batch 2 again, under its plan's configuration
    assert "note9" not in DeltaTable(cfg.sink_table).schema().to_arrow().names
    land_ids(cfg, "c.jsonl", range(5, 6))
    assert run_next(Protocol(cfg)) == 3
    assert published_ids(proto) == [f"o{i}" for i in range(6)]


def test_verify_refuses_sink_files_whose_columns_are_not_the_plans_schema(make_cfg):
    """A stage summary that records the plan's configuration, over files of another schema (a job
    that recorded one thing and staged another): verify names the extra column."""
    cfg = make_cfg()
    land_ids(cfg, "a.jsonl", range(0, 3))
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    attempt = stage(Protocol(make_cfg(schema=cfg.schema + ", note9 STRING")), 1, checks=False)
    summary = Path(proto.layout.stage_summary(1, attempt))
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "contract": config_values(cfg)}))
    make_cfg(schema=cfg.schema)
    with pytest.raises(VerifyFailed, match=r"its sink files hold the column\(s\) .*note9.*extra: note9; missing: none"):
        proto.verify(1, attempt)


def test_a_harmless_edit_does_not_stop_a_pending_batch(make_cfg):
    cfg = make_cfg()
    land_ids(cfg, "a.jsonl", range(0, 3))
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    edited = make_cfg(description="edited", retries={"commit": 3},
                      source={**edit_vars_source(cfg), "max_records_per_batch": 7})
    assert Protocol(edited).recover().actions  # commits batch 1
    assert published_ids(proto) == ["o0", "o1", "o2"]


def edit_vars_source(cfg) -> dict:
    return {"kind": "files", "path": cfg.source.path}


# -- a run that carries several batches (plan_batches) --------------------------------------------
# Each batch keeps its own plan record, attempt, PREPARED record and Delta commit; they commit
# strictly in order; a crash between any two of them leaves what the next run's recover and plan
# finish, each batch once.


@pytest.fixture
def small_batches(make_cfg):
    """Batches of at most 3 records (one landing file of 3 records is one batch)."""
    c = make_cfg()
    return make_cfg(source={"kind": "files", "path": c.source.path, "max_records_per_batch": 3})


def _land_files(cfg, files: int, first: int = 0) -> None:
    for i in range(first, first + files):
        land_ids(cfg, f"f{i:03d}.jsonl", range(3 * i, 3 * i + 3))


def _ids_of(files: int) -> list[str]:
    return sorted(f"o{i}" for i in range(3 * files))


def _txns(cfg) -> list[int]:
    """The sink's txn version of each Delta commit of this pipeline, from the raw log, in order."""
    out = []
    for f in sorted(Path(cfg.sink_table, "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            a = json.loads(line)
            if "txn" in a and a["txn"]["appId"] == cfg.app_id:
                out.append(a["txn"]["version"])
    return out


def test_a_run_plans_several_batches_each_its_own_record_and_range(small_batches):
    cfg = small_batches
    _land_files(cfg, 5)
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
    assert _txns(cfg) == [1, 2, 3], "one Delta commit per batch, in order"
    assert published_ids(proto) == _ids_of(3)
    plans, new = Protocol(cfg).plan_batches(max_batches=3)
    assert new and [p.batch_id for p in plans] == [4, 5], "as many as the source has"
    assert Protocol(cfg).plan_batches(max_batches=3) == ([plans[0], plans[1]], False)


def test_batches_of_a_run_commit_strictly_in_order(small_batches):
    cfg = small_batches
    _land_files(cfg, 3)
    proto = Protocol(cfg)
    plans, _ = proto.plan_batches(max_batches=3)
    for p in plans:
        proto.verify(p.batch_id, stage(proto, p.batch_id))
    with pytest.raises(BatchInFlight, match="batch 3 commits after batch 2 of its run, which the sink table does not "
                                            "hold yet .*: batch 1 commits first"):
        proto.commit(3)
    assert _txns(cfg) == []
    proto.commit(1)
    with pytest.raises(BatchInFlight, match="batch 2 commits first"):
        proto.commit(3)
    proto.commit(2)
    proto.commit(3)
    proto.commit(2)  # a retried commit of a committed batch: a no-op
    assert _txns(cfg) == [1, 2, 3] and published_ids(proto) == _ids_of(3)


@pytest.mark.parametrize("prepared, staged, pending", [
    ((), (), [1, 2, 3]),  # died after planning
    ((1,), (2,), [2, 3]),  # died while verifying: 1 PREPARED, 2 STAGED
    ((1, 2), (3,), [3]),
    ((1, 2, 3), (), []),  # died before the commits: recover commits all three
    ((2,), (3,), [1, 2, 3]),  # batch 1's attempt failed verify and was aborted; 2 PREPARED commits after it
])
def test_recover_commits_the_prepared_batches_in_order_and_hands_back_the_rest(small_batches, prepared, staged, pending):
    cfg = small_batches
    _land_files(cfg, 3)
    proto = Protocol(cfg)
    proto.plan_batches(max_batches=3, run_id="r1")
    for b in prepared:
        proto.verify(b, stage(proto, b))
    for b in staged:
        stage(proto, b)
    rec = Protocol(cfg).recover(run_id="r2")
    done = 3 - len(pending)
    assert rec.committed == done and rec.pending_batches == pending and rec.pending == (pending[0] if pending else None)
    assert _txns(cfg) == list(range(1, done + 1))
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
    assert published_ids(proto) == _ids_of(3) and _txns(cfg) == [1, 2, 3]


def test_a_commit_that_died_after_its_delta_commit_is_recorded_and_the_run_goes_on(small_batches):
    cfg = small_batches
    _land_files(cfg, 3)
    proto = Protocol(cfg)
    proto.plan_batches(max_batches=3)
    for b in (1, 2, 3):
        proto.verify(b, stage(proto, b))
    proto.commit(1)
    Path(proto.layout.committed(1)).unlink()  # the crash: Delta committed, the ledger record never written
    rec = Protocol(cfg).recover()
    assert any("batch 1 was committed in every table but its ledger entry was missing" in a for a in rec.actions)
    assert Protocol(cfg).ledger.committed(1) is not None and rec.committed == 3 and _txns(cfg) == [1, 2, 3]


def test_a_table_restored_behind_the_run_is_a_gap_not_a_pending_batch(small_batches, tmp_path):
    cfg = small_batches
    _land_files(cfg, 2)
    assert run_next(Protocol(cfg)) == 1
    log = Path(cfg.sink_table, "_delta_log")
    shutil.copytree(log, tmp_path / "log-at-1")
    assert run_next(Protocol(cfg)) == 2
    _land_files(cfg, 2, first=2)
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


def test_the_staged_attempt_of_a_batch_is_the_newest_try_that_wrote_its_summary_and_was_not_aborted(small_batches):
    cfg = small_batches
    _land_files(cfg, 1)
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    assert proto.staged_attempt(1) is None
    stage(proto, 1, "t1-aaaaaaaaaaaa")
    stage(proto, 1, "t2-bbbbbbbbbbbb")
    stage(proto, 1, "t3-cccccccccccc", write_summary=False)  # died before its summary
    stage(proto, 1, "t10-dddddddddddd")
    assert proto.staged_attempt(1) == "t10-dddddddddddd", "try 10 is newer than try 2"
    proto.abort(1, "t10-dddddddddddd", "failed")
    assert proto.staged_attempt(1) == "t2-bbbbbbbbbbbb"
    proto.verify(1, "t2-bbbbbbbbbbbb")
    proto.commit(1)
    assert published_ids(proto) == _ids_of(1)


def test_a_rewind_while_a_run_of_several_batches_is_undecided_names_the_reset_that_forgets_them_all(small_batches):
    cfg = small_batches
    _land_files(cfg, 1)
    assert run_next(Protocol(cfg)) == 1
    _land_files(cfg, 3, first=1)
    proto = Protocol(cfg)
    proto.plan_batches(max_batches=3)
    proto.verify(2, stage(proto, 2))
    proto.commit(2)
    with pytest.raises(ProtocolError, match=r"cannot rewind while batches 3\.\.4 of a run are not all committed "
                                            r"\(batch 3 is PLANNED\).*`make reset-batch PIPELINE=orders BATCH=3`"):
        Protocol(cfg).rewind(1)
    assert Protocol(cfg).reset(3) == [3, 4]
    assert Protocol(cfg).rewind(1) and published_ids(proto) == []


def test_a_run_of_several_batches_lists_the_landing_folder_once_and_says_each_skipped_input_once(
        small_batches, monkeypatch):
    """The run's batches share one listing of the landing folder (each would list it whole), and a
    landing input left out is in the run's skipped inputs (the gauge, the alert) once, not once
    per batch."""
    import os

    from eobatch.sources.files.planner import FilesSource

    cfg = small_batches
    _land_files(cfg, 3)
    fd = os.open(os.path.join(os.fsencode(cfg.source.path), b"bad-\xff.jsonl"), os.O_CREAT | os.O_WRONLY)
    os.write(fd, b'{"order_id": "x"}\n')
    os.close(fd)
    listings = []
    real = FilesSource.list_landing
    monkeypatch.setattr(FilesSource, "list_landing", lambda self, *a, **kw: listings.append(a) or real(self, *a, **kw))
    proto = Protocol(cfg)
    plans, _ = proto.plan_batches(max_batches=3)
    assert [p.batch_id for p in plans] == [1, 2, 3] and len(listings) == 1
    assert [s["reason"][:24] for s in proto.last_skipped] == ["its name is not UTF-8; n"]


# -- a run publishes what it could plan --------------------------------------------------------------


def _delta_lines(plan):
    """The stage job's records of a delta batch (each planned file's rows as JSON) and the positions
    the kind reports, for the pyarrow stager."""
    import pyarrow.parquet as pq

    lines, positions = [], {}
    for f in plan.range["files"]:
        rows = pq.read_table(f["path"]).to_pylist()
        lines += [("", f["path"], i, json.dumps(r).encode()) for i, r in enumerate(rows)]
        positions[f["path"]] = [len(rows), 0, len(rows) - 1]
    return lines, positions


def test_a_refusal_while_planning_a_later_batch_of_a_run_keeps_the_batches_planned_before_it(make_cfg, tmp_path):
    """Issue 41: an error planning batch 2 of a run failed the whole run, so batch 1 was published a
    run later. The run carries what it planned, says why it stopped, and the next run meets the
    refusal at its own first plan."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from eobatch.protocol.batch_run import BatchRun, RunParams
    from eobatch.sources.delta import UpstreamChanged

    up = str(tmp_path / "upstream")
    for i in (1, 2):  # v0, v1: one record each
        write_deltalake(up, pa.table({"order_id": [f"o{i}"], "amount": [float(i)]}), mode="append")
    DeltaTable(up).delete("order_id = 'o1'")  # v2: rows deleted, no change data: refused
    cfg = make_cfg(source={"kind": "delta", "table": up, "max_records_per_batch": 1})
    proto = Protocol(cfg)
    report = BatchRun(proto, "r1", RunParams(max_batches_per_run=3)).plan()  # the run's plan task
    assert report.value == [1, 2] and report.detail["new"]
    assert [proto.ledger.plan(b).range["versions"] for b in (1, 2)] == [[0, 1], [1, 2]]
    assert len(proto.last_warnings) == 1 and proto.last_warnings[0] in report.warnings
    assert proto.last_warnings[0].startswith("batch 3 was not planned: upstream version 2 (DELETE)")
    assert "this run carries batches 1..2" in proto.last_warnings[0]
    # a retried plan task hands the same batches back
    assert BatchRun(Protocol(cfg), "r1", RunParams(max_batches_per_run=3)).plan().value == [1, 2]
    for b in (1, 2):
        plan = proto.ledger.plan(b)
        lines, positions = _delta_lines(plan)
        proto.verify(b, stage(proto, b, lines=lines, source_positions=positions))
        proto.commit(b)
    assert published_ids(proto) == ["o1", "o2"]
    # the next run meets the refusal at its own first plan: nothing planned, the error raised
    with pytest.raises(UpstreamChanged, match=r"upstream version 2 \(DELETE\)"):
        Protocol(cfg).plan_batches(max_batches=3, run_id="r2")
    assert Protocol(cfg).ledger.history().latest == 2


def test_an_error_planning_the_first_batch_of_a_run_fails_the_run(make_cfg, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    from eobatch.sources.delta import UpstreamChanged

    up = str(tmp_path / "upstream")
    write_deltalake(up, pa.table({"order_id": ["o1"], "amount": [1.0]}), mode="append")
    DeltaTable(up).delete("order_id = 'o1'")
    cfg = make_cfg(source={"kind": "delta", "table": up, "max_records_per_batch": 1})
    proto = Protocol(cfg)
    (first,), _ = proto.plan_batches(max_batches=3)
    assert first.range["versions"] == [0, 1] and proto.last_warnings
    lines, positions = _delta_lines(first)
    proto.verify(1, stage(proto, 1, lines=lines, source_positions=positions))
    proto.commit(1)
    with pytest.raises(UpstreamChanged):
        Protocol(cfg).plan_batches(max_batches=3)
