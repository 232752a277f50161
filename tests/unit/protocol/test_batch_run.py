"""eobatch.protocol.batch_run: one run's batch (``BatchRun``), which the Airflow tasks and the CLI verbs both
drive (how each translates its outcome: airflow/test_operators.py, test_cli.py)."""

from __future__ import annotations

from pathlib import Path

from eobatch.protocol import Protocol
from eobatch.protocol.batch_run import BatchRun, RunParams
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

    from eobatch.protocol.verify import VerifyFailed

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


def test_a_transform_fixed_while_its_batch_is_pending_goes_on_with_the_replan_pending_param(make_cfg, write_yaml):
    """Issue 41: a pending batch pins its transform's code (and the other keys of the contract): the
    fix of a transform that fails every attempt was refused until the batch committed, which it never
    would. ``replan_pending`` (a run param of the trigger form) forgets the pending batches no table
    holds and plans their range again under the file as it is now; a PREPARED one is refused."""
    import pytest

    from eobatch.errors import ConfigChanged
    from eobatch.pipelines.loader import load_pipeline
    from support.protocol_runs import published_ids

    cfg = make_cfg()
    land(cfg, "a.jsonl", ["a1", "a2"])
    first = BatchRun(Protocol(cfg), run_id="r1")
    first.recover()
    assert first.plan().value == [1]
    first.fail(1, stage(first.proto, 1, write_summary=False))  # the old code failed

    with open(cfg.file, "a") as f:  # the fix: a key the pending batch pinned
        f.write("max_record_bytes: 4096\n")
    fixed = load_pipeline(cfg.file)
    with pytest.raises(ConfigChanged, match="max_record_bytes"):
        BatchRun(Protocol(fixed), run_id="r2").recover()
    run = BatchRun(Protocol(fixed), run_id="r3", params=RunParams(replan_pending=True))
    assert any(line.startswith("replan_pending: batches 1..1 forgotten") for line in run.recover().lines)
    assert run.plan().value == [1]
    attempt = stage(run.proto, 1)
    run.verify(1, attempt)
    run.commit(1)
    assert published_ids(run.proto) == ["a1", "a2"]
    assert run.proto.ledger.require_plan(1).config["max_record_bytes"] == 4096

    land(fixed, "b.jsonl", ["b1"])
    again = BatchRun(Protocol(fixed), run_id="r4")
    again.recover()
    [b2] = again.plan().value
    again.verify(b2, stage(again.proto, b2))
    with pytest.raises(Exception, match="PREPARED: it must be committed"):
        BatchRun(Protocol(fixed), run_id="r5", params=RunParams(replan_pending=True)).recover()
