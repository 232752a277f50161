"""The config of ``kind: files`` (JSON-lines landing files): what its ``source:`` keys load to
(``section.FilesSection``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..base import DEFAULT_MAX_FILES_PER_BATCH, NotificationsConfig, SourceConfig, legacy_fingerprint_dict


@dataclass(frozen=True, kw_only=True)
class FilesConfig(SourceConfig):
    path: str  # every file below it whose name ``include`` takes, sub-folders included
    include: tuple[str, ...] = ("*.jsonl",)  # the names it reads (globs of the file's name); others are reported
    interval_prefix: str | None = None  # interval mode: the interval's sub-folder ({ds}, {ds_nodash}, {hh})
    late_files: str = "republish"  # interval mode: a file landing in a published interval:
    #                                republish (the interval again, whole) | fail | ignore (logged)
    late_lookback_intervals: int = 24  # interval mode: how many earlier intervals are checked
    # optional: refuse landing files larger than this at plan time. None (the default): any size,
    # the stage job reads a file in pieces (spark.sql.files.maxPartitionBytes) with bounded memory
    max_file_bytes: int | None = None
    max_files_per_batch: int = DEFAULT_MAX_FILES_PER_BATCH  # a batch reads at most this many files (empty ones too)
    discovery: str = "full"  # full: every plan lists the folder; lexical: only the paths after the last one passed
    full_listing_hours: int = 24  # discovery lexical, notification: a plan lists the whole folder when the last full listing is older
    notifications: NotificationsConfig | None = None  # discovery notification: the topic of the store's events

    HASHED_UNLESS_DEFAULT: ClassVar[dict[str, Any]] = {"include": ("*.jsonl",)}

    def fingerprint_dict(self) -> dict:
        return legacy_fingerprint_dict(self)
