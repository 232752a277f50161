"""A merge sink's staged rows: read back (``read_staged``) by its commits' MERGE, and checked by
verify (``merge_problems``); the columns of them the tables publish (``published_schema``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from ...core.formats import StagedFile, slice_of
from ...storage.fs import Storage, join
from .config import MergeConfig
from .job import DELETE_COL


def published_schema(staged: pa.Schema) -> pa.Schema:
    """The table columns of a staged schema: without a merge's ``_eo_delete`` flag."""
    return pa.schema([f for f in staged if f.name != DELETE_COL])


def read_staged(fs: Storage, table_root: str, adds: list[StagedFile], schema: pa.Schema,
                columns: list[str] | None = None) -> pa.Table:
    """The rows of staged files ``adds`` (relative to ``table_root``), ``columns`` of ``schema``
    (all by default). Partition columns are not in the files: they come from each file's
    partition values (the text the Delta log keeps), cast to their type."""
    columns = list(columns or schema.names)
    afs = fs.arrow_fs()
    out = []
    for f in adds:
        pv = f.partition_values
        t = pq.read_table(fs.arrow_path(join(table_root, f.path)), filesystem=afs,
                          columns=[c for c in columns if c not in pv])
        for c in columns:
            if c in pv:
                typ = schema.field(c).type
                arr = pa.nulls(t.num_rows, typ) if pv[c] is None else pa.array([pv[c]] * t.num_rows).cast(typ)
                t = t.append_column(pa.field(c, typ), arr)
        out.append(t.select(columns).cast(pa.schema([schema.field(c) for c in columns])))
    if not out:
        return pa.schema([schema.field(c) for c in columns]).empty_table()
    return pa.concat_tables(out)


def merge_problems(fs: Storage, table_root: str, adds: list[StagedFile], staged: pa.Schema,
                   merge: MergeConfig) -> list[str]:
    """A merge sink's staged rows (``MergeConfig``): one row per key, no null key or
    sequence, and the delete flag. Reads the key and sequence columns of the staged files."""
    cols = [*merge.keys, *([merge.sequence_by] if merge.upsert and merge.sequence_by is not None else [])]
    missing = [c for c in [*cols, *([DELETE_COL] if merge.upsert else [])] if c not in staged.names]
    if missing:
        return [f"sink: the staged rows have no column(s) {', '.join(missing)} (sink.merge)"]
    if merge.upsert and not pa.types.is_boolean(staged.field(DELETE_COL).type):
        return [f"sink: the staged column {DELETE_COL} is {staged.field(DELETE_COL).type}, not boolean"]
    # running aggregates stage one row per key and interval slice (the slice folder of the file;
    # none in continuous mode), an upsert one row per key of the whole batch
    groups: dict[str | None, list[StagedFile]] = {}
    for f in adds:
        groups.setdefault(None if merge.upsert else slice_of(f.path), []).append(f)
    t = read_staged(fs, table_root, adds, staged, cols)
    problems = [f"sink: {t[c].null_count} staged row(s) have a null {c!r}: a merge needs the key (and an upsert the "
                f"sequence) of every row (the transform must not output null ones)" for c in cols if t[c].null_count]
    extra = 0
    for part in groups.values():
        g = read_staged(fs, table_root, part, staged, list(merge.keys)) if len(groups) > 1 else t
        extra += g.num_rows - (g.group_by(list(merge.keys)).aggregate([]).num_rows if g.num_rows else 0)
    if extra:
        problems.append(f"sink: the staged rows hold {extra} more row(s) than keys: a merge batch stages one row "
                        f"per key" + ("" if merge.upsert else " (per key and interval slice)"))
    return problems
