"""`make bench`'s delta source row: one downstream batch reading another pipeline's table against
Spark Structured Streaming reading the same table as a Delta stream (``peer_sss_delta.py``).

The upstream is a table of ``versions`` appends of ``records / versions`` orders each (written with
delta-rs: one Delta version per append, as a pipeline's sink holds one per batch). Then, on the
same upstream table, each in a Spark application of its own with the same master and driver memory:

* the product: one batch of a ``kind: delta`` pipeline (plan, the stage job's spark-submit, verify,
  commit), reading every upstream version;
* the peer: ``readStream.format("delta")`` with ``availableNow`` into a Delta table.

Reported: ``delta_source_stage_seconds`` (the stage job's spark-submit), ``delta_source_batch_seconds``
(plan + stage + verify + commit), ``sss_delta_seconds`` (the peer's spark-submit), the ratio
``delta_source_over_sss`` (stage seconds over the peer's), and the rows each published.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import textwrap
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
from merge_batch import one_batch

from eobatch.job import launch
from support.checks import read_rows
from support.harness import Pipeline

SCHEMA = "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"
HERE = Path(__file__).resolve().parent


def upstream(table: Path, records: int, versions: int) -> int:
    """An upstream table of ``versions`` appends (delta-rs), ``records / versions`` orders each, as a
    pipeline's sink holds them (one Delta version per batch); its records."""
    per = max(1, records // versions)
    for v in range(versions):
        i = pa.array(range(per), pa.int64())
        deltalake.write_deltalake(str(table), pa.table({
            "order_id": pc.binary_join_element_wise(pa.scalar(f"o{v}-"), pc.cast(i, pa.string()), ""),
            "customer": pc.binary_join_element_wise(pa.scalar("c"), pc.cast(pc.remainder(i, 97), pa.string()), ""),
            "amount": pc.cast(pc.remainder(i, 991), pa.float64()),
            "ts": pa.array([dt.datetime(2026, 11, 21, 10, tzinfo=dt.timezone.utc)] * per, pa.timestamp("us", "UTC")),
        }), mode="append")
    return per * versions


def measure(records: int, master: str, work: Path, versions: int = 10, driver_memory: str | None = None) -> dict:
    up = work / "up" / "bronze"
    total = upstream(up, records, versions)
    down_dir = work / "down"
    (down_dir / "pipelines").mkdir(parents=True)
    sink, quarantine = down_dir / "lake" / "silver", down_dir / "lake" / "silver_bad"
    path = down_dir / "pipelines" / "bench_silver.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: bench_silver
        source: {{kind: delta, table: {up}, max_records_per_batch: {total + 1},
                  max_versions_per_batch: {versions + 10}}}
        schema: "{SCHEMA}"
        sink: {{table: {sink}}}
        quarantine: {{table: {quarantine}}}
        """) + (f"spark: {{driver_memory: {driver_memory}}}\n" if driver_memory else ""))
    down = Pipeline(down_dir, "bench_silver", path, down_dir / "unused", sink, quarantine)
    steps = one_batch(down, master)
    out: dict = {"delta_source_records": total, "delta_source_versions": versions,
                 "delta_source_steps": steps, "delta_source_stage_seconds": steps["stage"],
                 "delta_source_batch_seconds": round(sum(steps.values()), 2),
                 "delta_source_rows": len(read_rows(sink))}
    peer_table, checkpoint = work / "peer" / "table", work / "peer" / "checkpoint"
    # the peer's spark-submit: the stage job's master, jars, --conf set (Delta's SQL extension and
    # catalog among them) and memory, as the other peers of the bench get them
    cfg = down.cfg
    conf = dict(launch.spark_conf(cfg))
    if cfg.spark.driver_memory:
        conf["spark.driver.memory"] = cfg.spark.driver_memory
    argv = ["spark-submit", "--master", master, "--name", "bench-peer-sss-delta", "--jars", ",".join(launch.jars(cfg)),
            *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
            str(HERE / "peer_sss_delta.py"), "--source", str(up), "--table", str(peer_table),
            "--checkpoint", str(checkpoint)]
    t = time.time()
    r = subprocess.run(argv, env=launch.spark_env(), capture_output=True, text=True, timeout=3600)
    out["sss_delta_seconds"] = round(time.time() - t, 2)
    if r.returncode != 0:
        errors = [line for line in r.stderr.splitlines() if "Exception" in line or "Error" in line]
        raise RuntimeError(f"the Structured Streaming peer failed (exit {r.returncode}): {errors[:5]}")
    out["sss_delta_rows"] = len(read_rows(peer_table))
    out["delta_source_over_sss"] = round(out["delta_source_stage_seconds"] / out["sss_delta_seconds"], 2)
    return out
