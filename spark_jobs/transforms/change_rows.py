"""Another Delta table's changes as upserts and deletes: a merge sink then holds the upstream's rows.

For a pipeline whose source reads a Delta table's changes (``source: {kind: delta, change_feed:
true}``): every record carries ``_change_type`` and ``_commit_version``, which are never published,
so a merge sink's ``sequence_by`` and ``delete_when`` cannot name them. This transform publishes
them as two columns an upsert can use:

* ``change_type``: ``insert``, ``update_postimage`` or ``delete`` (an update's pre-image is left
  out: its post-image replaces the row);
* ``change_seq``: the order of the changes: the upstream version × 4, plus 1 for a delete and 2
  for an insert or a post-image. A later version wins; within one version, a key's insert wins
  over its delete (an overwrite, which writes no change data, removes the key's old row and adds
  its new one in the same version).

Options (``transform: {name: change_rows, options: {...}}``): ``type`` and ``sequence``, the
names of the two columns (default ``change_type``, ``change_seq``), when the upstream has columns
of those names. Use it with an upsert keyed by the upstream's key (one upstream row per key):

    transform: change_rows
    sink:
      mode: merge
      merge: {keys: [order_id], sequence_by: change_seq, delete_when: "change_type = 'delete'"}
"""

from pyspark.sql import functions as F

ROW_PRESERVING = False  # an update's pre-image is left out
RANK = {"delete": 1, "insert": 2, "update_postimage": 2}


def transform(df, ctx):
    opts = ctx.options
    kind, seq = opts.get("type", "change_type"), opts.get("sequence", "change_seq")
    for c in ("_change_type", "_commit_version"):
        if c not in df.columns:
            raise ValueError(f"change_rows: the records have no {c}: read a Delta table's Change Data Feed "
                             f"(source: {{kind: delta, change_feed: true}})")
    taken = [c for c in (kind, seq) if c in df.columns]
    if taken:
        raise ValueError(f"change_rows: the records have column(s) {', '.join(taken)} already: name the output "
                         f"columns with the options type and sequence")
    rank = F.coalesce(*[F.when(F.col("_change_type") == t, F.lit(r)) for t, r in RANK.items()])
    kept = df.where(F.col("_change_type").isin(*RANK))
    return kept.select(*[F.col(f"`{c}`") for c in df.columns if not c.startswith("_")],
                       F.col("_change_type").alias(kind),
                       (F.col("_commit_version").cast("long") * 4 + rank).alias(seq))
