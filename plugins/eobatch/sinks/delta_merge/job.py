"""Spark side of merge sinks (``sink.mode: merge``): one staged row per key of a batch, for the
commit's MERGE (``step``, from the job spec's ``sink``: ``MergeConfig.job``).

Upsert (``sequence_by``): the latest record of each key (``latest_per_key``, below).
Accumulate (``accumulate``): the batch's rows of each key folded into one (``fold_per_key``).

A batch may hold several records of one key (an order created and then updated, a duplicate
delivery). Only its latest version is staged: the record with the highest ``sequence_by``; of
records with the same key and sequence (the same version delivered twice, or a producer that
reuses sequence numbers), the one whose whole row, as JSON, sorts highest, so that every attempt
of the batch stages the same row whatever the order Spark reads them in. The staged rows carry
``_eo_delete`` (``delete_when`` of the row, null counted as false); the commit applies them with
one Delta MERGE (``participants.MergeParticipant``).
"""

from __future__ import annotations

from ...config import sql_guard

DELETE_COL = "_eo_delete"  # the staged rows' column saying "this record deletes its key" (never published)
KEEPS_ROWS = False  # one row per key (and slice): never the transform's row count


def step(df, job: dict, within: list[str]):
    """The rows a merge sink stages from the transform's output ``df``: running aggregates fold
    the batch's rows of a key (of a slice: ``within``) into one; an upsert keeps the latest record
    of each key, flagged when it deletes."""
    if job.get("accumulate"):
        return fold_per_key(df, job["keys"], job["accumulate"], within=within)
    return latest_per_key(df, job["keys"], job["sequence_by"], job.get("delete_when"))


def latest_per_key(df, keys: list[str], sequence_by: str, delete_when: str | None):
    """One row per key of ``df``: its latest version, plus the ``_eo_delete`` column. SystemExit
    naming the problem when a key or sequence column is missing or ``delete_when`` does not
    evaluate on the transform's output."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.errors import AnalysisException
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    _require(df, [*keys, sequence_by])
    refused = sql_guard.job_refusal(df, delete_when) if delete_when else None
    if refused:  # Spark's own parse: a spec past the loader too
        raise SystemExit(f"sink.merge.delete_when {delete_when!r} {refused}; nothing of this batch is staged")
    try:
        flag = F.coalesce(F.expr(delete_when).cast("boolean"), F.lit(False)) if delete_when else F.lit(False)
        flagged = df.withColumn(DELETE_COL, flag)
        flagged.schema  # noqa: B018 - analyses the expression now, to name it in the error
    except AnalysisException as e:
        raise SystemExit(f"sink.merge.delete_when {delete_when!r} cannot be evaluated on the transform's "
                         f"output (columns: {', '.join(df.columns)}): {e}") from None
    tie = F.to_json(F.struct(*[F.col(c) for c in df.columns], F.col(DELETE_COL)))
    order = Window.partitionBy(*[F.col(k) for k in keys]).orderBy(F.col(sequence_by).desc_nulls_last(), tie.desc())
    return (flagged.withColumn("_eo_rank", F.row_number().over(order))
                   .where(F.col("_eo_rank") == 1).drop("_eo_rank"))


def _require(df, columns: list[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SystemExit(f"sink.merge: the transform's output has no column(s) {', '.join(missing)} "
                         f"(its columns: {', '.join(df.columns)})")


def fold_per_key(df, keys: list[str], accumulate: list[list[str]], within: list[str] | None = None):
    """One row per key of ``df`` (per key and ``within`` columns: interval mode, per key and
    slice): each ``accumulate`` column folded with its function (sum, min, max; nulls ignored,
    all-null gives null), as the commit then folds it into the table's row. Any other column of
    the output is refused: it would have no defined value."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    cols, within = [c for c, _ in accumulate], list(within or [])
    _require(df, [*keys, *cols])
    other = [c for c in df.columns if c not in keys and c not in cols and c not in within]
    if other:
        raise SystemExit(f"sink.merge.accumulate: the transform's output column(s) {', '.join(other)} have no "
                         f"aggregate (add them to sink.merge.accumulate, or leave them out of the output)")
    fn = {"sum": F.sum, "min": F.min, "max": F.max}
    return df.groupBy(*[F.col(k) for k in [*keys, *within]]).agg(*[fn[f](F.col(c)).alias(c) for c, f in accumulate])
