"""Spark side of the parquet kind: each row of each planned file as one JSON record.

Each file is read with its own schema (files of one batch may differ, e.g. a column added;
one merged schema would fail on a type that changed between files) and every row becomes
``raw = to_json(struct(*))``, ``position`` its row index in the file (Spark's
``_metadata.row_index``: exact, whichever row groups a task reads). From there on, a Parquet row
is a JSON record like any other: the pipeline's schema, quarantine and transform apply.
"""

from __future__ import annotations

LINES_SCHEMA = "source STRING, position BIGINT, raw STRING"


def read_lines(spark, rng: dict):
    from functools import reduce

    from pyspark.sql import functions as F

    from ..files.read import _glob_escape

    parts = []
    for f in rng["files"]:
        if f.get("skipped"):  # its footer cannot be true: consumed, never read (planner.footer_problem)
            continue
        df = spark.read.parquet(_glob_escape(f["path"]))
        row = F.struct(*[F.col(f"`{c}`") for c in df.columns])
        parts.append(df.select(F.lit(f["path"]).alias("source"), F.col("_metadata.row_index").alias("position"),
                               F.to_json(row).alias("raw")))
    if not parts:
        return spark.createDataFrame([], LINES_SCHEMA)
    return reduce(lambda a, b: a.unionByName(b), parts)


def file_positions(lines) -> dict:
    """{"<planned path>": [rows, min row index, max row index]} of what the job read, for verify."""
    from pyspark.sql import functions as F

    return {r["source"]: [r["n"], r["lo"], r["hi"]] for r in lines.groupBy("source")
            .agg(F.count("*").alias("n"), F.min("position").alias("lo"), F.max("position").alias("hi")).collect()}
