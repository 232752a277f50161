"""Recovery edges: a PREPARED batch whose staged files were vacuumed away; ledger and table
disagreeing after a table was dropped and recreated. Both stop loudly and are repaired with
`reset-batch`, then end exactly once."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from eobatch.job import launch
from eobatch.protocol import CommitBlocked, LedgerMismatch
from support.checks import assert_exactly_once, read_rows
from support.harness import base_env, orders, run_batch, stage

pytestmark = pytest.mark.integration


def reset_batch(p, batch: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eobatch.cli", "reset-batch", p.name, str(batch)],
                          env=base_env({"PIPELINES_DIR": str(p.yaml_path.parent)}), capture_output=True, text=True)


def test_prepared_batch_whose_files_were_vacuumed_is_rechecked_before_commit(pipeline):
    from deltalake import DeltaTable

    p = pipeline
    p.land("a.jsonl", orders("a", 10))
    assert run_batch(p) == 1
    p.land("b.jsonl", orders("b", 12))
    proto = p.protocol()
    plan, _ = proto.plan()
    attempt = launch.new_attempt_id(1)
    assert stage(p, plan.batch_id, attempt).returncode == 0
    proto.verify(plan.batch_id, attempt)  # PREPARED ... and then it waits longer than the retention
    removed = DeltaTable(str(p.sink)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
    assert any(f"b{plan.batch_id:010d}" in r for r in removed), removed

    with pytest.raises(CommitBlocked, match=r"PREPARED batch 2 cannot be committed: .*is gone.*reset-batch"):
        proto.commit(2)
    with pytest.raises(CommitBlocked):
        proto.recover()
    r = reset_batch(p, 2)
    assert r.returncode == 0, r.stderr
    assert run_batch(p) == 2
    assert_exactly_once(p, batches=2)


def test_reset_refuses_batches_a_table_holds(pipeline):
    p = pipeline
    p.land("a.jsonl", orders("a", 3))
    assert run_batch(p) == 1
    r = reset_batch(p, 1)
    assert r.returncode == 5 and "would publish them twice" in r.stderr


def test_table_dropped_and_recreated_is_a_gap_repaired_by_reset(pipeline):
    p = pipeline
    for i in range(3):
        p.land(f"f{i}.jsonl", orders(f"f{i}", 5))
        assert run_batch(p) == i + 1
    shutil.rmtree(p.quarantine)  # someone dropped the quarantine table
    with pytest.raises(LedgerMismatch, match=r"gap: .*reset-batch PIPELINE=orders BATCH=1"):
        p.protocol().recover()
    # ... and the sink too: both start again from batch 1 after the reset
    shutil.rmtree(p.sink / "_delta_log")
    shutil.rmtree(p.sink / "eo_batches")
    r = reset_batch(p, 1)
    assert r.returncode == 0, r.stderr
    while run_batch(p) is not None:
        pass
    assert sorted(r["order_id"] for r in read_rows(p.sink)) == sorted(r["order_id"] for r in p.landed)
    assert_exactly_once(p, batches=1)  # everything replayed as one batch (within the record limit)


def test_a_schema_edit_between_plan_and_stage_is_never_staged_nor_published(pipeline):
    """Issue 27: the pipeline file gains a column while batch 1 is PLANNED; the real stage job,
    built from the edited file, refuses to stage it (naming key, both values; nothing written). Was:
    it staged the column, and once the old schema was put back (as a refusal advises) verify and
    commit published it, after which every batch failed verify. Put back, the batch publishes
    without the column."""
    from deltalake import DeltaTable

    p = pipeline
    p.land("a.jsonl", orders("a", 4))
    plan, _ = p.protocol().plan()
    assert plan is not None
    text = p.yaml_path.read_text()
    p.yaml_path.write_text(text.replace(' ts TIMESTAMP"', ' ts TIMESTAMP, note9 STRING"'))
    attempt = launch.new_attempt_id(1)
    r = stage(p, plan.batch_id, attempt)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "is not staged" in out and "note9" in out, out[-3000:]
    assert "when batch 1 was planned and the job has" in out, out[-3000:]
    # nothing staged (the ledger holds the run's job spec, _eo_ledger/attempts/<batch>/<attempt>/job.json)
    assert not [f for f in p.sink.rglob(f"*{attempt}*") if "_eo_ledger" not in f.parts]
    assert not list(p.quarantine.rglob(f"*{attempt}*"))
    p.yaml_path.write_text(text)  # the old schema back
    proto = p.protocol()
    proto.abort(1, attempt, "the stage task failed")
    assert run_batch(p) == 1  # staged again from the file that says what the plan recorded
    assert "note9" not in DeltaTable(str(p.sink)).schema().to_arrow().names
    assert_exactly_once(p, batches=1)
