"""eobatch.core.batch_run: one run's batch (``BatchRun``), which the Airflow tasks and the CLI verbs both
drive (how each translates its outcome: airflow/test_operators.py, test_cli.py)."""

from __future__ import annotations

from pathlib import Path

from eobatch.core.batch_run import BatchRun, RunParams
from eobatch.core.protocol import Protocol
from support.protocol_runs import land
from support.pyarrow_stager import stage


def test_dry_run_ends_with_the_attempt_aborted_and_nothing_published(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    land(cfg, "a.jsonl", ["a1", "a2"])
    run = BatchRun(proto, run_id="r1", params=RunParams(dry_run=True))
    assert run.recover().skip is None
    [batch] = run.plan().value
    attempt = stage(proto, batch)
    verified = run.verify(batch, attempt).value
    assert verified["rows_published"] == 2 and proto.ledger.prepared(batch) is None
    r = run.commit(batch, verified=verified)
    assert r.value["dry_run"] and "Nothing was published" in r.lines[0]
    assert proto.committed_versions() == {"sink": 0, "quarantine": 0}
    assert not list(Path(cfg.sink_table).rglob("*.parquet"))


def test_a_failed_run_keeps_the_batches_it_staged_and_the_next_verifies_them_as_they_are(make_cfg):
    """Issue 41 (2): a run's Spark job that staged batches 1 and 2 and then met a limit on batch 3 (too
    many open files, its time bound) made the abort remove every batch that was not PREPARED, so the
    next run started over and met the same limit, forever. A STAGED attempt that no verify rejected is
    kept; the next run stages only what is left, verifies the rest as it is, and publishes all once."""
    from support.protocol_runs import land_ids, published_ids

    c = make_cfg()
    cfg = make_cfg(source={"kind": "files", "path": c.source.path, "max_records_per_batch": 3})
    proto = Protocol(cfg)
    for i in range(3):
        land_ids(cfg, f"f{i}.jsonl", range(3 * i, 3 * i + 3))
    run = BatchRun(proto, run_id="r1")
    run.recover()
    batches = run.plan().value
    assert batches == [1, 2, 3]
    attempts = run.stage_attempts(batches, iter(["t1-a1", "t1-a2", "t1-a3"]).__next__).value
    for b in (1, 2):
        stage(proto, b, attempts[b])
    stage(proto, 3, attempts[3], write_summary=False)  # the job died in batch 3
    failed = run.fail_run(batches, attempts)
    assert [line.split(":")[0] for line in failed.lines[:2]] == [
        "batch 1 attempt t1-a1 is STAGED and no verify rejected it",
        "batch 2 attempt t1-a2 is STAGED and no verify rejected it"]
    assert failed.lines[2].startswith("batch 3 attempt t1-a3 aborted, 2 staged file(s) removed; the batch stays PLANNED")
    assert not list(Path(cfg.sink_table, "eo_batches", "b0000000003").rglob("*.parquet"))

    again = BatchRun(proto, run_id="r2")
    again.recover()
    assert again.plan().value == [1, 2, 3]
    chosen = again.stage_attempts([1, 2, 3], lambda: "t2-b3")
    assert chosen.value == {1: "t1-a1", 2: "t1-a2", 3: "t2-b3"} and chosen.detail["stage"] == {3: "t2-b3"}
    stage(proto, 3, "t2-b3")
    again.verify_run(chosen.value)
    for b in (1, 2, 3):
        again.commit(b)
    assert published_ids(proto) == sorted(f"o{i}" for i in range(9))


def test_an_attempt_verify_rejected_is_decided_for_abort_and_removed_by_the_runs_abort(make_cfg):
    """A kept STAGED attempt is never one that verify rejected (it would be verified, and rejected,
    by every next run): verify decides "abort" for it, and the run's abort removes its files."""
    import pytest

    from eobatch.core.verify import VerifyFailed

    cfg = make_cfg()
    proto = Protocol(cfg)
    land(cfg, "a.jsonl", ["a1", "a2"])
    run = BatchRun(proto, run_id="r1")
    run.recover()
    [batch] = run.plan().value
    attempt = stage(proto, batch)
    for f in Path(cfg.sink_table).rglob("*.parquet"):
        f.write_bytes(f.read_bytes() + b"x")  # not what the manifests say
    with pytest.raises(VerifyFailed):
        run.verify(batch, attempt)
    assert proto.ledger.decision(batch, attempt)["decision"] == "abort"
    removed = run.fail(batch, attempt)
    assert removed.value > 0 and "aborted" in removed.lines[0]
    assert not list(Path(cfg.sink_table).rglob("*.parquet"))
