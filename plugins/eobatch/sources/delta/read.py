"""Spark side of the delta kind: each row of each planned file as one JSON record.

The files are read as the parquet kind reads its files (``files.read.open_planned``: checked
against the plan's identity, a local one through its descriptor), each with its own schema, with
the upstream's partition columns added from the log's partition values (typed by the table's
schema), since Delta keeps them out of the files. ``position`` is the row index in the file.

A range that reads the Change Data Feed (``change_feed``) gives each record the feed's metadata
columns: ``_change_type`` (a change data file's own; ``delete`` for each row of a file planned as
``removed``; ``insert`` for an added file's), ``_commit_version`` and ``_commit_timestamp`` (its
version and that version's commit time, as the plan recorded them).
"""

from __future__ import annotations

from functools import reduce

from ..files.planner import read_files
from ..files.read import _glob_escape, open_planned

LINES_SCHEMA = "source STRING, position BIGINT, raw STRING"
# the Change Data Feed's metadata columns
CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP = "_change_type", "_commit_version", "_commit_timestamp"
FEED_COLUMNS = f", {CHANGE_TYPE} STRING, {COMMIT_VERSION} BIGINT, {COMMIT_TIMESTAMP} TIMESTAMP"


def read_lines(spark, rng: dict, root: str | None = None):
    """The rows of the planned files, with their partition columns. SystemExit naming every
    planned file that is not the one planned (nothing is read then)."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    types = rng.get("partition_columns") or {}
    feed = bool(rng.get("change_feed"))
    read_as = open_planned(spark, rng, root)
    parts = []
    for f in read_files(rng):
        df = spark.read.parquet(_glob_escape(read_as[f["path"]]))
        values = f.get("partition_values") or {}
        cols = [F.col(f"`{c}`") for c in df.columns if c not in types and c != CHANGE_TYPE]
        cols += [F.lit(values.get(c)).cast(t).alias(c) for c, t in types.items()]
        meta = _feed_columns(F, f, df.columns) if feed else []
        parts.append(df.select(F.lit(f["path"]).alias("source"), F.col("_metadata.row_index").alias("position"),
                               F.to_json(F.struct(*cols)).alias("raw"), *meta))
    if not parts:
        return spark.createDataFrame([], LINES_SCHEMA + (FEED_COLUMNS if feed else ""))
    return reduce(lambda a, b: a.unionByName(b), parts)


def _feed_columns(F, f: dict, columns: list[str]) -> list:
    """The feed's metadata columns of planned file ``f``'s rows: a change data file's rows say their
    change, a removed file's rows are deletes, an added file's rows are inserts."""
    if f.get("change_data") and CHANGE_TYPE in columns:
        change = F.col(CHANGE_TYPE)
    else:
        change = F.lit("delete" if f.get("removed") else "insert")
    ms = f.get("timestamp_ms")
    stamp = F.timestamp_millis(F.lit(int(ms))) if ms is not None else F.lit(None).cast("timestamp")
    return [change.cast("string").alias(CHANGE_TYPE), F.lit(int(f["version"])).cast("long").alias(COMMIT_VERSION),
            stamp.alias(COMMIT_TIMESTAMP)]
