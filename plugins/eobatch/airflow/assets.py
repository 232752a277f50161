"""Airflow Assets of a pipeline's published tables: one definition of their URIs and of the
extra of a committed batch's asset event, shared by the commit path and the downstream DAGs.

* The asset of a table is its location: ``file:///abs/path`` for a local table, ``s3://bucket/key``
  for ``s3a://bucket/key`` (the spelling Airflow and every non-Spark reader use). ``asset_uri`` is
  the one mapping; a downstream DAG schedules on ``table_asset(cfg.sink_table)``.
* The pipeline's tasks that can commit a batch (commit, and recover for a PREPARED batch left by an
  earlier run) declare the outlet ``AssetAlias(alias_name(pipeline))`` and add the events through
  it, only when their call wrote the batch's COMMITTED ledger record (put-if-absent, written once
  per batch). A static ``outlets=[Asset(...)]`` would emit on every success of the task: a dry run's
  commit step, a no-op recommit of a batch already committed. Airflow registers the events when the
  task instance succeeds, and queues the DAGs scheduled on ``Asset(uri)`` for alias-added events too.
* ``batch_extras``: per table, the JSON ``extra`` of its event: pipeline, batch id, which table,
  its Delta version and every table's, rows, the source range (offsets or files), fingerprint.

No I/O here; Airflow is imported only by ``table_asset`` and ``batch_alias``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias

from ..core.formats import planned_files
from ..sources import range_summary
from ..storage import lineage

if TYPE_CHECKING:
    from ..core.formats import BatchPlan, CommittedBatch, PreparedBatch

ALIAS_PREFIX = "eobatch-"
MAX_FILES_IN_EXTRA = 100  # a files range lists at most this many paths in an event (the count always)


def asset_uri(location: str) -> str:
    """The asset URI of a table at ``location``: ``s3a://b/k`` and ``s3://b/k`` -> ``s3://b/k``; a
    local path -> ``file://`` + its absolute, normalised path. No trailing slash (Airflow drops it).
    The place is named as its OpenLineage dataset is (``storage.lineage.dataset_at``, the one mapping)."""
    namespace, name = lineage.dataset_at(location)
    if namespace == "file":
        return "file://" + name
    return f"{namespace}/{name}" if name else namespace


def alias_name(pipeline: str) -> str:
    """The pipeline's asset alias: the outlet of the tasks that can commit its batches."""
    return ALIAS_PREFIX + pipeline


def table_asset(location: str) -> Asset:
    """The Airflow Asset of a table (name = URI, so a producer and a consumer built from the same
    location name the same asset)."""
    uri = asset_uri(location)
    return Asset(name=uri, uri=uri)


def batch_alias(pipeline: str) -> AssetAlias:
    return AssetAlias(alias_name(pipeline))


def range_extra(plan: BatchPlan) -> dict[str, Any]:
    """The batch's source range, small enough for an event: Kafka's topic and offsets per partition
    ``[from, to)``; a files range's count and paths (the first ``MAX_FILES_IN_EXTRA``; ``truncated``
    says when there are more), the interval in interval mode, and the ledger's one-line summary."""
    rng = dict(plan.range or {})
    out: dict[str, Any] = {"kind": plan.source_kind, "summary": range_summary(plan)}
    files = planned_files(rng)
    if files is not None:
        paths = [f.path for f in files]
        out["file_count"] = len(paths)
        out["files"] = paths[:MAX_FILES_IN_EXTRA]
        if len(paths) > MAX_FILES_IN_EXTRA:
            out["truncated"] = True
    else:
        out.update({k: v for k, v in rng.items() if k in ("topic", "partitions", "isolation_level", "lost")})
    if plan.interval:
        out["interval"] = dict(plan.interval)
    return out


def batch_extras(pipeline: str, tables: dict[str, str], plan: BatchPlan, prepared: PreparedBatch | None,
                 committed: CommittedBatch) -> dict[str, dict[str, Any]]:
    """{participant: the extra of its table's event} for one committed batch. ``tables``:
    participant -> table location (sink, quarantine). ``delta_version`` is that table's version
    holding the batch (-1 when its commit info was cleaned from the log); ``delta_versions`` every
    table's. ``prepared`` None (a PREPARED record lost by a crash): rows are left out."""
    versions = {p: int(v) for p, v in committed.delta_versions.items()}
    rows = ({} if prepared is None else
            {"rows_in": prepared.rows_in, "rows_published": prepared.rows_published,
             "rows_quarantined": prepared.rows_quarantined, "files": prepared.files, "bytes": prepared.bytes})
    src = range_extra(plan)
    out = {}
    for participant, location in tables.items():
        if participant not in versions:
            continue
        out[participant] = {
            "pipeline": pipeline, "batch_id": committed.batch_id, "table": participant,
            "table_uri": asset_uri(location), "delta_version": versions[participant], "delta_versions": versions,
            **rows, "range": src, "fingerprint": committed.fingerprint, "recovered": committed.recovered,
            "planned_by_run": plan.run_id,
        }
    return out
