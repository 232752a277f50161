"""``kind: files``: JSON-lines landing files, one record per line, read in parallel pieces.

Config ``config.FilesConfig``, planner ``planner.FilesSource``, range ``range.FilesRange``,
Spark reader ``read.read_lines``; ``KIND`` ties them to the registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...storage import lineage
from ...storage.lineage import MAX_FILES_LISTED, LineageDataset
from ..base import (
    COMMON_HARMLESS,
    PLANNED,
    ConfigContext,
    IntervalTooLarge,
    LandingUnreadable,
    SourceConfig,
    fields_as_keys,
    harmless,
    pinned,
)
from .config import FilesConfig
from .planner import FilesSource, FileTooLarge, LateFiles, changed_since_plan, count_records, gone_files
from .range import FilesRange, PlannedFile
from .read import locate, observed_pieces, read_lines, release, seen

if TYPE_CHECKING:
    from ..section import SourceSection

# the keys of the landing kinds (files, parquet) that bound how a range is planned, not what it holds
LANDING_HARMLESS = {**COMMON_HARMLESS, **harmless(
    PLANNED, "include", "interval_prefix", "late_files", "late_lookback_intervals", "max_files_per_batch", "discovery",
    "full_listing_hours", "notifications")}


class FilesKind:
    name = "files"
    config_keys = fields_as_keys(FilesConfig)  # the config's fields are the source: keys (the section's, a test checks)
    contract_keys = pinned("path")  # its part of config.contract: the landing folder
    harmless_keys = {**LANDING_HARMLESS, **harmless(PLANNED, "max_file_bytes")}
    position_based = False
    checks_late_files = True
    interval_by_record_time = False  # interval mode: by landing folder or mtime
    replayable = True  # a replayed record lands as a JSON-lines file in the landing folder
    reads_alike = True  # the opened, pinned files read again as the same lines, numbered alike (``read_lines``)
    reads_table_versions = False
    located_columns: tuple[str, ...] = ("source",)  # the planned path, from _eo_file, for quarantined records only
    quarantine_columns: tuple[str, ...] = ("_eo_file", "_eo_split", "position")  # what locate numbers lines by

    @property
    def config_model(self) -> type[SourceSection]:
        """The ``source:`` section's model (pydantic: imported where YAML is read, never by the Spark job)."""
        # pydantic: only where YAML is read (the Spark job loads this kind without it)
        from .section import FilesSection

        return FilesSection

    def first_batch_reading(self, plans, version: int) -> tuple[int, list[int]] | None:
        """Its offsets are files, not versions (``SourceKind.first_batch_reading``)."""
        return None

    def interval_slices(self, lines, rng: dict) -> None:
        """A record's interval slice is its planned file's (``SourceKind.interval_slices``)."""
        return None

    def parse_config(self, src: dict, ctx: ConfigContext) -> SourceConfig:  # FilesConfig; ParquetKind returns its own
        return self.config_model.parse(src, ctx)

    def planner(self, cfg) -> FilesSource:
        return FilesSource(cfg)

    def range(self, data: dict) -> FilesRange:
        return FilesRange.from_json(data)

    def start_marker(self, rng: dict) -> None:
        return None

    def job_source(self, source: FilesConfig) -> dict:
        return {"kind": self.name, "path": source.path}  # the landing folder: no link below it is followed

    def job_env(self, source: FilesConfig) -> dict[str, str]:
        return {}  # storage credentials travel on their own (s3conf)

    def lineage_inputs(self, source: FilesConfig, rng: dict) -> list[LineageDataset]:
        """The landing folder (one dataset, whatever the number of files): the files the range reads
        (at most ``MAX_FILES_LISTED`` paths, the count always), their records and bytes; planned files
        it will not read (``skipped``) are counted apart."""
        files = FilesRange.from_json(rng).files
        read = [f for f in files if not f.skipped]
        paths = [f.path for f in read]
        detail: dict = {"kind": self.name, "file_count": len(paths), "files": paths[:MAX_FILES_LISTED]}
        if len(paths) > MAX_FILES_LISTED:
            detail["truncated"] = True
        if len(read) < len(files):
            detail["skipped"] = [f.path for f in files if f.skipped][:MAX_FILES_LISTED]
        records = None if any(f.records is None for f in read) else sum(f.records or 0 for f in read)
        return [lineage.at(source.path, rows=records, bytes=sum(f.size for f in read), files=len(read), detail=detail)]

    def unreadable(self, rng: dict, job: dict) -> list[str]:
        return changed_since_plan(rng, job.get("path"))

    def gone(self, rng: dict) -> list[str]:
        return gone_files(rng)

    def read(self, spark, rng: dict, job: dict):
        # pyspark: the Spark job only (the Airflow side imports this module)
        from pyspark.sql import Observation

        self._seen = (rng, job.get("path"))
        self._pieces = Observation("eobatch_pieces")  # the lines of each piece, for ``locate``
        return read_lines(spark, rng, job.get("path"), max_record_bytes=job["max_record_bytes"], pieces=self._pieces)

    def locate(self, spark, records, rng: dict, job: dict):
        return locate(spark, records, rng, job.get("path"), max_record_bytes=job["max_record_bytes"],
                      pieces=observed_pieces(getattr(self, "_pieces", None)))

    def positions(self, lines) -> dict:
        """The identity of each planned local file after the job's reads (``read.seen``): verify
        refuses a batch whose files are not the ones planned."""
        rng_root = getattr(self, "_seen", None)
        return seen(*rng_root) if rng_root else {}

    def release(self, rng: dict) -> None:
        """The descriptors the batch's read opened are closed (``read.release``)."""
        release(rng)


KIND = FilesKind()

__all__ = ["KIND", "FilesKind", "FilesConfig", "FilesSource", "FilesRange", "PlannedFile", "LateFiles",
           "FileTooLarge", "IntervalTooLarge", "LandingUnreadable", "changed_since_plan", "count_records"]
