"""`make bench`: the product's headline figures, measured side by side in one run.

    .venv/bin/python tests/bench/run_bench.py [--records N] [--out .bench/results.json]

* ``eo_over_alo``: wall time of one exactly-once batch of N records run as a DAG run of the
  pipeline (`airflow dags test`), over the at-least-once baseline: the same Spark job, launched
  the same way from a one-task DAG run, appending straight to a Delta table with delta-spark.
  Runs alternate (EO, ALO, EO, ALO, ...) on the same landed data; medians are compared.
* ``commit_seconds_small`` / ``_large``: the commit of a batch of F files, and of one with about
  100 times the bytes in the same number of files (the commit must cost O(files), not O(bytes)).
* ``verify_seconds_per_1000_files``: the pre-commit verification of a batch of 1000 files.
* ``fixed_overhead_seconds``: plan + verify + commit of a one-record batch, the Spark job excluded.
* ``eo_throughput_over_sss``: our records/s over Spark Structured Streaming (Kafka → Delta,
  availableNow). Spark's Kafka source cannot be assembled from the Maven registry this project
  reaches (spark-token-provider-kafka-0-10 is missing), so it is null with the reason.

The commit and verify figures use staged batches written directly with pyarrow in the exact
layout the Spark job writes (files, manifests, stage summary): the protocol's own costs,
measured without Spark's noise. Writes .bench/results.json and prints it as a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests"))

from eobatch.delta_sink import schema_to_b64  # noqa: E402
from eobatch.formats import QUARANTINE, SINK, PartitionManifest, StagedFile, StageSummary  # noqa: E402
from eobatch.protocol import Protocol  # noqa: E402
from support.harness import airflow_env, orders, write_pipeline  # noqa: E402

VENV_BIN = Path(sys.executable).parent


# -- synthetic staged batches (the protocol's costs without Spark) ------------------------
def _tables(n_files: int, rows_per_file: int, text_bytes: int):
    import pyarrow as pa

    schema = pa.schema([("order_id", pa.string()), ("customer", pa.string()), ("amount", pa.float64()),
                        ("ts", pa.timestamp("us", tz="UTC"))])
    noise = os.urandom(max(text_bytes, 1) * 64).hex()  # incompressible text: bytes on disk grow with it
    for f in range(n_files):
        ids = [f"f{f}-{i}" for i in range(rows_per_file)]
        texts = [noise[(i * 7919) % (len(noise) - text_bytes):][:text_bytes] + str(i) for i in range(rows_per_file)]
        yield pa.table({"order_id": ids, "customer": texts,
                        "amount": [float(i) for i in range(rows_per_file)],
                        "ts": pa.array([1_767_225_600_000_000 + i for i in range(rows_per_file)],
                                       pa.timestamp("us", tz="UTC"))}, schema=schema)


def synthetic_batch(p, n_files: int, rows_per_file: int, text_bytes: int) -> dict:
    """Plan a real batch, stage it with pyarrow like the Spark job would, then time verify and commit."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = n_files * rows_per_file
    name = f"land-{time.time_ns()}.jsonl"
    (p.landing / name).write_text("{}\n" * rows)  # the plan counts lines; staging is synthetic
    proto = Protocol(p.cfg)
    t = time.perf_counter()
    plan, _ = proto.plan(max_records=rows)
    plan_s = time.perf_counter() - t
    b, attempt = plan.batch_id, f"bench-{time.time_ns()}"
    lay = proto.layout
    manifests, schema = [], None
    for i, tbl in enumerate(_tables(n_files, rows_per_file, text_bytes)):
        rel = f"{lay.attempt_staging_rel(b, attempt)}/part-{i:05d}-0-bench.snappy.parquet"
        full = Path(lay.sink_table) / rel
        full.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(tbl, full, compression="snappy")
        schema = tbl.schema
        m = PartitionManifest(batch_id=b, attempt=attempt, participant=SINK, partition=i, task_attempt=0,
                              rows=tbl.num_rows, files=[StagedFile(path=rel, size=full.stat().st_size,
                                                                   rows=tbl.num_rows).__dict__])
        proto.ledger.fs.write_atomic(lay.manifest(b, attempt, SINK, i), m.to_json())
        manifests.append(json.loads(m.to_json()))
    qschema = pa.schema([("batch_id", pa.int64()), ("source", pa.string()), ("position", pa.int64()),
                         ("raw", pa.string()), ("reason", pa.string())])
    qm = PartitionManifest(batch_id=b, attempt=attempt, participant=QUARANTINE, partition=0, task_attempt=0,
                           rows=0, files=[])
    proto.ledger.fs.write_atomic(lay.manifest(b, attempt, QUARANTINE, 0), qm.to_json())
    summary = StageSummary(batch_id=b, attempt=attempt, rows_in=rows, rows_valid=rows, rows_quarantined=0,
                           row_preserving=True, partitions={SINK: n_files, QUARANTINE: 1},
                           manifests={SINK: manifests, QUARANTINE: [json.loads(qm.to_json())]},
                           arrow_schema={SINK: schema_to_b64(schema), QUARANTINE: schema_to_b64(qschema)},
                           partition_by={SINK: [], QUARANTINE: []}, stage_seconds=0.0,
                           config_fingerprint=p.cfg.fingerprint())
    proto.ledger.fs.write_atomic(lay.stage_summary(b, attempt), summary.to_json())
    t = time.perf_counter()
    prepared = Protocol(p.cfg).verify(b, attempt)
    verify_s = time.perf_counter() - t
    t = time.perf_counter()
    Protocol(p.cfg).commit(b)
    commit_s = time.perf_counter() - t
    return {"plan": plan_s, "verify": verify_s, "commit": commit_s, "bytes": prepared.bytes,
            "files": prepared.files}


def protocol_figures(root: Path, files: int = 16, repeat: int = 3) -> dict:
    p = write_pipeline(root, name="bench_protocol", max_records=10_000_000)
    synthetic_batch(p, 1, 1, 8)  # creates both tables: later commits are plain appends
    small, large, one = [], [], []
    for _ in range(repeat):  # alternate, so drift on the machine hits both alike
        small.append(synthetic_batch(p, files, 100, 8))
        large.append(synthetic_batch(p, files, 100, 5000))
        one.append(synthetic_batch(p, 1, 1, 8))
    thousand = synthetic_batch(p, 1000, 10, 8)
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    return {
        "commit_seconds_small": round(med(small, "commit"), 4),
        "commit_seconds_large": round(med(large, "commit"), 4),
        "commit_large_over_small": round(med(large, "commit") / med(small, "commit"), 3),
        "bytes_small": int(med(small, "bytes")), "bytes_large": int(med(large, "bytes")), "files_per_batch": files,
        "verify_seconds_per_1000_files": round(thousand["verify"], 3),
        "fixed_overhead_seconds": round(statistics.median(x["plan"] + x["verify"] + x["commit"] for x in one), 4),
    }


# -- exactly-once DAG run vs at-least-once DAG run ----------------------------------------
ALO_DAG = '''
"""Benchmark baseline: the same Spark job, appending straight to Delta, as a one-task DAG."""
import datetime as dt, json, os
from airflow.sdk import DAG
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from eobatch import launch
from eobatch.config import load_pipeline

cfg = load_pipeline(os.environ["EOBATCH_BENCH_PIPELINE"])
spec = launch.job_spec(cfg, 0, "alo")
spec["alo"] = {"range": json.loads(os.environ["EOBATCH_BENCH_RANGE"]),
               "sink": os.environ["EOBATCH_BENCH_ALO_SINK"], "quarantine": os.environ["EOBATCH_BENCH_ALO_SINK"] + "_bad"}
env = launch.spark_env()
with DAG("bench_alo", schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)):
    SparkSubmitOperator(task_id="append", application=launch.STAGE_APP, conn_id=cfg.spark.conn_id,
                        conf=launch.spark_conf(cfg), jars=",".join(launch.jars()), py_files=launch.pyfiles_zip(),
                        application_args=["--spec", launch.encode_spec(spec)],
                        env_vars={k: env[k] for k in ("PATH", "SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")})
'''


def _dags_test(env: dict, dag_id: str) -> float:
    t = time.perf_counter()
    r = subprocess.run([str(VENV_BIN / "airflow"), "dags", "test", dag_id], env=env, capture_output=True, text=True,
                       timeout=1800)
    took = time.perf_counter() - t
    if r.returncode != 0 or "state=success" not in r.stdout + r.stderr:
        raise RuntimeError(f"{dag_id} run failed:\n{(r.stdout + r.stderr)[-4000:]}")
    return took


def eo_vs_alo(root: Path, records: int, rounds: int = 2) -> dict:
    p = write_pipeline(root, name="bench_eo", max_records=records * 10)
    files = 4
    for i in range(files):
        p.land(f"part-{i}.jsonl", orders(f"r{i}", records // files))
    dags = root / "dags"
    dags.mkdir()
    shutil.copy(REPO / "dags" / "eobatch_pipelines.py", dags / "eobatch_pipelines.py")
    (dags / "bench_alo.py").write_text(ALO_DAG)
    home = root / "airflow"
    env = airflow_env(home, p.yaml_path.parent, {"AIRFLOW__CORE__DAGS_FOLDER": str(dags)})
    r = subprocess.run([str(VENV_BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    proto = Protocol(p.cfg)
    rng, n, _ = __import__("eobatch.sources", fromlist=["source_for"]).source_for(p.cfg).next_range([], records * 10)
    env_alo = {**env, "EOBATCH_BENCH_PIPELINE": str(p.yaml_path), "EOBATCH_BENCH_RANGE": json.dumps(rng)}
    eo, alo = [], []
    for i in range(rounds):
        # EO: a fresh table each round (reset the tables), the same landed files
        for t in (p.sink, p.quarantine):
            shutil.rmtree(t, ignore_errors=True)
        eo.append(_dags_test(env, "bench_eo"))
        assert proto.ledger.latest_batch_id() == 1
        alo.append(_dags_test({**env_alo, "EOBATCH_BENCH_ALO_SINK": str(root / f"alo_{i}")}, "bench_alo"))
    from deltalake import DeltaTable

    published = DeltaTable(str(p.sink)).count() if hasattr(DeltaTable, "count") else None
    return {"records": n, "eo_run_seconds": [round(x, 2) for x in eo], "alo_run_seconds": [round(x, 2) for x in alo],
            "eo_over_alo": round(statistics.median(eo) / statistics.median(alo), 3), "published": published}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(REPO / ".bench" / "results.json"))
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="eobatch-bench-"))
    try:
        res: dict = {"records": args.records}
        res.update(protocol_figures(root / "protocol"))
        res.update(eo_vs_alo(root / "dagruns", args.records, args.rounds))
        res["eo_throughput_over_sss"] = None
        res["eo_throughput_over_sss_note"] = ("not measured: Spark's Kafka source needs "
                                              "spark-token-provider-kafka-0-10, which the Maven registry "
                                              "reachable here does not serve")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    width = max(len(k) for k in res)
    for k, v in res.items():
        print(f"{k:<{width}}  {v}")
    print(f"(written to {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
