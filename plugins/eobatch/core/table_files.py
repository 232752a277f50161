"""Every Parquet file the product writes into a table, and what it says about its rows: one
definition for every writer (the stage job, a compaction, a merge's rewrite).

Statistics are a promise to readers: a reader that skips a file (by its Delta stats) or a row
group (by its Parquet footer) must never skip one holding a matching row. The rules are those
of ``writer_statistics`` (which footer statistics a file keeps: none for floating-point
columns, whose Arrow min/max ignore NaN) and ``footer_stats`` (the Delta stats from the
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

import datetime as _dt
import decimal
import json
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .formats import StagedFile

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from deltalake import WriterProperties
    from deltalake.transaction import AddAction

COMPRESSION = "snappy"

# a bound of a Delta stats column (minValues/maxValues), as ``_stats_json`` writes it
Bound = str | int | float | decimal.Decimal


def _json_value(v: object, t: pa.DataType, is_max: bool) -> Bound | None:
    """One footer bound as a Delta stats value, or None when it cannot be written so that it
    still bounds every value of the file (the caller then publishes no bounds for the column).

    Every bound is exact or rounded outward (min down, max up); the kind of value must match
    the column's Arrow type (a footer bound of another kind is not trusted). Decimals come back
    as ``decimal.Decimal`` and are written as exact JSON numbers by ``_stats_json``.
    """
    if v is None or pa.types.is_boolean(t) or isinstance(v, bool):
        return None  # Delta collects no min/max for booleans
    if pa.types.is_timestamp(t):
        # work in integer nanoseconds so that no unit loses the digits that decide the rounding
        if isinstance(v, int):
            nanos = v * {"s": 1_000_000_000, "ms": 1_000_000, "us": 1000, "ns": 1}[t.unit]
        elif hasattr(v, "value"):  # pandas.Timestamp: integer nanoseconds
            nanos = int(v.value)
        elif isinstance(v, _dt.datetime):
            if v.tzinfo is None:
                v = v.replace(tzinfo=_dt.timezone.utc)
            delta = v - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
            nanos = (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
        else:
            return None
        ms = -(-nanos // 1_000_000) if is_max else nanos // 1_000_000  # Delta keeps milliseconds
        d = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(milliseconds=ms)
        return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"
    if pa.types.is_date32(t) or pa.types.is_date64(t):  # Parquet stores both as days
        if isinstance(v, int) and pa.types.is_date32(t):
            v = _dt.date(1970, 1, 1) + _dt.timedelta(days=v)
        if isinstance(v, _dt.datetime) or not isinstance(v, _dt.date):
            return None
        return v.isoformat()
    if pa.types.is_decimal(t):
        # exact: written by _stats_json as the decimal's own digits, never through float
        if not isinstance(v, decimal.Decimal) or not v.is_finite():
            return None
        return v.copy_abs() if v.is_zero() else v
    if pa.types.is_floating(t):
        # float16 bounds come back as raw bytes; NaN and +-inf have no JSON number
        if not isinstance(v, float) or math.isnan(v) or math.isinf(v):
            return None
        if v == 0.0:  # -0.0 for a min, +0.0 for a max: outward for readers that order -0.0 < +0.0
            return -0.0 if not is_max else 0.0
        return v
    if pa.types.is_integer(t):
        return v if isinstance(v, int) else None
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        if isinstance(v, (bytes, bytearray)):
            try:
                v = bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                return None
        if not isinstance(v, str):
            return None
        return v if len(v) <= 32 else None  # longer values would need Delta's truncation rules
    return None  # binary (Delta collects no min/max for it), time, nested, ...: no bounds


def _decimal_text(v: decimal.Decimal) -> str:
    """A finite Decimal as a plain JSON number with its own digits and scale (12.30, 1E-18 ->
    0.000000000000000001, 9007199254740993): no float, no exponent."""
    return format(v, "f")


def _stats_json(v: object) -> str:
    """Compact JSON like ``json.dumps(v, separators=(",", ":"))``, except that a Decimal is
    written as an exact number (json.dumps cannot write one as a number)."""
    if isinstance(v, decimal.Decimal):
        return _decimal_text(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_stats_json(x)}" for k, x in v.items()) + "}"
    return json.dumps(v, allow_nan=False)


def holds(t: pa.DataType, kind: Callable[[pa.DataType], bool]) -> bool:
    """Whether type ``t`` is of ``kind`` (a ``pa.types.is_*``) or nests a field that is."""
    if kind(t):
        return True
    return pa.types.is_nested(t) and any(holds(t.field(i).type, kind) for i in range(t.num_fields))


def writer_statistics(schema: pa.Schema) -> bool | list[str]:
    """Which columns the stage writer keeps Parquet footer statistics for (``write_statistics`` of
    pyarrow's ParquetWriter): every column but floating-point ones. Arrow computes a float
    column's footer min/max ignoring NaN, and readers (delta-rs among them) skip row groups by
    those footer statistics themselves, so a row group holding NaN would be skipped for
    ``x > 5``, whatever the Delta stats say. Without footer statistics a float column gets no
    Delta min/max either (``footer_stats``): pruning on float columns is given up, never a row.
    A schema with nested columns and floats (at any depth) writes no statistics at all (leaf
    names are not top-level names)."""
    floats = [f.name for f in schema if holds(f.type, pa.types.is_floating)]
    if not floats:
        return True
    if any(pa.types.is_nested(f.type) for f in schema):
        return False
    return [f.name for f in schema if f.name not in floats]


def footer_stats(meta: pq.FileMetaData, schema: pa.Schema, nan_free: Iterable[str] | None = None) -> str:
    """Delta AddFile stats (numRecords, minValues, maxValues, nullCount) from a Parquet footer.

    Readers skip a file when its stats say no row can match, so every published bound must
    hold for every value of the file (exact, or rounded outward); when that is not certain the
    column gets no min/max (nullCount is kept when the footer has it):

    * decimals are exact JSON numbers (``9007199254740993``, ``12.30``), never rounded through
      float; a bound that is not a finite Decimal is not published;
    * floating-point columns: the stage writer (Arrow C++) computes footer min/max ignoring
      NaN ([1.0, NaN] says max 1.0; an all-NaN chunk has none), while Spark, DuckDB and delta-rs
      order NaN above +inf (``x > 5`` matches it) and delta-rs orders a sign-bit NaN (what
      ``-float("nan")`` gives) below -inf (``x < 0`` matches it). So a float column gets
      min/max only when ``nan_free`` (from the stage writer's manifest: the float columns it
      checked hold no NaN) names it; absent (None) means unknown, and no float column gets
      bounds. A zero min is written as -0.0 and a zero max as 0.0; an infinite bound has no
      JSON number, so that column gets none;
    * timestamps are in milliseconds, min rounded down and max up; strings longer than 32
      characters, booleans, binary and nested columns get no bounds;
    * a column gets bounds only if every row group that holds non-null values has min/max
      (a row group whose statistics the writer dropped, e.g. strings over 4 KiB, may hold
      anything); both bounds or neither.
    """
    mins, maxs, nulls = {}, {}, {}
    top = {f.name: f.type for f in schema}
    nan_free = frozenset(nan_free or ())
    for ci in range(meta.num_columns):
        col0 = meta.row_group(0).column(ci) if meta.num_row_groups else None
        if col0 is None:
            break
        path = col0.path_in_schema
        if "." in path or path not in top:
            continue  # nested columns: no stats
        t = top[path]
        lo = hi = None
        nc, ok, bounded, counted = 0, True, True, True
        for rg in range(meta.num_row_groups):
            st = meta.row_group(rg).column(ci).statistics
            if st is None:
                ok = False
                break
            if st.has_null_count:
                nc += st.null_count or 0
            else:
                counted = False
            if st.has_min_max:
                lo = st.min if lo is None or st.min < lo else lo
                hi = st.max if hi is None or st.max > hi else hi
            elif not st.has_null_count or st.num_values > 0:
                bounded = False  # values without bounds (or unknown): the others' bounds do not hold
        if not ok:
            continue
        if counted:
            nulls[path] = nc
        if not bounded or (pa.types.is_floating(t) and path not in nan_free):
            continue
        a, b = _json_value(lo, t, False), _json_value(hi, t, True)
        if a is not None and b is not None:
            mins[path], maxs[path] = a, b
    return _stats_json({"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})




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
               size: int, partition_values: dict[str, str | None], modification_time: int) -> StagedFile:
    """The AddFile of a written file (a ``StagedFile``, as ``PreparedBatch.adds`` holds them), its
    statistics from its footer."""
    return StagedFile(path, size, partition_values, modification_time, footer_stats(meta, table_schema, nan_free))


def delta_add(f: StagedFile, *, data_change: bool, now: int) -> AddAction:
    """The delta-rs ``AddAction`` of staged file ``f`` in a commit at ``now`` (ms): a file with no
    time takes the commit's, one with no statistics none (``"{}"``)."""
    # deltalake: the commit side only, never the Spark job
    from deltalake.transaction import AddAction

    return AddAction(f.path, f.size, f.partition_values, f.modification_time or now, data_change, f.stats or "{}")


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


__all__ = ["TableFileWriter", "add_action", "delta_add", "delta_rs_writer_properties", "nan_checked", "without_nan", "footer_stats",
           "writer_statistics"]
