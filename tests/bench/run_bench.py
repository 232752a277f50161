"""`make bench`: the product against the peers a user would pick, side by side in one run.

    .venv/bin/python tests/bench/run_bench.py [--sizes 1000,1000000,5000000] [--single-file-gb 1]
        [--master 'local[*]'] [--plan-late-batches 100000] [--kafka-records 1000000]
        [--merge-records 1000000] [--delta-records 1000000] [--driver-memory 3g] [--catchup 10x500000] [--catchup-one-per-run 1]
        [--scheduler-runs 3] [--landing-sizes 1000,1000000] [--landing-s3-sizes 1000,10000]
        [--landing-sss-sizes <landing sizes>] [--landing-sss-real-up-to 10000]
        [--out .bench/results.json] [--plot .bench/bench.png]

(every option also reads its environment variable: SIZES, SINGLE_FILE_GB, MASTER,
PLAN_LATE_BATCHES, KAFKA_RECORDS, MERGE_RECORDS, DRIVER_MEMORY, CATCHUP, CATCHUP_ONE_PER_RUN,
SCHEDULER_RUNS, LANDING_SIZES, LANDING_S3_SIZES, LANDING_SSS_SIZES, LANDING_SSS_REAL_UP_TO; `make bench`
passes them through.)

For each size, on the same generated JSON-lines orders (``bench_data``: ~0.1 % bad lines,
cached under .bench/data), one after another, with the same Spark master, ``--conf`` set and
driver memory as the product's stage job (``launch.spark_conf``; the pipeline's
``spark.driver_memory``, Spark's default 1g when DRIVER_MEMORY is not given):

* ``eo_seconds``: one exactly-once batch holding the whole data set, run as a DAG run of a
  fresh pipeline (``airflow dags test <pipeline>``, what `make run` runs): wall time of that
  command, Airflow's start-up and every task included.
* ``stage_seconds``: the stage task's ``spark-submit`` alone, timed like the peers: from the fork
  of its process to its exit, read from /proc (``procwatch``: the driver JVM keeps the pid of
  its spark-submit; exit seen within 0.1 s). ``stage_task_seconds`` is the stage task's own
  log line ("finished in X s", around the Spark hook), ``stage_job_internal_seconds`` the job's
  own figure in its stage summary (session start-up excluded).
* ``sss_seconds``: ``peer_sss.py``, Spark Structured Streaming file source -> Delta sink with a
  checkpoint, ``trigger(availableNow=True)``; ``alo_seconds``: ``peer_append.py``, a plain
  ``spark.read.json(files).write.format("delta").mode("append")``. Each a ``spark-submit`` of its
  own, wall time of the process, on a new table.
* ``driver_peak_rss_mib``: the kernel's high-water mark (VmHWM) of the driver JVM of the stage
  job; ``sss_``/``alo_driver_peak_rss_mib`` the same for the peers; ``*_tree_peak_rss_mib`` the
  peak of the JVM plus its Python processes (driver, workers) summed.
* ``single_file``: the same for one landing file of at least SINGLE_FILE_GB GiB (0: skipped),
  product and Structured Streaming.

Then the protocol's own costs (``protocol_costs``: commit, verify, fixed overhead, plan at batch
100,000 of a synthetic ledger over plan at batch 10), the Kafka stage over the raw consume
floor of one confluent-kafka consumer per partition (``kafka_batch``; KAFKA_RECORDS=0 skips it),
and a batch upserted into a merge sink over the same batch appended (``merge_batch``:
``merge_over_append``; MERGE_RECORDS=0 skips it), and one batch of a ``kind: delta`` pipeline
reading another pipeline's table against Structured Streaming reading it as a Delta stream
(``delta_source_batch``: ``delta_source_over_sss``; DELTA_RECORDS=0 skips it).

Last, landing zones of any size (``landing_zone``, issue 44): the plan task and the recover task of a
10-file batch in a landing folder of LANDING_SIZES files, all consumed but those 10 (``landing_zone``
rows, ``plan_1m_over_1k``: plan seconds at the largest size over the smallest), against one
``availableNow`` trigger of Structured Streaming's file source on the same folder
(``plan_task_over_sss_trigger``, at LANDING_SSS_SIZES), and the same on the S3 server at
LANDING_S3_SIZES objects (``landing_zone_s3`` rows, with the LIST calls of a plan); 0 skips each.

A contender that fails (e.g. OutOfMemoryError) gets null seconds and an ``*_error`` text; the
run goes on. Writes .bench/results.json (keys: ../shared/contracts.md "Benchmarks"), prints
a table and draws seconds against records (.bench/bench.png).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
for _p in (REPO / "plugins", REPO / "tests", BENCH):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import delta_source_batch  # noqa: E402
import kafka_batch  # noqa: E402
import landing_zone  # noqa: E402
import merge_batch  # noqa: E402
import protocol_costs  # noqa: E402
from bench_data import DDL, backlog, dataset, single_file  # noqa: E402
from procwatch import Jvm, JvmWatch  # noqa: E402

from eobatch.job import launch  # noqa: E402
from eobatch.protocol import Protocol  # noqa: E402
from support.harness import VENV_BIN, airflow_env, write_pipeline  # noqa: E402

PEER_SSS = BENCH / "peer_sss.py"
PEER_APPEND = BENCH / "peer_append.py"
RUN_TIMEOUT = 3 * 3600


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- running a process and its Spark driver --------------------------------------------
def run_watched(argv: list[str], env: dict, log_path: Path, timeout: float = RUN_TIMEOUT) -> tuple[int, float, list[Jvm]]:
    """Run ``argv`` (output to ``log_path``): (exit code, wall seconds, the Spark driver JVMs under it)."""
    with open(log_path, "w") as log:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        with JvmWatch(proc.pid) as watch:
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
        took = time.perf_counter() - t
    return rc, took, watch.drivers()


def _error_text(log_path: Path) -> str:
    """The telling line of a failed run's log (an OutOfMemoryError first), shortened."""
    text = log_path.read_text(errors="replace")
    for pat in (r"[^\n]*OutOfMemoryError[^\n]*", r"[^\n]*(?:FileTooLarge|TerminalError|ProtocolError)[^\n]*",
                r"[^\n]*(?:Error|Exception)[^\n]*"):
        m = re.search(pat, text)
        if m:
            return m.group(0).strip()[:400]
    return text.strip()[-400:]


def spark_argv(cfg, master: str, name: str, app: Path, args: list[str]) -> list[str]:
    """A peer's spark-submit: the stage job's master, jars, --conf set and memory settings."""
    argv = ["spark-submit", "--master", master, "--name", name, "--jars", ",".join(launch.jars(cfg))]
    conf = dict(launch.spark_conf(cfg))
    for k, v in (("spark.driver.memory", cfg.spark.driver_memory), ("spark.executor.memory", cfg.spark.executor_memory)):
        if v:
            conf[k] = v  # as the stage operator passes them
    for k, v in conf.items():
        argv += ["--conf", f"{k}={v}"]
    return argv + [str(app), *args]


def delta_rows(path: Path) -> int | None:
    try:
        import pyarrow as pa
        from deltalake import DeltaTable

        adds = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
        return int(sum(v or 0 for v in adds.column("num_records").to_pylist()))
    except Exception:  # noqa: BLE001 - a sanity figure, never a reason to fail the bench
        return None


def _rate(records: int, seconds: float | None) -> int | None:
    return round(records / seconds) if seconds else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


# -- the contenders --------------------------------------------------------------------
def run_peer(kind: str, ds: dict, cfg, master: str, work: Path) -> dict:
    table = work / f"{kind}_table"
    if kind == "sss":
        args = ["--source", ds["path"], "--table", str(table), "--checkpoint", str(work / "sss_checkpoint"),
                "--schema", DDL]
        app = PEER_SSS
    else:
        args = ["--table", str(table), "--schema", DDL, *[str(Path(ds["path"]) / n) for n in ds["names"]]]
        app = PEER_APPEND
    log = work / f"{kind}.log"
    rc, took, drivers = run_watched(spark_argv(cfg, master, f"bench-peer-{kind}", app, args), launch.spark_env(), log)
    jvm = drivers[0] if drivers else None
    out: dict = {f"{kind}_seconds": round(took, 2) if rc == 0 else None,
                 f"{kind}_driver_peak_rss_mib": jvm.peak_rss_mib if jvm else None,
                 f"{kind}_tree_peak_rss_mib": jvm.tree_peak_rss_mib if jvm else None}
    if rc == 0:
        out[f"{kind}_rows"] = delta_rows(table)
    else:
        out[f"{kind}_error"] = f"exit {rc}: {_error_text(log)}"
        _log(f"{kind} failed, see {log}")
    return out


def airflow_home(work: Path) -> Path:
    """A new Airflow home (SQLite) whose database is a copy of one migrated once for the whole bench
    run (not timed), beside ``work``."""
    template = work.parent / ".airflow-template"
    if not (template / "airflow.db").exists():
        template.mkdir(parents=True, exist_ok=True)
        env = airflow_env(template, work.parent, _airflow_paths(template))
        r = subprocess.run([str(VENV_BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True,
                           timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{(r.stdout + r.stderr)[-3000:]}")
    home = work / "airflow"
    home.mkdir(parents=True)
    shutil.copy2(template / "airflow.db", home / "airflow.db")
    return home


def _airflow_paths(home: Path) -> dict:
    return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs")}


def bench_pipeline(ds: dict, name: str, master: str, driver_memory: str | None, work: Path, home: Path,
                   max_records: int, batches_per_run: int = 1, lake: str | None = None):
    """A new pipeline over the data set's folder (a local one or s3a://): (its config, the Airflow
    environment of its runs); ``lake``: where its tables go (default: under ``work``)."""
    extra = f"spark:\n  driver_memory: {driver_memory}\n" if driver_memory else ""
    extra += f"max_batches_per_run: {batches_per_run}\n"
    p = write_pipeline(work, name=name, schema=DDL, max_records=max_records, extra=extra)
    text = p.yaml_path.read_text()
    moves = {f"  path: {p.landing}\n": f"  path: {ds['path']}\n"}
    if lake:
        moves |= {f"table: {p.sink}\n": f"table: {lake}/{name}\n",
                  f"table: {p.quarantine}\n": f"table: {lake}/{name}_bad\n"}
    for old, new in moves.items():
        assert old in text, f"harness.write_pipeline changed its layout ({old.strip()!r})"
        text = text.replace(old, new)
    p.yaml_path.write_text(text)
    env = airflow_env(home, p.yaml_path.parent, {
        **_airflow_paths(home), "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": master})})
    return p.cfg, env


def run_eo(ds: dict, name: str, master: str, driver_memory: str | None, work: Path, home: Path) -> tuple[dict, object]:
    """One exactly-once batch of the whole data set as a DAG run of a new pipeline."""
    cfg, env = bench_pipeline(ds, name, master, driver_memory, work, home, max_records=ds["records"] + 1)
    log = work / "eo-dagrun.log"
    rc, took, drivers = run_watched([str(VENV_BIN / "airflow"), "dags", "test", name], env, log)
    text = log.read_text(errors="replace")
    states = re.findall(r"DagRun Finished:.*?state=([a-z_]+)", text)
    ok = rc == 0 and bool(states) and states[-1] == "success"
    stage = [j for j in drivers if j.name.startswith(f"eobatch-{name}-b")]
    jvm = stage[0] if stage else None  # the pipeline's stage retries are 0: one attempt
    task = re.findall(r"stage: batch \d+ attempt \S+ finished in ([0-9.]+)s", text)
    prepared = Protocol(cfg).ledger.prepared(1)
    tasks = dag_test_task_seconds(text)
    out: dict = {
        "eo_seconds": round(took, 2) if ok else None,
        # the tasks' own run time (from the task runner's start to the task's end) and the rest of
        # the DAG run: Airflow's start-up, DAG parse, execution API, task bookkeeping, exit
        "eo_task_seconds": tasks,
        "eo_airflow_seconds": round(took - sum(tasks.values()), 2) if ok and tasks else None,
        # the task logs "finished in" only when its spark-submit succeeded
        "stage_seconds": round(jvm.seconds, 2) if jvm and jvm.seconds is not None and task else None,
        "driver_peak_rss_mib": jvm.peak_rss_mib if jvm else None,
        "driver_tree_peak_rss_mib": jvm.tree_peak_rss_mib if jvm else None,
        "stage_task_seconds": float(task[-1]) if task else None,
        "stage_job_internal_seconds": prepared.stage_seconds if prepared else None,
        "stage_attempts": len(stage),
        "eo_rows_published": prepared.rows_published if prepared else None,
        "eo_rows_quarantined": prepared.rows_quarantined if prepared else None,
    }
    if not ok:
        out["eo_error"] = f"DAG run {states[-1] if states else 'unknown'} (exit {rc}): {_error_text(log)}"
        _log(f"eo run of {name} failed, see {log}")
    return out, cfg


_DAG_TEST = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+)Z .*?(\[DAG TEST\] end task task_id=(\w+)|Task started)")


def dag_test_task_seconds(log_text: str) -> dict:
    """{task: seconds} of an ``airflow dags test`` log: each task from its runner's "Task started"
    (the execution API's line, once Airflow is ready to run it) to its "[DAG TEST] end task"."""
    out: dict = {}
    started = None
    for line in log_text.splitlines():
        m = _DAG_TEST.search(line)
        if not m:
            continue
        at = dt.datetime.fromisoformat(m.group(1))
        if m.group(3) is None:
            started = at
        elif started is not None:
            out[m.group(3)] = round(out.get(m.group(3), 0.0) + (at - started).total_seconds(), 2)
            started = None
    return out


def measure_size(ds: dict, master: str, driver_memory: str | None, work: Path, home: Path,
                 peers: tuple[str, ...] = ("sss", "alo")) -> dict:
    records = ds["records"]
    row: dict = {"records": records, "files": ds["files"], "bytes": ds["bytes"]}
    _log(f"{records:,} records in {ds['files']} file(s), {ds['bytes'] / 1e6:.0f} MB: exactly-once DAG run")
    eo, cfg = run_eo(ds, f"bench_{records}", master, driver_memory, work / "eo", home)
    row.update(eo)
    for kind in peers:
        _log(f"{records:,} records: peer {kind}")
        row.update(run_peer(kind, ds, cfg, master, work))
    row["eo_over_sss"] = _ratio(row["eo_seconds"], row.get("sss_seconds"))
    row["stage_over_sss"] = _ratio(row["stage_seconds"], row.get("sss_seconds"))
    for k in ("eo", "stage", "sss", "alo"):
        if f"{k}_seconds" in row:
            row[f"{k}_records_per_s"] = _rate(records, row[f"{k}_seconds"])
    return row


def _dag_runs(name: str, env: dict, log: Path, runs: int) -> tuple[float | None, str | None]:
    """``runs`` DAG runs of pipeline ``name`` one after another (``airflow dags test``, what `make
    run RUNS=n` runs): (wall seconds of all of them, or None and the first failure)."""
    took = 0.0
    for i in range(runs):
        rc, sec, _ = run_watched([str(VENV_BIN / "airflow"), "dags", "test", name], env, log)
        states = re.findall(r"DagRun Finished:.*?state=([a-z_]+)", log.read_text(errors="replace"))
        if rc != 0 or not states or states[-1] != "success":
            return None, f"run {i + 1}: DAG run {states[-1] if states else 'unknown'} (exit {rc}): {_error_text(log)}"
        took += sec
    return round(took, 2), None


def measure_catchup(ds: dict, master: str, driver_memory: str | None, work: Path, home: Path,
                    one_per_run: bool = True, lake: str | None = None) -> dict:
    """A backlog of ``ds["files"]`` files, one batch each: this product drains it in one DAG run
    (``max_batches_per_run`` = the backlog: one Spark application, each batch its own two-phase
    commit); Structured Streaming with ``maxFilesPerTrigger=1`` (one micro-batch per file, in one
    process); the product one batch per DAG run (``one_per_run``: what a drain cost before runs
    carried several); and the same records as one batch. ``lake``: where every table (and the
    peer's checkpoint) goes, e.g. ``s3a://bucket/prefix`` (default: under ``work``)."""
    n, per = ds["files"], ds["per_file"]
    out: dict = {"batches": n, "records_per_batch": per, "records": ds["records"], "bytes": ds["bytes"]}
    cases = [("eo", n, per), ("eo_one_batch", 1, ds["records"] + 1)] + ([("eo_one_per_run", 1, per)] if one_per_run else [])
    for key, batches_per_run, max_records in cases:
        name = f"catchup_{key}"
        _log(f"catch-up: {key} ({n} batches of {per:,} records)" if key != "eo_one_batch" else
             f"catch-up: the same {ds['records']:,} records as one batch")
        cfg, env = bench_pipeline(ds, name, master, driver_memory, work / key, home, max_records, batches_per_run,
                                  lake=f"{lake}/{key}" if lake else None)
        runs = n if key == "eo_one_per_run" else 1
        took, err = _dag_runs(name, env, work / f"{key}.log", runs)
        out[f"{key}_seconds"] = took
        if err:
            out[f"{key}_error"] = err
            _log(f"catch-up {key} failed: {err}")
            continue
        held = Protocol(cfg).committed_versions()
        want = 1 if key == "eo_one_batch" else n
        if set(held.values()) != {want}:
            out[f"{key}_error"] = f"the tables hold batches {held}, not {want}"
    _log(f"catch-up: Structured Streaming, maxFilesPerTrigger=1 ({n} micro-batches)")
    table_path, log = f"{lake}/sss_table" if lake else work / "sss_table", work / "sss.log"
    checkpoint = f"{lake}/sss_checkpoint" if lake else work / "sss_checkpoint"
    args = ["--source", ds["path"], "--table", str(table_path), "--checkpoint", str(checkpoint),
            "--schema", DDL, "--max-files-per-trigger", "1"]
    rc, took, _ = run_watched(spark_argv(cfg, master, "bench-catchup-sss", PEER_SSS, args), launch.spark_env(), log)
    out["sss_seconds"] = round(took, 2) if rc == 0 else None
    if rc != 0:
        out["sss_error"] = f"exit {rc}: {_error_text(log)}"
    for key in ("eo", "sss", "eo_one_per_run", "eo_one_batch"):  # one batch: per batch's worth of records
        if out.get(f"{key}_seconds") is not None:
            out[f"{key}_seconds_per_batch"] = round(out[f"{key}_seconds"] / n, 2)
    out["catchup_over_sss"] = _ratio(out.get("eo_seconds"), out.get("sss_seconds"))
    out["one_per_run_over_sss"] = _ratio(out.get("eo_one_per_run_seconds"), out.get("sss_seconds"))
    return out


def time_scheduled_runs(stack, dag_id: str, runs: int, conf: dict | None = None) -> list[float]:
    """``runs`` DAG runs of ``dag_id`` triggered one after another through the REST API of a running
    Airflow (``support.airflow_stack.AirflowStack``), each waited for: the seconds of each from its
    queueing to its end, as Airflow records them."""
    seconds = []
    for _ in range(runs):
        status, body = stack.trigger(dag_id, conf)
        if status not in (200, 201):
            raise RuntimeError(f"trigger refused: {status} {body}")
        run = stack.wait_success(dag_id, [body["dag_run_id"]], timeout=1800)[body["dag_run_id"]]
        took = dt.datetime.fromisoformat(run["end_date"]) - dt.datetime.fromisoformat(run["queued_at"])
        seconds.append(round(took.total_seconds(), 2))
    return seconds


def measure_scheduler(data: Path, master: str, work: Path, runs: int, records: int = 1000) -> dict:
    """``eo_scheduler_seconds``: what one run costs under a running scheduler, the way users run it
    (the Airflow of `make ui-up`: api-server, scheduler, dag-processor, SQLite): ``runs`` DAG runs
    triggered one after another through the REST API, each a batch of ``records`` records (one
    landing file), each from its queueing to its end as Airflow records them; the median."""
    from support.airflow_stack import ui_stack

    ds = backlog(data, runs, records)
    home = work / "airflow"
    cfg, env = bench_pipeline(ds, "sched", master, None, work / "pipeline", home, max_records=records)
    stack = ui_stack(work / "stack", env, home=home)
    stack.start(["sched"])
    try:
        seconds = time_scheduled_runs(stack, "sched", runs)
    finally:
        stack.stop()
    held = Protocol(cfg).committed_versions()
    if set(held.values()) != {runs}:
        raise RuntimeError(f"the tables hold batches {held} after {runs} runs")
    ordered = sorted(seconds)
    return {"runs": runs, "records_per_run": records, "run_seconds": seconds,
            "eo_scheduler_seconds": ordered[len(ordered) // 2]}


# -- report ----------------------------------------------------------------------------
CONTRACT_SIZE_KEYS = ("records", "files", "eo_seconds", "stage_seconds", "sss_seconds", "alo_seconds",
                      "eo_over_sss", "stage_over_sss", "driver_peak_rss_mib")
CONTRACT_SINGLE_KEYS = ("bytes", "records", "eo_seconds", "sss_seconds", "eo_over_sss")
CONTRACT_SCALARS = ("commit_large_over_small", "verify_seconds_per_1000_files", "fixed_overhead_seconds",
                    "plan_late_over_early", "kafka_stage_over_consume_floor", "merge_over_append", "catchup_over_sss")
# printed with them, beside the contract's keys
REPORTED_SCALARS = CONTRACT_SCALARS + ("kafka_read_over_consume_floor", "eo_scheduler_seconds", "delta_source_over_sss",
                                       "plan_1m_over_1k", "plan_task_over_sss_trigger")
# the landing zone rows printed (key, heading), local and on S3
LANDING_COLUMNS = (("files", "files"), ("plan_task_seconds", "plan s"), ("plan_max_rss_mib", "plan MiB"),
                   ("recover_task_seconds", "recover s"), ("recover_max_rss_mib", "recover MiB"),
                   ("plan_full_seconds", "plan full s"), ("sss_trigger_seconds", "sss trigger s"),
                   ("sss_latest_offset_seconds", "sss latestOffset s"), ("plan_task_over_sss_trigger", "plan/sss"))
LANDING_S3_COLUMNS = (("files", "objects"), ("plan_task_seconds", "plan s"), ("plan_max_rss_mib", "plan MiB"),
                      ("list_calls_per_plan", "LISTs/plan"), ("recover_task_seconds", "recover s"),
                      ("plan_full_seconds", "plan full s"), ("list_calls_per_plan_full", "LISTs/plan full"),
                      ("upload_seconds", "upload s"))


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if 0 < abs(v) < 0.1:  # a ratio or seconds far below one: its first digits
            return f"{v:.2g}"
        return f"{v:.2f}" if v < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(res: dict) -> str:
    cols = [("records", "records"), ("files", "files"), ("MB", None), ("eo s", "eo_seconds"),
            ("stage s", "stage_seconds"), ("sss s", "sss_seconds"), ("append s", "alo_seconds"),
            ("eo/sss", "eo_over_sss"), ("stage/sss", "stage_over_sss"), ("eo rec/s", "eo_records_per_s"),
            ("sss rec/s", "sss_records_per_s"), ("RSS MiB eo", "driver_peak_rss_mib"),
            ("sss", "sss_driver_peak_rss_mib"), ("append", "alo_driver_peak_rss_mib")]
    rows = list(res["sizes"])
    if res.get("single_file"):
        rows.append({**res["single_file"], "files": 1, "label": "single file"})
    cells = [[h for h, _ in cols]]
    for r in rows:
        cells.append([_fmt(r.get(k)) if k else _fmt(round(r["bytes"] / 1e6)) for _, k in cols])
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if res.get("single_file"):
        lines[-1] += "   (one landing file)"
    for r in rows:
        for k in sorted(k for k in r if k.endswith("_error")):
            lines.append(f"  {r['records']:,} records, {k}: {r[k]}")
    c = res.get("catchup")
    if c:
        lines += ["", f"catch-up: {c['batches']} batches of {c['records_per_batch']:,} records (seconds, seconds per batch)"]
        for key, label in (("eo", "this product, one DAG run"), ("sss", "Structured Streaming, maxFilesPerTrigger=1"),
                           ("eo_one_per_run", "this product, one batch per DAG run"),
                           ("eo_one_batch", "this product, all of it as one batch")):
            if f"{key}_seconds" in c:
                lines.append(f"  {label:<44} {_fmt(c.get(f'{key}_seconds')):>8}  {_fmt(c.get(f'{key}_seconds_per_batch')):>6}"
                             + (f"   {c[key + '_error']}" if c.get(f"{key}_error") else ""))
    for key, label, columns in (("landing_zone", "landing zone: a 10-file batch among N local files", LANDING_COLUMNS),
                                ("landing_zone_s3", "landing zone on the S3 server", LANDING_S3_COLUMNS)):
        if res.get(key):
            lines += ["", label] + _columns(res[key], columns)
            lines += [f"  {r['files']:,} files, {k}: {r[k]}" for r in res[key] for k in sorted(r) if k.endswith("_error")]
    lines.append("")
    for k in REPORTED_SCALARS:
        note = res.get(f"{k}_note")
        lines.append(f"{k:<32} {_fmt(res.get(k))}" + (f"   ({note})" if note else ""))
    return "\n".join(lines)


def _columns(rows: list[dict], columns) -> list[str]:
    cells = [[h for _, h in columns]] + [[_fmt(r.get(k)) for k, _ in columns] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    out = ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    out.insert(1, "  " + "  ".join("-" * w for w in widths))
    return out


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = res.get("catchup") or {}
    bars = [(label, c.get(f"{key}_seconds_per_batch")) for key, label in (
        ("eo", "eobatch,\none DAG run"), ("sss", "Structured\nStreaming"), ("eo_one_per_run", "eobatch, one\nbatch per run"),
        ("eo_one_batch", "eobatch,\nas one batch"))]
    bars = [(label, v) for label, v in bars if v is not None]
    if bars:
        fig, (ax, cx) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
        cx.bar([b[0] for b in bars], [b[1] for b in bars], color=["C0", "C2", "C7", "C1"][:len(bars)])
        cx.set_ylabel("seconds per batch")
        cx.set_title(f"catch-up: {c['batches']} batches of {c['records_per_batch']:,} records", fontsize=10)
        cx.tick_params(axis="x", labelsize=8)
    else:
        fig, ax = plt.subplots(figsize=(8, 5))
    series = [("eo_seconds", "this product, whole DAG run", "o-"), ("stage_seconds", "this product, stage job alone", "s--"),
              ("sss_seconds", "Structured Streaming (availableNow) → Delta", "^-"),
              ("alo_seconds", "plain delta-spark append", "v-")]
    sizes = res["sizes"]
    for key, label, style in series:
        pts = [(r["records"], r[key]) for r in sizes if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts), style, label=label)
    sf = res.get("single_file")
    if sf:
        for key, label, marker in (("eo_seconds", "this product, single file", "o"),
                                   ("sss_seconds", "Structured Streaming, single file", "^")):
            if sf.get(key) is not None:
                ax.scatter([sf["records"]], [sf[key]], marker=marker, facecolors="none", edgecolors="k", s=80,
                           label=f"{label} ({sf['bytes'] / 2**30:.1f} GiB)")
    for r in sizes:
        if r.get("eo_seconds") is None and r.get("eo_error"):
            ax.annotate("product failed", (r["records"], r.get("sss_seconds") or 1), textcoords="offset points",
                        xytext=(0, 12), ha="center", color="red", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("records (one batch)")
    ax.set_ylabel("seconds")
    env = res.get("environment", {})
    ax.set_title(f"make bench: master {env.get('master')}, driver memory {env.get('driver_memory')}, "
                 f"{env.get('cpus')} CPUs", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- main ------------------------------------------------------------------------------
def _env(name: str, default: str) -> str:
    v = os.environ.get(name, "")
    return v if v.strip() else default


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=_env("SIZES", "1000,1000000,5000000"))
    ap.add_argument("--single-file-gb", type=float, default=float(_env("SINGLE_FILE_GB", "1")))
    ap.add_argument("--master", default=_env("MASTER", "local[*]"))
    ap.add_argument("--plan-late-batches", type=int, default=int(_env("PLAN_LATE_BATCHES", "100000")))
    ap.add_argument("--kafka-records", type=int, default=int(_env("KAFKA_RECORDS", "1000000")))
    ap.add_argument("--merge-records", type=int, default=int(_env("MERGE_RECORDS", "1000000")),
                    help="records of the measured merge batch, and of the table's first batch (0: skipped)")
    ap.add_argument("--delta-records", type=int, default=int(_env("DELTA_RECORDS", "1000000")),
                    help="records of an upstream table read by one batch of a kind: delta pipeline, against "
                         "Structured Streaming reading it as a Delta stream (0: skipped)")
    ap.add_argument("--driver-memory", default=_env("DRIVER_MEMORY", "") or None,
                    help="the pipeline's spark.driver_memory, and the peers' (default: Spark's own, 1g)")
    ap.add_argument("--catchup", default=_env("CATCHUP", "10x500000"),
                    help="the backlog of the catch-up case: <batches>x<records per batch> (0: skipped)")
    ap.add_argument("--catchup-one-per-run", type=int, default=int(_env("CATCHUP_ONE_PER_RUN", "1")),
                    help="also drain it one batch per DAG run (1) or not (0)")
    ap.add_argument("--scheduler-runs", type=int, default=int(_env("SCHEDULER_RUNS", "3")),
                    help="DAG runs triggered through the REST API of a running Airflow (0: skipped)")
    ap.add_argument("--landing-sizes", default=_env("LANDING_SIZES", "1000,1000000"),
                    help="landing zones of that many files, all consumed but 10: plan and recover task (0: skipped)")
    ap.add_argument("--landing-s3-sizes", default=_env("LANDING_S3_SIZES", "1000,10000"),
                    help="the same on the S3 server, objects uploaded first (0: skipped)")
    ap.add_argument("--landing-sss-sizes", default=_env("LANDING_SSS_SIZES", ""),
                    help="landing sizes at which Structured Streaming's file source runs too (default: every "
                         "landing size; 0: none)")
    ap.add_argument("--landing-sss-real-up-to", type=int, default=int(_env("LANDING_SSS_REAL_UP_TO", "10000")),
                    help="up to this many files the peer also runs from a checkpoint its own query built")
    ap.add_argument("--data-dir", default=_env("BENCH_DATA_DIR", str(REPO / ".bench" / "data")))
    ap.add_argument("--out", default=str(REPO / ".bench" / "results.json"))
    ap.add_argument("--plot", default=None, help="PNG path (default: bench.png beside --out)")
    ap.add_argument("--keep", action="store_true", help="keep the tables and logs of the run")
    args = ap.parse_args(argv)
    try:
        args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--sizes / SIZES: comma-separated record counts, got {args.sizes!r}")
    if not args.sizes or min(args.sizes) < 1:
        ap.error("--sizes / SIZES: at least one positive record count")
    if args.plan_late_batches < 11:
        ap.error("--plan-late-batches / PLAN_LATE_BATCHES must be more than 10")
    for opt in ("landing_sizes", "landing_s3_sizes", "landing_sss_sizes"):
        text = getattr(args, opt)
        if opt == "landing_sss_sizes" and not text.strip():
            args.landing_sss_sizes = args.landing_sizes
            continue
        try:
            setattr(args, opt, sorted({int(s.replace("_", "")) for s in text.split(",") if s.strip()} - {0}))
        except ValueError:
            ap.error(f"--{opt.replace('_', '-')} / {opt.upper()}: comma-separated file counts (0: skipped), got {text!r}")
        if any(n <= 10 for n in getattr(args, opt)):
            ap.error(f"--{opt.replace('_', '-')} / {opt.upper()}: more than 10 files (10 are the new batch)")
    return args


def _guarded(res: dict, key: str, fn) -> dict | None:
    """Run one figure; a failure is recorded as ``<key>_note`` and the bench goes on."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        _log(f"{key} failed: {e}")
        traceback.print_exc()
        res[f"{key}_note"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
        return None


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = Path(args.plot) if args.plot else out.with_name("bench.png")
    data = Path(args.data_dir)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=out.parent))
    t0 = time.time()
    res: dict = {"sizes": [], "single_file": None}
    res["environment"] = {
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "master": args.master, "driver_memory": args.driver_memory or "Spark default (1g)",
        "cpus": os.cpu_count(), "sizes": args.sizes, "single_file_gb": args.single_file_gb,
        "plan_late_batches": args.plan_late_batches, "kafka_records": args.kafka_records,
        "merge_records": args.merge_records, "catchup": args.catchup, "scheduler_runs": args.scheduler_runs,
        "delta_records": args.delta_records, "landing_sizes": args.landing_sizes,
        "landing_s3_sizes": args.landing_s3_sizes, "landing_sss_sizes": args.landing_sss_sizes,
        "stage_seconds": "wall time of the stage task's spark-submit process (fork to exit, from /proc)",
        "peers_seconds": "wall time of each peer's spark-submit process",
        "driver_peak_rss_mib": "VmHWM of the Spark driver JVM (org.apache.spark.deploy.SparkSubmit)",
    }
    try:
        for n in args.sizes:
            _log(f"data set of {n:,} records (cached in {data})")
            ds = dataset(data, n)
            size_work = work / f"size-{n}"
            home = airflow_home(size_work)
            res["sizes"].append(measure_size(ds, args.master, args.driver_memory, size_work, home))
            if not args.keep:
                shutil.rmtree(size_work, ignore_errors=True)
        if args.single_file_gb > 0:
            _log(f"single landing file of {args.single_file_gb:g} GiB (cached in {data})")
            ds = single_file(data, args.single_file_gb)
            size_work = work / "single"
            home = airflow_home(size_work)
            row = measure_size(ds, args.master, args.driver_memory, size_work, home, peers=("sss",))
            res["single_file"] = {k: row.get(k) for k in CONTRACT_SINGLE_KEYS}
            res["single_file"].update({k: v for k, v in row.items() if k not in CONTRACT_SINGLE_KEYS})
            if not args.keep:
                shutil.rmtree(size_work, ignore_errors=True)
        else:
            res["single_file_note"] = "skipped: SINGLE_FILE_GB=0"

        if args.catchup not in ("", "0"):
            batches, per = (int(x) for x in args.catchup.lower().split("x"))
            _log(f"catch-up: a backlog of {batches} batches of {per:,} records (cached in {data})")
            ds = backlog(data, batches, per)
            size_work = work / "catchup"
            home = airflow_home(size_work)
            res["catchup"] = _guarded(res, "catchup", lambda: measure_catchup(
                ds, args.master, args.driver_memory, size_work, home, one_per_run=bool(args.catchup_one_per_run)))
            res["catchup_over_sss"] = (res["catchup"] or {}).get("catchup_over_sss")
            if not args.keep:
                shutil.rmtree(size_work, ignore_errors=True)
        else:
            res["catchup"] = res["catchup_over_sss"] = None
            res["catchup_over_sss_note"] = "skipped: CATCHUP=0"

        if args.scheduler_runs > 0:
            _log(f"under a running scheduler: {args.scheduler_runs} DAG runs triggered through the REST API")
            sched = _guarded(res, "eo_scheduler_seconds", lambda: measure_scheduler(
                data, args.master, work / "scheduler", args.scheduler_runs))
            res["eo_scheduler_seconds"] = sched["eo_scheduler_seconds"] if sched else None
            res["scheduler_details"] = sched
            if not args.keep:
                shutil.rmtree(work / "scheduler", ignore_errors=True)
        else:
            res["eo_scheduler_seconds"] = None
            res["eo_scheduler_seconds_note"] = "skipped: SCHEDULER_RUNS=0"

        _log("protocol costs: commit, verify, fixed overhead")
        figs = _guarded(res, "commit_large_over_small",
                        lambda: protocol_costs.commit_verify_figures(work / "protocol"))
        for k in ("commit_large_over_small", "verify_seconds_per_1000_files", "fixed_overhead_seconds"):
            res[k] = figs.get(k) if figs else None
        res["protocol_details"] = figs

        _log(f"plan at batch {args.plan_late_batches:,} of a synthetic ledger over plan at batch 10")
        plan = _guarded(res, "plan_late_over_early",
                        lambda: protocol_costs.plan_figures(work / "plan", late=args.plan_late_batches))
        res["plan_late_over_early"] = plan["plan_late_over_early"] if plan else None
        res["plan_details"] = plan
        shutil.rmtree(work / "plan", ignore_errors=True)

        if args.kafka_records > 0:
            _log(f"Kafka: stage of {args.kafka_records:,} records over the raw consume floor")
            kafka = _guarded(res, "kafka_stage_over_consume_floor",
                             lambda: kafka_batch.measure(args.kafka_records, master=args.master))
        else:
            kafka = None
            res["kafka_stage_over_consume_floor_note"] = "skipped: KAFKA_RECORDS=0"
        res["kafka_stage_over_consume_floor"] = kafka["stage_over_consume_floor"] if kafka else None
        res["kafka_read_over_consume_floor"] = kafka.get("read_over_consume_floor") if kafka else None
        res["kafka_details"] = kafka

        if args.merge_records > 0:
            _log(f"merge sink: a batch of {args.merge_records:,} changes upserted into {args.merge_records:,} keys, "
                 f"against the same batch appended")
            merge = _guarded(res, "merge_over_append",
                             lambda: merge_batch.measure(args.merge_records, args.master, work / "merge"))
        else:
            merge = None
            res["merge_over_append_note"] = "skipped: MERGE_RECORDS=0"
        res["merge_over_append"] = merge["merge_over_append"] if merge else None
        res["merge_details"] = merge

        if args.delta_records > 0:
            _log(f"delta source: one batch reading {args.delta_records:,} records of another pipeline's table, "
                 f"against Structured Streaming reading it as a Delta stream")
            delta = _guarded(res, "delta_source_over_sss", lambda: delta_source_batch.measure(
                args.delta_records, args.master, work / "delta", driver_memory=args.driver_memory))
        else:
            delta = None
            res["delta_source_over_sss_note"] = "skipped: DELTA_RECORDS=0"
        res["delta_source_over_sss"] = delta["delta_source_over_sss"] if delta else None
        res["delta_source_details"] = delta

        landing_figures(res, args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        res["environment"]["bench_seconds"] = round(time.time() - t0)
        with open(out, "w") as f:
            json.dump(_ordered(res), f, indent=1)
    try:
        plot(res, png)
    except Exception as e:  # noqa: BLE001 - the figures are written already
        _log(f"plot failed: {e}")
    print(table(res))
    print(f"\n(written to {out}; plot {png}; work folder {work}{'' if args.keep else ', removed'})")
    return 0


def landing_figures(res: dict, args, work: Path) -> None:
    """``landing_zone``, ``plan_1m_over_1k``, ``plan_task_over_sss_trigger`` and ``landing_zone_s3``
    (``landing_zone.py``), each guarded: a failure is its ``_note`` and the bench goes on."""
    if args.landing_sizes:
        _log(f"landing zones of {', '.join(f'{n:,}' for n in args.landing_sizes)} files, all consumed but 10: plan "
             f"and recover task; Structured Streaming at {args.landing_sss_sizes or 'no size'}")
        lz = _guarded(res, "plan_1m_over_1k", lambda: landing_zone.figures(
            work / "landing", args.landing_sizes, sss_sizes=args.landing_sss_sizes, master=args.master,
            sss_real_up_to=args.landing_sss_real_up_to, driver_memory=args.driver_memory))
        shutil.rmtree(work / "landing", ignore_errors=True)
    else:
        lz = None
        res["plan_1m_over_1k_note"] = "skipped: LANDING_SIZES=0"
    res["landing_zone"] = (lz or {}).get("landing_zone")
    res["plan_1m_over_1k"] = (lz or {}).get("plan_1m_over_1k")
    if lz and res["plan_1m_over_1k"] is None:
        res["plan_1m_over_1k_note"] = "one landing size only"
    elif lz:
        small, big = lz["plan_1m_over_1k_sizes"]
        res["plan_1m_over_1k_note"] = f"plan task seconds at {big:,} files over {small:,}"
    res["plan_task_over_sss_trigger"] = (lz or {}).get("plan_task_over_sss_trigger")
    if lz and res["plan_task_over_sss_trigger"] is not None:
        res["plan_task_over_sss_trigger_note"] = f"at {lz['plan_task_over_sss_trigger_files']:,} files"
    elif lz:
        errors = [r["sss_error"] for r in lz["landing_zone"] if r.get("sss_error")]
        res["plan_task_over_sss_trigger_note"] = errors[-1][:300] if errors else "skipped: LANDING_SSS_SIZES=0"
    if args.landing_s3_sizes:
        _log(f"landing zones on the S3 server: {', '.join(f'{n:,}' for n in args.landing_s3_sizes)} objects")
        s3 = _guarded(res, "landing_zone_s3", lambda: landing_zone.s3_figures(work / "landing-s3", args.landing_s3_sizes))
        shutil.rmtree(work / "landing-s3", ignore_errors=True)
        res["landing_zone_s3"] = (s3 or {}).get("landing_zone_s3")
    else:
        res["landing_zone_s3"] = None
        res["landing_zone_s3_note"] = "skipped: LANDING_S3_SIZES=0"


def _ordered(res: dict) -> dict:
    """The contract's keys first, in its order, then the rest."""
    first = ["sizes", "single_file", *CONTRACT_SCALARS]
    sizes = [{**{k: r.get(k) for k in CONTRACT_SIZE_KEYS}, **r} for r in res["sizes"]]
    return {**{k: res.get(k) for k in first}, **res, "sizes": sizes}


if __name__ == "__main__":
    sys.exit(main())
