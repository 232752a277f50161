"""A run's batches as lineage: what they read (each source kind's ``lineage_inputs`` of the recorded
ranges) and wrote (every table of the commit, at the Delta version holding the batch), read from
the ledger. Plain data (``storage.lineage.LineageDataset``); ``eobatch.airflow.lineage`` reports
it as OpenLineage facets of the pipeline's tasks.

* ``planned``: the inputs of the batches a plan recorded (no output: nothing is written yet);
* ``committed``: the inputs and outputs of the committed batches, each table once, at the version
  of the newest batch (each batch's version in the table's ``detail["batches"]``);
* every dataset a run's batches share (a landing folder, a topic) is reported once, each batch's
  facts under ``detail["batches"][<batch id>]``; ``batches``: one entry per batch (the run facet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.formats import QUARANTINE, SINK
from ..sources import lineage_inputs, range_summary
from ..storage import lineage
from ..storage.lineage import LineageDataset

if TYPE_CHECKING:
    from ..core.formats import BatchPlan, CommittedBatch, PreparedBatch
    from .verbs import Protocol


@dataclass
class RunLineage:
    pipeline: str
    inputs: list[LineageDataset] = field(default_factory=list)
    outputs: list[LineageDataset] = field(default_factory=list)
    batches: list[dict[str, Any]] = field(default_factory=list)  # one entry per batch, in order


def _add(into: dict[tuple[str, str], LineageDataset], batch_id: int, ds: LineageDataset) -> None:
    """``ds`` (one batch's) into ``into``: one dataset per (namespace, name), the newest batch's
    version, counts summed (unknown when a batch's is), each batch's detail under its id."""
    have = into.get(ds.key)
    if have is None:
        into[ds.key] = have = LineageDataset(ds.namespace, ds.name, storage=ds.storage, rows=0, bytes=0, files=0,
                                             detail={"batches": {}})
    have.version = ds.version if ds.version is not None else have.version
    for name in ("rows", "bytes", "files"):
        mine, theirs = getattr(have, name), getattr(ds, name)
        setattr(have, name, None if mine is None or theirs is None else mine + theirs)
    have.detail["batches"][str(batch_id)] = ds.detail


def _entry(proto: Protocol, plan: BatchPlan, state: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"batch_id": plan.batch_id, "state": state, "source_kind": plan.source_kind,
                             "range": range_summary(plan), "planned_by_run": plan.run_id}
    if plan.interval:
        entry["interval"] = dict(plan.interval)
    if plan.rows_in is not None:
        entry["rows_in"] = plan.rows_in
    return entry


def planned(proto: Protocol, batch_ids: list[int]) -> RunLineage:
    """The inputs of the planned batches ``batch_ids`` (their recorded ranges)."""
    out = RunLineage(proto.cfg.name)
    inputs: dict[tuple[str, str], LineageDataset] = {}
    for b in batch_ids:
        plan = proto.ledger.require_plan(b)
        for ds in lineage_inputs(proto.cfg.source, plan):
            _add(inputs, b, ds)
        out.batches.append(_entry(proto, plan, "PLANNED"))
    out.inputs = list(inputs.values())
    return out


def _table_output(proto: Protocol, participant: str, version: int, prepared: PreparedBatch | None) -> LineageDataset:
    """One table of a committed batch at ``version``: its rows (the sink's published, the quarantine's),
    files and bytes when the batch's staged files are its own (a merge sink's tables read the sink's)."""
    rows = files = size = None
    if prepared is not None:
        rows = {SINK: prepared.rows_published, QUARANTINE: prepared.rows_quarantined}.get(participant)
        if proto.inputs(participant) == participant and participant in prepared.adds:
            staged = prepared.adds[participant]
            files, size = len(staged), sum(f.size for f in staged)
    return lineage.at(proto.layout.table(participant), version=str(version), storage="delta", rows=rows, bytes=size,
                      files=files, detail={"participant": participant, "delta_version": version})


def committed(proto: Protocol, batch_ids: list[int], attempts: dict[int, str] | None = None,
              by_this_task: set[int] | frozenset[int] = frozenset()) -> RunLineage:
    """The committed batches of ``batch_ids`` (the others are left out): their inputs, every table
    each was committed to at the version holding it, one entry each (attempt, counts, versions;
    ``committed_by_this_task``: the reporting task's call wrote its COMMITTED record)."""
    out = RunLineage(proto.cfg.name)
    inputs: dict[tuple[str, str], LineageDataset] = {}
    outputs: dict[tuple[str, str], LineageDataset] = {}
    led = proto.ledger
    for b in batch_ids:
        rec: CommittedBatch | None = led.committed(b)
        plan = led.plan(b)
        if rec is None or plan is None:
            continue
        prepared = led.prepared(b)
        for ds in lineage_inputs(proto.cfg.source, plan):
            _add(inputs, b, ds)
        versions = {p: int(v) for p, v in rec.delta_versions.items()}
        for participant in proto.names:  # commit order: the sink's own tables, the sink, the quarantine
            if participant in versions:
                _add(outputs, b, _table_output(proto, participant, versions[participant], prepared))
        entry = _entry(proto, plan, "COMMITTED")
        entry.update({"attempt": (attempts or {}).get(b) or (prepared.attempt if prepared else None),
                      "committed_by_this_task": b in by_this_task, "recovered": rec.recovered,
                      "delta_versions": versions, "fingerprint": rec.fingerprint, "committed_at": rec.committed_at})
        if prepared is not None:
            entry.update({"rows_in": prepared.rows_in, "rows_published": prepared.rows_published,
                          "rows_quarantined": prepared.rows_quarantined})
        out.batches.append(entry)
    out.inputs, out.outputs = list(inputs.values()), list(outputs.values())
    return out
