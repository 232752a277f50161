"""Running totals per key: this batch's partials, folded into the table's running state by the sink.

Options (``transform: {name: running_totals, options: {...}}``):
  key: the key column (default ``customer``)
  value: the numeric column totalled (default ``amount``)
  time: the event-time column whose latest value is kept (default ``ts``)

Output, one row per key of the batch: <key>, ``events`` (records), ``total`` (sum of value),
``smallest`` / ``largest`` (min / max of value), ``last_seen`` (max of time). Use it with an
accumulating merge sink (docs/site/sinks.md "Running aggregates"), which folds each batch's row of a key
into the key's row in the same commit as the batch's txn:

    sink:
      mode: merge
      merge:
        keys: [customer]
        accumulate: {events: sum, total: sum, smallest: min, largest: max, last_seen: max}

The table then holds, per key, the totals of every record published so far, each counted once.
"""

from pyspark.sql import functions as F

ROW_PRESERVING = False


def transform(df, ctx):
    opts = ctx.options
    key, value, time = opts.get("key", "customer"), opts.get("value", "amount"), opts.get("time", "ts")
    for c in (key, value, time):
        if c not in df.columns:
            raise ValueError(f"running_totals: the records have no column {c!r} (columns: {df.columns})")
    return (df.groupBy(F.col(key))
              .agg(F.count(F.lit(1)).alias("events"), F.sum(value).alias("total"), F.min(value).alias("smallest"),
                   F.max(value).alias("largest"), F.max(time).alias("last_seen")))
