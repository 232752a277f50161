"""`make bench` in miniature: the benchmark runs and writes every key of its contract.

No timing is asserted (the figures of a shared 2-core machine mean nothing in a test); the
smoke run checks that each contender ran on the same data and that every figure of
../shared/contracts.md ("Benchmarks") is a number. The Kafka figure has its own, smaller test.
"""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from support.harness import REPO, base_env

BENCH = REPO / "tests" / "bench"
sys.path.insert(0, str(BENCH))

SIZE_KEYS = ("records", "files", "eo_seconds", "stage_seconds", "sss_seconds", "alo_seconds", "eo_over_sss",
             "stage_over_sss", "driver_peak_rss_mib")
SINGLE_KEYS = ("bytes", "records", "eo_seconds", "sss_seconds", "eo_over_sss")
SCALARS = ("commit_large_over_small", "verify_seconds_per_1000_files", "fixed_overhead_seconds",
           "plan_late_over_early", "kafka_stage_over_consume_floor", "merge_over_append", "catchup_over_sss")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


@pytest.mark.integration
def test_bench_smoke_writes_every_contract_key(tmp_path):
    out = tmp_path / "results.json"
    env = base_env({"SIZES": "1000", "SINGLE_FILE_GB": "0", "PLAN_LATE_BATCHES": "200", "KAFKA_RECORDS": "0",
                    "MERGE_RECORDS": "0", "CATCHUP": "2x1000", "CATCHUP_ONE_PER_RUN": "0", "DELTA_RECORDS": "2000",
                    "SCHEDULER_RUNS": "0",  # its timing runs in test_scheduler.py, on that module's Airflow
                    # the landing zone's plan and recover tasks at two small sizes; S3 and the peer in
                    # test_landing_zone_figures (its Spark peer is the other contenders' spark-submit)
                    "LANDING_SIZES": "200,400", "LANDING_S3_SIZES": "0", "LANDING_SSS_SIZES": "0",

                    "MASTER": "local[*]"})
    r = subprocess.run([sys.executable, str(BENCH / "run_bench.py"), "--out", str(out),
                        "--data-dir", str(tmp_path / "data")], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    res = json.loads(out.read_text())
    assert [k for k in ("sizes", "single_file", *SCALARS) if k not in res] == []
    [row] = res["sizes"]
    not_numbers = {k: row[k] for k in SIZE_KEYS if not _number(row[k])}
    assert not_numbers == {}, {k: v for k, v in row.items() if k in not_numbers or k.endswith("_error")}
    assert (row["records"], row["files"]) == (1000, 1)
    # the same data reached every contender: 999 good lines and one bad one (0.1 %)
    assert (row["eo_rows_published"], row["eo_rows_quarantined"]) == (999, 1)
    assert row["sss_rows"] == row["alo_rows"] == 1000  # Spark's PERMISSIVE mode keeps the bad line as nulls
    assert row["driver_peak_rss_mib"] > 100 and row["sss_driver_peak_rss_mib"] > 100
    assert 2 < row["stage_seconds"] < row["eo_seconds"]  # a whole spark-submit, not a process it forked
    # the DAG run split into its tasks' own run time and Airflow's share
    assert set(row["eo_task_seconds"]) >= {"recover", "plan", "stage", "verify", "commit"}
    assert row["eo_task_seconds"]["stage"] >= row["stage_task_seconds"] > 0
    assert 0 < row["eo_airflow_seconds"] < row["eo_seconds"]
    assert res["single_file"] is None and "SINGLE_FILE_GB=0" in res["single_file_note"]
    assert res["kafka_stage_over_consume_floor"] is None and "KAFKA_RECORDS=0" in res[
        "kafka_stage_over_consume_floor_note"]
    assert res["merge_over_append"] is None and "MERGE_RECORDS=0" in res["merge_over_append_note"]
    # the delta source: one batch of a kind: delta pipeline and the Delta stream peer, on the same upstream
    d = res["delta_source_details"]
    assert d and d["delta_source_rows"] == d["sss_delta_rows"] == d["delta_source_records"] == 2000, d
    assert _number(res["delta_source_over_sss"]) and 2 < d["delta_source_stage_seconds"] < d["delta_source_batch_seconds"]
    assert {k: res[k] for k in (*SCALARS[:4], "catchup_over_sss") if not _number(res[k])} == {}
    # the catch-up case: the backlog drained in one DAG run (its two batches committed, else an error),
    # by Structured Streaming one file per micro-batch, and as one batch
    c = res["catchup"]
    assert (c["batches"], c["records_per_batch"]) == (2, 1000) and not [k for k in c if k.endswith("_error")], c
    assert all(_number(c[f"{k}_seconds_per_batch"]) for k in ("eo", "sss", "eo_one_batch")), c
    assert "eo_one_per_run_seconds" not in c and "catch-up: 2 batches of 1,000 records" in r.stdout
    assert res["eo_scheduler_seconds"] is None and "SCHEDULER_RUNS=0" in res["eo_scheduler_seconds_note"]
    assert (tmp_path / "bench.png").stat().st_size > 1000
    assert "eo/sss" in r.stdout and "plan_late_over_early" in r.stdout
    # the landing zone: each size's plan planned the 10 new files, its recover found the newest batch committed
    assert [(z["files"], z["planned_files"], z["recover_found"]["committed"]) for z in res["landing_zone"]] == [
        (200, 10, 1), (400, 10, 1)]
    assert _number(res["plan_1m_over_1k"]) and "400 files over 200" in res["plan_1m_over_1k_note"]
    assert res["landing_zone_s3"] is None and "LANDING_S3_SIZES=0" in res["landing_zone_s3_note"]
    assert "landing zone: a 10-file batch among N local files" in r.stdout


@pytest.mark.integration
def test_bench_kafka_figure():
    r = subprocess.run([sys.executable, str(BENCH / "kafka_batch.py"), "3000"], env=base_env(),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["rows_published"] == res["consume_records"] == 3000
    assert _number(res["stage_s"]) and _number(res["consume_floor_s"]) and res["consume_floor_s"] > 0
    assert _number(res["stage_over_consume_floor"])
    # the read phase, from the stage job's line per read task: every record read once, in the consumer
    assert res["read_records"] == 3000 and res["read_tasks"] >= 3
    assert _number(res["read_over_consume_floor"]) and len(res["read_consumer_s"]) == 3


@pytest.mark.integration
def test_landing_zone_figures(tmp_path):
    """tests/bench/landing_zone.py at its smallest: 200 landing files, locally and on the S3 server
    (the peer is left out: a spark-submit is the other contenders' and takes longer than all this)."""
    out = tmp_path / "lz.json"
    r = subprocess.run([sys.executable, str(BENCH / "landing_zone.py"), "--sizes", "200", "--s3-sizes", "200",
                        "--sss-sizes", "0", "--repeat", "1", "--work", str(tmp_path / "work"), "--out", str(out)],
                       env=base_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    res = json.loads(out.read_text())
    for row in res["landing_zone"] + res["landing_zone_s3"]:
        assert (row["files"], row["ledger_batches"], row["planned_files"], row["backlog_files"]) == (200, 1, 10, 0), row
        assert row["recover_found"] == {"latest": 1, "committed": 1, "pending": None}, row
        assert _number(row["plan_task_seconds"]) and _number(row["recover_task_seconds"]) and row["plan_max_rss_mib"] > 50
        assert _number(row["plan_full_seconds"]), row  # discovery full, on the same files
    [s3] = res["landing_zone_s3"]
    # lexical: the listing after the position and the replay folder (and the ledger's); the landing folder's
    # own check only when a listing finds nothing
    landing = {k: v for k, v in s3["s3_lists_per_plan"].items() if "/landing/" in k}
    assert sum(landing.values()) == 2 and any("part-000000189.jsonl" in k for k in landing), s3["s3_lists_per_plan"]
    assert s3["list_calls_per_plan"] >= 3 and s3["list_calls_per_plan_full"] >= 3
    assert s3["s3_calls_per_plan"]["PutObject"] == 1  # the plan record
    assert "landing_zone_s3" in res and "sss_trigger_seconds" not in res["landing_zone"][0]


# -- the pieces, without Spark -----------------------------------------------------------
def test_data_sets_are_cached_and_sized(tmp_path):
    data = importlib.import_module("bench_data")  # tests/bench is not a package
    DDL, dataset, files_for, single_file = data.DDL, data.dataset, data.files_for, data.single_file
    assert [files_for(n) for n in (1, 1000, 100_000, 1_000_000, 5_000_000, 10_000_000)] == [1, 1, 1, 10, 20, 40]
    ds = dataset(tmp_path, 2500)
    lines = b"".join((Path(ds["path"]) / n).read_bytes() for n in ds["names"]).splitlines()
    assert (len(lines), ds["files"], ds["bad"]) == (2500, 1, 2)
    good = [json.loads(x) for i, x in enumerate(lines) if i % 1000 != 999]
    assert set(good[0]) == {c.split()[0] for c in DDL.split(", ")}
    bad = [x for i, x in enumerate(lines) if i % 1000 == 999]
    with pytest.raises(ValueError):
        json.loads(bad[0])  # malformed
    assert json.loads(bad[1])["amount"] == "n/a"  # wrong type
    mtime = (Path(ds["path"]) / ds["names"][0]).stat().st_mtime_ns
    assert dataset(tmp_path, 2500)["names"] == ds["names"]
    assert (Path(ds["path"]) / ds["names"][0]).stat().st_mtime_ns == mtime  # reused, not written again
    one = single_file(tmp_path, 0.0001)
    assert one["files"] == 1 and one["bytes"] >= 0.0001 * (1 << 30)


def test_report_renders_a_failed_contender(tmp_path):
    bench = importlib.import_module("run_bench")
    _ordered, plot, table = bench._ordered, bench.plot, bench.table

    row = {"records": 5_000_000, "files": 20, "bytes": 440_000_000, "eo_seconds": None, "stage_seconds": None,
           "sss_seconds": 28.5, "alo_seconds": 28.1, "eo_over_sss": None, "stage_over_sss": None,
           "driver_peak_rss_mib": 1100, "eo_error": "DAG run failed (exit 1): java.lang.OutOfMemoryError"}
    res = {"sizes": [row], "single_file": None, "plan_late_over_early": 40.0,
           "kafka_stage_over_consume_floor": None, "kafka_stage_over_consume_floor_note": "skipped",
           "environment": {"master": "local[*]", "driver_memory": "1g", "cpus": 2}}
    text = table(res)
    assert "OutOfMemoryError" in text and "5,000,000" in text and "(skipped)" in text
    plot(res, tmp_path / "b.png")
    assert (tmp_path / "b.png").stat().st_size > 1000
    assert list(_ordered(res))[:2] == ["sizes", "single_file"]
