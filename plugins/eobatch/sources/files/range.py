"""The recorded range of a landing-files kind (files, parquet): whole files, each with its size,
modification time, record count and (interval mode) its interval slice.

Ledger JSON: ``{"files": [{"path", "size", "mtime_ms", "records", "slice"?, "skipped"?, "identity"?}],
"listed_after"?, "full_listing_ms"?, "listing_done"?, "events"?}`` (``source.discovery``: lexical records the
first two, notification all four, ``events`` being ``{"topic", "positions": {partition: next offset}}``);
identity: [device, inode, mtime in ns] of a local file, [ETag, VersionId, LastModified in ms] of an S3
object (plans written before them have none: checked by size and mtime only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from ...core.formats import PlannedFile
from ..base import RangeDetail

if TYPE_CHECKING:
    from ...core.formats import StageSummary


@dataclass(frozen=True)
class FilesRange:
    files: tuple[PlannedFile, ...]
    # ``source.discovery: lexical``: the path the next plan lists after (every path up to it was
    # consumed, left void or planned) and when the last full listing was made (ms)
    listed_after: str | None = None
    full_listing_ms: int | None = None
    # ``source.discovery: notification``: whether the reconciliation listing is done, and the positions
    # of the notification topic after the events this range passed
    listing_done: bool | None = None
    events: dict | None = None

    @classmethod
    def from_json(cls, data: dict) -> Self:
        return cls(tuple(PlannedFile.of(f) for f in data.get("files", [])), data.get("listed_after"), data.get("full_listing_ms"),
                   data.get("listing_done"), data.get("events"))

    def to_json(self) -> dict:
        d: dict[str, Any] = {"files": [f.to_json() for f in self.files]}
        if self.full_listing_ms is not None:
            d["listed_after"] = self.listed_after
            d["full_listing_ms"] = self.full_listing_ms
        if self.events is not None:
            d["listing_done"] = self.listing_done
            d["events"] = self.events
        return d

    def summary(self) -> str:
        if not self.files:
            return "0 files"
        names = [f.path.rsplit("/", 1)[-1] for f in self.files]
        shown = ", ".join(names[:3]) + (f", +{len(names) - 3}" if len(names) > 3 else "")
        return f"{len(self.files)} files [{shown}]"

    def commit_offsets(self) -> list | dict:
        """``[[path, size, mtime_ms], ...]``; with notification discovery ``{"files": that, "events":
        {"topic", "positions"}}``: the topic's positions in the same commit as the data."""
        files = [[f.path, f.size, f.mtime_ms] for f in self.files]
        return files if self.events is None else {"files": files, "events": self.events}

    def locations(self) -> list[str]:
        return [f.path for f in self.files]

    def detail(self) -> RangeDetail:
        return RangeDetail(files=self.files)

    def check_stage(self, summary: StageSummary) -> list[str]:
        """JSON lines: the record count (``rows_in``, checked by verify for every kind), and each
        planned file's identity against what the job read (``read.seen``; a job that recorded
        none, from before identities, is not checked)."""
        seen = (summary.source_positions or {}).get("files")
        if seen is None:
            return []
        problems = []
        for f in self.files:
            if f.identity is None or f.skipped:  # planned before identities; consumed, never read
                continue
            got = seen.get(f.path)
            want = [f.size, *f.identity]
            if got != want:
                what = "size, device, inode, mtime_ns" if isinstance(f.identity[0], int) else "size, ETag, VersionId, mtime_ms"
                problems.append(f"{f.path}: the stage job read another file, or a changed one, than the one planned "
                                f"({what} {want} planned, {got} read)")
        return problems
