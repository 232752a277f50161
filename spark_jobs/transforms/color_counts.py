"""Counts per ``color`` per event-time window, for each batch (the seeds' running example).

Options (``transform: {name: color_counts, options: {...}}``):
  time_column: the event-time column (default ``ts``)
  color_column: the key column (default ``color``)
  window: the tumbling window length, a Spark interval such as "1 minute" (default)

Output columns: window_start, window_end, color, events, batch_id. Each batch publishes the
counts of its own records; a window spread over several batches has one row per batch, so the
total of a window is ``SUM(events) GROUP BY window_start, color`` and each event counts once.
"""

from pyspark.sql import functions as F

ROW_PRESERVING = False


def transform(df, ctx):
    opts = ctx.options
    ts, color, window = opts.get("time_column", "ts"), opts.get("color_column", "color"), opts.get("window", "1 minute")
    for c in (ts, color):
        if c not in df.columns:
            raise ValueError(f"color_counts: the records have no column {c!r} (columns: {df.columns})")
    w = F.window(F.col(ts), window)
    return (df.where(F.col(ts).isNotNull())
              .groupBy(w.alias("w"), F.col(color).alias("color"))
              .agg(F.count("*").alias("events"))
              .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                      "color", "events", F.lit(ctx.batch_id).cast("long").alias("batch_id"))
              .orderBy("window_start", "color"))
