"""Landing zones of any size (issue 44, part of `make bench`): what a plan task and a recover task
cost for a 10-file batch when the landing folder holds N files, all consumed but the newest 10, on
the local disk and on the S3 server, against Structured Streaming's file source on the same folder.

    .venv/bin/python tests/bench/landing_zone.py [--sizes 1000,1000000] [--s3-sizes 1000,10000]
        [--sss-sizes 1000,1000000] [--sss-real-up-to 10000] [--new 10] [--per-batch 1000]
        [--full-up-to 100000] [--s3-put-up-to 100000] [--repeat 3] [--master 'local[*]'] [--driver-memory 1g] [--work DIR] [--out FILE.json]

(``--s3-sizes 0`` or ``--sss-sizes 0`` skips that part; ``--sss-sizes`` defaults to ``--sizes``.)

**The landing zone** is laid out as landing zones usually are, ``date=YYYY-MM-DD/hour=HH/part-<n>.jsonl``
(1000 one-record files an hour folder), so names grow in byte order: ``source.discovery: lexical``.
**The ledger is synthetic**, written as plain files at the paths of ``formats.Layout`` (like
``protocol_costs``): batches of ``--per-batch`` consumed files each (plan, PREPARED and COMMITTED
records; each plan's range carries its ``listed_after`` position and a full listing made when the
bench starts, so no full listing is due), both Delta tables holding the txn of the newest batch.
One untimed plan task per size comes first: it reads every record once and writes the ledger
checkpoint, as the plan of a pipeline of that age would have; what is timed is the plan after it.

Each figure is measured in a process of its own (``--child``), after its imports, so ``max RSS``
is the process's peak (``VmHWM``: its imports and that task, nothing else):

* ``plan_task_seconds``: what the plan task does after Airflow starts it: ``BatchRun.plan`` (the
  discovery, the lookups of the consumed-file index, the plan record) and the backlog count of
  ``_after_plan`` through the plan's own listing. The record it writes is removed after, so each
  repetition plans the same batch; the median of ``--repeat``. ``planned_files``: the files its
  plan holds, checked to be exactly the newest ``--new`` ones.
* ``recover_task_seconds``: what the recover task does outside Airflow's own calls
  (``RecoverOperator``): the ledger's newest batch and its plan, the tables' committed versions,
  ``BatchRun.recover`` and the stuck detector, for a run that finds the newest batch committed
  (checked: ``recover_found`` is ``{latest, committed, pending}`` of the ledger).
* ``plan_full_seconds``: the plan task with ``source.discovery: full`` (every plan lists the whole
  folder) on the same landing files, up to ``--full-up-to`` files: the cost lexical discovery removes.
* ``plan_1m_over_1k`` (when two sizes or more ran): plan task seconds at the largest size over the
  smallest.

**On the S3 server** (``s3``: S3Proxy on loopback, ``tests/support/services.py``; a bucket of its
own): the same layout uploaded with boto3 (32 threads: ``upload_seconds``), a pipeline whose
``source.path`` is ``s3a://<bucket>/lz-<N>/landing`` with its tables (and so its ledger) on S3
under ``s3a://<bucket>/lz-<N>/lake``, as a user on S3 writes it; the synthetic ledger written
through the product's ``storage_for(...)`` (``write_atomic`` is one PUT there). Besides the
seconds and max RSS, ``list_calls_per_plan``: the ListObjectsV2 calls one plan task makes, counted
inside the child by wrapping botocore's ``BaseClient._make_api_call`` (every boto3 client of the
product, ``eobatch.storage.s3conf.boto3_client``, calls S3 through it); ``s3_calls_per_plan`` every
boto3 call by operation (the ledger reads are GETs and HEADs). Delta-rs reads the two tables' logs
with its own (Rust) client: those requests are not counted. With lexical discovery a plan lists
after its position (a handful of calls: the listing after the position and the replay folder; the
folder's own check only when they find nothing); with ``discovery: full`` (``list_calls_per_plan_full``, up to ``--full-up-to``)
⌈N/1000⌉ and the same handful. Uploading is the cost of this part: S3Proxy took about
``upload_seconds`` / N per object here (see the figures), so 1,000,000 objects would take about an
hour on the 2-core machine; and S3Proxy's filesystem backend walks the bucket's folder for every
ListObjectsV2 (about 45 µs an object, whatever ``StartAfter`` and ``MaxKeys`` say), so its times
grow with N where S3's do not: the calls per plan are the figure that carries over. Above
``--s3-put-up-to`` objects (100,000) only the first object and
the ``--new`` newest are PUT; the others are written into the server's filesystem backend as its
PUT of the first left it (the object's file at its key, the same bytes and metadata attributes),
and the listing that follows checks that the server serves all N (``landed_by`` says which).

**The peer** (``sss``, on the same local folder): Spark Structured Streaming's file source, one
``trigger(availableNow=True)`` of ``peer_sss.py`` (same JSON schema, Delta sink) whose checkpoint
already holds the N - 10 consumed files, so that it finds the 10 new ones, as the plan does.
``sss_trigger_seconds``: the query in the driver, from ``start()`` (the file source restores the
files it has seen from its checkpoint) to the end of ``awaitTermination()`` (the listing, the read
of the 10 files, the Delta commit); ``sss_latest_offset_seconds``: Spark's own ``latestOffset``
phase of that micro-batch (where it finds what is new); ``sss_process_seconds`` the whole
spark-submit; ``sss_rows``: the rows that micro-batch read (checked: 10).
``plan_task_over_sss_trigger``: ``plan_task_seconds`` over ``sss_trigger_seconds`` of the same size.
**The peer's checkpoint is synthetic, like our ledger**: Structured Streaming over N tiny files
costs minutes at 100k (see ``sss_real_checkpoint_build_seconds``), so the checkpoint is made by a
real query over one file copied into a folder of the same layout (its metadata, offsets, commits
and a Delta table the query's id has written), then the file source's log
(``sources/0``: ``FileStreamSourceLog``, a ``CompactibleFileStreamLog`` of ``FileEntry`` lines
``{"path", "timestamp", "batchId"}`` under a ``v1`` line; every 10th batch a ``<id>.compact`` file
holding every entry before it) is written for the N - 10 consumed files, ``--per-batch`` files a
micro-batch, each with its path as Spark writes it and its modification time, the latest
compaction and the batches after it; ``offsets/`` and ``commits/`` get the records of the last two
batches (a restarted query reads the offsets of the one before the last as its committed ones). Up
to ``--sss-real-up-to`` files the peer is also measured on a checkpoint its own queries built
(a query over the N - 10 files, then the 10 new ones landed): ``sss_real_trigger_seconds``, which
checks the synthetic one.
"""

from __future__ import annotations

import argparse
import collections
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
PER_FOLDER = 1000  # files an hour folder
BASE_DAY = dt.date(2026, 1, 1)
BODY = b'{"order_id":"x"}\n'
S3_BUCKET = "landing-bench"
UPLOAD_THREADS = 32
SSS_COMPACT_INTERVAL = 10  # spark.sql.streaming.fileSource.log.compactInterval's default


def _paths() -> None:
    for p in (REPO / "plugins", REPO / "tests", BENCH):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))


def rel_path(i: int) -> str:
    """The ``i``-th landing file's path under the landing folder (byte order = landing order)."""
    folder = i // PER_FOLDER
    day = BASE_DAY + dt.timedelta(days=folder // 24)
    return f"date={day.isoformat()}/hour={folder % 24:02d}/part-{i:09d}.jsonl"


def _put(path: str, data: bytes) -> None:
    """A plain write (no fsync, no put-if-absent: see ``protocol_costs``); S3 through the product's Storage."""
    if path.startswith("s3a://"):
        from eobatch.storage.fs import storage_for

        storage_for(path).write_atomic(path, data)
        return
    from protocol_costs import _put as put_local  # tests/bench is the script's folder

    put_local(path, data)


def _remove(path: str) -> None:
    from eobatch.storage.fs import storage_for

    storage_for(path).delete(path)


# -- the landing zone ------------------------------------------------------------------------------
def land_local(landing: Path, files: int) -> list[dict]:
    """``files`` one-record files under ``landing``: each one's {path, size, mtime_ms}, in landing order."""
    out = []
    for i in range(files):
        path = f"{landing}/{rel_path(i)}"
        _put(path, BODY)
        st = os.stat(path)
        out.append({"path": path, "size": st.st_size, "mtime_ms": st.st_mtime_ns // 1_000_000})
    return out


def land_s3(client, bucket: str, prefix: str, files: int, threads: int = UPLOAD_THREADS,
            server_data: Path | None = None, new: int = 0) -> list[dict]:
    """The same files as objects under ``s3a://bucket/prefix`` (PUTs from ``threads`` threads), then
    one listing for their sizes and LastModified, the planner's.

    ``server_data`` (the S3 server's data folder): the first object and the newest ``new`` are PUT,
    every other one is written into the server's folder as the PUT of the first left it (the same
    bytes, the same metadata attributes: ``_seed_like``), an hour's upload in a minute at 1,000,000."""
    def put(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            client.put_object(Bucket=bucket, Key=f"{prefix}/{rel_path(i)}", Body=BODY)

    todo = (0, files)
    if server_data is not None and files - new > 1:
        put(0, 1)
        _seed_like(server_data / bucket / prefix, range(1, files - new))
        todo = (files - new, files)
    step = max(1, -(-(todo[1] - todo[0]) // (threads * 8)))
    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(put, lo, min(todo[1], lo + step)) for lo in range(*todo, step)]:
            f.result()
    from eobatch.storage.fs import storage_for

    # the product's own listing (its S3 settings are the server's: ``s3_figures``), so the ledger records
    # what the planner lists; not boto3's paginator, whose continuation token S3Proxy reads back as a key
    root = f"s3a://{bucket}/{prefix}"
    out = [{"path": f.path, "size": f.size, "mtime_ms": f.mtime_ms} for f in storage_for(root).list_files(root)]
    out.sort(key=lambda e: str(e["path"]))
    if len(out) != files:
        raise RuntimeError(f"s3a://{bucket}/{prefix}: {len(out)} objects listed after {files} uploads")
    return out


def _seed_like(folder: Path, ids: range) -> None:
    """Objects ``ids`` written straight into the S3 server's filesystem backend (S3Proxy keeps an
    object as a file at its key, its metadata in extended attributes), each a copy of object 0,
    which a real PUT made: the server then lists, HEADs and GETs them as objects it stored."""
    first = folder / rel_path(0)
    attrs = {a: os.getxattr(first, a) for a in os.listxattr(first)}
    if not attrs:
        raise RuntimeError(f"{first}: no metadata attributes (not S3Proxy's filesystem backend?)")
    made: set[Path] = set()
    for i in ids:
        path = folder / rel_path(i)
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_bytes(BODY)
        for a, v in attrs.items():
            os.setxattr(path, a, v)


def pipeline(root: Path, name: str, discovery: str, landing: str | None = None, lake: str | None = None) -> Path:
    """A files pipeline under ``root`` (``support.harness.write_pipeline``) with ``source.discovery``;
    ``landing``/``lake``: its landing folder and the folder of its tables instead (e.g. ``s3a://``)."""
    _paths()
    from support.harness import write_pipeline

    p = write_pipeline(root, name=name, max_records=1_000_000)
    text = p.yaml_path.read_text()
    moves = {"  max_records_per_batch:": f"  discovery: {discovery}\n  max_records_per_batch:"}
    if landing:
        moves[f"  path: {p.landing}\n"] = f"  path: {landing}\n"
    if lake:
        moves |= {f"table: {p.sink}\n": f"table: {lake}/{name}\n",
                  f"table: {p.quarantine}\n": f"table: {lake}/{name}_bad\n"}
    for old, new in moves.items():
        assert old in text, f"harness.write_pipeline changed its layout ({old.strip()!r})"
        text = text.replace(old, new, 1)
    p.yaml_path.write_text(text)
    return p.yaml_path


def write_ledger(yaml_path: Path, consumed: list[dict], per_batch: int) -> int:
    """The synthetic ledger of a pipeline that consumed ``consumed`` in batches of ``per_batch``
    (records at ``formats.Layout``'s paths, local or on S3) and both tables holding the txn of its
    newest batch: the number of batches."""
    _paths()
    from protocol_costs import QSCHEMA, SCHEMA

    from eobatch.config.schemas import schema_to_b64
    from eobatch.core.formats import QUARANTINE, SINK, BatchPlan, CommittedBatch, PreparedBatch, StagedFile
    from eobatch.pipelines.loader import load_pipeline
    from eobatch.protocol import Protocol
    from eobatch.sinks.delta import DeltaParticipant

    cfg = load_pipeline(str(yaml_path))
    lay = Protocol(cfg).layout
    lexical = getattr(cfg.source, "discovery", "full") == "lexical"  # a files source's key
    fp, at = cfg.fingerprint(), "2026-01-01T00:00:00.000+00:00"
    now_ms = int(time.time() * 1000)
    schemas = {SINK: schema_to_b64(SCHEMA), QUARANTINE: schema_to_b64(QSCHEMA)}
    records: list[tuple[str, bytes]] = []
    batches = 0
    for start in range(0, len(consumed), per_batch):
        chunk = [{**e, "records": 1} for e in consumed[start:start + per_batch]]
        batches += 1
        b, attempt = batches, f"t1-{batches:012x}"
        rng: dict = {"files": chunk}
        if lexical:
            rng |= {"listed_after": chunk[-1]["path"], "full_listing_ms": now_ms}
        records.append((lay.plan(b), BatchPlan(pipeline=cfg.name, batch_id=b, source_kind="files",
                                               rows_in=len(chunk), config_fingerprint=fp, planned_at=at,
                                               range=rng).to_json()))
        add = StagedFile(f"{lay.attempt_staging_rel(b, attempt)}/part-00000-0.snappy.parquet", 1000, {},
                         1_767_225_600_000, "{}")
        records.append((lay.prepared(b), PreparedBatch(
            pipeline=cfg.name, batch_id=b, attempt=attempt, adds={SINK: [add], QUARANTINE: []},
            arrow_schema=schemas, partition_by={SINK: [], QUARANTINE: []}, fingerprint=fp, rows_in=len(chunk),
            rows_valid=len(chunk), rows_quarantined=0, rows_published=len(chunk), bytes=1000, files=1,
            prepared_at=at, verify_seconds=0.01, stage_seconds=1.0).to_json()))
        records.append((lay.committed(b), CommittedBatch(pipeline=cfg.name, batch_id=b, fingerprint=fp,
                                                         delta_versions={SINK: 1, QUARANTINE: 1}, committed_at=at,
                                                         commit_seconds=0.05).to_json()))
    if lay.ledger.startswith("s3a://"):
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda r: _put(*r), records))
    else:
        for path, data in records:
            _put(path, data)
    for part, table, schema in ((SINK, lay.sink_table, SCHEMA), (QUARANTINE, lay.quarantine_table, QSCHEMA)):
        DeltaParticipant(part, table).commit(cfg.app_id, batches, [], schema, [], {"eo.bench": "synthetic"},
                                             expected_prev=0)
    return batches


# -- the measured tasks, each in a process of its own ---------------------------------------------
def _count_s3_calls() -> collections.Counter:
    """Every boto3 API call of this process from now on, by operation (``BaseClient._make_api_call``:
    the product's clients, ``s3conf.boto3_client``, call S3 through it)."""
    import botocore.client

    calls: collections.Counter = collections.Counter()
    inner = botocore.client.BaseClient._make_api_call

    def counted(self, operation_name, api_params):
        calls[operation_name] += 1
        if operation_name == "ListObjectsV2":  # what each listing asked for (the report's detail)
            calls[f"LIST {api_params.get('Prefix')} after={api_params.get('StartAfter', '')[-40:]}"
                  f"{' /' if api_params.get('Delimiter') else ''}"] += 1
        return inner(self, operation_name, api_params)

    botocore.client.BaseClient._make_api_call = counted
    return calls


def peak_rss_mib() -> float:
    """This process's peak resident set: the kernel's ``VmHWM``, which starts again at ``exec``.
    (Not ``getrusage``'s ``ru_maxrss``: Linux keeps it across ``execve``, so a child forked by a
    parent of 200 MiB reports at least 200 MiB, whatever it uses itself.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(task: str, pipeline_file: str) -> dict:
    _paths()
    # botocore only where the product imports it (an S3 pipeline): max RSS is the task's
    calls = _count_s3_calls() if "s3a://" in Path(pipeline_file).read_text() else collections.Counter()
    from eobatch.core.stuck import find_stuck
    from eobatch.pipelines.loader import load_pipeline
    from eobatch.protocol import Protocol
    from eobatch.protocol.backlog import backlog
    from eobatch.protocol.batch_run import BatchRun

    cfg = load_pipeline(pipeline_file)
    rss0 = peak_rss_mib()
    calls.clear()
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
        # what RecoverOperator does besides Airflow's own calls (events, lineage, alerts)
        proto = Protocol(cfg)
        latest = proto.ledger.latest_batch_id()
        if latest:
            proto.ledger.require_plan(latest)
        proto.committed_versions()
        rec = BatchRun(proto, run_id="bench").recover().value
        if latest:
            proto.ledger.committed(latest)
        find_stuck(proto.ledger, cfg)
        out["found"] = {k: rec[k] for k in ("latest", "committed", "pending")}  # type: ignore[index]
    else:
        raise SystemExit(f"unknown task {task!r}")
    out["seconds"] = time.perf_counter() - t
    out["s3_calls"] = {k: v for k, v in calls.items() if not k.startswith("LIST ")}
    out["s3_lists"] = {k[5:]: v for k, v in calls.items() if k.startswith("LIST ")}
    if task == "plan":  # what it planned (read after the timing)
        proto = Protocol(cfg)
        out["planned"] = [f["path"] for b in out["batches"] or [] for f in proto.ledger.require_plan(b).range["files"]]
    out["max_rss_mib"] = peak_rss_mib()
    out["rss_at_start_mib"] = rss0
    return out


def run_child(task: str, pipeline_file: Path) -> dict:
    got = subprocess.run([sys.executable, __file__, "--child", task, str(pipeline_file)], capture_output=True,
                         text=True, cwd=REPO)
    if got.returncode != 0:
        raise RuntimeError(f"{task} failed: {got.stderr[-3000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def plan_task(pipeline_file: Path, repeat: int) -> list[dict]:
    """``repeat`` plan tasks of the same batch (each one's record removed after it)."""
    _paths()
    from eobatch.pipelines.loader import load_pipeline
    from eobatch.protocol import Protocol

    lay = Protocol(load_pipeline(str(pipeline_file))).layout
    out = []
    for _ in range(repeat):
        got = run_child("plan", pipeline_file)
        assert got["batches"], f"the plan task planned nothing: {got}"
        for b in got["batches"]:
            _remove(lay.plan(b))
        out.append(got)
    return out


def _list_calls(r: dict) -> int:
    return int(r["s3_calls"].get("ListObjectsV2", 0))


def measure_tasks(yaml: Path, newest: list[str], batches: int, repeat: int, full_yaml: Path | None) -> dict:
    """The plan and recover tasks of the pipeline ``yaml`` (a ledger of ``batches`` batches) whose
    landing zone holds the ``newest`` files unconsumed; ``full_yaml``: the same with discovery full."""
    row: dict = {}
    warm = plan_task(yaml, 1)[0]  # reads every record once, writes the checkpoint
    row["first_plan_task_seconds"] = round(warm["seconds"], 3)
    runs = plan_task(yaml, repeat)
    for r in runs:
        if r["batches"] != warm["batches"] or sorted(r["planned"]) != sorted(newest):
            raise RuntimeError(f"the plan task planned {r['batches']}: {len(r['planned'])} files, not the "
                               f"{len(newest)} newest ({sorted(set(r['planned']) ^ set(newest))[:5]} differ)")
    row["planned_files"] = len(runs[-1]["planned"])
    row["plan_task_seconds"] = round(statistics.median(r["seconds"] for r in runs), 4)
    row["plan_max_rss_mib"] = round(max(r["max_rss_mib"] for r in runs), 1)
    row["plan_rss_after_imports_mib"] = round(runs[-1]["rss_at_start_mib"], 1)  # the part that is not the task's
    row["backlog_files"] = runs[-1]["backlog_files"]
    rec = [run_child("recover", yaml) for _ in range(repeat)]
    want = {"latest": batches, "committed": batches, "pending": None}
    if any(r["found"] != want for r in rec):
        raise RuntimeError(f"the recover task found {rec[-1]['found']}, not {want}")
    row["recover_found"] = rec[-1]["found"]
    row["recover_task_seconds"] = round(statistics.median(r["seconds"] for r in rec), 4)
    row["recover_max_rss_mib"] = round(max(r["max_rss_mib"] for r in rec), 1)
    if any(r["s3_calls"] for r in runs):
        row["list_calls_per_plan"] = max(_list_calls(r) for r in runs)
        row["s3_calls_per_plan"] = runs[-1]["s3_calls"]
        row["s3_lists_per_plan"] = runs[-1]["s3_lists"]  # prefix and StartAfter of each listing
        row["s3_calls_per_recover"] = rec[-1]["s3_calls"]
    if full_yaml is not None:
        plan_task(full_yaml, 1)
        [full] = plan_task(full_yaml, 1)
        if sorted(full["planned"]) != sorted(newest):
            raise RuntimeError(f"discovery full planned {len(full['planned'])} files, not the {len(newest)} newest")
        row["plan_full_seconds"] = round(full["seconds"], 3)
        row["plan_full_max_rss_mib"] = round(full["max_rss_mib"], 1)
        if full["s3_calls"]:
            row["list_calls_per_plan_full"] = _list_calls(full)
    return row


def measure(work: Path, files: int, new: int, per_batch: int, repeat: int, full: bool,
            sss: dict | None = None) -> dict:
    """The local figures at ``files`` landing files; ``sss``: also the peer (``sss_figures``'s options)."""
    row: dict = {"files": files, "new_files": new}
    t = time.perf_counter()
    yaml = pipeline(work / f"lexical-{files}", "lz", "lexical")
    landing = work / f"lexical-{files}" / "landing" / "lz"
    landed = land_local(landing, files)
    batches = write_ledger(yaml, landed[:files - new], per_batch)
    full_yaml = None
    if full:
        full_yaml = pipeline(work / f"full-{files}", "lzfull", "full", landing=str(landing))
        write_ledger(full_yaml, landed[:files - new], per_batch)
    row["build_seconds"] = round(time.perf_counter() - t, 1)
    row["ledger_batches"] = batches
    row.update(measure_tasks(yaml, [e["path"] for e in landed[files - new:]], batches, repeat, full_yaml))
    if sss is not None:
        row.update(sss_figures(work / f"sss-{files}", yaml, landing, files, new, per_batch, **sss))
        if row.get("sss_trigger_seconds"):
            row["plan_task_over_sss_trigger"] = round(row["plan_task_seconds"] / row["sss_trigger_seconds"], 4)
    return row


def measure_s3(work: Path, server, files: int, new: int, per_batch: int, repeat: int, full: bool,
               seed_over: int = 100_000) -> dict:
    """The figures at ``files`` objects on the S3 server ``server`` (``support.services.S3Server``)."""
    row: dict = {"files": files, "new_files": new}
    prefix = f"lz-{files}"
    client = _upload_client(server)
    t = time.perf_counter()
    seed = files > seed_over
    landed = land_s3(client, S3_BUCKET, f"{prefix}/landing", files, new=new,
                     server_data=Path(server.home) / "data" if seed else None)
    row["upload_seconds"] = round(time.perf_counter() - t, 1)
    row["landed_by"] = "put" if not seed else f"put: the first and the {new} newest; the others written as the server stores them"
    if not seed:
        row["upload_objects_per_second"] = round(files / max(row["upload_seconds"], 0.1))
    t = time.perf_counter()
    landing, lake = f"s3a://{S3_BUCKET}/{prefix}/landing", f"s3a://{S3_BUCKET}/{prefix}/lake"
    yaml = pipeline(work / f"s3-lexical-{files}", "lz", "lexical", landing=landing, lake=lake)
    batches = write_ledger(yaml, landed[:files - new], per_batch)
    full_yaml = None
    if full:
        full_yaml = pipeline(work / f"s3-full-{files}", "lzfull", "full", landing=landing, lake=lake + "-full")
        write_ledger(full_yaml, landed[:files - new], per_batch)
    row["ledger_build_seconds"] = round(time.perf_counter() - t, 1)
    row["ledger_batches"] = batches
    row.update(measure_tasks(yaml, [e["path"] for e in landed[files - new:]], batches, repeat, full_yaml))
    return row


def _upload_client(server):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=server.access_key,
                        aws_secret_access_key=server.secret_key, region_name=server.region,
                        config=Config(s3={"addressing_style": "path"}, max_pool_connections=UPLOAD_THREADS,
                                      retries={"max_attempts": 5, "mode": "standard"}))


# -- the peer: Structured Streaming's file source -------------------------------------------------
def _spark_run(cfg, master: str, name: str, args: list[str], log: Path,
               driver_memory: str | None = None) -> tuple[int, float, object]:
    """``peer_sss.py`` with ``args``, submitted like the other peers (``run_bench.spark_argv``; with
    ``driver_memory``, as ``DRIVER_MEMORY`` gives it to them): (exit code, wall seconds, its driver JVM or None)."""
    _paths()
    import run_bench

    from eobatch.job import launch

    argv = run_bench.spark_argv(cfg, master, name, run_bench.PEER_SSS, args)
    if driver_memory:
        argv[1:1] = ["--driver-memory", driver_memory]
    rc, took, drivers = run_bench.run_watched(argv, launch.spark_env(), log)
    return rc, took, (drivers[0] if drivers else None)


def _sss_args(source: Path, table: Path, checkpoint: Path, progress: Path | None = None) -> list[str]:
    from bench_data import DDL

    return ["--source", str(source), "--table", str(table), "--checkpoint", str(checkpoint), "--schema", DDL,
            *(["--progress", str(progress)] if progress else [])]


def _sss_failed(what: str, rc: int, log: Path) -> RuntimeError:
    _paths()
    import run_bench

    return RuntimeError(f"Structured Streaming {what}: exit {rc}: {run_bench._error_text(log)} (log {log})")


def sss_synthetic_checkpoint(cfg, master: str, work: Path, landing: Path, consumed: list[Path],
                             per_batch: int, driver_memory: str | None = None) -> tuple[Path, Path, float]:
    """A checkpoint (and its Delta table) of a file-source query that has read ``consumed``
    (see the module): (checkpoint, table, seconds of the bootstrap query)."""
    boot, ck, table = work / "boot", work / "checkpoint", work / "table"
    first = boot / consumed[0].relative_to(landing)
    first.parent.mkdir(parents=True)
    shutil.copy2(consumed[0], first)
    rc, took, _ = _spark_run(cfg, master, "bench-sss-bootstrap", _sss_args(boot, table, ck), work / "bootstrap.log",
                             driver_memory)
    if rc != 0:
        raise _sss_failed("bootstrap", rc, work / "bootstrap.log")
    sources, offsets, commits = ck / "sources" / "0", ck / "offsets", ck / "commits"
    [entry] = [json.loads(x) for x in (sources / "0").read_text().splitlines()[1:]]
    if entry["path"] != f"file://{first}":  # the spelling every entry below follows
        raise RuntimeError(f"Structured Streaming wrote {entry['path']!r} for {first}: not file://<path>")
    head = (offsets / "0").read_text().splitlines()
    if len(head) != 3 or json.loads(head[2]) != {"logOffset": 0}:
        raise RuntimeError(f"unexpected offsets file of Structured Streaming: {head}")
    commit = (commits / "0").read_text()
    for d in (sources, offsets, commits):
        for f in d.iterdir():
            f.unlink()
    last = -(-len(consumed) // per_batch) - 1  # batch ids 0..last
    compact = last - (last + 1) % SSS_COMPACT_INTERVAL  # the newest compaction batch at or before last
    lines: list[str] = []
    for b in range(last + 1):
        for p in consumed[b * per_batch:(b + 1) * per_batch]:
            lines.append(json.dumps({"path": f"file://{p}", "timestamp": p.stat().st_mtime_ns // 1_000_000,
                                     "batchId": b}, separators=(",", ":")))
        if b == compact:
            (sources / f"{b}.compact").write_text("\n".join(["v1", *lines]))
        if b > compact or compact < 0:
            (sources / str(b)).write_text("\n".join(["v1", *lines]))
        if b >= compact:
            lines = []
    # the last two batches' offsets (a restarted query reads the one before the last as its committed
    # offsets) and commits
    for b in range(max(0, last - 1), last + 1):
        (offsets / str(b)).write_text("\n".join([*head[:2], json.dumps({"logOffset": b})]))
        (commits / str(b)).write_text(commit)
    shutil.rmtree(boot)
    return ck, table, took


def sss_real_checkpoint(cfg, master: str, work: Path, landing: Path, new: list[Path],
                        driver_memory: str | None = None) -> tuple[Path, Path, float]:
    """A checkpoint its own query built: a query over the landing folder without the ``new`` files
    (moved aside, then back with their times): (checkpoint, table, seconds of that query)."""
    aside, ck, table = work / "aside", work / "checkpoint-real", work / "table-real"
    moved = []
    for p in new:
        to = aside / p.relative_to(landing)
        to.parent.mkdir(parents=True, exist_ok=True)
        os.rename(p, to)
        moved.append((to, p))
    try:
        rc, took, _ = _spark_run(cfg, master, "bench-sss-build", _sss_args(landing, table, ck), work / "build.log",
                                 driver_memory)
    finally:
        for to, p in moved:
            os.rename(to, p)
    if rc != 0:
        raise _sss_failed("checkpoint build", rc, work / "build.log")
    return ck, table, took


def sss_trigger(cfg, master: str, work: Path, landing: Path, ck: Path, table: Path, tag: str,
                driver_memory: str | None = None) -> dict:
    """One ``availableNow`` trigger of the peer on ``landing`` from checkpoint ``ck``."""
    progress, log = work / f"progress-{tag}.json", work / f"trigger-{tag}.log"
    rc, took, jvm = _spark_run(cfg, master, f"bench-sss-trigger-{tag}", _sss_args(landing, table, ck, progress), log,
                               driver_memory)
    if rc != 0:
        raise _sss_failed("trigger", rc, log)
    got = json.loads(progress.read_text())
    batches = [b for b in got["batches"] if b.get("numInputRows")]
    return {"trigger_seconds": round(got["query_seconds"], 3), "process_seconds": round(took, 2),
            "rows": sum(b["numInputRows"] for b in batches), "micro_batches": len(batches),
            "latest_offset_seconds": round(sum(b["durationMs"].get("latestOffset", 0) for b in got["batches"]) / 1000, 3),
            "driver_peak_rss_mib": getattr(jvm, "peak_rss_mib", None)}


def sss_figures(work: Path, yaml: Path, landing: Path, files: int, new: int, per_batch: int,
                master: str = "local[*]", real_up_to: int = 10_000, driver_memory: str | None = None) -> dict:
    """The peer at ``files`` landing files (see the module); a failure is the row's ``sss_error``."""
    _paths()
    from eobatch.pipelines.loader import load_pipeline

    cfg = load_pipeline(str(yaml))
    work.mkdir(parents=True, exist_ok=True)
    paths = [landing / rel_path(i) for i in range(files)]
    out: dict = {}
    try:
        t = time.perf_counter()
        ck, table, boot = sss_synthetic_checkpoint(cfg, master, work, landing, paths[:files - new], per_batch,
                                                   driver_memory)
        out["sss_checkpoint_seconds"] = round(time.perf_counter() - t, 1)
        out["sss_bootstrap_seconds"] = round(boot, 1)
        got = sss_trigger(cfg, master, work, landing, ck, table, "synthetic", driver_memory)
        if got["rows"] != new:
            raise RuntimeError(f"the trigger read {got['rows']} rows, not the {new} new files' ({got})")
        out |= {f"sss_{k}": v for k, v in got.items()}
        if files <= real_up_to:
            ck, table, build = sss_real_checkpoint(cfg, master, work, landing, paths[files - new:], driver_memory)
            out["sss_real_checkpoint_build_seconds"] = round(build, 1)
            real = sss_trigger(cfg, master, work, landing, ck, table, "real", driver_memory)
            if real["rows"] != new:
                raise RuntimeError(f"the trigger read {real['rows']} rows, not the {new} new files' ({real})")
            out["sss_real_trigger_seconds"] = real["trigger_seconds"]
            out["sss_real_latest_offset_seconds"] = real["latest_offset_seconds"]
    except Exception as e:  # noqa: BLE001 - the peer's failure is a figure, the product's are kept
        out["sss_error"] = f"{type(e).__name__}: {str(e)[:600]}"
        print(f"Structured Streaming at {files:,} files failed: {out['sss_error']}", file=sys.stderr, flush=True)
    return out


# -- the figures -----------------------------------------------------------------------------------
def _log(msg: str) -> None:
    print(f"[landing zone {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _clean(work: Path) -> None:
    for d in work.iterdir():
        shutil.rmtree(d, ignore_errors=True)


def figures(work: Path, sizes: list[int], new: int = 10, per_batch: int = 1000, repeat: int = 3,
            full_up_to: int = 100_000, keep: bool = False, sss_sizes: list[int] | None = None,
            master: str = "local[*]", sss_real_up_to: int = 10_000, driver_memory: str | None = None) -> dict:
    """The local figures (``landing_zone``), the peer at ``sss_sizes`` (default: every size) and
    ``plan_1m_over_1k``."""
    rows = []
    sss_sizes = sizes if sss_sizes is None else sss_sizes
    work.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        _log(f"{n:,} local files ({new} new)")
        sss = ({"master": master, "real_up_to": sss_real_up_to, "driver_memory": driver_memory}
               if n in sss_sizes else None)
        rows.append(measure(work, n, new, per_batch, repeat, full=n <= full_up_to, sss=sss))
        _log(json.dumps(rows[-1]))
        if not keep:
            _clean(work)
    res: dict = {"landing_zone": rows}
    if len(rows) > 1:
        small, big = rows[0], rows[-1]
        res["plan_1m_over_1k"] = round(big["plan_task_seconds"] / small["plan_task_seconds"], 3)
        res["plan_1m_over_1k_sizes"] = [small["files"], big["files"]]
    with_sss = [r for r in rows if r.get("plan_task_over_sss_trigger") is not None]
    if with_sss:
        res["plan_task_over_sss_trigger"] = with_sss[-1]["plan_task_over_sss_trigger"]
        res["plan_task_over_sss_trigger_files"] = with_sss[-1]["files"]
    return res


def s3_figures(work: Path, sizes: list[int], new: int = 10, per_batch: int = 1000, repeat: int = 3,
               full_up_to: int = 100_000, seed_over: int = 100_000) -> dict:
    """``landing_zone_s3``: the figures on an S3 server of its own (S3Proxy, data under ``work``)."""
    _paths()
    from eobatch.storage.s3conf import ENV_KEYS
    from support.services import S3Server

    server = S3Server(str(work / "s3")).start()
    saved = {k: os.environ.get(k) for k in (*ENV_KEYS, "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")}
    rows = []
    try:
        server.create_bucket(S3_BUCKET)
        for k in saved:
            os.environ.pop(k, None)
        os.environ.update(server.env())  # the product's S3 settings, here and in the children
        for n in sizes:
            _log(f"{n:,} objects on the S3 server ({new} new)")
            rows.append(measure_s3(work, server, n, new, per_batch, repeat, full=n <= full_up_to, seed_over=seed_over))
            _log(json.dumps(rows[-1]))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
        server.stop(kill=True)
    res: dict = {"landing_zone_s3": rows}
    if len(rows) > 1:
        res["s3_plan_large_over_small"] = round(rows[-1]["plan_task_seconds"] / rows[0]["plan_task_seconds"], 3)
        res["s3_plan_large_over_small_sizes"] = [rows[0]["files"], rows[-1]["files"]]
    return res


def _sizes(text: str) -> list[int]:
    return [int(s.replace("_", "")) for s in text.split(",") if s.strip() and int(s.replace("_", "")) > 0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("TASK", "PIPELINE_FILE"), help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1000,1000000")
    ap.add_argument("--s3-sizes", default="0")
    ap.add_argument("--sss-sizes", default=None, help="sizes the peer runs at (default: --sizes; 0: none)")
    ap.add_argument("--sss-real-up-to", type=int, default=10_000)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--driver-memory", default=None, help="the peer's driver memory (default: Spark's, 1g)")
    ap.add_argument("--new", type=int, default=10)
    ap.add_argument("--per-batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full-up-to", type=int, default=100_000)
    ap.add_argument("--s3-put-up-to", type=int, default=100_000,
                    help="above this many objects, all but the first and the newest are written as the S3 server stores them")
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    sizes, s3_sizes = _sizes(args.sizes), _sizes(args.s3_sizes)
    sss_sizes = sizes if args.sss_sizes is None else _sizes(args.sss_sizes)
    work = (Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="landing-zone-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    res: dict = {}
    if sizes:
        res |= figures(work / "local", sizes, args.new, args.per_batch, args.repeat, args.full_up_to, args.keep,
                       sss_sizes=sss_sizes, master=args.master, sss_real_up_to=args.sss_real_up_to,
                       driver_memory=args.driver_memory)
    if s3_sizes:
        res |= s3_figures(work / "s3", s3_sizes, args.new, args.per_batch, args.repeat, args.full_up_to,
                          seed_over=args.s3_put_up_to)
    text = json.dumps(res, indent=2)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    if not args.keep and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
