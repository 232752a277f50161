"""``kind: delta``: another Delta table's versions, read exactly once (a pipeline chained to another).

Offsets are the upstream table's versions (``planner``, ``range``): a batch reads the files that
versions ``[from, to)`` added with ``dataChange=true``, read like the parquet kind's files with the
partition columns the Delta log holds (``read``). Compaction upstream is never read again; a
RESTORE upstream is followed; a version that changes or deletes rows is read as its changes with
``change_feed`` (its change data files, else its added files' rows as inserts and its removed
files' rows as deletes, as the Delta protocol defines them), refused without it (or passed over,
recorded, when the YAML says so); the log and files removed before they were read are data loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import TerminalError
from ...storage import lineage, s3conf
from ...storage.lineage import LineageDataset
from ..base import COMMON_HARMLESS, PLANNED, fields_as_keys, harmless, pinned
from ..files.planner import changed_since_plan
from ..parquet import ParquetKind
from .config import DeltaConfig
from .log import DeltaLog, UndoneRead, effective_versions
from .planner import DeltaSource, UpstreamChanged, UpstreamDataLoss, UpstreamOutside, UpstreamRefused
from .range import DeltaRange
from .read import read_lines

if TYPE_CHECKING:
    from ..section import SourceSection


class DeltaKind(ParquetKind):
    """The parquet kind's files, planned from a Delta log: its own config, planner, range (versions)
    and reader (partition columns); rows per file checked as the parquet kind checks them."""

    name = "delta"
    reads_table_versions = True  # its offsets are the upstream table's versions (``first_batch_reading``)
    config_keys = fields_as_keys(DeltaConfig)
    # its part of config.contract: the upstream table (``path`` too, the table again: recorded since before
    # kinds were packages) and the connection to its store
    contract_keys = pinned("path", "table", "conn_id")
    harmless_keys = {
        **COMMON_HARMLESS, **harmless(PLANNED, "starting_version", "max_versions_per_batch", "max_files_per_batch"),
        "source.on_change_commit": "the policy for upstream versions that change rows, read when a range is planned",
        "source.change_feed": "whether a range reads the upstream's change data; each range records it",
        "source.on_data_loss": "the policy when records are gone before they are read: changing it is a repair",
    }
    position_based = True  # a rewind reads again from a batch's first upstream version
    checks_late_files = False
    interval_by_record_time = False
    replayable = False  # a replay writes JSON lines, which a Delta source does not read

    @property
    def config_model(self) -> type[SourceSection]:
        """The ``source:`` section's model (pydantic: imported where YAML is read, never by the Spark job)."""
        # pydantic: only where YAML is read (the Spark job loads this kind without it)
        from .section import DeltaSection

        return DeltaSection

    def planner(self, cfg) -> DeltaSource:  # type: ignore[override]
        return DeltaSource(cfg)

    def range(self, data: dict) -> DeltaRange:  # type: ignore[override]
        return DeltaRange.from_json(data)

    def start_marker(self, rng: dict) -> dict:  # type: ignore[override]
        return DeltaRange.from_json(rng).start_marker().to_json()

    def job_source(self, source: DeltaConfig) -> dict:  # type: ignore[override]
        return {"kind": self.name, "path": source.table}  # the table's folder: no link below it is followed

    def job_env(self, source: DeltaConfig) -> dict[str, str]:  # type: ignore[override]
        """An upstream in another store: its bucket's settings (``s3conf.BUCKETS_ENV``), which the
        Airflow task resolved from ``source.conn_id`` (``airflow.hooks.pipeline_store``)."""
        buckets = source.bucket_connections()
        if not buckets:
            return {}
        known = s3conf.bucket_settings()
        missing = sorted(set(buckets) - set(known))
        if missing:
            raise TerminalError(f"source.conn_id {source.conn_id!r}: the settings of bucket {missing[0]!r} were not "
                                f"resolved in this process (the pipeline's Airflow tasks resolve the connection)")
        return {s3conf.BUCKETS_ENV: s3conf.bucket_env(buckets)}

    def lineage_inputs(self, source: DeltaConfig, rng: dict) -> list[LineageDataset]:  # type: ignore[override]
        """The upstream table at the newest version the range read (``versions`` ``[from, to)``: ``to - 1``;
        none for a range at a version, which read nothing), the files it read, and the upstream
        pipelines' batches those versions carried (``upstream``)."""
        r = DeltaRange.from_json(rng)
        f, t = r.versions
        files = rng.get("files") or []
        detail: dict = {"kind": self.name, "versions": [f, t], "file_count": len(files)}
        detail.update({k: rng[k] for k in ("table_id", "upstream", "lost", "skipped", "change_feed") if rng.get(k)})
        records = None if any(x.get("records") is None for x in files) else sum(int(x["records"]) for x in files)
        return [lineage.at(rng["table"], version=str(t - 1) if t > f else None, storage="delta", rows=records,
                           bytes=sum(int(x.get("size") or 0) for x in files), files=len(files), detail=detail)]

    def unreadable(self, rng: dict, job: dict) -> list[str]:
        problems = changed_since_plan(rng, job.get("path"))
        if problems:
            problems.append(f"upstream files of {rng.get('table')} changed or were removed (a VACUUM?) since this "
                            f"batch was planned: its records cannot be read exactly any more")
        return problems

    def first_batch_reading(self, plans, version: int) -> tuple[int, list[int]] | None:
        """(batch, its upstream versions [from, to)) of the first of ``plans`` (the pipeline's live
        plans, in batch order) that read upstream ``version`` or a later one: a rewind to it reads
        the upstream again from at most ``version`` (``eobatch rewind --upstream-version``). None
        when no batch has read that far."""
        for p in plans:
            versions = (p.range or {}).get("versions")
            if p.source_kind == self.name and versions and int(versions[1]) > version:
                return p.batch_id, [int(versions[0]), int(versions[1])]
        return None

    def read(self, spark, rng: dict, job: dict):
        self._seen = (rng, job.get("path"))
        return read_lines(spark, rng, job.get("path"))


KIND = DeltaKind()

__all__ = ["KIND", "DeltaKind", "DeltaConfig", "DeltaSource", "DeltaRange", "DeltaLog", "UndoneRead",
           "UpstreamChanged", "UpstreamDataLoss", "UpstreamOutside", "UpstreamRefused", "effective_versions"]
