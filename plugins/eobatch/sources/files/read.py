"""Spark side of the files kind: the records of planned JSON-lines files, read in parallel pieces.

Spark's line reader splits every file into pieces (``spark.sql.files.maxPartitionBytes``, 128 MiB
by default) read by parallel tasks, so a landing file of any size streams through bounded memory.
It gives no line numbers, so a record's position is found in two steps:

1. ``read_lines``: every line gets the piece it was read from (``_metadata.file_block_start``) and
   its read-order id (``monotonically_increasing_id``: the task's partition in the high bits, the
   row's index within that task in the low bits; a piece is read by one task, its lines in order).
   That id is the provisional ``position``.
2. ``locate`` (only for the quarantined records, the only ones whose position is written): one
   more pass over the same pieces counts the lines of each piece and its first id; a record's
   line number is the lines of the file's earlier pieces plus its index in its piece. Both passes
   number the very same DataFrame (``numbered``), before any filter, and every located record is
   checked to fall inside its piece, so a numbering that differed between the passes would fail
   the stage instead of pointing at the wrong line.

Lines are Spark's with ``lineSep="\\n"``: the bytes between two ``\\n`` (eobatch.lines), kept as
bytes (invalid UTF-8 is preserved for the classifier); a ``\\r`` just before the ``\\n`` is dropped.
"""

from __future__ import annotations


def _glob_escape(path: str) -> str:
    out = []
    for ch in path:
        out.append("\\" + ch if ch in "[]{}*?\\" else ch)
    return "".join(out)


def planned_path(file_path):
    """The planned path of a file from Spark's ``_metadata.file_path`` (a percent-encoded URI).

    A SQL expression, not a Python UDF: a UDF would start Python workers just for this.
    ``+`` is protected before url_decode, which would turn it into a space.
    """
    from pyspark.sql import functions as F

    local = F.regexp_replace(file_path, "^file:(//)?", "")
    return F.url_decode(F.replace(local, F.lit("+"), F.lit("%2B")))


# Pieces per core, at least, when the files are large enough (Spark's default is one: the last of
# 5 equal pieces on 2 cores runs alone, and a core idles for a fifth of the read).
PIECES_PER_CORE = 4


def balance_pieces(spark) -> None:
    """Split the read into at least PIECES_PER_CORE pieces per core (``spark.sql.files.minPartitionNum``,
    unless the pipeline sets it), so that the cores finish together. Pieces stay between Spark's
    open cost (4 MiB) and ``maxPartitionBytes``: small files are still packed into one task."""
    if spark.conf.get("spark.sql.files.minPartitionNum", None) is None:
        spark.conf.set("spark.sql.files.minPartitionNum", str(PIECES_PER_CORE * spark.sparkContext.defaultParallelism))


def numbered(spark, files: list[str]):
    """Every line of ``files`` (blank ones included) with ``_eo_file`` (Spark's URI of the file),
    ``_eo_split`` (the start byte of the piece it was read from), ``_eo_row`` (read-order id)."""
    from pyspark.sql import functions as F

    balance_pieces(spark)
    df = spark.read.option("lineSep", "\n").text([_glob_escape(p) for p in files])
    return df.select(F.col("_metadata.file_path").alias("_eo_file"),
                     F.col("_metadata.file_block_start").alias("_eo_split"),
                     F.monotonically_increasing_id().alias("_eo_row"), "value")


def _blank(value):
    """eobatch.lines' blank line, cheaply: the regular expression runs only on a line that is
    empty or starts with one of the blank bytes (almost never, for a record)."""
    from pyspark.sql import functions as F

    from ...lines import BLANK_BYTES, SPARK_BLANK_LINE

    first = F.substring(value, 1, 1)
    return (F.octet_length(value) == 0) | (first.isin(*[chr(b) for b in BLANK_BYTES]) & value.rlike(SPARK_BLANK_LINE))


def _without_trailing_cr(value):
    """The line without a final ``\\r`` (part of a ``\\r\\n`` terminator), cut as bytes so that a
    line of invalid UTF-8 keeps its exact bytes."""
    from pyspark.sql import functions as F

    cut = F.substring(value.cast("binary"), 1, F.octet_length(value) - 1).cast("string")
    return F.when(F.endswith(value, F.lit("\r")), cut).otherwise(value)


def read_lines(spark, rng: dict):
    """One row per non-blank line: source (planned path), position (provisional: the read-order
    id, see ``locate``), raw, and the ``_eo_file`` / ``_eo_split`` internals."""
    from pyspark.sql import functions as F

    lines = numbered(spark, [f["path"] for f in rng["files"]])
    # The filter stays above the numbering: Spark never pushes a filter below a non-deterministic
    # projection (monotonically_increasing_id), so blank lines keep their ids.
    return lines.where(~_blank(F.col("value"))).select(
        planned_path(F.col("_eo_file")).alias("source"), F.col("_eo_row").alias("position"),
        _without_trailing_cr(F.col("value")).alias("raw"), "_eo_file", "_eo_split")


def locate(spark, records, rng: dict):
    """``records`` (rows of ``read_lines``, ``source`` not needed) with ``source`` = the planned path
    and ``position`` = the 1-based line number in its file."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    records = records.withColumn("source", planned_path(F.col("_eo_file")))
    # Lazy, like the rest of the job: the counting pass runs only if the quarantine is written.
    pieces = (numbered(spark, [f["path"] for f in rng["files"]]).groupBy("_eo_file", "_eo_split")
              .agg(F.count("*").alias("_eo_n"), F.min("_eo_row").alias("_eo_first")))
    earlier = Window.partitionBy("_eo_file").orderBy("_eo_split").rowsBetween(Window.unboundedPreceding, -1)
    index = pieces.withColumn("_eo_before", F.coalesce(F.sum("_eo_n").over(earlier), F.lit(0)))
    located = records.join(F.broadcast(index), ["_eo_file", "_eo_split"], "left")
    k = F.col("position") - F.col("_eo_first")
    line = (F.when(F.col("_eo_first").isNotNull() & (k >= 0) & (k < F.col("_eo_n")), F.col("_eo_before") + k + 1)
            .otherwise(F.raise_error(F.concat(F.lit("cannot locate a record of "), F.col("source"),
                                              F.lit(": the two reads of the file numbered its lines differently")))))
    return located.withColumn("position", line.cast("long")).drop("_eo_first", "_eo_n", "_eo_before")
