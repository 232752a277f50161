"""Spark side of the files kind: the lines DataFrame of planned JSON-lines files."""

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


def read_lines(spark, rng: dict):
    """One row per non-blank line: source (planned path), position (1-based line), raw."""
    from pyspark.sql import functions as F

    from ...lines import SPARK_BLANK_LINE, SPARK_TRAILING_CR

    files = [f["path"] for f in rng["files"]]
    df = (spark.read.text([_glob_escape(p) for p in files], wholetext=True)
          .select(planned_path(F.col("_metadata.file_path")).alias("source"), F.col("value")))
    # split() decodes to Java strings, turning invalid UTF-8 into U+FFFD: remember which files
    # had invalid bytes, so that their lines with U+FFFD are quarantined as invalid UTF-8.
    lines = df.select("source", F.is_valid_utf8("value").alias("_utf8_file"),
                      F.posexplode(F.split(F.col("value"), "\n")).alias("pos", "raw"))
    # one definition of a line and of a blank line, shared with the planner's count (eobatch.lines)
    lines = lines.select("source", (F.col("pos") + 1).cast("long").alias("position"),
                         F.regexp_replace("raw", SPARK_TRAILING_CR, "").alias("raw"),
                         (F.col("_utf8_file") | ~F.col("raw").contains("\ufffd")).alias("_utf8_ok"))
    return lines.where(~F.col("raw").rlike(SPARK_BLANK_LINE))
