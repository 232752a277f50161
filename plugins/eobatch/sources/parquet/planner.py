"""Parquet planner: the files kind's planning (new whole files, oldest first, at least one per
batch, up to the record limit; interval mode by prefix or modification time; late files), with
``*.parquet`` landing files whose records are counted exactly from their footers (no data read).

A footer's row counts are an input like any other: a footer whose count is negative, or whose
file-level count is not the sum of its row groups', or a row group claiming more rows than its
columns hold values, can never be read as it says (the read would not reconcile with the plan,
at every retry). Such a file is skipped: planned as consumed with no records and its reason
(``skipped``), so the other files publish, and reported in the batch plan's notes, a metric and
an alert (``SKIPPED_FILE``).
"""

from __future__ import annotations

import logging

import pyarrow.parquet as pq

from ...errors import TerminalError
from ...storage.fs import FileInfo, ObjectChanged
from ..files.planner import FilesSource, measured, planned_file

log = logging.getLogger(__name__)


class UnreadableParquet(TerminalError):
    """A landing ``*.parquet`` file whose footer cannot be read (not Parquet, or still being written)."""


class ForgedFooter(ValueError):
    """A Parquet footer whose row counts cannot be true (the planner skips the file)."""


def footer_problem(meta) -> str | None:
    """Why a Parquet footer's row counts cannot be true (pyarrow FileMetaData), or None."""
    groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    if meta.num_rows < 0 or any(g.num_rows < 0 for g in groups):
        return f"its footer holds a negative row count ({meta.num_rows}; row groups {[g.num_rows for g in groups]})"
    if sum(g.num_rows for g in groups) != meta.num_rows:
        return (f"its footer says {meta.num_rows} rows but its row groups hold "
                f"{sum(g.num_rows for g in groups)}")
    for i, g in enumerate(groups):
        for c in range(g.num_columns):  # every row has at least one value (or null) in every leaf column
            col = g.column(c)
            if col.num_values < g.num_rows:
                return (f"its row group {i} says {g.num_rows} rows but its column {col.path_in_schema!r} holds "
                        f"{col.num_values} values")
    return None


def footer_rows(fs, path: str, root: str | None = None) -> tuple[int, FileInfo]:
    """(rows, the file they were counted of) of a Parquet landing file, from its footer, read from
    the file as ``files.planner.measured`` opens it (no link followed locally; S3: the object HEAD
    saw). UnreadableParquet when the footer cannot be read, ForgedFooter when its counts cannot be
    true (``footer_problem``); the OSErrors of a file that cannot be opened, or changed while read,
    as they are."""
    def rows(fh, info: FileInfo) -> int:
        try:
            meta = pq.ParquetFile(fh).metadata
        except ObjectChanged:
            raise
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise UnreadableParquet(f"{path}: not a readable Parquet file ({e}); nothing was planned. Write landing "
                                    f"files under a name starting with '.' or '_' and rename them into place when "
                                    f"complete; remove or replace this one") from e
        problem = footer_problem(meta)
        if problem is not None:
            raise ForgedFooter(problem, info)
        return meta.num_rows

    return measured(fs, path, root, rows)


class ParquetSource(FilesSource):
    kind = "parquet"
    counts_cheaply = True  # a footer each

    def _entry(self, f: FileInfo) -> dict:
        """A planned file: its records and identity, of the one file its footer was read from."""
        try:
            n, info = footer_rows(self.fs, f.path, self.root)
            return {**planned_file(info), "records": n}
        except ForgedFooter as e:
            reason = f"{e.args[0]}: no reader can read it as it says"
            log.warning("skipping %s: %s", f.path, reason)
            return {**planned_file(e.args[1]), "records": 0, "skipped": reason}
