"""Each crash point of the protocol as its own test: real spark-submit, real Delta (delta-rs).

Each ends with the exact expected table read by an independent reader, the txn version equal
to the number of committed batches, and no orphan files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from eobatch.job import launch
from eobatch.protocol import LedgerMismatch
from eobatch.protocol.verify import VerifyFailed
from eobatch.sinks import FingerprintMismatch
from support.checks import assert_exactly_once, delta_log_commits, orphans, txn_version
from support.harness import REPO, base_env, kill_group, orders, run_batch, stage, wait_for

pytestmark = pytest.mark.integration
ONE_PARTITION_PER_FILE = {"spark.sql.files.openCostInBytes": str(1 << 30)}


def test_spark_submit_killed_mid_write(pipeline):
    p = pipeline
    p.land("a.jsonl", orders("a", 300))
    p.land("b.jsonl", orders("b", 300))
    proto = p.protocol()
    plan, _ = proto.plan()
    attempt = launch.new_attempt_id(1)
    proc = stage(p, plan.batch_id, attempt, env={"EOBATCH_PAUSE": "stage.after_first_file"}, wait=False,
                 conf=ONE_PARTITION_PER_FILE)
    staged = p.sink / "eo_batches" / f"b{plan.batch_id:010d}" / attempt
    wait_for(lambda: list(staged.rglob("*.parquet")), timeout=300, what="the first staged file")
    kill_group(proc)  # kill -9 of spark-submit and its Python workers, mid-write
    assert list(staged.rglob("*.parquet")), "the killed attempt left a partial file behind"
    assert proto.ledger.stage_summary(plan.batch_id, attempt) is None

    # the next run: the batch is re-staged with the same range. The dead attempt's files stay
    # until the batch is decided (a sweep cannot tell a dead attempt from a live one), and the
    # commit removes them.
    rec = proto.recover()
    assert rec.pending == 1
    assert list(staged.rglob("*.parquet")), "an undecided batch's attempts are never swept"
    assert run_batch(p) == 1
    assert not staged.exists() and orphans(p.sink) == []
    assert proto.ledger.plan(1).range == plan.range
    assert_exactly_once(p, batches=1)


def test_missing_partition_manifest_at_verify(pipeline):
    p = pipeline
    for i in range(3):
        p.land(f"f{i}.jsonl", orders(f"f{i}", 50))
    proto = p.protocol()
    plan, _ = proto.plan()
    attempt = launch.new_attempt_id(1)
    r = stage(p, plan.batch_id, attempt, conf=ONE_PARTITION_PER_FILE)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = proto.ledger.stage_summary(plan.batch_id, attempt)
    assert summary.partitions["sink"] >= 3, summary.partitions
    manifest = proto.layout.manifest(plan.batch_id, attempt, "sink", 1)
    os.unlink(manifest)
    with pytest.raises(VerifyFailed, match=r"manifest of Spark partition 1 of \d+ is missing"):
        proto.verify(plan.batch_id, attempt)
    assert proto.ledger.prepared(plan.batch_id) is None
    removed = proto.abort(plan.batch_id, attempt, "verify failed")
    assert removed and orphans(p.sink) == []
    assert run_batch(p) == 1
    assert_exactly_once(p, batches=1)


def test_wrong_file_size_fails_verify(pipeline):
    p = pipeline
    p.land("a.jsonl", orders("a", 20))
    proto = p.protocol()
    plan, _ = proto.plan()
    attempt = launch.new_attempt_id(1)
    assert stage(p, plan.batch_id, attempt).returncode == 0
    f = next((p.sink / "eo_batches").rglob("*.parquet"))
    with open(f, "ab") as fh:
        fh.write(b"junk")
    with pytest.raises(VerifyFailed, match="bytes, manifest 0 says"):
        proto.verify(plan.batch_id, attempt)


def test_commit_retried_after_it_succeeded(pipeline):
    p = pipeline
    p.land("a.jsonl", orders("a", 30), bad=["nope"])
    assert run_batch(p) == 1
    proto = p.protocol()
    before = [c["version"] for c in delta_log_commits(p.sink)]
    again = proto.commit(1)  # a retry of a commit that already happened: a checked no-op
    assert again.delta_versions == {"sink": 1, "quarantine": 1}
    assert [c["version"] for c in delta_log_commits(p.sink)] == before
    assert_exactly_once(p, batches=1)

    # the committed file set must be the prepared one: a different fingerprint is an error
    prepared_path = proto.layout.prepared(1)
    d = json.loads(open(prepared_path).read())
    d["fingerprint"] = "0" * 64
    open(prepared_path, "w").write(json.dumps(d))
    with pytest.raises(FingerprintMismatch, match="holds batch 1 with file-set fingerprint"):
        proto.commit(1)


def test_two_attempts_of_one_batch_racing_to_commit(pipeline):
    p = pipeline
    p.land("a.jsonl", orders("a", 200), bad=["{"])
    proto = p.protocol()
    plan, _ = proto.plan()
    a1, a2 = launch.new_attempt_id(1), launch.new_attempt_id(2)
    procs = [stage(p, plan.batch_id, a, wait=False) for a in (a1, a2)]  # a zombie and its retry
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:]
    results = {}

    def verify(a):
        results[a] = proto.verify(plan.batch_id, a)

    threads = [threading.Thread(target=verify, args=(a,)) for a in (a1, a2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    winner = proto.ledger.prepared(plan.batch_id).attempt
    assert results[a1].attempt == results[a2].attempt == winner  # one PREPARED, same for both

    # two committers in two processes at once
    script = ("import sys; sys.path.insert(0, sys.argv[1]);"
              "from eobatch.pipelines.loader import load_pipeline; from eobatch.protocol import Protocol;"
              "print(Protocol(load_pipeline(sys.argv[2])).commit(1).delta_versions)")
    cmds = [subprocess.Popen([sys.executable, "-c", script, str(REPO / "plugins"), str(p.yaml_path)],
                             env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    outs = [c.communicate(timeout=120) for c in cmds]
    assert all(c.returncode == 0 for c in cmds), outs
    sink_commits = [c for c in delta_log_commits(p.sink) if c["txns"]]
    assert len(sink_commits) == 1, "the batch was committed twice"
    assert sink_commits[0]["commitInfo"]["eo.attempt"] == winner

    loser = a2 if winner == a1 else a1
    assert not list((p.sink / "eo_batches").rglob(f"{loser}/*")), "the commit removes the loser's files"
    proto.recover()
    assert_exactly_once(p, batches=1)


def test_empty_landing_zone_publishes_nothing(pipeline):
    assert run_batch(pipeline) is None
    assert not (pipeline.sink / "_delta_log").exists()
    pipeline.land("a.jsonl", orders("a", 3))
    assert run_batch(pipeline) == 1
    versions = [c["version"] for c in delta_log_commits(pipeline.sink)]
    assert run_batch(pipeline) is None
    assert [c["version"] for c in delta_log_commits(pipeline.sink)] == versions
    assert_exactly_once(pipeline, batches=1)


def test_changed_file_is_reported_and_never_published_twice(pipeline):
    p = pipeline
    f = p.land("a.jsonl", orders("a", 10))
    assert run_batch(p) == 1
    with open(f, "a") as fh:  # a producer rewrites a consumed file
        fh.write(json.dumps(orders("z", 1)[0]) + "\n")
    p.land("b.jsonl", orders("b", 4))
    assert run_batch(p) == 2
    notes = p.protocol().ledger.plan(2).notes
    assert len(notes) == 1 and notes[0].startswith(f"changed {f} after it was consumed")
    assert run_batch(p) is None
    assert p.protocol().ledger.plan(2).range["files"][0]["path"].endswith("b.jsonl")
    assert_exactly_once(p, batches=2)


def test_batches_are_bounded_by_whole_files(pipeline):
    p = pipeline
    for i in range(4):
        p.land(f"f{i}.jsonl", orders(f"f{i}", 40))
    assert run_batch(p, max_records=90) == 1  # two files of 40
    assert run_batch(p, max_records=10) == 2  # at least one whole file, even over the limit
    assert run_batch(p, max_records=90) == 3
    assert run_batch(p) is None
    counts = [len(p.protocol().ledger.plan(b).range["files"]) for b in (1, 2, 3)]
    assert counts == [2, 1, 1]
    assert_exactly_once(p, batches=3)


def test_ledger_and_table_disagreeing_stop_the_pipeline(pipeline):
    p = pipeline
    p.land("a.jsonl", orders("a", 5))
    assert run_batch(p) == 1
    proto = p.protocol()
    # a batch the ledger does not know: its plan file lost
    plan1 = proto.layout.plan(1)
    saved = open(plan1, "rb").read()
    os.unlink(plan1)
    with pytest.raises(LedgerMismatch, match="only knows batches up to 0"):
        proto.recover()
    open(plan1, "wb").write(saved)
    # a gap: the ledger planned batch 3 while the table holds batch 1
    for b in (2, 3):
        d = json.loads(saved)
        d["batch_id"] = b
        open(proto.layout.plan(b), "w").write(json.dumps(d))
    with pytest.raises(LedgerMismatch, match="gap"):
        proto.recover()
    with pytest.raises(LedgerMismatch, match="gap"):
        proto.plan()
    assert txn_version(p.sink, p.name) == 1
