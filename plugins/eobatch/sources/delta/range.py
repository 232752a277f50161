"""The recorded range of the delta kind: upstream versions ``[from, to)`` and the files they added.

Ledger JSON: ``{"table", "table_id", "versions": [from, to), "files": [planned file + "version",
"partition_values"?, "change_data"? | "removed"?, "timestamp_ms"?], "change_feed"?: true,
"partition_columns"?: {name: Delta type}, "skipped"?: {"<version>": why}, "lost"?: [versions],
"upstream"?: {"<pipeline>": [batch ids]}}`` (``planner``). A file is read as inserts, or as its
rows' ``_change_type`` (``change_data``), or as deletes (``removed``: a file a version without
change data removed); ``timestamp_ms`` is its version's commit time (a feed's; absent from plans
written before it: the records' ``_commit_timestamp`` is then null). Plans written before
``removed`` read exactly as they did. The files are checked as the parquet kind checks its
files (identity, rows per file against the footers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.formats import planned_files
from ...errors import LedgerMismatch
from ..base import RangeDetail
from ..parquet.range import ParquetRange

if TYPE_CHECKING:
    from ...core.formats import StageSummary


@dataclass(frozen=True)
class DeltaRange:
    data: dict

    @classmethod
    def from_json(cls, data: dict) -> DeltaRange:
        if "table" not in data or "versions" not in data:
            raise LedgerMismatch(f"a delta range without a table or versions: {sorted(data)}")
        return cls(dict(data))

    @property
    def versions(self) -> tuple[int, int]:
        f, t = self.data["versions"]
        return int(f), int(t)

    def to_json(self) -> dict:
        return dict(self.data)

    def summary(self) -> str:
        f, t = self.versions
        files = self.data.get("files", [])
        text = f"{self.data['table']}: versions {f}..{t - 1}" if t > f else f"{self.data['table']}: at version {f}"
        text += f", {len(files)} file(s)"
        removed = sum(1 for f in files if f.get("removed"))
        if removed:
            text += f" ({removed} removed: read as deletes)"
        if self.data.get("skipped"):
            text += f", changes passed over at {', '.join(sorted(self.data['skipped'], key=int))}"
        if self.data.get("lost"):
            text += f", LOST versions {', '.join(map(str, self.data['lost']))}"
        ups = self.data.get("upstream") or {}
        if ups:
            text += "; upstream " + ", ".join(f"{p} batch{'es' if len(b) > 1 else ''} {_ids(b)}" for p, b in sorted(ups.items()))
        return text

    def commit_offsets(self) -> dict:
        out = {"table": self.data["table"], "versions": list(self.data["versions"])}
        if self.data.get("lost"):
            out["lost"] = list(self.data["lost"])
        return out

    def locations(self) -> list[str]:
        return [f["path"] for f in self.data.get("files", [])]

    def detail(self) -> RangeDetail:
        ups = self.data.get("upstream") or {}
        return RangeDetail(files=planned_files(self.data) or (),
                           upstream=tuple((p, tuple(int(b) for b in ids)) for p, ids in sorted(ups.items())))

    def start_marker(self) -> DeltaRange:
        """An empty range at this range's first version: where a rewind to it reads again from."""
        f, _t = self.versions
        marker = {"table": self.data["table"], "versions": [f, f], "files": []}
        if "table_id" in self.data:
            marker["table_id"] = self.data["table_id"]
        return DeltaRange(marker)

    def check_stage(self, summary: StageSummary) -> list[str]:
        return ParquetRange.from_json(self.data).check_stage(summary)


def _ids(batches: list[int]) -> str:
    """``[3, 4, 5, 7]`` as ``3-5, 7``."""
    out: list[str] = []
    run: list[int] = []
    for b in sorted(batches):
        if run and b == run[-1] + 1:
            run.append(b)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [b]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)
