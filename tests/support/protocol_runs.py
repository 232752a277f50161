"""Batches through the real protocol for the unit tests: real local files, real delta-rs tables,
no Spark (the stage step is the pyarrow stager).

Land JSON-lines files, run a batch (recover, plan, stage, verify, commit), read what the sink
table published; in interval mode, hourly intervals from 2026-01-01T00:00Z. And what a crash can
leave: a batch the tables hold whose PREPARED and COMMITTED records are gone; attempts written
by hand (staged files and ledger records, no stager) for the sweep and for runs that overlap."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

from eobatch.core.formats import BatchPlan, PreparedBatch, StagedFile, fingerprint_of
from eobatch.protocol import Protocol
from support.pyarrow_stager import stage


# -- continuous mode: landing files of records o<i> ------------------------------------------------
def land_ids(cfg, name: str, ids: range) -> None:
    """Landing file ``name`` with the records {"order_id": "o<i>", "amount": i} of ``ids``."""
    path = Path(cfg.source.path) / name
    path.write_text("".join(json.dumps({"order_id": f"o{i}", "amount": float(i)}) + "\n" for i in ids))


def published_ids(proto: Protocol) -> list[str]:
    """The order ids the sink table publishes, sorted."""
    from deltalake import DeltaTable

    return sorted(r["order_id"] for r in DeltaTable(proto.cfg.sink_table).to_pyarrow_table().to_pylist())


def run_next(proto: Protocol, run_id: str | None = None) -> int | None:
    """One run: recover, plan, stage, verify, commit. The batch id; None when nothing was planned."""
    proto.recover(run_id=run_id)
    plan, _ = proto.plan(run_id=run_id)
    if plan is None:
        return None
    attempt = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    return plan.batch_id


def land_and_run(proto: Protocol, ids: range, name: str):
    """Land ``ids`` in file ``name``, then plan, stage, verify and commit: (batch id, its PREPARED record)."""
    land_ids(proto.cfg, name, ids)
    plan, _ = proto.plan()
    assert plan is not None, "nothing to plan"
    attempt = stage(proto, plan.batch_id)
    prepared = proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    return plan.batch_id, prepared


def failing_run(proto: Protocol, run_id: str, dry_run: bool = False) -> int:
    """A run whose stage job fails, as the DAG runs it (``BatchRun``): recover, plan, the stage task
    starts an attempt (its ledger record) and its job dies before the stage summary, then the abort
    task aborts it. The batch id (it stays PLANNED)."""
    from eobatch.protocol.batch_run import BatchRun, RunParams

    run = BatchRun(proto, run_id=run_id, params=RunParams(dry_run=dry_run))
    run.recover()
    planned = run.plan().value
    assert isinstance(planned, list) and planned, "nothing was planned"
    batch: int = planned[0]
    chosen = run.stage_attempts([batch], lambda: f"t1-{len(proto.ledger.attempts(batch)) + 1:04d}").value
    assert isinstance(chosen, dict)
    attempts: dict[int, str] = chosen
    if dry_run:  # what a dry run's commit task does: abort its attempt (BatchRun._dry_run_end)
        proto.abort(batch, attempts[batch], reason=f"dry run {run_id}")
    else:
        run.fail(batch, attempts[batch])
    return batch


def lose_prepared_and_committed(proto: Protocol, batch_id: int) -> None:
    """What a power loss can leave: the tables hold the batch, its two last ledger names are gone."""
    for path in (proto.layout.committed(batch_id), proto.layout.prepared(batch_id)):
        os.unlink(path)


# -- interval mode: hourly intervals from T0 ---------------------------------------------------------
H = 3600
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


def iv(i: int) -> dict:
    """The data interval of hour ``i`` after T0."""
    import datetime as dt

    return {k: dt.datetime.fromtimestamp(T0 + (i + j) * H, dt.timezone.utc).isoformat()
            for k, j in (("start", 0), ("end", 1))}


def land(cfg, rel: str, ids: list[str], mtime: float | None = None) -> None:
    """Landing file ``rel`` with the records of ``ids``, renamed into place (it keeps ``mtime``)."""
    path = Path(cfg.source.path) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text("".join(json.dumps({"order_id": i}) + "\n" for i in ids))
    if mtime is not None:
        os.utime(tmp, (mtime, mtime))
    os.replace(tmp, path)  # rename into place: keeps the mtime


def run(proto: Protocol, i: int, run_id: str | None = None):
    """The run of hour ``i``: recover, plan, stage, verify, commit. Its plan; None when nothing was planned."""
    proto.recover(run_id=run_id or f"h{i}")
    plan, _ = proto.plan(interval=iv(i), run_id=run_id or f"h{i}")
    if plan is None:
        return None
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    proto.commit(plan.batch_id)
    return plan


def published(proto: Protocol) -> collections.Counter:
    """How many times the sink table publishes each order id."""
    from deltalake import DeltaTable

    return collections.Counter(r["order_id"] for r in DeltaTable(proto.cfg.sink_table).to_pyarrow_table().to_pylist())


# -- attempts written by hand: staged files and ledger records, no stager ------------------------------
def empty_plan(batch_id: int, run_id: str | None = None, interval: dict | None = None) -> BatchPlan:
    """The plan record of a files batch of pipeline "orders" (its range holds no file)."""
    return BatchPlan(pipeline="orders", batch_id=batch_id, source_kind="files", range={"files": []},
                     rows_in=1, config_fingerprint="f", planned_at="2026-01-01T00:00:00Z",
                     run_id=run_id, interval=interval)


def stage_by_hand(proto: Protocol, batch_id: int, attempt: str, n: int = 2) -> list[str]:
    """Files as an attempt leaves them in both tables' staging folders; their paths relative to the table."""
    rels = []
    for participant in ("sink", "quarantine"):
        table = Path(proto.layout.table(participant))
        for i in range(n):
            rel = f"{proto.layout.attempt_staging_rel(batch_id, attempt)}/part-{i}.parquet"
            (table / rel).parent.mkdir(parents=True, exist_ok=True)
            (table / rel).write_bytes(b"x" * (i + 1))
            rels.append(f"{participant}:{rel}")
    return rels


def staged_left(proto: Protocol) -> set[str]:
    """Every staged file of both tables, as ``stage_by_hand`` names them."""
    out = set()
    for participant in ("sink", "quarantine"):
        table = Path(proto.layout.table(participant))
        out |= {f"{participant}:{p.relative_to(table)}" for p in (table / "eo_batches").rglob("*") if p.is_file()}
    return out


def prepare_by_hand(proto: Protocol, batch_id: int, attempt: str, rels: list[str]) -> None:
    """The PREPARED record of ``attempt`` whose files are ``rels`` (as ``stage_by_hand`` returned them)."""
    adds = {p: [StagedFile(r.split(":", 1)[1], 1, {}, 0, "{}") for r in rels if r.startswith(p + ":")]
            for p in ("sink", "quarantine")}
    assert proto.ledger.put_prepared(PreparedBatch(
        pipeline="orders", batch_id=batch_id, attempt=attempt, adds=adds, arrow_schema={}, partition_by={},
        fingerprint=fingerprint_of(adds), rows_in=1, rows_valid=1, rows_quarantined=0, rows_published=1,
        bytes=1, files=1, prepared_at="t", verify_seconds=0.0, stage_seconds=0.0))


class Died(BaseException):
    """A process that died at a crash point (``commit_dying_at``)."""


def commit_dying_at(proto: Protocol, batch_id: int, point: str | None) -> str:
    """Commit ``batch_id`` as a commit task that dies at crash point ``point`` (None: never):
    "committed", or "died" (PREPARED, maybe partly committed: the next run's recover finishes it)."""
    from eobatch.core import faults

    def dies_at(name: str) -> None:
        if name == point:
            raise Died(f"the commit died at {point}")
    real = faults.crash_point
    faults.crash_point = dies_at
    try:
        proto.commit(batch_id)
    except Died:
        return "died"
    finally:
        faults.crash_point = real
    return "committed"


def model_settings(ci_examples_env: str, ci_examples: int, ci_steps: int):
    """A model's hypothesis settings: ``EOBATCH_MODEL_EXAMPLES`` examples of 40 steps when set
    (``make model-check``), else ``ci_examples_env`` (default ``ci_examples``) of ``ci_steps``."""
    from hypothesis import HealthCheck, settings

    if os.environ.get("EOBATCH_MODEL_EXAMPLES"):
        return settings(max_examples=int(os.environ["EOBATCH_MODEL_EXAMPLES"]), stateful_step_count=40, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow])
    return settings(max_examples=int(os.environ.get(ci_examples_env, str(ci_examples))), stateful_step_count=ci_steps,
                    deadline=None, suppress_health_check=[HealthCheck.too_slow])
