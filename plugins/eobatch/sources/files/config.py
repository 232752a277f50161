"""The ``source:`` keys of ``kind: files`` (JSON-lines landing files)."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import ConfigContext, SourceConfig, legacy_fingerprint_dict

KEYS = frozenset({"kind", "path", "max_records_per_batch", "interval_prefix", "settle_seconds", "late_files",
                  "late_lookback_intervals", "max_file_bytes"})


@dataclass(frozen=True, kw_only=True)
class FilesConfig(SourceConfig):
    path: str  # every *.jsonl below it, sub-folders included
    interval_prefix: str | None = None  # interval mode: the interval's sub-folder ({ds}, {ds_nodash}, {hh})
    late_files: str = "republish"  # interval mode: a file landing in a published interval:
    #                                republish (the interval again, whole) | fail | ignore (logged)
    late_lookback_intervals: int = 24  # interval mode: how many earlier intervals are checked
    # optional: refuse landing files larger than this at plan time. None (the default): any size,
    # the stage job reads a file in pieces (spark.sql.files.maxPartitionBytes) with bounded memory
    max_file_bytes: int | None = None

    def fingerprint_dict(self) -> dict:
        return legacy_fingerprint_dict(self)


def parse_landing(src: dict, ctx: ConfigContext) -> dict:
    """The keys files and parquet share (landing folder, record limit, interval mode), as
    keyword arguments of their config: the same checks and messages for both kinds."""
    from ...config import check_interval_prefix, interval_source_keys, pos_int, require, table_path

    limit = pos_int(src.get("max_records_per_batch", 100_000), ctx.file, "source.max_records_per_batch")
    path = table_path(require(src, "path", ctx.file, "source."), ctx.file, "source.path")
    prefix = src.get("interval_prefix")
    if prefix is not None:
        check_interval_prefix(prefix, ctx.mode, ctx.schedule, ctx.file)
    return {"kind": src["kind"], "path": path, "max_records_per_batch": limit, "interval_prefix": prefix,
            **interval_source_keys(src, ctx.mode, ctx.file)}


def parse(src: dict, ctx: ConfigContext) -> FilesConfig:
    from ...config import pos_int

    kw = parse_landing(src, ctx)
    if src.get("max_file_bytes") is not None:
        kw["max_file_bytes"] = pos_int(src["max_file_bytes"], ctx.file, "source.max_file_bytes")
    return FilesConfig(**kw)
