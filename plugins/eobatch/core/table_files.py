"""Every Parquet file the product writes into a table, and what it says about its rows: one
definition for every writer (the stage job, a compaction, a merge's rewrite).

Statistics are a promise to readers: a reader that skips a file (by its Delta stats) or a row
group (by its Parquet footer) must never skip one holding a matching row. The rules are those
of ``verify.writer_statistics`` (which footer statistics a file keeps: none for floating-point
columns, whose Arrow min/max ignore NaN) and ``verify.footer_stats`` (the Delta stats from the
footer: exact decimals, timestamps rounded outward, float bounds only for columns the writer saw
no NaN in). ``TableFileWriter`` writes a file by those rules and tracks the NaN-free columns;
``add_action`` turns the written file into its Delta AddFile.

The files delta-rs writes itself (a merge sink's MERGE, the partials' overwrite) cannot take our
stats: delta-rs computes them, writing decimal bounds through a double (9007199254740993 becomes
9007199254740992) and float bounds that ignore NaN, in the footer as in the log.
``delta_rs_writer_properties`` keeps no statistics for those columns at all, so that delta-rs
writes no bound for them: those files are never skipped for a float or decimal filter (pruning
given up, never a row) until maintenance rewrites them with ours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .formats import JSON
from .verify import footer_stats, holds, writer_statistics

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from deltalake import WriterProperties

COMPRESSION = "snappy"


def nan_checked(schema: pa.Schema) -> list[str]:
    """The columns whose NaN a writer checks (float32/float64; others never get float bounds)."""
    return [f.name for f in schema if pa.types.is_float32(f.type) or pa.types.is_float64(f.type)]


def without_nan(data: pa.Table | pa.RecordBatch, columns: list[str]) -> list[str]:
    """Those of ``columns`` in which ``data`` holds no NaN (nulls are not NaN)."""
    return [c for c in columns if not pc.any(pc.is_nan(data[c])).as_py()]


class TableFileWriter:
    """One table file, written by the product's statistics rules (module docstring).

    Each ``write`` is one row group (the stage job's Arrow batches), unless ``row_group_bytes``
    is given: then writes are gathered into row groups of about that many bytes in memory (a
    compaction, whose pieces are small files)."""

    def __init__(self, where: str, schema: pa.Schema, filesystem: pafs.FileSystem | None = None, row_group_bytes: int | None = None):
        self.schema = schema
        self.writer = pq.ParquetWriter(where, schema, filesystem=filesystem, compression=COMPRESSION,
                                       write_statistics=writer_statistics(schema))
        self.rows = 0
        self.nan_free = nan_checked(schema)  # until a NaN is written to them
        self.row_group_bytes = row_group_bytes
        self.pending: list[pa.Table] = []

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        self.rows += data.num_rows
        self.nan_free = without_nan(data, self.nan_free)
        self.pending.append(data)
        if self.row_group_bytes is None or sum(t.nbytes for t in self.pending) >= self.row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            data = pa.concat_tables(self.pending)
            self.pending = []
            self.writer.write_table(data, row_group_size=max(data.num_rows, 1))

    def close(self) -> None:
        self._flush()
        self.writer.close()


def add_action(meta: pq.FileMetaData, table_schema: pa.Schema, nan_free: list[str] | None, *, path: str,
               size: int, partition_values: JSON, modification_time: int) -> JSON:
    """The AddFile (as ``PreparedBatch.adds`` holds them) of a written file, from its footer."""
    return {"path": path, "size": size, "partition_values": partition_values, "modification_time": modification_time,
            "stats": footer_stats(meta, table_schema, nan_free)}


def delta_rs_writer_properties(schema: pa.Schema) -> WriterProperties:
    """``WriterProperties`` for files delta-rs writes into a table of ``schema``: no statistics
    for the columns whose bounds delta-rs gets wrong (floating-point, decimals; all columns when
    a nested column holds one, since leaf names are not top-level names)."""
    # deltalake: the commit side only, never the Spark job
    from deltalake import ColumnProperties, WriterProperties

    unsafe = [f for f in schema if holds(f.type, lambda t: pa.types.is_floating(t) or pa.types.is_decimal(t))]
    if not unsafe:
        return WriterProperties(compression="SNAPPY")
    if any(pa.types.is_nested(f.type) for f in unsafe):
        return WriterProperties(compression="SNAPPY", default_column_properties=ColumnProperties(
            statistics_enabled="NONE"))
    return WriterProperties(compression="SNAPPY", column_properties={
        f.name: ColumnProperties(statistics_enabled="NONE") for f in unsafe})


__all__ = ["TableFileWriter", "add_action", "delta_rs_writer_properties", "nan_checked", "without_nan"]
