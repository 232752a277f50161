"""The config of ``kind: parquet``, what its ``source:`` keys load to (``section.ParquetSection``):
those of ``kind: files`` but ``max_file_bytes`` (Spark splits a Parquet file by row groups, so no
file has to fit one task)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..base import DEFAULT_MAX_FILES_PER_BATCH, NotificationsConfig, SourceConfig


@dataclass(frozen=True, kw_only=True)
class ParquetConfig(SourceConfig):
    path: str  # every file below it whose name ``include`` takes, sub-folders included
    include: tuple[str, ...] = ("*.parquet",)  # the names it reads (globs of the file's name); others are reported
    interval_prefix: str | None = None  # interval mode: the interval's sub-folder ({ds}, {ds_nodash}, {hh})
    late_files: str = "republish"  # interval mode: republish | fail | ignore (as kind: files)
    late_lookback_intervals: int = 24  # interval mode: how many earlier intervals are checked
    max_files_per_batch: int = DEFAULT_MAX_FILES_PER_BATCH  # a batch reads at most this many files (empty ones too)
    discovery: str = "full"  # full: every plan lists the folder; lexical: only the paths after the last one passed
    full_listing_hours: int = 24  # discovery lexical, notification: a plan lists the whole folder when the last full listing is older
    notifications: NotificationsConfig | None = None  # discovery notification: the topic of the store's events

    HASHED_UNLESS_DEFAULT: ClassVar[dict[str, Any]] = {"include": ("*.parquet",)}
