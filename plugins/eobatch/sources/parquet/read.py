"""Spark side of the parquet kind: each row of each planned file as one JSON record.

Each file is read with its own schema (files of one batch may differ, e.g. a column added;
one merged schema would fail on a type that changed between files) and every row becomes
``raw = to_json(struct(*))``, ``position`` its row index in the file (Spark's
``_metadata.row_index``: exact, whichever row groups a task reads). From there on, a Parquet row
is a JSON record like any other: the pipeline's schema, quarantine and transform apply.

Files are opened as the files kind opens them (``files.read.open_planned``): a local file by this
driver, without following links, checked against the plan's identity, and read by Spark through
its descriptor (``/proc/<pid>/fd/<n>``); an S3 object by name, checked before and after the read.
"""

from __future__ import annotations

from functools import reduce

from ..files.planner import read_files
from ..files.read import _glob_escape, open_planned

LINES_SCHEMA = "source STRING, position BIGINT, raw STRING"


def read_lines(spark, rng: dict, root: str | None = None):
    """The rows of the planned files; ``root``: the landing folder (no link below it is followed).
    SystemExit naming every planned file that is not the one planned (nothing is read then)."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    read_as = open_planned(spark, rng, root)
    parts = []
    for f in read_files(rng):  # a skipped file's footer cannot be true: consumed, never read
        df = spark.read.parquet(_glob_escape(read_as[f["path"]]))
        row = F.struct(*[F.col(f"`{c}`") for c in df.columns])
        parts.append(df.select(F.lit(f["path"]).alias("source"), F.col("_metadata.row_index").alias("position"),
                               F.to_json(row).alias("raw")))
    if not parts:
        return spark.createDataFrame([], LINES_SCHEMA)
    return reduce(lambda a, b: a.unionByName(b), parts)


def file_positions(lines) -> dict:
    """{"<planned path>": [rows, min row index, max row index]} of what the job read, for verify."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    return {r["source"]: [r["n"], r["lo"], r["hi"]] for r in lines.groupBy("source")
            .agg(F.count("*").alias("n"), F.min("position").alias("lo"), F.max("position").alias("hi")).collect()}
