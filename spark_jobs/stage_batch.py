"""spark-submit entry point: stage one attempt of one batch (no Airflow imports).

    spark-submit --py-files eobatch.zip spark_jobs/stage_batch.py --spec <base64 JSON>

1. read the batch plan from the ledger: exactly the recorded source range;
2. split it into records, by the source kind's reader (eobatch.sources.<kind>.read): one row per
   record with source, position, raw (a JSON text) and "_"-prefixed metadata columns for
   transforms, never published (files: one JSON object per line, source = file, position = line;
   Kafka: one value per record, source = topic/partition, position = offset, _kafka_*; parquet:
   one row as a JSON object, source = file, position = row index);
3. classify: too large, invalid UTF-8, not a JSON object, type mismatch, missing required field
   -> quarantine with the raw text and the reason; the rest parsed with the declared schema;
4. apply the pipeline's transform to the valid records;
5. write both outputs with attempt-unique file names under each table's eo_batches/ folder
   (invisible to readers: not in the Delta log) and one manifest per Spark partition;
6. write the stage summary (counts, partitions, schemas) last: the attempt is STAGED.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import sys
import time
import uuid
from typing import Any, Iterable, Iterator


def _parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="base64 JSON job spec (built by the stage task)")
    return ap.parse_args(argv)


class TransformContext:
    """What a transform may know besides its input DataFrame."""

    def __init__(self, spark, pipeline: str, batch_id: int, options: dict):
        self.spark, self.pipeline, self.batch_id, self.options = spark, pipeline, batch_id, options


def load_transform(name: str):
    mod = importlib.import_module(f"spark_jobs.transforms.{name}")
    if not hasattr(mod, "transform"):
        raise SystemExit(f"spark_jobs/transforms/{name}.py defines no transform(df, ctx)")
    return mod


def classify(lines, ddl: str, not_null: list[str], max_record_bytes: int):
    """Adds ``rec`` (the parsed record) and ``reason`` (null when the record is valid)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = T.StructType.fromDDL(ddl)
    if not isinstance(schema, T.StructType):  # fromDDL gives a bare type for a DDL such as "int"
        raise SystemExit(f"the job spec's schema {ddl!r} is not a list of columns")
    typed = T.StructType([T.StructField(f.name, f.dataType, True) for f in schema.fields]
                         + [T.StructField("_corrupt_record", T.StringType(), True)])
    loose = T.StructType([T.StructField(f.name, T.StringType(), True) for f in schema.fields])
    opts = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
    meta = [c for c in lines.columns if c.startswith("_")]  # source metadata, e.g. _kafka_offset
    df = lines.select(
        "source", "position", "raw", *meta,
        F.from_json("raw", typed, opts).alias("rec"),
        F.from_json("raw", loose).alias("loose"),
    )
    mismatches = [
        F.when(F.col("loose")[f.name].isNotNull() & F.col("rec")[f.name].isNull(),
               F.concat(F.lit(f"field '{f.name}': expected {f.dataType.simpleString().upper()}, got "),
                        F.substring(F.col("loose")[f.name], 1, 80)))
        for f in schema.fields
    ]
    missing = [F.when(F.col("rec")[c].isNull(), F.lit(f"missing required field '{c}'")) for c in not_null]
    size = F.octet_length("raw")
    reason = (
        F.when(F.col("raw").isNull(), F.lit("null value (tombstone)"))
        .when(size > max_record_bytes,
               F.concat(F.lit("record too large: "), size.cast("string"),
                        F.lit(f" bytes > max_record_bytes {max_record_bytes}")))
        .when(~F.is_valid_utf8("raw") | (~F.col("_utf8_ok") if "_utf8_ok" in lines.columns else F.lit(False)),
              F.lit("invalid UTF-8"))
        .when(F.json_object_keys("raw").isNull(), F.lit("malformed JSON: not a JSON object"))
        .when(F.col("rec._corrupt_record").isNotNull(),
              F.coalesce(F.concat_ws("; ", *mismatches) if mismatches else F.lit(None),
                         F.lit("does not fit the schema")))
    )
    if missing:
        reason = reason.when(F.concat_ws("; ", *missing) != "", F.concat_ws("; ", *missing))
    return df.select("source", "position", "raw", *meta, "rec", reason.alias("reason"))


def stage_dataframe(df, *, participant: str, table_root: str, ledger_spec: dict, partition_by: list[str],
                    batch_id: int, attempt: str, slice_col: str | None = None):
    """Write ``df`` as Parquet files of this attempt, one manifest per Spark partition.

    ``slice_col`` (interval mode): a column holding each row's interval slice name; rows of a
    slice go to files under ``<attempt>/<slice>/`` (the column itself is not written), so a later
    commit can replace exactly that slice. Returns the manifests as collected by the driver.
    """
    import pyspark

    from eobatch.formats import Layout, PartitionManifest, StagedFile, partition_text
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
        import pyarrow.parquet as pq

        from eobatch import faults
        from eobatch.verify import writer_statistics

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
                sub = "/".join(([key[0]] if n_slice else []) +
                               [f"{c}={_pv_path(v)}" for c, v in zip(partition_by, key[n_slice:])])
                name = f"part-{pid:05d}-{tattempt}-{uuid.uuid4().hex[:12]}.snappy.parquet"
                rel = "/".join(x for x in (staging_rel, sub, name) if x)
                full = fs.arrow_path(join(table_root, rel))
                if fs.scheme == "file":
                    os.makedirs(os.path.dirname(full), exist_ok=True)
                writers[key] = pq.ParquetWriter(full, schema, filesystem=afs, compression="snappy",
                                                write_statistics=writer_statistics(schema))
                files[key] = {"path": rel, "rows": 0,
                              "partition_values": {c: partition_text(v) for c, v in zip(partition_by, key[n_slice:])},
                              # float columns, until a NaN is written to them (see StagedFile)
                              "nan_free": [f.name for f in schema if pa.types.is_float32(f.type)
                                           or pa.types.is_float64(f.type)]}
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
                w.write_table(data)
                files[key]["rows"] += data.num_rows
                files[key]["nan_free"] = [c for c in files[key]["nan_free"]
                                          if not pc.any(pc.is_nan(data[c])).as_py()]
                total += data.num_rows
            faults.crash_point("stage.after_first_file")
        for w in writers.values():
            w.close()
        staged = []
        for f in files.values():
            info = fs.stat(join(table_root, f["path"]))
            if info is None:  # the task fails and Spark runs it again
                raise FileNotFoundError(f"{join(table_root, f['path'])}: staged file missing right after it was written")
            staged.append(StagedFile(path=f["path"], size=info.size, rows=f["rows"],
                                     partition_values=f["partition_values"], nan_free=f["nan_free"]).__dict__)
        m = PartitionManifest(batch_id=batch_id, attempt=attempt, participant=participant, partition=pid,
                              task_attempt=tattempt, rows=total, files=sorted(staged, key=lambda x: x["path"]))
        mfs = storage_for(layout.sink_table)
        mfs.write_atomic(layout.manifest(batch_id, attempt, participant, pid), m.to_json())
        yield pa.RecordBatch.from_pydict({"manifest": [m.to_json().decode()]})

    rows = ordered.mapInArrow(write_partition, "manifest string").collect()
    return sorted((json.loads(r["manifest"]) for r in rows), key=lambda m: m["partition"])


def _pv_path(v) -> str:
    from urllib.parse import quote

    from eobatch.formats import partition_text

    s = partition_text(v)
    return "__HIVE_DEFAULT_PARTITION__" if s is None else quote(s, safe="")


def executor_env(spec: dict, plan) -> dict:
    """The S3 endpoint and credentials for the executors' environment (s3a's default credential
    chain and the Parquet writers read them there). Set on the session by the driver, from its
    own environment: never on the spark-submit command line. Spark redacts them in its UI and
    event log (spark.redaction.regex)."""
    from eobatch import s3conf
    from eobatch.sources import kind_for

    paths = [spec["sink_table"], spec["quarantine_table"]] + kind_for(plan.source_kind).range(plan.range).locations()
    if not any(s3conf.is_s3(p) for p in paths):
        return {}
    return s3conf.credential_env()


SLICE_COL = "_eo_slice"


def transform_slices(tmod, valid, ctx, slices: list[str]):
    """The pipeline's transform, once per interval slice (interval mode), so that a transform
    that aggregates never mixes two intervals; each output row keeps its slice. Columns whose
    name starts with "_" are never published."""
    from functools import reduce

    from pyspark.sql import functions as F

    def published(df):
        return df.select(*[c for c in df.columns if not c.startswith("_")])

    if not slices:
        return published(tmod.transform(valid, ctx))
    outs = [published(tmod.transform(valid.where(F.col(SLICE_COL) == s), ctx)).withColumn(SLICE_COL, F.lit(s))
            for s in slices]
    return reduce(lambda a, b: a.unionByName(b), outs)


def run(spec: dict) -> dict:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    from eobatch.delta_sink import schema_to_b64
    from eobatch.formats import QUARANTINE, SINK, Layout, StageSummary
    from eobatch.ledger import Ledger
    from eobatch.sources import kind_for
    from eobatch.storage import storage_for

    t0 = time.time()
    batch_id, attempt = int(spec["batch_id"]), spec["attempt"]
    layout = Layout(spec["sink_table"], spec["quarantine_table"])
    ledger = Ledger(layout)
    digest = ledger.plan_digest(batch_id)  # before the plan: the record verify compares against
    plan = ledger.plan(batch_id)
    if plan is None or digest is None:
        raise SystemExit(f"batch {batch_id} has no plan at {layout.plan(batch_id)}")
    if ledger.prepared(batch_id) is not None:
        raise SystemExit(f"batch {batch_id} is already PREPARED; refusing to stage attempt {attempt}")
    log = lambda msg: print(f"[eobatch] {spec['pipeline']} batch {batch_id} attempt {attempt} "  # noqa: E731
                            f"+{time.time() - t0:.1f}s: {msg}", flush=True)

    src = spec.get("source") or {}
    try:
        kind = kind_for(plan.source_kind)
    except KeyError:
        raise SystemExit(f"source kind {plan.source_kind!r} is not supported by this job") from None
    problems = kind.unreadable(plan.range, src)
    if problems:
        raise SystemExit("the planned source range changed or cannot be read since the plan; the batch range "
                         "can no longer be read exactly: " + "; ".join(problems))

    builder = SparkSession.builder.appName(f"eobatch:{spec['pipeline']}:b{batch_id}:{attempt}")
    for k, v in executor_env(spec, plan).items():
        builder = builder.config(f"spark.executorEnv.{k}", v)
    spark = builder.getOrCreate()
    log("Spark session ready")
    for k, v in {"spark.sql.session.timeZone": "UTC"}.items():
        spark.conf.set(k, v)
    log(f"reading {plan.range_summary()} ({plan.rows_in} records by the plan's count)")

    lines = kind.read(spark, plan.range, src)
    slices = sorted({f["slice"] for f in plan.range.get("files", []) if f.get("slice")})
    if slices:  # interval mode: each record's interval slice, by the planned file it came from
        of_file = spark.createDataFrame([(f["path"], f["slice"]) for f in plan.range["files"]],
                                        f"source string, {SLICE_COL} string")
        lines = lines.join(F.broadcast(of_file), "source")
    classified = classify(lines, spec["schema"], spec["not_null"], int(spec["max_record_bytes"]))
    classified = classified.persist()
    counts = {bool(r["ok"]): r["n"] for r in
              classified.groupBy(F.col("reason").isNull().alias("ok")).agg(F.count("*").alias("n")).collect()}
    rows_valid, rows_bad = counts.get(True, 0), counts.get(False, 0)
    positions = kind.positions(classified)
    log(f"read {rows_valid + rows_bad} records: {rows_valid} valid, {rows_bad} to quarantine")

    tmod = load_transform(spec["transform"])
    ctx = TransformContext(spark, spec["pipeline"], batch_id, spec.get("transform_options") or {})
    meta = [c for c in classified.columns if c.startswith("_")]
    valid = classified.where(F.col("reason").isNull()).select("rec.*", *meta).drop("_corrupt_record")
    out = transform_slices(tmod, valid, ctx, slices)
    bad = classified.where(F.col("reason").isNotNull()).select(
        F.lit(batch_id).cast("long").alias("batch_id"), "source", "position",
        F.when(F.is_valid_utf8("raw"), F.substring("raw", 1, 65536))
         .otherwise(F.make_valid_utf8(F.substring("raw", 1, 65536))).alias("raw"),
        "reason", *([SLICE_COL] if slices else []))

    ledger_spec = {"sink_table": layout.sink_table, "quarantine_table": layout.quarantine_table}
    common = dict(ledger_spec=ledger_spec, batch_id=batch_id, attempt=attempt,
                  slice_col=SLICE_COL if slices else None)
    pby = {SINK: list(spec["partition_by"]), QUARANTINE: []}
    manifests = {SINK: stage_dataframe(out, participant=SINK, table_root=layout.sink_table,
                                       partition_by=pby[SINK], **common)}
    log(f"sink staged: {sum(m['rows'] for m in manifests[SINK])} rows")
    manifests[QUARANTINE] = stage_dataframe(bad, participant=QUARANTINE, table_root=layout.quarantine_table,
                                            partition_by=[], **common)
    classified.unpersist()
    schemas = {SINK: to_arrow_schema(out.drop(SLICE_COL).schema, timezone="UTC"),
               QUARANTINE: to_arrow_schema(bad.drop(SLICE_COL).schema, timezone="UTC")}
    summary = StageSummary(
        batch_id=batch_id, attempt=attempt, rows_in=rows_valid + rows_bad, rows_valid=rows_valid,
        rows_quarantined=rows_bad, row_preserving=bool(getattr(tmod, "ROW_PRESERVING", False)),
        partitions={p: len(m) for p, m in manifests.items()}, manifests=manifests,
        arrow_schema={p: schema_to_b64(s) for p, s in schemas.items()}, partition_by=pby,
        stage_seconds=round(time.time() - t0, 3), spark_app_id=spark.sparkContext.applicationId,
        config_fingerprint=spec.get("config_fingerprint", ""), source_positions=positions, plan_digest=digest,
    )
    storage_for(layout.sink_table).write_atomic(layout.stage_summary(batch_id, attempt), summary.to_json())
    nfiles = sum(len(m["files"]) for ms in manifests.values() for m in ms)
    log(f"STAGED in {summary.stage_seconds:.1f}s: {sum(m['rows'] for m in manifests[SINK])} rows to publish, "
        f"{rows_bad} quarantined, {nfiles} files over {summary.partitions} partitions")
    return summary.__dict__


def run_alo(spec: dict) -> dict:
    """Benchmark baseline only (`make bench`): the same read, quarantine and transform, then a
    plain at-least-once append with delta-spark, straight to a Delta table, no protocol."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from eobatch.sources import kind_for

    t0 = time.time()
    alo = spec["alo"]
    spark = SparkSession.builder.appName(f"eobatch-alo:{spec['pipeline']}").getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    lines = kind_for(spec["source"]["kind"]).read(spark, alo["range"], spec["source"])
    classified = classify(lines, spec["schema"], spec["not_null"], int(spec["max_record_bytes"])).persist()
    tmod = load_transform(spec["transform"])
    ctx = TransformContext(spark, spec["pipeline"], 0, spec.get("transform_options") or {})
    meta = [c for c in classified.columns if c.startswith("_")]
    out = tmod.transform(classified.where(F.col("reason").isNull()).select("rec.*", *meta).drop("_corrupt_record"), ctx)
    out = out.select(*[c for c in out.columns if not c.startswith("_")])
    bad = classified.where(F.col("reason").isNotNull()).select("source", "position", "raw", "reason")
    out.write.format("delta").mode("append").partitionBy(*spec["partition_by"]).save(alo["sink"])
    bad.write.format("delta").mode("append").save(alo["quarantine"])
    print(f"[eobatch] at-least-once append done in {time.time() - t0:.1f}s", flush=True)
    return {"seconds": time.time() - t0}


def main(argv=None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    spec = json.loads(base64.b64decode(args.spec))
    if spec.get("alo"):
        run_alo(spec)
    else:
        run(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
