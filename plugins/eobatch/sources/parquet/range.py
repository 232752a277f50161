"""The recorded range of the parquet kind: the files kind's range (same JSON), checked per file.

The job reports, per planned file, ``[rows read, first row index, last row index]``; a file read
whole and once gives ``[records, 0, records - 1]`` with ``records`` from its footer at plan time;
and under ``"files"`` the identity of each file it read, checked as the files kind checks it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..files.range import FilesRange

if TYPE_CHECKING:
    from ...core.formats import StageSummary


class ParquetRange(FilesRange):
    def check_stage(self, summary: StageSummary) -> list[str]:
        problems = super().check_stage(summary)  # identities ("files"; none from older jobs)
        seen = dict(summary.source_positions or {})
        seen.pop("files", None)
        for f in self.files:
            count, lo, hi = seen.pop(f.path, (0, None, None))
            if count != f.records or (count and (lo, hi) != (0, count - 1)):
                problems.append(f"{f.path}: read {count} rows (row indexes {lo}..{hi}), its footer holds "
                                f"{f.records} when planned")
        problems += [f"read {path}, which is not in the plan" for path in sorted(seen)]
        return problems
