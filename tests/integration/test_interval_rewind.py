"""Interval mode (a run's data interval is its batch; re-running an interval replaces its
slice) and rewind (tables back to before batch K, then read again from K's start), on real
Spark and Delta, checked with delta-rs and the raw _delta_log."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest

from eobatch.job import launch
from eobatch.protocol import BatchInFlight, ProtocolError
from support.checks import delta_log_commits, live_files, read_rows, txn_version
from support.harness import base_env, orders, run_batch, stage, write_pipeline

pytestmark = pytest.mark.integration

H0 = ("2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00")
H1 = ("2026-01-01T01:00:00+00:00", "2026-01-01T02:00:00+00:00")


def ids(table) -> collections.Counter:
    return collections.Counter(r["order_id"] for r in read_rows(table))


def cli(p, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eobatch.cli", *args],
                          env=base_env({"PIPELINES_DIR": str(p.yaml_path.parent), **(env or {})}),
                          capture_output=True, text=True, timeout=300)


def test_rewind_restores_the_tables_and_replays_from_the_batch_exactly_once(tmp_path):
    p = write_pipeline(tmp_path)
    a, b, c = orders("a", 5), orders("b", 6), orders("c", 4)
    p.land("a.jsonl", a, bad=["{broken a"], mtime=1_700_000_000)
    assert run_batch(p) == 1
    p.land("b.jsonl", b, bad=["{broken b"], mtime=1_700_000_100)
    assert run_batch(p) == 2

    r = cli(p, "rewind", p.name, "2", "--dry-run")
    assert r.returncode == 0 and "would rewind to before batch 2" in r.stdout, r.stderr
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a + b)

    # The rewind process dies after restoring the first table; the next run's recover finishes it.
    r = cli(p, "rewind", p.name, "2", env={"EOBATCH_CRASH": "rewind.after_first_restore"})
    assert r.returncode == 137, r.stdout + r.stderr
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a)
    assert len(read_rows(p.quarantine)) == 2  # not restored yet
    proto = p.protocol()
    rec = proto.recover()
    assert any("quarantine: restored" in x for x in rec.actions), rec.actions
    assert [x["raw"] for x in read_rows(p.quarantine)] == ["{broken a"]
    # RESTORE kept the txn ids: the pipeline's position moved through the ledger, not the txn.
    assert txn_version(p.sink, p.name) == 2 and txn_version(p.quarantine, p.name) == 2
    assert proto.state(2) == "REWOUND" and proto.state(1) == "COMMITTED"
    assert not any("restored" in a for a in proto.recover().actions)  # idempotent: nothing restored twice
    replay = proto.ledger.plan(3)  # reserved by the rewind: the first batch read again from batch 2's start
    assert replay.rewind["to_batch"] == 2 and [f["path"].rsplit("/", 1)[-1] for f in replay.range["files"]] == [
        "b.jsonl"]
    by = proto.ledger.rewinds()[0].run_id
    assert by.startswith("cli:") and proto.rewind(2, run_id=by) == [
        f"the rewind to before batch 2 was already done by run {by}"]  # the same run asking again

    p.land("c.jsonl", c, mtime=1_700_000_200)
    assert run_batch(p) == 3  # a new id; reads b again
    assert run_batch(p) == 4  # then c
    plan4 = p.protocol().ledger.plan(4)
    assert [f["path"].rsplit("/", 1)[-1] for f in plan4.range["files"]] == ["c.jsonl"]
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a + b + c)
    assert sorted(x["raw"] for x in read_rows(p.quarantine)) == ["{broken a", "{broken b"]
    for table in (p.sink, p.quarantine):
        commits = delta_log_commits(table)
        assert [c["txns"][0]["version"] for c in commits if c["txns"]] == [1, 2, 3, 4]
        restores = [c for c in commits if c["commitInfo"].get("eo.rewind")]
        assert len(restores) == 1 and restores[0]["commitInfo"]["operation"] == "RESTORE"
        # batch 2's files left the snapshot with the restore; batch 3 re-published its records
        assert not any("/b0000000002/" in f for f in live_files(table))

    r = cli(p, "rewind", p.name, "2")
    assert r.returncode == 5 and "can be rewound are 1, 3..4" in r.stderr
    r = cli(p, "rewind", p.name, "9")
    assert r.returncode == 5 and "cannot rewind to batch 9" in r.stderr


def test_interval_batches_replace_their_slice_and_are_strictly_ordered(tmp_path):
    p = write_pipeline(tmp_path, name="hourly", mode="interval", schedule="@hourly",
                       interval_prefix="dt={ds}/hour={hh}")
    a, b, c, d = orders("a", 5), orders("b", 4), orders("c", 3), orders("d", 2)
    p.land("dt=2026-01-01/hour=00/a.jsonl", a, bad=["{bad a"])
    p.land("dt=2026-01-01/hour=01/b.jsonl", b)
    p.land("dt=2026-01-02/hour=00/x.jsonl", orders("x", 2))  # another day, same hour: not in H0
    assert run_batch(p, interval=H0, run_id="r1") == 1
    assert run_batch(p, interval=H1, run_id="r2") == 2
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a + b)

    # The hour-00 interval runs again (a retry, a manual run, a backfill with reprocessing) after
    # more of its data landed: its slice is replaced, nothing is published twice.
    p.land("dt=2026-01-01/hour=00/c.jsonl", c)
    assert run_batch(p, interval=H0, run_id="r3") == 3
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a + b + c)
    assert [x["raw"] for x in read_rows(p.quarantine)] == ["{bad a"]
    commit3 = [x for x in delta_log_commits(p.sink) if x["txns"] and x["txns"][0]["version"] == 3][0]
    assert commit3["removes"] and all("/b0000000001/" in r["path"] for r in commit3["removes"])
    assert commit3["commitInfo"]["eo.interval"] == f"{H0[0]}/{H0[1]}"

    # Run r4 plans hour 01; run r5 (say a backfill) must wait for it, not plan past it.
    p.land("dt=2026-01-01/hour=01/d.jsonl", d)
    proto = p.protocol()
    plan4, new = proto.plan(interval={"start": H1[0], "end": H1[1]}, run_id="r4")
    assert new and plan4.batch_id == 4
    with pytest.raises(BatchInFlight, match="run r4"):
        p.protocol().plan(interval={"start": H1[0], "end": H1[1]}, run_id="r5")
    assert p.protocol().recover(run_id="r5").in_flight.batch_id == 4
    # r4 fails before PREPARED: its batch is abandoned (never both abandoned and prepared).
    attempt = launch.new_attempt_id(1)
    assert stage(p, 4, attempt).returncode == 0
    proto.abort(4, attempt, "run r4 failed")
    assert proto.abandon(4, "run r4 failed")
    with pytest.raises(Exception, match="ABANDONED"):
        proto.verify(4, attempt)
    assert proto.state(4) == "ABANDONED"
    assert run_batch(p, interval=H1, run_id="r5") == 5
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a + b + c + d)
    assert txn_version(p.sink, p.name) == 5 and txn_version(p.quarantine, p.name) == 5
    txns = [x["txns"][0]["version"] for x in delta_log_commits(p.sink) if x["txns"]]
    assert txns == [1, 2, 3, 5]

    # An interval with nothing landed still looks back: 2026-01-02 hour 00 never ran and holds x.jsonl,
    # so it is published (no file is skipped silently).
    plan6, _ = p.protocol().plan(interval={"start": "2026-01-03T00:00:00Z", "end": "2026-01-03T01:00:00Z"},
                                 run_id="r6")
    assert list(plan6.slices()) == ["iv=20260102T000000Z"] and "x.jsonl" in plan6.notes[0]
    assert p.protocol().abandon(6, "test: only the plan is checked")
    # An interval with nothing landed and nothing late plans nothing; a zero-length interval is refused.
    assert p.protocol().plan(interval={"start": "2025-12-31T00:00:00Z", "end": "2025-12-31T01:00:00Z"},
                             run_id="r6b") == (None, False)
    with pytest.raises(ProtocolError, match="non-zero length"):
        p.protocol().plan(interval={"start": H0[0], "end": H0[0]}, run_id="r7")


def test_a_late_file_republishes_its_interval_whole_in_the_next_runs_batch(tmp_path):
    """Hour 00 is published; then a file is renamed into hour 00's folder. The hour-01 run's batch
    holds both slices: the Spark job transforms and stages each under its own iv=<start>/ folder,
    the commit replaces hour 00's earlier files in the same transaction, and the ledger says so."""
    p = write_pipeline(tmp_path, name="late", mode="interval", schedule="@hourly",
                       interval_prefix="dt={ds}/hour={hh}")
    a, late, b = orders("a", 4), orders("late", 2), orders("b", 3)
    p.land("dt=2026-01-01/hour=00/a.jsonl", a, bad=["{bad a"])
    assert run_batch(p, interval=H0, run_id="h0") == 1
    p.land("dt=2026-01-01/hour=00/late.jsonl", late)
    p.land("dt=2026-01-01/hour=01/b.jsonl", b)
    assert run_batch(p, interval=H1, run_id="h1") == 2
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a + late + b)
    assert [x["raw"] for x in read_rows(p.quarantine)] == ["{bad a"]  # quarantine slice replaced too
    for table in (p.sink, p.quarantine):
        commit2 = [c for c in delta_log_commits(table) if c["txns"] and c["txns"][0]["version"] == 2][0]
        assert commit2["removes"] and all("/b0000000001/" in r["path"] for r in commit2["removes"])
        assert {a["path"].split("/")[3] for a in commit2["adds"]} <= {"iv=20260101T000000Z", "iv=20260101T010000Z"}
        # the commit info names the slices whose earlier files it removed: hour 01 is new
        assert json.loads(commit2["commitInfo"]["eo.replaces"]) == ["iv=20260101T000000Z"]
    r = cli(p, "ledger", p.name)
    assert r.returncode == 0 and "late files in the already planned interval" in r.stdout and "late.jsonl" in r.stdout
