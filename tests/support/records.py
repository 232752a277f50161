"""Ledger records for the unit tests of formats, ledger and the source kinds: a files batch plan
and its PREPARED record, the plan of a range of any kind, a stage summary's source positions."""

from __future__ import annotations

from eobatch.core.formats import BatchPlan, PreparedBatch, StagedFile, StageSummary, fingerprint_of


def plan_record(batch_id=1, files=None, notes=None) -> BatchPlan:
    """Batch ``batch_id`` of pipeline "orders": landing files a.jsonl and b.jsonl unless ``files``."""
    files = files if files is not None else [
        {"path": "/landing/a.jsonl", "size": 10, "mtime_ms": 1000, "records": 2},
        {"path": "/landing/b.jsonl", "size": 20, "mtime_ms": 2000, "records": 3},
    ]
    return BatchPlan(pipeline="orders", batch_id=batch_id, source_kind="files", range={"files": files},
                     rows_in=sum(f["records"] for f in files), config_fingerprint="0123456789abcdef",
                     planned_at="2024-01-01T00:00:00Z", plan_seconds=0.25, notes=list(notes or []))


def prepared_record(batch_id=1) -> PreparedBatch:
    """The PREPARED record of attempt a1 of batch ``batch_id``: one sink file."""
    adds = {"sink": [StagedFile("eo_batches/b0000000001/a1/part-0.parquet", 123, {}, 5, "{}")], "quarantine": []}
    return PreparedBatch(pipeline="orders", batch_id=batch_id, attempt="a1", adds=adds,
                         arrow_schema={"sink": "QUJD", "quarantine": "REVG"}, partition_by={"sink": []},
                         fingerprint=fingerprint_of(adds), rows_in=5, rows_valid=4, rows_quarantined=1,
                         rows_published=4, bytes=123, files=1, prepared_at="2024-01-01T00:00:01Z",
                         verify_seconds=0.5, stage_seconds=12.0)


def kind_plan(kind, rng):
    """Batch 3 of pipeline "p", whose source kind is ``kind`` and range ``rng``."""
    return BatchPlan(pipeline="p", batch_id=3, source_kind=kind, range=rng, rows_in=None, config_fingerprint="f",
                     planned_at="2026-01-01T00:00:00+00:00")


def stage_summary(rows_in, positions):
    """A stage summary of ``rows_in`` records whose source positions are ``positions``."""
    return StageSummary(batch_id=1, attempt="a", rows_in=rows_in, rows_valid=rows_in, rows_quarantined=0,
                        row_preserving=True, partitions={}, manifests={}, arrow_schema={}, partition_by={},
                        stage_seconds=0.0, source_positions=positions)
