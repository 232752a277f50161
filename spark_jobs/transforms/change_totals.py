"""Running totals per key over another table's Change Data Feed: each change counted with its sign.

For a pipeline whose source reads a Delta table's changes (``source: {kind: delta, change_feed:
true}``): every record carries ``_change_type``. An insert and an update's post-image add their
value, an update's pre-image and a delete take it away again, so that, folded by an accumulating
merge sink, a key's row equals the totals over the upstream table's current rows of that key.

Options (``transform: {name: change_totals, options: {...}}``):
  key: the key column (default ``customer``)
  value: the numeric column totalled (default ``amount``)

Output, one row per key of the batch: <key>, ``rows`` (the change in the key's number of upstream
rows), ``total`` (the change in the sum of value). Use it with:

    sink:
      mode: merge
      merge: {keys: [customer], accumulate: {rows: sum, total: sum}}
"""

from pyspark.sql import functions as F

ROW_PRESERVING = False
SIGN = {"insert": 1, "update_postimage": 1, "update_preimage": -1, "delete": -1}


def transform(df, ctx):
    opts = ctx.options
    key, value = opts.get("key", "customer"), opts.get("value", "amount")
    if "_change_type" not in df.columns:
        raise ValueError("change_totals: the records have no _change_type: read a Delta table's Change Data Feed "
                         "(source: {kind: delta, change_feed: true})")
    for c in (key, value):
        if c not in df.columns:
            raise ValueError(f"change_totals: the records have no column {c!r} (columns: {df.columns})")
    sign = F.coalesce(*[F.when(F.col("_change_type") == t, F.lit(s)) for t, s in SIGN.items()])
    return (df.select(F.col(key), sign.alias("_sign"), F.col(value).alias("_value"))
              .groupBy(F.col(key))
              .agg(F.sum("_sign").cast("long").alias("rows"),
                   F.sum(F.col("_sign") * F.coalesce(F.col("_value").cast("double"), F.lit(0.0))).alias("total")))
