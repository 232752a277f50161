"""Write one participant's rows as this attempt's staged Parquet files, one manifest per Spark partition.

Each Spark task writes its rows with pyarrow under the attempt's own folder of the table
(``<table>/eo_batches/b<id>/<attempt>/``: invisible to readers, it is not in the Delta log),
with names unique per task attempt, then its manifest (the files it wrote, their sizes and
rows), atomically, last. The driver collects the manifests; verify later checks each of them
against storage.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterable, Iterator


def staged_file(staging_rel: str, slice_: str | None, partition_by: list[str], values: tuple, partition: int,
                task_attempt: int) -> dict:
    """Where one task attempt writes its file of one folder: ``path`` (relative to the table:
    ``<attempt folder>[/<slice>][/<partition folders>]/part-<partition>-<task attempt>-<unique>.snappy.parquet``)
    and the ``partition_values`` of its adds, both from ``eobatch.core.formats`` (the one definition of
    a partition value's folder and of its spelling in the Delta log)."""
    from eobatch.core.formats import partition_path, partition_text

    name = f"part-{partition:05d}-{task_attempt}-{uuid.uuid4().hex[:12]}.snappy.parquet"
    rel = "/".join(x for x in (staging_rel, slice_ or "", partition_path(partition_by, values), name) if x)
    return {"path": rel, "partition_values": {c: partition_text(v) for c, v in zip(partition_by, values)}}


def rows_by_folder(t, path_cols: list[str]) -> list[tuple[tuple, Any]]:
    """The rows of the Arrow table ``t`` per value of its ``path_cols`` (the columns that are
    folders, not file columns): [(values, rows)], one per distinct value (null included, a
    folder of its own); [((), t)] without such columns. Each row is in exactly one part: the
    groups hold row numbers, never matched again by equality (a NaN equals nothing, and 0.0
    equals -0.0 though they group apart: a computed DOUBLE column would lose or double rows)."""
    import pyarrow as pa

    if not path_cols:
        return [((), t)]
    row = "_eo_row"  # a record field never starts with "_"; the slice column is "_eo_slice"
    groups = (t.select(path_cols).append_column(row, pa.array(range(t.num_rows), pa.int64()))
              .group_by(path_cols, use_threads=False).aggregate([(row, "list")]))
    rows = groups.column(f"{row}_list").combine_chunks()
    return [(tuple(k[c] for c in path_cols), t.take(rows[i].values))
            for i, k in enumerate(groups.select(path_cols).to_pylist())]


def stage_dataframe(df, *, participant: str, table_root: str, ledger_spec: dict, partition_by: list[str],
                    batch_id: int, attempt: str, slice_col: str | None = None):
    """Write ``df`` as Parquet files of this attempt, one manifest per Spark partition.

    ``slice_col`` (interval mode): a column holding each row's interval slice name; rows of a
    slice go to files under ``<attempt>/<slice>/`` (the column itself is not written), so a later
    commit can replace exactly that slice. Returns the manifests as collected by the driver.
    """
    import pyspark

    from eobatch.core.formats import Layout, ManifestFile, PartitionManifest
    from eobatch.storage.fs import join, storage_for

    layout = Layout(**ledger_spec)
    staging_rel = layout.attempt_staging_rel(batch_id, attempt)
    path_cols = ([slice_col] if slice_col else []) + list(partition_by)  # folders, not file columns
    data_cols = [c for c in df.columns if c not in path_cols]
    ordered = df.select(*data_cols, *path_cols)
    n_slice = 1 if slice_col else 0

    def write_partition(batches: Iterable[Any]) -> Iterator[Any]:
        import os

        import pyarrow as pa

        from eobatch.core import faults
        from eobatch.core.table_files import TableFileWriter

        ctx = pyspark.TaskContext.get()
        if ctx is None:  # mapInArrow calls this in a Spark task, which always has one
            raise RuntimeError("write_partition runs only inside a Spark task")
        pid, tattempt = ctx.partitionId(), ctx.attemptNumber()
        fs = storage_for(table_root)
        afs = fs.arrow_fs()
        writers: dict = {}
        files: dict = {}
        total = 0

        def writer_for(key: tuple, schema):
            if key not in writers:
                files[key] = staged_file(staging_rel, key[0] if n_slice else None, partition_by, key[n_slice:],
                                         pid, tattempt)
                full = fs.arrow_path(join(table_root, files[key]["path"]))
                if fs.scheme == "file":
                    os.makedirs(os.path.dirname(full), exist_ok=True)
                writers[key] = TableFileWriter(full, schema, filesystem=afs)  # the product's statistics rules
            return writers[key]

        for rb in batches:
            if rb.num_rows == 0:
                continue
            for key, part in rows_by_folder(pa.Table.from_batches([rb]), path_cols):
                data = part.drop_columns(path_cols) if path_cols else part
                w = writer_for(key, data.schema)
                w.write(data)
                total += data.num_rows
            faults.crash_point("stage.after_first_file")
        for w in writers.values():
            w.close()
        staged = []
        for key, f in files.items():
            info = fs.stat(join(table_root, f["path"]))
            if info is None:  # the task fails and Spark runs it again
                raise FileNotFoundError(f"{join(table_root, f['path'])}: staged file missing right after it was written")
            # nan_free: the float columns the writer saw no NaN in (see ManifestFile)
            staged.append(ManifestFile(path=f["path"], size=info.size, rows=writers[key].rows,
                                       partition_values=f["partition_values"], nan_free=writers[key].nan_free).__dict__)
        m = PartitionManifest(batch_id=batch_id, attempt=attempt, participant=participant, partition=pid,
                              task_attempt=tattempt, rows=total, files=sorted(staged, key=lambda x: x["path"]))
        mfs = storage_for(layout.sink_table)
        mfs.write_atomic(layout.manifest(batch_id, attempt, participant, pid), m.to_json())
        yield pa.RecordBatch.from_pydict({"manifest": [m.to_json().decode()]})

    rows = ordered.mapInArrow(write_partition, "manifest string").collect()
    return sorted((json.loads(r["manifest"]) for r in rows), key=lambda m: m["partition"])

