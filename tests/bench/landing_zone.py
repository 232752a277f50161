"""Landing zones of any size (issue 44, part of `make bench`): what a plan task and a recover task
cost for a 10-file batch when the landing folder holds N files, all consumed but the newest 10.

    .venv/bin/python tests/bench/landing_zone.py [--sizes 1000,1000000] [--new 10] [--per-batch 1000]
        [--full-up-to 100000] [--work DIR] [--out FILE.json]

The landing zone is laid out as landing zones usually are, ``date=YYYY-MM-DD/hour=HH/part-<n>.jsonl``
(1000 one-record files an hour folder), so names grow in byte order: ``source.discovery: lexical``.
The ledger is synthetic, written as plain files at the paths of ``formats.Layout`` (like
``protocol_costs``): batches of ``--per-batch`` consumed files each (plan, PREPARED and COMMITTED
records; each plan's range carries its ``listed_after`` position and a full listing made when the
bench starts, so no full listing is due), both Delta tables holding the txn of the newest batch.
One untimed plan task per size comes first: it reads every record once and writes the ledger
checkpoint, as the plan of a pipeline of that age would have; what is timed is the plan after it.

Each figure is measured in a process of its own (``--child``), after its imports, so ``max RSS``
is the process's peak while it did that task and nothing else:

* ``plan_task_seconds``: what the plan task does after Airflow starts it: ``BatchRun.plan`` (the
  discovery, the lookups of the consumed-file index, the plan record) and the backlog count of
  ``_after_plan`` through the plan's own listing. The record it writes is removed after, so each
  repetition plans the same batch; the median of ``--repeat``.
* ``recover_task_seconds``: ``BatchRun.recover`` of a run that finds the newest batch committed.
* ``plan_full_seconds``: the plan task with ``source.discovery: full`` (every plan lists the whole
  folder), up to ``--full-up-to`` files: the cost lexical discovery removes.
* ``plan_1m_over_1k`` (when both sizes ran): plan task seconds at the largest size over the smallest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PER_FOLDER = 1000  # files an hour folder
BASE_DAY = dt.date(2026, 1, 1)


def rel_path(i: int) -> str:
    """The ``i``-th landing file's path under the landing folder (byte order = landing order)."""
    folder = i // PER_FOLDER
    day = BASE_DAY + dt.timedelta(days=folder // 24)
    return f"date={day.isoformat()}/hour={folder % 24:02d}/part-{i:09d}.jsonl"


def _put(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def build(root: Path, name: str, files: int, new: int, per_batch: int, discovery: str = "lexical"):
    """The landing folder of ``files`` files and a ledger that consumed all but the newest ``new``."""
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "plugins")]
    from protocol_costs import QSCHEMA, SCHEMA

    from eobatch.config.schemas import schema_to_b64
    from eobatch.core.formats import QUARANTINE, SINK, BatchPlan, CommittedBatch, PreparedBatch
    from eobatch.protocol import Protocol
    from eobatch.sinks.delta import DeltaParticipant
    from support.harness import write_pipeline

    p = write_pipeline(root, name=name, max_records=1_000_000)
    text = p.yaml_path.read_text().replace("  max_records_per_batch:", f"  discovery: {discovery}\n  max_records_per_batch:")
    p.yaml_path.write_text(text)
    from eobatch.config.loader import load_pipeline
    cfg = load_pipeline(str(p.yaml_path))
    lay = Protocol(cfg).layout
    landing = str(p.landing)
    body = b'{"order_id":"x"}\n'
    entries = []
    for i in range(files):
        path = f"{landing}/{rel_path(i)}"
        _put(path, body)
        if i < files - new:
            st = os.stat(path)
            entries.append({"path": path, "size": st.st_size, "mtime_ms": st.st_mtime_ns // 1_000_000, "records": 1})
    fp, at = cfg.fingerprint(), "2026-01-01T00:00:00.000+00:00"
    now_ms = int(time.time() * 1000)
    schemas = {SINK: schema_to_b64(SCHEMA), QUARANTINE: schema_to_b64(QSCHEMA)}
    batches = 0
    for start in range(0, len(entries), per_batch):
        chunk = entries[start:start + per_batch]
        batches += 1
        b, attempt = batches, f"t1-{batches:012x}"
        rng: dict = {"files": chunk}
        if discovery == "lexical":
            rng |= {"listed_after": chunk[-1]["path"], "full_listing_ms": now_ms}
        _put(lay.plan(b), BatchPlan(pipeline=cfg.name, batch_id=b, source_kind="files", rows_in=len(chunk),
                                    config_fingerprint=fp, planned_at=at, range=rng).to_json())
        add = {"path": f"{lay.attempt_staging_rel(b, attempt)}/part-00000-0.snappy.parquet", "size": 1000,
               "partition_values": {}, "modification_time": 1_767_225_600_000, "stats": "{}"}
        _put(lay.prepared(b), PreparedBatch(
            pipeline=cfg.name, batch_id=b, attempt=attempt, adds={SINK: [add], QUARANTINE: []},
            arrow_schema=schemas, partition_by={SINK: [], QUARANTINE: []}, fingerprint=fp, rows_in=len(chunk),
            rows_valid=len(chunk), rows_quarantined=0, rows_published=len(chunk), bytes=1000, files=1,
            prepared_at=at, verify_seconds=0.01, stage_seconds=1.0).to_json())
        _put(lay.committed(b), CommittedBatch(pipeline=cfg.name, batch_id=b, fingerprint=fp,
                                              delta_versions={SINK: 1, QUARANTINE: 1}, committed_at=at,
                                              commit_seconds=0.05).to_json())
    for part, table, schema in ((SINK, lay.sink_table, SCHEMA), (QUARANTINE, lay.quarantine_table, QSCHEMA)):
        DeltaParticipant(part, table).commit(cfg.app_id, batches, [], schema, [], {"eo.bench": "synthetic"},
                                             expected_prev=0)
    return p.yaml_path, batches


# -- the measured tasks, each in a process of its own ---------------------------------------------
def child(task: str, pipeline_file: str) -> dict:
    sys.path[:0] = [str(REPO / "plugins")]
    from eobatch.config.loader import load_pipeline
    from eobatch.protocol import Protocol
    from eobatch.protocol.backlog import backlog
    from eobatch.protocol.batch_run import BatchRun

    cfg = load_pipeline(pipeline_file)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    out: dict = {}
    if task == "plan":
        proto = Protocol(cfg)
        report = BatchRun(proto, run_id="bench").plan(None)
        left = backlog(proto, count_records=False, planner=proto.last_planner)
        out["batches"] = report.value
        out["backlog_files"] = left["files"]
        out["backlog_error"] = left["error"]
    elif task == "recover":
        BatchRun(Protocol(cfg), run_id="bench").recover()
    else:
        raise SystemExit(f"unknown task {task!r}")
    out["seconds"] = time.perf_counter() - t
    out["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["rss_at_start_mib"] = rss0 / 1024
    return out


def run_child(task: str, pipeline_file: Path) -> dict:
    got = subprocess.run([sys.executable, __file__, "--child", task, str(pipeline_file)], capture_output=True,
                         text=True, cwd=REPO)
    if got.returncode != 0:
        raise RuntimeError(f"{task} failed: {got.stderr[-3000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def plan_task(pipeline_file: Path, repeat: int) -> list[dict]:
    """``repeat`` plan tasks of the same batch (each one's record removed after it)."""
    sys.path[:0] = [str(REPO / "plugins")]
    from eobatch.config.loader import load_pipeline
    from eobatch.protocol import Protocol

    lay = Protocol(load_pipeline(str(pipeline_file))).layout
    out = []
    for _ in range(repeat):
        got = run_child("plan", pipeline_file)
        assert got["batches"], f"the plan task planned nothing: {got}"
        for b in got["batches"]:
            os.remove(lay.plan(b))
        out.append(got)
    return out


def measure(work: Path, files: int, new: int, per_batch: int, repeat: int, full: bool) -> dict:
    row: dict = {"files": files, "new_files": new}
    t = time.perf_counter()
    yaml, batches = build(work / f"lexical-{files}", "lz", files, new, per_batch)
    row["build_seconds"] = round(time.perf_counter() - t, 1)
    row["ledger_batches"] = batches
    warm = plan_task(yaml, 1)[0]  # reads every record once, writes the checkpoint
    row["first_plan_task_seconds"] = round(warm["seconds"], 3)
    runs = plan_task(yaml, repeat)
    assert all(r["batches"] == warm["batches"] for r in runs)
    row["plan_task_seconds"] = round(statistics.median(r["seconds"] for r in runs), 4)
    row["plan_max_rss_mib"] = round(max(r["max_rss_mib"] for r in runs), 1)
    rec = [run_child("recover", yaml) for _ in range(repeat)]
    row["recover_task_seconds"] = round(statistics.median(r["seconds"] for r in rec), 4)
    row["recover_max_rss_mib"] = round(max(r["max_rss_mib"] for r in rec), 1)
    if full:
        yaml_f, _ = build(work / f"full-{files}", "lzfull", files, new, per_batch, discovery="full")
        plan_task(yaml_f, 1)
        runs_f = plan_task(yaml_f, 1)
        row["plan_full_seconds"] = round(runs_f[0]["seconds"], 3)
        row["plan_full_max_rss_mib"] = round(runs_f[0]["max_rss_mib"], 1)
    return row


def figures(work: Path, sizes: list[int], new: int = 10, per_batch: int = 1000, repeat: int = 3,
            full_up_to: int = 100_000, keep: bool = False) -> dict:
    rows = []
    for n in sizes:
        print(f"landing zone of {n:,} files ({new} new)", file=sys.stderr, flush=True)
        rows.append(measure(work, n, new, per_batch, repeat, full=n <= full_up_to))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        if not keep:
            for d in work.iterdir():
                shutil.rmtree(d, ignore_errors=True)
    res: dict = {"landing_zone": rows}
    if len(rows) > 1:
        small, big = rows[0], rows[-1]
        res["plan_1m_over_1k"] = round(big["plan_task_seconds"] / small["plan_task_seconds"], 3)
        res["plan_1m_over_1k_sizes"] = [small["files"], big["files"]]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("TASK", "PIPELINE_FILE"), help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1000,1000000")
    ap.add_argument("--new", type=int, default=10)
    ap.add_argument("--per-batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full-up-to", type=int, default=100_000)
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="landing-zone-"))
    work.mkdir(parents=True, exist_ok=True)
    res = figures(work, sizes, args.new, args.per_batch, args.repeat, args.full_up_to, args.keep)
    text = json.dumps(res, indent=2)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    if not args.keep and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
