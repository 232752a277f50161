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


def stage_dataframe(df, *, participant: str, table_root: str, ledger_spec: dict, partition_by: list[str],
                    batch_id: int, attempt: str, slice_col: str | None = None):
    """Write ``df`` as Parquet files of this attempt, one manifest per Spark partition.

    ``slice_col`` (interval mode): a column holding each row's interval slice name; rows of a
    slice go to files under ``<attempt>/<slice>/`` (the column itself is not written), so a later
    commit can replace exactly that slice. Returns the manifests as collected by the driver.
    """
    import pyspark

    from eobatch.formats import Layout, PartitionManifest, StagedFile, partition_path, partition_text
    from eobatch.storage import join, storage_for

    layout = Layout(**ledger_spec)
    staging_rel = layout.attempt_staging_rel(batch_id, attempt)
    path_cols = ([slice_col] if slice_col else []) + list(partition_by)  # folders, not file columns
    data_cols = [c for c in df.columns if c not in path_cols]
    ordered = df.select(*data_cols, *path_cols)
    n_slice = 1 if slice_col else 0

    def write_partition(batches: Iterable[Any]) -> Iterator[Any]:
        import os

        import pyarrow as pa
        import pyarrow.compute as pc

        from eobatch import faults
        from eobatch.table_files import TableFileWriter

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
                sub = partition_path(partition_by, key[n_slice:])  # the one definition of the folders
                name = f"part-{pid:05d}-{tattempt}-{uuid.uuid4().hex[:12]}.snappy.parquet"
                rel = "/".join(x for x in (staging_rel, key[0] if n_slice else "", sub, name) if x)
                full = fs.arrow_path(join(table_root, rel))
                if fs.scheme == "file":
                    os.makedirs(os.path.dirname(full), exist_ok=True)
                writers[key] = TableFileWriter(full, schema, filesystem=afs)  # the product's statistics rules
                files[key] = {"path": rel,
                              "partition_values": {c: partition_text(v) for c, v in zip(partition_by, key[n_slice:])}}
            return writers[key]

        for rb in batches:
            if rb.num_rows == 0:
                continue
            t = pa.Table.from_batches([rb])
            if not path_cols:
                parts = [((), t)]
            else:
                keys = t.select(path_cols).group_by(path_cols).aggregate([]).to_pylist()
                parts = []
                for k in keys:
                    mask = None
                    for c in path_cols:
                        v = k[c]
                        m = pc.is_null(t[c]) if v is None else pc.equal(t[c], pa.scalar(v, t.schema.field(c).type))
                        m = pc.fill_null(m, False)
                        mask = m if mask is None else pc.and_(mask, m)
                    parts.append((tuple(k[c] for c in path_cols), t.filter(mask)))
            for key, part in parts:
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
            # nan_free: the float columns the writer saw no NaN in (see StagedFile)
            staged.append(StagedFile(path=f["path"], size=info.size, rows=writers[key].rows,
                                     partition_values=f["partition_values"], nan_free=writers[key].nan_free).__dict__)
        m = PartitionManifest(batch_id=batch_id, attempt=attempt, participant=participant, partition=pid,
                              task_attempt=tattempt, rows=total, files=sorted(staged, key=lambda x: x["path"]))
        mfs = storage_for(layout.sink_table)
        mfs.write_atomic(layout.manifest(batch_id, attempt, participant, pid), m.to_json())
        yield pa.RecordBatch.from_pydict({"manifest": [m.to_json().decode()]})

    rows = ordered.mapInArrow(write_partition, "manifest string").collect()
    return sorted((json.loads(r["manifest"]) for r in rows), key=lambda m: m["partition"])

