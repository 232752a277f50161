"""make chaos: batches through the real pipeline with faults at every phase boundary.

    python tests/chaos/run_chaos.py --batches N --seed S [--backend files|kafka|s3|delta] [--mode continuous|interval]
                                      [--sink append|merge|totals]
                                      [--master M] [--workdir DIR] [--faults k1,k2] [--distinct] [--fault-rate R] [--minutes M]

Each "run" does what one DAG run does (recover -> plan -> stage -> verify -> commit, abort on
failure before PREPARED), every step in its own process exactly as the Airflow tasks call it
(`python -m eobatch.cli <verb>`, and the same spark-submit as the stage task). The seed picks,
for each run, at most one fault:

  stage_crash      the Spark job dies mid-write (a task's Python worker exits) -> abort
  stage_kill       kill -9 of spark-submit while it writes -> no abort (as if the worker died)
  plan_crash       kill -9 of the plan process right after the plan was recorded
  verify_fail      a staged file is damaged before verify -> verification fails -> abort
  verify_crash     kill -9 of the verify process right after PREPARED was written
  commit_transient the commit fails once with a storage error and is retried
  commit_crash     kill -9 of the commit process after the first table's commit
  ledger_crash     kill -9 of the commit process after the Delta commits, before the ledger
  zombie           a second attempt of the same batch runs concurrently and finishes late
  land_during      new input lands while the batch is staged
  upstream_compaction  (delta backend) the upstream table is compacted (OPTIMIZE: dataChange=false)
  upstream_rewind  (delta backend) the upstream table is RESTOREd to an earlier version; when that
                   undid versions the pipeline published, its plan refuses and names the batch to
                   rewind to, and the harness rewinds there (an operator's repair, counted in repairs)
  verify_abort_race  a zombie verify races the abort task: after the stage, `cli verify` and
                   `cli abort` of the same batch and attempt start as two processes (random order,
                   random delay up to 1.3 times what a whole verify took lately: a verify
                   reaches the decision later than an abort, as it checks every file first, so
                   either can be first on a fast or a loaded machine). Exactly one wins the
                   attempt's decision: the verify (PREPARED; the abort exits 5 "decided for
                   PREPARE first") or the abort (the verify exits 4 "ABORTED while it was
                   verified"); in continuous mode an abort that finds the attempt STAGED with no
                   decision keeps it for the next run (exit 0, nothing removed) and the verify
                   decides alone. Then the run goes on as a DAG run would: PREPARED is committed, an
                   aborted batch is re-staged by the next run (interval mode: the abort task also
                   abandons the batch, and the hour runs again later)
  rewind_race      (continuous) with at least 2 committed batches and none pending, `cli rewind
                   <p> K` (K one of the last 3 live batches) and `cli plan <p>` start as two
                   processes (random order, random delay under 1.5 s): exactly one of them gets
                   batch L+1 (the rewind's put-if-absent reservation, or the plan's new batch).
                   The loser: the rewind exits 5 ("nothing was rewound" / "cannot rewind while"), or 3
                   (it lost the reservation after its checks: ConcurrentPlan, "nothing was rewound"),
                   or the plan hands back (or, after a ConcurrentPlan, its next poke hands back)
                   the rewind's reserved batch, which reads again from K's start
  foreign_writers  between two runs another writer changes the sink table with delta-rs, one of:
                   OPTIMIZE compact; a blind append of rows whose order_id starts with `foreign-`
                   (schema from the table); VACUUM retention 0, full (unreferenced files too). If
                   that VACUUM deleted the staged files of a PREPARED batch (the previous run's
                   commit crashed), recover stops with CommitBlocked and the harness does the
                   documented repair (`cli reset-batch`), counted in "repairs". Interval mode:
                   a late file whose hour was compacted cannot be republished (the plan is refused,
                   SliceRewritten); the harness does the documented repair, moving the late files
                   the message names into this run's hour (a blocked commit: `reset-batch` first)
  odd_lines        (files, s3) a landing file whose lines include lines made only of U+0085 /
                   U+2028 / U+2029 (and U+00A0), a lone \\r inside a line, CRLF endings, blank and
                   whitespace-only lines; good records (some with U+2028/U+0085 inside a string, one
                   with a lone \\r between tokens) are published once, the odd lines quarantined
  hostile_inputs   (files, local) next to a normal landing file, inputs the product must leave
                   out without halting: a file whose name is not UTF-8, a link to a file outside the
                   landing zone (a JSON-lines "secret" holding a valid order), a link to /dev/zero, a
                   FIFO, and a link to a folder holding a valid order. Each holds records whose
                   order_id no landed record has: published or quarantined, it counts as a
                   duplicate; the run must still commit the normal file's records
  maintenance      between two runs, the product's own maintenance pass (`cli maintain`, what `make
                   maintain` runs): compaction (continuous mode), lite VACUUM with retention 0 (the
                   chaos pipelines set `maintenance: {vacuum_retention_hours: 0}`), Delta checkpoint;
                   a PREPARED batch left by a crashed commit must survive it and commit once
  long_records     a landing file (Kafka: records) holding, between good records, a line over the
                   pipeline's max_record_bytes (the chaos pipelines set 64 KiB) in the middle and
                   one at the end with no newline (files), and one not in UTF-8: each is
                   quarantined at its own position (raw: the first 64 Ki characters, invalid
                   bytes as U+FFFD), the good records publish once
  late_file        (interval) a file lands in an hour that was already published; a later run
                   republishes that hour whole, as another slice of its batch
  broker_restart   (kafka) the broker is restarted between stage and verify
  broker_kill      (kafka) the broker is killed during the stage, started again after it failed
  s3_restart       (s3) the S3 server is killed after PREPARED; the commit fails until it is back

Issue 41's kinds ("never stuck"; files and delta backends, continuous mode) each drive a side
pipeline of their own next to the chaos pipeline (chaos/side_runs.py: same pipelines folder, its
own landing, tables and ledger; the chaos pipeline's run goes on after it). A side run is one DAG
run of several batches, each step a process calling ``BatchRun`` as its Airflow task does:
recover, plan (up to the YAML's max_batches_per_run), the stage task's choice of attempts, ONE
spark-submit staging every batch still to stage (``launch.spark_submit_argv(..., also=...)``),
verify of each, commit of each in order, and the abort task (``fail_run``) when the job failed:

  wide_schema      chaos_wide: the chaos schema plus 300 nullable columns (STRING, BIGINT, DOUBLE,
                   BOOLEAN; each record sets 8 of them), max_batches_per_run 30: 2 to 30 files land,
                   one batch each, all carried by one run. In 3 of 10 the job dies after staging
                   the first batch (EOBATCH_CRASH=stage.between_batches): the abort keeps that
                   STAGED attempt, the next run verifies it as it is and stages only the rest
  many_files_low_limit  chaos_many: 1,124 to 1,524 one-record files land, 200 a batch, and one run
                   stages them under RLIMIT_NOFILE=1024 for its spark-submit (more files than the
                   limit in one application); the same crash between batches in 3 of 10
  transform_action chaos_act: the pipeline's own transform (transforms/chaos_action.py) goes
                   through df.rdd or calls isEmpty(), first() or count() on its input; each time
                   one of the four is drawn, switched between batches; in 4 of 10 a run first
                   plans and stops (its stage never ran), and a switch then plans that pending
                   batch again under the new code (the run param replan_pending)
  upstream_partition_delete  chaos_cdf reads its own upstream Delta table (partitioned by customer,
                   delta.enableChangeDataFeed) with change_feed: true, through change_rows into a
                   merge sink (keys order_id, sequence_by change_seq, delete_when change_type =
                   'delete'); each time the upstream gets new rows, then a DELETE of whole
                   partitions, a DELETE without a condition (truncate), an overwrite (some keys
                   written again) or an UPDATE (the one that writes change data)

Each side pipeline is drained and swept at the end and checked like the chaos pipeline: rows =
the records landed (wide: every column as landed; chaos_cdf: the sink equals the upstream, read
with delta-rs, sorted, per key), quarantine = the bad lines, each landed file in exactly one
committed batch (chaos_cdf: upstream versions read once, in order, up to the newest), ledger =
tables, no orphan; its duplicates, losses and orphans count in the last line's.

``--sink merge``: the sink upserts by key (``sink.mode: merge``, keys ``order_id`` drawn from a
pool of 60, a random ``seq`` per record so later files often hold older versions, 20 % with
``op = 'd'``, a delete); the check is then that the sink holds, per key, the landed record with the
highest seq (none when it deletes) and that the tombstones table holds every batch. ``--sink
totals``: running totals per customer (the ``running_totals`` transform into an accumulating
merge sink; in interval mode recomputed from each interval's partials, which re-runs and late
files replace); the check is that each customer's row equals the totals recomputed from every
good record landed. Both also run every check above (offsets, quarantine, ledger, orphans).

BACKEND=kafka produces JSON records to a 3-partition topic of a real broker (some inside
producer transactions that commit, some in transactions that abort and must never appear).
BACKEND=s3 lands the files and keeps both tables and the ledger on a real S3 server (S3Proxy
on loopback, its own for the run); the checks read through S3 (boto3, delta-rs). ``--master``
submits the stage job elsewhere than local[*] (e.g. a standalone cluster of `make cluster-up`).

``--mode interval`` (files backend): an hourly pipeline (``mode: interval``, ``schedule:
"@hourly"``, ``interval_prefix: "dt={ds}/hour={hh}"``, ``settle_seconds: 0``); run k is the run
of hour k from 2026-01-01T00:00Z (``cli plan <p> --interval START END --run-id <id>``), whose
files land under that hour's folder first. A run that fails before PREPARED abandons its batch
(the abort task: abort the attempt, then ``Protocol.abandon``) and the hour runs again later, as
a backfill; a run that dies leaving its batch undecided (plan_crash, stage_kill) is cleared and
retried with the same run id. Every hour ends published. Kinds there: all of the first ten,
verify_abort_race, foreign_writers, odd_lines, hostile_inputs, long_records, late_file,
maintenance.

At the end, without the product's code, it checks with delta-rs and the raw _delta_log:
published rows = the good records landed (no duplicate, none lost; `foreign-` rows apart: each
foreign row present exactly once), quarantined rows = the bad lines landed, the ledger agrees
with the table, and no orphan staged files after the sweep. Offsets, continuous mode: every
landed file in exactly one live committed batch's offsets (Kafka: contiguous offset ranges),
where a batch is REWOUND (not live) when a later RESTORE commit of the log restored the table to
before it; that set must match the ledger's rewinds/ records and REWOUND states. Interval mode:
every landed file is in the newest committed batch holding its hour, that batch holds exactly
the hour's landed files, and no older batch's staged files of that hour are still live.
An orphan is a file under eo_batches/ that no commit of the log ever added (a staged file no
commit will reference). A file a commit added and a later commit removed (OPTIMIZE, a rewind's
RESTORE, an interval's slice replace) is not an orphan: it is VACUUM's to delete; those are
counted as "tombstoned", for information.
The line before the last: ``chaos: mode=.. backend=.. runs=.. seconds=.. problems=.. rewound=..
repairs=.. foreign_rows=<present>/<appended> foreign_duplicates=.. foreign_lost=.. side_pipelines=..
side_batches=..``.
Last line: ``chaos: batches=<n> faults=<f> duplicates=<d> lost=<l> orphans=<o> stuck=<s>`` (exit 0
only when d = l = o = s = 0, no problem was found and all n batches committed, or, with ``--minutes
M``, every batch landed before the time budget ran out); ``stuck``: the
pipelines (the chaos pipeline and the side ones) whose batch the product's stuck detector
(``eobatch.core.stuck.find_stuck``) names at the end.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests"))

from chaos.side_runs import SIDE_KINDS, SideRuns  # noqa: E402
from eobatch.config.lines import RAW_CHARS  # noqa: E402
from eobatch.job import launch  # noqa: E402
from support.checks import delta_log_commits  # noqa: E402
from support.harness import (  # noqa: E402
    Pipeline,
    base_env,
    write_delta_pipeline,
    write_kafka_pipeline,
    write_pipeline,
)

if TYPE_CHECKING:
    from support.s3checks import S3Pipeline, S3Reader
    from support.services import KafkaBroker, S3Server

BASE_FAULTS = ["stage_crash", "stage_kill", "plan_crash", "verify_fail", "verify_crash", "commit_transient",
               "commit_crash", "ledger_crash", "zombie", "land_during"]
NEW_FAULTS = ["verify_abort_race", "rewind_race", "foreign_writers", "odd_lines", "maintenance", "long_records"]
# issue 41's kinds: each drives a side pipeline of its own (chaos/side_runs.py), local whatever the backend
FAULTS = BASE_FAULTS + NEW_FAULTS + ["hostile_inputs"] + SIDE_KINDS  # the files backend, continuous mode (the default)
KAFKA_FAULTS = BASE_FAULTS + ["broker_restart", "broker_kill", "verify_abort_race", "rewind_race", "foreign_writers",
                              "maintenance", "long_records"]
S3_FAULTS = BASE_FAULTS + NEW_FAULTS + ["s3_restart"]
# the delta backend: the pipeline reads another Delta table (source kind: delta), which the harness appends
# to (a version per landing), compacts and RESTOREs
DELTA_FAULTS = BASE_FAULTS + ["verify_abort_race", "rewind_race", "foreign_writers", "maintenance",
                              "upstream_compaction", "upstream_rewind"] + SIDE_KINDS
INTERVAL_FAULTS = BASE_FAULTS + ["verify_abort_race", "foreign_writers", "odd_lines", "hostile_inputs", "long_records",
                                 "late_file",
                                 "maintenance"]
UNDONE = re.compile(r"make rewind PIPELINE=chaos BATCH=(\d+)")  # a delta plan's refusal after an upstream RESTORE
MAX_RECORD_BYTES = 1 << 16  # the chaos pipelines' max_record_bytes (long_records lands lines over it)
HOSTILE = ("name_not_utf8", "link_to_secret", "link_to_dev_zero", "fifo", "folder_link")
FOREIGN_OPS = ("compact", "append", "vacuum")
MERGE_KEYS = 60  # --sink merge: the keys records are drawn from
SINKS = ("append", "merge", "totals")
PY = sys.executable
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)  # interval mode: hour 0
HOUR_DIR = re.compile(r"/dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/")
REWRITTEN = "another writer rewrote them"  # SliceRewritten's message (interval mode, foreign OPTIMIZE)
SLICE_DIR = re.compile(r"^eo_batches/b(\d+)/[^/]+/iv=(\d{4})(\d{2})(\d{2})T(\d{2})\d{4}Z/")


def quarantined_raw(line: str | bytes) -> str:
    """The quarantine's ``raw`` of a bad line or record: its text (invalid UTF-8 bytes as U+FFFD),
    at most its first RAW_CHARS characters."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    return text[:RAW_CHARS]


def kinds_for(backend: str, mode: str) -> list[str]:
    if mode == "interval":
        return INTERVAL_FAULTS
    return {"kafka": KAFKA_FAULTS, "s3": S3_FAULTS, "delta": DELTA_FAULTS}.get(backend, FAULTS)


# The abort task of an interval-mode DAG run (eobatch.airflow.operators.AbortOperator.execute), in a
# process of its own: abort the attempt (after winning its decision), then abandon the batch
# (ABANDONED and PREPARED share one put-if-absent record). The CLI has no `abandon` verb.
ABORT_TASK = r"""
import json, sys
from eobatch.pipelines.loader import find_pipeline
from eobatch.protocol import AttemptPrepared, Protocol
proto = Protocol(find_pipeline(sys.argv[1]))
batch, attempt = int(sys.argv[2]), sys.argv[3]
out = {"removed": None, "prepared_first": None, "abandoned": None}
if attempt:
    try:
        out["removed"] = len(proto.abort(batch, attempt, "chaos: run failed"))
    except AttemptPrepared as e:
        out["prepared_first"] = str(e)
if proto.cfg.mode == "interval" and (attempt or proto.ledger.prepared(batch) is None):
    out["abandoned"] = proto.abandon(batch, "chaos: run failed")
print(json.dumps(out))
sys.exit(5 if out["prepared_first"] else 0)
"""


class Chaos:
    def __init__(self, batches: int, seed: int, workdir: Path, fault_rate: float = 0.6, quiet: bool = False,
                 backend: str = "files", master: str = "local[*]", only: list[str] | None = None,
                 distinct: bool = False, mode: str = "continuous", sink: str = "append",
                 minutes: float | None = None):
        if mode not in ("continuous", "interval"):
            raise ValueError(f"mode {mode!r}: continuous or interval")
        if sink not in SINKS:
            raise ValueError(f"sink {sink!r}: one of {', '.join(SINKS)}")
        self.sink = sink
        self.merge = sink == "merge"
        self.totals = sink == "totals"
        self.seqs: set[int] = set()  # merge: every sequence drawn (one per record)
        if mode == "interval" and backend != "files":
            raise ValueError("interval mode runs with the files backend only")
        self.n, self.seed, self.rnd = batches, seed, random.Random(seed)
        self.minutes = minutes  # a time budget: no run starts after it (the drain and the check still do)
        self.out_of_time = False
        self.distinct = distinct  # each kind once before any repeats
        self.deck: list[str] = []
        self.root = workdir
        self.backend = backend
        self.mode = mode
        self.broker: KafkaBroker | None = None  # the kafka backend's
        self.s3: S3Server | None = None  # the s3 backend's, and its reader
        self.reader: S3Reader | None = None
        self.p: Pipeline | S3Pipeline
        self.master = master
        self.only = only
        extra_env = {}
        if backend == "s3":
            from support.s3checks import S3Reader, s3_pipeline
            from support.services import S3Server

            self.s3 = S3Server(str(workdir / "s3")).start()
            self.s3.create_bucket("chaos")
            extra_env = self.s3.env()
            os.environ.update(extra_env)  # for this process's own product calls (the pipeline's cfg)
            self.reader = S3Reader(self.s3.endpoint, self.s3.access_key, self.s3.secret_key, self.s3.region)
            self.p = s3_pipeline(self.root, self.reader, name="chaos", max_records=60, bucket="chaos")
        elif backend == "kafka":
            from support.services import KafkaBroker

            self.broker = KafkaBroker(str(workdir / "kafka")).start()
            self.topic = "chaos"
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
            for f in admin.create_topics([NewTopic(self.topic, num_partitions=3, replication_factor=1)]).values():
                f.result()
            self.p = write_kafka_pipeline(self.root, self.broker.bootstrap, self.topic, name="chaos", max_records=60)
            self.txn_no = 0
        elif backend == "delta":
            self.upstream = self.root / "lake" / "upstream"
            self.up_effect: list[tuple[int, ...]] = []  # per upstream version: the append versions in effect
            self.up_appended: dict[int, list[dict]] = {}  # append version -> its records
            self.p = write_delta_pipeline(self.root, "chaos", self.upstream,
                                          "max_records_per_batch: 60\nmax_versions_per_batch: 3\n")
        elif mode == "interval":
            self.p = write_pipeline(self.root, name="chaos", mode="interval", schedule="@hourly",
                                    interval_prefix="dt={ds}/hour={hh}")
            text = self.p.yaml_path.read_text().replace("max_records_per_batch: 100000",
                                                        "max_records_per_batch: 100000\n  settle_seconds: 0")
            self.p.yaml_path.write_text(text)
        else:
            self.p = write_pipeline(self.root, name="chaos")
            text = self.p.yaml_path.read_text().replace("max_records_per_batch: 100000", "max_records_per_batch: 60")
            self.p.yaml_path.write_text(text)
        # the maintenance fault: VACUUM at retention 0, the harshest the product allows
        self.p.yaml_path.write_text(self.p.yaml_path.read_text() + "maintenance: {vacuum_retention_hours: 0}\n"
                                    f"max_record_bytes: {MAX_RECORD_BYTES}\n")
        if self.merge:  # the same pipeline, upserting by key: records carry a version and may delete
            text = self.p.yaml_path.read_text().replace("ts TIMESTAMP\"", "ts TIMESTAMP, seq BIGINT NOT NULL, op STRING\"")
            text = text.replace("\nsink:\n", "\nsink:\n  mode: merge\n  merge: {keys: [order_id], sequence_by: seq, "
                                "delete_when: \"op = 'd'\"}\n", 1)
            assert "mode: merge" in text and "seq BIGINT" in text, text
            self.p.yaml_path.write_text(text)
        if self.totals:  # running totals per customer of the same records (an accumulating merge sink)
            text = self.p.yaml_path.read_text().replace("customer STRING,", "customer STRING NOT NULL,")
            tr = "transform: {name: running_totals, options: {key: customer, value: amount, time: ts}}\n"
            text = (text.replace("\ntransform: passthrough\n", "\n" + tr, 1) if "\ntransform:" in text
                    else text.replace("\nsink:\n", "\n" + tr + "sink:\n", 1))
            text = text.replace("\nsink:\n", "\nsink:\n  mode: merge\n  merge: {keys: [customer], accumulate: {events: sum, "
                                "total: sum, smallest: min, largest: max, last_seen: max}}\n", 1)
            assert "running_totals" in text and "accumulate" in text and "customer STRING NOT NULL" in text, text
            self.p.yaml_path.write_text(text)
        self.env = base_env({"PIPELINES_DIR": str(self.p.yaml_path.parent), **extra_env})
        self.fault_rate = fault_rate
        self.faults: collections.Counter[str] = collections.Counter()
        self.outcomes: collections.Counter[str] = collections.Counter()  # how each race and foreign write went
        self.anomalies: list[str] = []  # product misbehaviour seen while driving: reported as problems
        self.repairs: list[str] = []  # documented repairs the harness did (as an operator would)
        self.foreign_ids: list[str] = []  # order_id of every row a foreign writer appended
        self.vacuumed = False  # a foreign VACUUM ran (staged files of undecided batches may be gone)
        self.zombies: list[subprocess.Popen] = []
        self.sides = SideRuns(self)  # the side pipelines of issue 41's kinds, made when first drawn
        self.runs = 0
        self.files = 0
        self.hostile: list[str] = []  # hostile_inputs: the paths (and linked folders) never to publish
        self.quiet = quiet
        self.log_lines: list[str] = []
        self.nothing_new = False  # the last run's plan found nothing to do
        self.verify_seconds: list[float] = []  # wall time of whole verify processes (race delays)
        self.last_race_seconds = [0.0, 0.0]
        # interval mode: the hour of this run, the next new hour, a run to retry (cleared, same
        # run id: its batch is undecided), hours whose batch was abandoned (run again later)
        self.cur: tuple[int, str] | None = None
        self.next_hour = 0
        self.retry: tuple[int, str] | None = None
        self.backlog: list[int] = []
        self.reruns = 0
        self.batch_hour: dict[int, int] = {}

    def say(self, msg: str) -> None:
        line = f"[chaos seed={self.seed}] {msg}"
        self.log_lines.append(line)
        if not self.quiet:
            print(line, flush=True)

    # -- what only one backend or mode has (None, or the other backend's type, elsewhere) --
    @property
    def local(self) -> Pipeline:
        """The pipeline's local folders (every backend but s3)."""
        assert isinstance(self.p, Pipeline), "the s3 backend has no local folders"
        return self.p

    @property
    def remote(self) -> S3Pipeline:
        """The pipeline's s3a:// locations (the s3 backend)."""
        assert not isinstance(self.p, Pipeline), "the s3 backend only"
        return self.p

    @property
    def kafka(self) -> KafkaBroker:
        assert self.broker is not None, "the kafka backend only"
        return self.broker

    @property
    def s3_server(self) -> S3Server:
        assert self.s3 is not None, "the s3 backend only"
        return self.s3

    @property
    def run_hour(self) -> int:
        """Interval mode: the hour of the current run."""
        assert self.cur is not None, "interval mode only, once a run has started"
        return self.cur[0]

    # -- input --------------------------------------------------------------------------
    def land(self, sub: str | None = None) -> None:
        self.files += 1
        k = self.files
        good = [{"order_id": f"s{self.seed}-f{k}-{i}", "customer": f"c{i % 5}", "amount": float(i),
                 "ts": "2026-01-01T00:00:00Z"} for i in range(self.rnd.randint(5, 40))]
        if self.totals:  # event times that differ, for last_seen
            for i, r in enumerate(good):
                r["ts"] = f"2026-01-{1 + k % 28:02d}T{i % 24:02d}:00:00Z"
        if self.merge:  # keys of a small pool, so that they repeat within and across batches
            for r in good:
                r["order_id"] = f"s{self.seed}-k{self.rnd.randint(0, MERGE_KEYS - 1)}"
                self.versioned(r, deletes=True)
        bad = [f'{{"order_id": "bad-{self.seed}-{k}-{j}", "amount": "x{j}"}}' for j in range(self.rnd.randint(0, 2))]
        if self.backend == "kafka":
            self.produce(good, bad)
        elif self.backend == "delta":
            self.append_upstream(good)
        else:
            self.p.land(f"{sub or f'd{k % 3}'}/f{k:04d}.jsonl", good, bad=bad)

    # -- the delta backend's upstream table ------------------------------------------------
    def _upstream_version(self) -> int:
        import deltalake

        return deltalake.DeltaTable(str(self.upstream)).version()

    def _upstream_after(self, keep: tuple[int, ...] | None) -> None:
        """What the upstream's newest version holds (``keep``; None: the version before's), and the
        records the pipeline must publish: those of the appends in effect there."""
        v = self._upstream_version()
        while len(self.up_effect) < v:  # versions another process wrote (none expected): same as before
            self.up_effect.append(self.up_effect[-1] if self.up_effect else ())
        self.up_effect.append(keep if keep is not None else (self.up_effect[-1] if self.up_effect else ()))
        self.p.landed[:] = [r for u in self.up_effect[-1] for r in self.up_appended[u]]

    def append_upstream(self, good: list[dict]) -> None:
        """A landing, for the delta backend: one upstream version appending ``good`` (a record's
        ``ts`` as a timestamp, as a pipeline's sink holds it)."""
        import deltalake
        import pyarrow as pa

        ts = [dt.datetime.fromisoformat(r["ts"].replace("Z", "+00:00")) for r in good]
        deltalake.write_deltalake(str(self.upstream), pa.table({
            "order_id": [r["order_id"] for r in good], "customer": [r["customer"] for r in good],
            "amount": [r["amount"] for r in good], "ts": pa.array(ts, pa.timestamp("us", "UTC"))}), mode="append")
        v = self._upstream_version()
        self.up_appended[v] = list(good)
        self._upstream_after((self.up_effect[-1] if self.up_effect else ()) + (v,))

    def upstream_compaction(self) -> str:
        import deltalake

        before = self._upstream_version()
        deltalake.DeltaTable(str(self.upstream)).optimize.compact()
        if self._upstream_version() == before:
            return "upstream compaction: nothing to compact"
        self._upstream_after(None)
        return f"upstream compacted (version {before + 1}, dataChange=false)"

    def upstream_rewind(self) -> str | None:
        import deltalake

        if len(self.up_effect) < 2:
            return None
        t = self.rnd.randint(0, len(self.up_effect) - 2)
        deltalake.DeltaTable(str(self.upstream)).restore(t)
        self._upstream_after(self.up_effect[t])
        return f"upstream RESTOREd to version {t} (version {self._upstream_version()})"

    def versioned(self, r: dict, deletes: bool) -> None:
        """Merge sink: the record's version (a sequence drawn at random, so later files often hold
        older versions) and, for some, a delete."""
        seq = self.rnd.randint(1, 10 ** 9)
        while seq in self.seqs:
            seq = self.rnd.randint(1, 10 ** 9)
        self.seqs.add(seq)
        r["seq"], r["op"] = seq, ("d" if deletes and self.rnd.random() < 0.2 else "u")

    def put_landing(self, name: str, data: bytes) -> None:
        """Land ``data`` as the file ``name`` of the landing zone, whole at once (S3: one PUT)."""
        if self.reader:
            self.reader.put(f"{self.p.landing}/{name}", data)
            return
        path = self.local.landing / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def land_odd(self, sub: str | None = None) -> str:
        """A landing file of odd lines (see odd_lines in the module docstring), written as bytes."""
        self.files += 1
        k = self.files
        good = [{"order_id": f"s{self.seed}-f{k}-odd{i}", "customer": f"c{i}", "amount": float(i) + 0.25,
                 "ts": "2026-01-01T00:00:00Z"} for i in range(self.rnd.randint(3, 6))]
        good[1]["customer"] = "c\u2028x\u0085y\u2029z"  # legal unescaped inside a JSON string
        if self.merge:
            for r in good:
                self.versioned(r, deletes=False)
        texts = [json.dumps(r, ensure_ascii=False) for r in good]
        texts[2] = texts[2].replace(", ", ",\r", 1)  # a lone \r between tokens: JSON whitespace
        bad = ["\u0085", "\u2028", "\u2029", "\u2028\u0085\u2029", "\u00a0",
               f'{{"order_id": "bad-{self.seed}-{k}-cr", "customer": "a\rb"}}']  # \r inside a string: not JSON
        blank = ["", "   ", "\t \x0b\x0c ", "\r"]
        items = [("good", t) for t in texts] + [("bad", t) for t in bad] + [("blank", t) for t in blank]
        self.rnd.shuffle(items)
        lines = [t.encode() + (b"\r" if self.rnd.random() < 0.5 else b"") for _kind, t in items]  # CRLF or LF
        data = b"\n".join(lines) + (b"\n" if self.rnd.random() < 0.5 else b"")
        name = f"{sub or f'd{k % 3}'}/f{k:04d}-odd.jsonl"
        self.put_landing(name, data)
        self.p.landed.extend(good)
        self.p.landed_bad.extend(bad)
        return f"landed {name}: {len(good)} good records, {len(bad)} odd lines, {len(blank)} blank lines"

    def land_long(self, sub: str | None = None) -> str:
        """Good records with lines over max_record_bytes and a line not in UTF-8 among them (see
        long_records in the module docstring)."""
        self.files += 1
        k = self.files
        good = [{"order_id": f"s{self.seed}-f{k}-long{i}", "customer": f"c{i}", "amount": float(i) + 0.5,
                 "ts": "2026-01-01T00:00:00Z"} for i in range(self.rnd.randint(2, 5))]
        if self.merge:
            for r in good:
                self.versioned(r, deletes=False)
        longs = [json.dumps({"order_id": f"bad-{self.seed}-{k}-long{j}", "pad": "x" * n})
                 for j, n in enumerate((MAX_RECORD_BYTES + 1, self.rnd.randint(2, 5) * MAX_RECORD_BYTES))]
        utf8 = b'{"order_id": "bad-%d-%d-utf8", "customer": "\xff\xfe"}' % (self.seed, k)
        if self.backend == "kafka":
            bad: list[str | bytes] = [longs[0], utf8, longs[1]]
            self.produce(good, bad)
            return f"produced {len(good)} good records, 2 over max_record_bytes and 1 not in UTF-8"
        lines = [json.dumps(r).encode() for r in good]
        lines[1:1] = [longs[0].encode(), utf8]
        data = b"\n".join(lines) + b"\n" + longs[1].encode()  # the last line has no newline
        name = f"{sub or f'd{k % 3}'}/f{k:04d}-long.jsonl"
        self.put_landing(name, data)
        self.p.landed.extend(good)
        self.p.landed_bad.extend(quarantined_raw(v) for v in (longs[0], utf8, longs[1]))
        return f"landed {name}: {len(good)} good records, 2 lines over max_record_bytes, 1 not in UTF-8"

    def land_hostile(self, sub: str | None = None) -> str:
        """A normal landing file, and next to it each hostile input (see hostile_inputs in the module
        docstring), whose records must never be published nor quarantined."""
        self.land(sub)
        self.files += 1
        k = self.files
        folder = self.local.landing / (sub or f"d{k % 3}")
        folder.mkdir(parents=True, exist_ok=True)
        record = json.dumps({"order_id": f"hostile-{self.seed}-{k}", "customer": "h", "amount": 1.0,
                             "ts": "2026-01-01T00:00:00Z"}) + "\n"
        for what in HOSTILE:
            path = folder / f"f{k:04d}-{what}.jsonl"
            if what == "name_not_utf8":
                raw = os.path.join(os.fsencode(folder), f"f{k:04d}-".encode() + b"\xff\xfe.jsonl")
                with open(raw, "wb") as f:
                    f.write(record.encode())
                path = Path(os.fsdecode(raw))
            elif what == "link_to_secret":
                secret = self.root / f"secret-{k}.jsonl"
                secret.write_text(record)
                os.symlink(secret, path)
            elif what == "link_to_dev_zero":
                os.symlink("/dev/zero", path)
            elif what == "fifo":
                os.mkfifo(path)
            else:
                elsewhere = self.root / f"elsewhere-{k}"
                elsewhere.mkdir()
                (elsewhere / "g.jsonl").write_text(record)
                path = folder / f"link-{k}"
                os.symlink(elsewhere, path)
            self.hostile.append(str(path))
        return f"landed a normal file and {len(HOSTILE)} hostile inputs ({', '.join(HOSTILE)}) in {folder.name}"

    def produce(self, good: list[dict], bad: list[str] | list[str | bytes]) -> None:
        """Records to random partitions; sometimes in a transaction, which sometimes aborts."""
        from confluent_kafka import Producer

        mode = self.rnd.choice(["plain", "plain", "commit", "abort"])
        conf: dict[str, Any] = {"bootstrap.servers": self.kafka.bootstrap, "linger.ms": 5}
        if mode != "plain":
            self.txn_no += 1
            conf["transactional.id"] = f"chaos-{self.seed}-{self.txn_no}"
        prod = Producer(conf)
        if mode != "plain":
            prod.init_transactions(30)
            prod.begin_transaction()
        for v in [json.dumps(r) for r in good] + bad:
            prod.produce(self.topic, value=v if isinstance(v, bytes) else v.encode(), partition=self.rnd.randrange(3))
        prod.flush(30)
        if mode == "abort":
            prod.abort_transaction(30)  # these records must never be published
            return
        if mode == "commit":
            prod.commit_transaction(30)
        self.p.landed.extend(good)
        self.p.landed_bad.extend(quarantined_raw(v) for v in bad)

    # -- interval mode: which hour this run is ---------------------------------------------
    @staticmethod
    def hour_dir(h: int) -> str:
        t = START + dt.timedelta(hours=h)
        return f"dt={t:%Y-%m-%d}/hour={t:%H}"

    def start_interval_run(self, land: bool) -> str:
        """Pick this run's hour: a cleared run's retry first, then (sometimes) an abandoned hour
        again, else the next new hour, whose files land first when ``land``."""
        if self.retry is not None:
            self.cur, self.retry = self.retry, None
            return f"hour {self.cur[0]} (retry of run {self.cur[1]})"
        if self.backlog and (not land or self.rnd.random() < 0.5):
            h = self.backlog.pop(0)
            self.reruns += 1
            self.cur = (h, f"backfill__{(START + dt.timedelta(hours=h)).isoformat()}__{self.reruns}")
            return f"hour {h} (run again: its batch was abandoned)"
        h = self.next_hour
        self.next_hour += 1
        self.cur = (h, f"scheduled__{(START + dt.timedelta(hours=h)).isoformat()}")
        if land:
            for _ in range(self.rnd.randint(1, 2)):
                self.land(self.hour_dir(h))
        return f"hour {h}"

    def published_hours(self) -> set[int]:
        """Hours whose own batch the sink's Delta log holds (eo.interval of its commits)."""
        out = set()
        for c in self.log_commits(self.p.sink):
            iv = c["commitInfo"].get("eo.interval")
            if c["txns"] and iv:
                start = dt.datetime.fromisoformat(iv.split("/")[0])
                out.add(int((start - START).total_seconds() // 3600))
        return out

    def land_late(self) -> str | None:
        here = self.run_hour
        done = sorted(h for h in self.published_hours() if h != here and h >= self.next_hour - 20)
        if not done:
            return None
        h = self.rnd.choice(done)
        self.land(self.hour_dir(h))
        return f"late file f{self.files:04d}.jsonl landed in the published hour {h}"

    # -- one process per step, as Airflow runs each task -----------------------------------
    def verb(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        t0 = time.time()
        r = subprocess.run([PY, "-m", "eobatch.cli", args[0], self.p.name, *args[1:]],
                           env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=300)
        if args[0] == "verify" and r.returncode == 0 and not env:
            self.verify_seconds.append(time.time() - t0)  # a whole verify, for the race's delays
        return r

    def cli_argv(self, *args: str) -> list[str]:
        return [PY, "-m", "eobatch.cli", args[0], self.p.name, *args[1:]]

    def crash_env(self, point: str) -> dict:
        return {"EOBATCH_CRASH": point}

    def race(self, x: list[str], y: list[str], max_delay: float = 1.5):
        """Start x and y as two processes, in random order, a random delay (< ``max_delay``) apart.
        Returns (result of x, result of y, whether x started first, the delay)."""
        x_first = self.rnd.random() < 0.5
        delay = round(self.rnd.uniform(0, max_delay), 3)
        procs: list[subprocess.Popen] = []
        started: list[float] = []
        ended: dict[int, float] = {}
        for i, argv in enumerate((x, y) if x_first else (y, x)):
            if i:
                time.sleep(delay)
            started.append(time.time())
            procs.append(subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        deadline = time.time() + 300
        while len(ended) < 2 and time.time() < deadline:  # wall time of each, for the next delays
            for i, proc in enumerate(procs):
                if i not in ended and proc.poll() is not None:
                    ended[i] = time.time() - started[i]
            time.sleep(0.02)
        out = []
        for proc in procs:
            o, e = proc.communicate(timeout=60)
            out.append(subprocess.CompletedProcess(proc.args, proc.returncode, o, e))
        self.last_race_seconds = [round(ended.get(i, 0.0), 2) for i in range(2)]
        if not x_first:
            out.reverse()
            self.last_race_seconds.reverse()
        return out[0], out[1], x_first, delay

    def ledger_rows(self) -> list[dict]:
        r = self.verb("ledger", "--format", "json")
        if r.returncode != 0:
            raise RuntimeError(f"ledger failed: {r.stderr[-2000:]}")
        return json.loads(r.stdout)

    def raw_ledger(self, rel: str) -> dict | None:
        """A ledger record as raw JSON (``rel`` under the sink's _eo_ledger/), None if absent."""
        try:
            if self.reader:
                return json.loads(self.reader.get(self.remote.sink, f"_eo_ledger/{rel}"))
            return json.loads((self.local.sink / "_eo_ledger" / rel).read_bytes())
        except Exception:  # absent (FileNotFoundError, NoSuchKey)
            return None

    def staged_files(self, batch: int, attempt: str, tables=None) -> list:
        if self.reader:  # S3: URIs of the attempt's Parquet objects
            prefix = f"eo_batches/b{batch:010d}/{attempt}/"
            return sorted(f"{t}/{k}" for t in tables or (self.remote.sink, self.remote.quarantine)
                          for k in self.reader.keys(t) if k.startswith(prefix) and k.endswith(".parquet"))
        out: list[Path] = []
        for t in tables or (self.local.sink, self.local.quarantine):
            out += (t / "eo_batches" / f"b{batch:010d}" / attempt).rglob("*.parquet")
        return sorted(out)

    def stage(self, batch: int, attempt: str, env: dict | None = None, wait: bool = True):
        argv = launch.spark_submit_argv(self.p.cfg, batch, attempt, master=self.master)
        if env and not self.master.startswith("local"):
            # executors on a cluster do not inherit spark-submit's environment: the fault
            # points inside Spark tasks get theirs through spark.executorEnv.*
            i = argv.index(launch.STAGE_APP)
            argv[i:i] = [x for k, v in env.items() if k.startswith("EOBATCH_")
                         for x in ("--conf", f"spark.executorEnv.{k}={v}")]
        e = {**self.env, **(env or {})}
        if not wait:
            return subprocess.Popen(argv, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
        return subprocess.run(argv, env=e, capture_output=True, text=True, timeout=900)

    # -- what the DAG does when a run fails ------------------------------------------------
    def abort_attempt(self, batch: int, attempt: str) -> str:
        """The abort task. Interval mode: it also abandons the batch; the hour runs again later."""
        if self.mode != "interval":
            self.verb("abort", str(batch), attempt)
            return "attempt aborted"
        r = subprocess.run([PY, "-c", ABORT_TASK, self.p.name, str(batch), attempt], env=self.env,
                           capture_output=True, text=True, timeout=300)
        if r.returncode not in (0, 5):
            raise RuntimeError(f"abort task failed: {r.stderr[-2000:]}")
        if json.loads(r.stdout).get("abandoned"):
            self.backlog.append(self.run_hour)
            return "attempt aborted, batch ABANDONED (the hour runs again later)"
        return "attempt aborted"

    def left_undecided(self) -> str:
        """The run died with its batch undecided. Interval mode: the run is cleared and retried
        (same run id) next, as a task retry would; no other run can plan before it (BatchInFlight)."""
        if self.mode == "interval":
            self.retry = self.cur
            return " (the run is retried)"
        return ""

    def move_late_files(self, stderr: str) -> str:
        """The documented remedy when a late file's hour was compacted by a foreign writer (the
        plan is refused: SliceRewritten): move the late files into the folder of a later hour,
        this run's, whose plan then publishes them."""
        m = re.search(r"The late files this batch would have published: (.*)", stderr)
        if m is None:
            raise RuntimeError(f"plan refused without late files to move: {stderr[-2000:]}")
        moved = []
        for path in (Path(x.strip()) for x in m.group(1).split(", ")):
            dest = self.local.landing / self.hour_dir(self.run_hour) / path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)
            moved.append(f"{path.parent.name}/{path.name}")
        self.repairs.append(f"plan of hour {self.run_hour} refused (a late file's hour was compacted by a foreign "
                            f"writer); moved {', '.join(moved)} into hour {self.run_hour}")
        self.say(f"repair: {self.repairs[-1]}")
        return self.repairs[-1]

    def recover(self) -> None:
        r = self.verb("recover")
        if r.returncode == 0:
            return
        m = re.search(r"PREPARED batch (\d+) cannot be committed", r.stderr) if self.vacuumed else None
        m = m or re.search(r"\(batch (\d+), PREPARED\) was not committed: .*" + REWRITTEN, r.stderr)
        if m:
            # a foreign VACUUM (retention 0, check disabled) deleted the staged files of a batch
            # that was PREPARED when it ran: the product stops with the documented repair
            b = int(m.group(1))
            rr = self.verb("reset-batch", str(b))
            why = ("its slice's files rewritten by a foreign OPTIMIZE: recover stopped (SliceRewritten)"
                   if REWRITTEN in r.stderr else
                   "its staged files deleted by a foreign VACUUM: recover stopped (CommitBlocked)")
            self.repairs.append(f"batch {b} PREPARED, {why}; `reset-batch {b}` exit {rr.returncode}")
            self.say(f"repair: {self.repairs[-1]}: {(rr.stdout + rr.stderr).strip()[-300:]}")
            if self.mode == "interval" and b in self.batch_hour:
                self.backlog.append(self.batch_hour[b])
            if rr.returncode == 0:
                r = self.verb("recover")
                if r.returncode == 0:
                    return
        raise RuntimeError(f"recover failed: {r.stderr[-2000:]}")

    def plan(self, env: dict | None = None) -> subprocess.CompletedProcess:
        if self.mode == "interval":
            assert self.cur is not None, "no run started"
            h, run_id = self.cur
            start = START + dt.timedelta(hours=h)
            return self.verb("plan", "--interval", start.isoformat(), (start + dt.timedelta(hours=1)).isoformat(),
                             "--run-id", run_id, env=env)
        return self.verb("plan", env=env)

    # -- one DAG run ------------------------------------------------------------------------
    def dag_run(self, fault: str | None) -> str:
        """One run; faults that happen between runs or to the input are done first."""
        pre = []
        if fault == "foreign_writers":
            what = self.foreign_write()
            pre.append(what or "foreign writer: no sink table yet, nothing done")
            if what:
                self.faults[fault] += 1
            fault = None
        elif fault == "maintenance":
            r = self.verb("maintain")
            if r.returncode != 0:
                self.anomalies.append(f"run {self.runs}: maintain failed ({r.returncode}): {r.stderr[-800:]}")
            line = (r.stdout.splitlines() or ["(no output)"])[0]
            pre.append(f"maintenance pass: {line}")
            self.faults[fault] += 1
            self.outcomes["maintenance: " + ("ok" if r.returncode == 0 else "failed")] += 1
            fault = None
        elif fault == "odd_lines":
            pre.append(self.land_odd(self.hour_dir(self.run_hour) if self.mode == "interval" else None))
            self.faults[fault] += 1
            fault = None
        elif fault == "long_records":
            pre.append(self.land_long(self.hour_dir(self.run_hour) if self.mode == "interval" else None))
            self.faults[fault] += 1
            fault = None
        elif fault == "hostile_inputs":
            pre.append(self.land_hostile(self.hour_dir(self.run_hour) if self.mode == "interval" else None))
            self.faults[fault] += 1
            fault = None
        elif fault == "upstream_compaction":
            pre.append(self.upstream_compaction())
            self.faults[fault] += 1
            fault = None
        elif fault == "upstream_rewind":
            what = self.upstream_rewind()
            pre.append(what or "upstream_rewind: fewer than two upstream versions, nothing done")
            if what:
                self.faults[fault] += 1
            fault = None
        elif fault in SIDE_KINDS:
            pre.append(self.sides.inject(fault))
            self.faults[fault] += 1
            fault = None
        elif fault == "late_file":
            what = self.land_late()
            pre.append(what or "no published hour yet: no late file")
            if what:
                self.faults[fault] += 1
            fault = None
        self.nothing_new = False
        return "; ".join(pre + [self._dag_run(fault)])

    def _dag_run(self, fault: str | None) -> str:
        self.recover()
        r = None
        race_note = ""
        if fault == "rewind_race":
            found = self.rewind_candidates()
            fault = None
            if found is None:
                race_note = "rewind_race not injected (fewer than 2 live committed batches, or one pending); "
            else:
                self.faults["rewind_race"] += 1
                r, race_note = self.race_rewind_plan(*found)
                if r is None:
                    self.nothing_new = True
                    return race_note
                race_note += "; "
        if r is None:
            plan_env = self.crash_env("plan.after_record") if fault == "plan_crash" else None
            r = self.plan(env=plan_env)
        if fault == "plan_crash" and r.returncode == 6:
            self.nothing_new = True
            return "nothing new (no plan to crash after)"
        if fault == "plan_crash" and r.returncode == 0:
            fault = None  # a pending batch was handed back for re-staging: no new record to crash after
        if fault and r.returncode != 6:
            self.faults[fault] += 1  # counted when it is injected, not when there was no batch
        if fault == "plan_crash":
            assert r.returncode == 137, r.stderr[-1000:]
            return "plan process killed after recording the plan" + self.left_undecided()
        if r.returncode == 6:
            self.nothing_new = True
            return race_note + "nothing new"
        if r.returncode == 5 and self.mode == "interval" and REWRITTEN in r.stderr:
            race_note += self.move_late_files(r.stderr) + "; "
            r = self.plan()
            if r.returncode == 6:
                self.nothing_new = True
                return race_note + "nothing new"
        if r.returncode != 0 and self.backend == "delta" and (m := UNDONE.search(r.stderr)):
            # an upstream RESTORE undid versions this pipeline published: the operator's repair is the rewind
            # the message names; then the pipeline reads on from that batch's start
            k = m.group(1)
            rw = self.verb("rewind", k)
            if rw.returncode != 0:
                raise RuntimeError(f"the rewind to batch {k} the plan asked for failed: {rw.stderr[-2000:]}")
            self.repairs.append(f"run {self.runs}: an upstream RESTORE undid published versions; rewound to batch {k}")
            race_note += f"upstream RESTORE undid published versions: rewound to batch {k}; "
            r = self.plan()
            if r.returncode == 6:
                self.nothing_new = True
                return race_note + "nothing new"
        if r.returncode != 0:
            raise RuntimeError(f"plan failed: {r.stderr[-2000:]}")
        batch = json.loads(r.stdout)["batch_id"]
        if self.mode == "interval":
            self.batch_hour[batch] = self.run_hour
        return race_note + self.stage_verify_commit(batch, fault)

    def stage_verify_commit(self, batch: int, fault: str | None) -> str:
        attempt = launch.new_attempt_id(1)
        if fault == "zombie":  # an earlier attempt that nobody waits for
            self.zombies.append(self.stage(batch, launch.new_attempt_id(0), wait=False))
        if fault == "stage_kill":
            once = self.root / f"pause-{self.faults.total()}-{attempt}"
            once.mkdir()
            proc = self.stage(batch, attempt, env={"EOBATCH_PAUSE": "stage.after_first_file",
                                                   "EOBATCH_CRASH_ONCE_DIR": str(once)}, wait=False)
            deadline = time.time() + 300
            # a task is mid-write (on S3 an object appears only when its writer closes)
            paused = once / "pause-stage.after_first_file"  # holds the paused process's pid
            while not (paused.exists() and paused.read_text().strip()) and time.time() < deadline \
                    and proc.poll() is None:
                time.sleep(0.2)
            if proc.poll() is not None:
                raise RuntimeError(f"stage_kill: spark-submit exited {proc.returncode} before a task paused "
                                   f"mid-write (fault points not reaching the executors?)")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if not self.master.startswith("local") and paused.exists() and paused.read_text().strip():
                # on a cluster the paused task runs in an executor of a worker, not under
                # spark-submit: it goes with the dead application (the worker kills its executors)
                try:
                    os.kill(int(paused.read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return f"batch {batch}: spark-submit killed mid-write" + self.left_undecided()
        if fault == "land_during":
            proc = self.stage(batch, attempt, wait=False)
            time.sleep(self.rnd.uniform(0.5, 4))
            self.land(self.hour_dir(self.run_hour) if self.mode == "interval" else None)
            rc = proc.wait()
        elif fault == "broker_kill":
            proc = self.stage(batch, attempt, wait=False)
            time.sleep(self.rnd.uniform(0.0, 3))
            self.kafka.stop(kill=True)
            rc = proc.wait()
            self.kafka.start()
            if rc == 0:  # the job had read everything before the broker went down
                fault = None
        else:
            env = self.crash_env("stage.after_first_file") if fault == "stage_crash" else None
            rc = self.stage(batch, attempt, env=env).returncode
        if rc != 0:
            assert fault in ("stage_crash", "broker_kill"), f"stage failed without an injected fault (rc {rc})"
            return f"batch {batch}: stage failed, {self.abort_attempt(batch, attempt)}"
        if fault == "broker_restart":
            self.kafka.restart()
        if fault == "verify_abort_race":
            prepared, note = self.race_verify_abort(batch, attempt)
            if not prepared:
                return note
            return note + "; " + self.commit(batch, None)
        if fault == "verify_fail":
            files = self.staged_files(batch, attempt, tables=(self.p.sink,))
            if files and self.reader:
                uri = self.rnd.choice(files)
                self.reader.put(uri, self._get(uri) + b"damage")
            elif files:
                with open(self.rnd.choice(files), "ab") as f:
                    f.write(b"damage")
            elif self.reader:
                m = next(k for k in self.reader.keys(self.remote.sink)
                         if f"/{attempt}/manifests/" in k and k.rsplit("/", 1)[1].startswith("part-"))
                b, k = self.reader.split(f"{self.p.sink}/{m}")
                self.reader.s3.delete_object(Bucket=b, Key=k)
            else:  # nothing published in the sink: drop a manifest instead
                manifest = next((self.local.sink / "_eo_ledger" / "attempts").rglob(f"{attempt}/manifests/*/part-*.json"))
                manifest.unlink()
        r = self.verb("verify", str(batch), attempt,
                      env=self.crash_env("verify.after_prepared") if fault == "verify_crash" else None)
        if fault == "verify_fail":
            assert r.returncode == 4, (r.returncode, r.stderr[-1000:])
            return f"batch {batch}: verification failed, {self.abort_attempt(batch, attempt)}"
        if fault == "verify_crash":
            assert r.returncode == 137
            return f"batch {batch}: verify process killed after PREPARED"
        if r.returncode != 0:
            raise RuntimeError(f"verify failed: {r.stderr[-2000:]}")
        return self.commit(batch, fault)

    def commit(self, batch: int, fault: str | None) -> str:
        env = None
        once = str(self.root / f"once-{self.faults.total()}")
        if fault == "commit_transient":
            env = {"EOBATCH_FAIL": "commit.before_delta_commit", "EOBATCH_CRASH_ONCE_DIR": once}
        elif fault == "commit_crash":
            env = self.crash_env("commit.after_first_participant")
        elif fault == "ledger_crash":
            env = self.crash_env("commit.after_delta_commit")
        elif fault == "s3_restart":  # S3 goes away after PREPARED: the commit fails until it is back
            self.s3_server.stop(kill=True)
            r = self.verb("commit", str(batch))
            assert r.returncode != 0, "commit succeeded with the S3 server down"
            assert self.s3_server.secret_key not in r.stdout + r.stderr, "the S3 secret is in the commit's output"
            self.s3_server.start()
        for attempt_no in range(5):  # commit retries, as the commit task's retries do
            r = self.verb("commit", str(batch), env=env)
            if r.returncode == 0:
                return f"batch {batch}: committed" + (f" after {attempt_no} retries" if attempt_no else "")
            if r.returncode == 137:
                return f"batch {batch}: commit process killed ({fault})"
            if "injected transient storage error" not in r.stderr:
                raise RuntimeError(f"commit failed: {r.stderr[-2000:]}")
        raise RuntimeError("commit did not succeed after 5 tries")

    # -- the races ----------------------------------------------------------------------------
    def race_verify_abort(self, batch: int, attempt: str) -> tuple[bool, str]:
        """A zombie verify and the abort task on one attempt: exactly one decides it."""
        abort = (self.cli_argv("abort", str(batch), attempt) if self.mode != "interval"
                 else [PY, "-c", ABORT_TASK, self.p.name, str(batch), attempt])
        # A verify reaches the decision later than an abort (it checks every file first): the
        # delays span up to 1.3 times what a whole verify took lately, so that on a fast or a
        # loaded machine either process can be first to the decision.
        took = sorted(self.verify_seconds[-7:])
        max_delay = max(1.0, 1.3 * took[len(took) // 2]) if took else 3.0
        v, a, v_first, delay = self.race(self.cli_argv("verify", str(batch), attempt), abort, max_delay=max_delay)
        if v.returncode == 0:
            self.verify_seconds.append(self.last_race_seconds[0])
        order = (f"{'verify' if v_first else 'abort'} started first, {delay:.2f}s ahead; verify took "
                 f"{self.last_race_seconds[0]:.2f}s, abort {self.last_race_seconds[1]:.2f}s")
        prepared = self.raw_ledger(f"prepared/{batch:010d}.json")
        decision = self.raw_ledger(f"attempts/{batch:010d}/{attempt}/decision.json")
        abandoned = bool(prepared and prepared.get("abandoned"))
        is_prepared = bool(prepared and not prepared.get("abandoned") and prepared.get("attempt") == attempt)
        tail = f"verify exit {v.returncode} ({v.stderr.strip()[-300:]}), abort exit {a.returncode} " \
               f"({(a.stdout + a.stderr).strip()[-300:]}), decision {decision}, prepared record {prepared}"
        if v.returncode == 0:
            won = "verify"
            said = a.stdout + a.stderr
            # the abort lost the decision (5), or, continuous mode, found the attempt STAGED with no
            # decision and kept it for the next run (exit 0, nothing removed: BatchRun.fail), so that
            # the verify decided alone
            kept = (self.mode != "interval" and a.returncode == 0 and "no verify rejected it: kept" in said
                    and '"removed": 0' in said)
            ok = is_prepared and (kept or (a.returncode == 5 and ("decided for PREPARE first" in said
                                                                  or "is PREPARED" in said)))
            won = "verify (the abort kept the STAGED attempt)" if kept else won
        elif v.returncode == 4 and self.mode == "interval" and abandoned and (decision or {}).get("decision") == "prepare":
            won = "verify (decision), abandon (record)"  # the abort task lost the attempt, then abandoned the batch
            ok = a.returncode == 5 and "ABANDONED" in v.stderr
        else:
            won = "abort"
            ok = (v.returncode == 4 and a.returncode == 0 and not is_prepared
                  and (decision or {}).get("decision") == "abort"
                  and (self.mode != "interval" or abandoned))
        if not ok:
            self.anomalies.append(f"verify_abort_race batch {batch} attempt {attempt} ({order}): not exactly one "
                                  f"winner: {tail}")
            self.say(f"ANOMALY: {self.anomalies[-1]}")
        self.outcomes[f"verify_abort_race: {won} won"] += 1
        if is_prepared:
            return True, f"batch {batch}: verify/abort race ({order}): {won} won, PREPARED"
        if self.mode == "interval" and abandoned:
            self.backlog.append(self.run_hour)
            return False, (f"batch {batch}: verify/abort race ({order}): {won} won, batch ABANDONED "
                           f"(the hour runs again later)")
        return False, f"batch {batch}: verify/abort race ({order}): {won} won, the next run re-stages"

    def rewind_candidates(self) -> tuple[list[int], int] | None:
        """(live committed batches, the latest batch) when at least 2 are live and nothing is
        pending, else None."""
        rows = self.ledger_rows()
        if not rows or rows[-1]["state"] != "COMMITTED":
            return None
        live = [b["batch_id"] for b in rows if b["state"] == "COMMITTED"]
        return (live, rows[-1]["batch_id"]) if len(live) >= 2 else None

    def race_rewind_plan(self, live: list[int], latest: int) -> tuple[subprocess.CompletedProcess | None, str]:
        """`cli rewind <p> K` against `cli plan <p>`: exactly one of them gets batch L+1.
        Returns the plan result the run goes on with (None: nothing to stage) and a note."""
        k = self.rnd.choice(live[-3:])
        rw, pl, rw_first, delay = self.race(self.cli_argv("rewind", str(k)), self.cli_argv("plan"))
        order = f"{'rewind' if rw_first else 'plan'} started first, {delay:.2f}s ahead"
        rewound = rw.returncode == 0
        plan = json.loads(pl.stdout) if pl.returncode == 0 else None
        tail = f"rewind exit {rw.returncode} ({(rw.stdout + rw.stderr).strip()[-300:]}), plan exit {pl.returncode} " \
               f"({(pl.stdout + pl.stderr).strip()[-300:]})"
        problems = []
        rec = self.raw_ledger(f"rewinds/{latest:010d}-{k:010d}.json")
        if rewound:
            if rec is None:
                problems.append("the rewind succeeded but wrote no rewinds/ record")
            if plan is not None and (plan["new"] or plan["batch_id"] != latest + 1):
                problems.append("both the rewind and the plan got a new batch")
            # 3 (ConcurrentPlan, "wait"): the plan lost batch L+1 to the rewind's reservation; its next poke
            # hands that batch back (below)
            if pl.returncode not in (0, 3, 6) or (pl.returncode == 3 and "another planner" not in pl.stderr):
                problems.append("the plan failed otherwise")
        else:
            # 5: refused at its checks (the plan's batch was there first); 3 (ConcurrentPlan, "wait"): it lost
            # the reservation of batch L+1 to the plan, after its checks
            if rw.returncode not in (3, 5) or not ("nothing was rewound" in rw.stderr
                                                   or "cannot rewind while" in rw.stderr):
                problems.append("the rewind failed otherwise")
            if pl.returncode not in (0, 6):
                problems.append("neither the rewind nor the plan got batch L+1")
            if rec is not None:
                problems.append("the rewind failed but its rewinds/ record exists")
        if problems:
            self.anomalies.append(f"rewind_race K={k} after batch {latest} ({order}): {'; '.join(problems)}: {tail}")
            self.say(f"ANOMALY: {self.anomalies[-1]}")
        if rewound and plan is None:
            pl = self.plan()  # the plan sensor's next poke (or the next run) hands back the reserved batch
            plan = json.loads(pl.stdout) if pl.returncode == 0 else None
            if plan is None or plan["new"] or plan["batch_id"] != latest + 1:
                self.anomalies.append(f"rewind_race K={k}: after the rewind the plan did not hand back batch "
                                      f"{latest + 1}: exit {pl.returncode} {(pl.stdout + pl.stderr)[-300:]}")
        won = "rewind" if rewound else ("plan" if plan is not None and plan["new"] else "neither")
        self.outcomes[f"rewind_race: {won} won"] += 1
        note = (f"rewind to {k} / plan race ({order}): {won} won"
                + (f", batches {k}..{latest} REWOUND, batch {latest + 1} reads again from batch {k}'s start"
                   if rewound else ""))
        if pl.returncode == 6:
            return None, note + "; nothing new"
        if pl.returncode != 0:
            raise RuntimeError(f"plan failed after the rewind race: {tail}")
        return pl, note

    # -- a foreign writer on the sink table ------------------------------------------------------
    def table_uri(self, t) -> str:
        return "s3://" + str(t).split("://", 1)[1] if self.reader else str(t)

    def table_exists(self, t) -> bool:
        if self.reader:
            return any(k.startswith("_delta_log/") for k in self.reader.keys(t))
        return (Path(t) / "_delta_log").exists()

    def delta_table(self, t):
        from deltalake import DeltaTable

        return self.reader.table(t) if self.reader else DeltaTable(str(t))

    def foreign_write(self) -> str | None:
        import pyarrow as pa
        from deltalake import write_deltalake

        if not self.table_exists(self.p.sink):
            return None
        op = self.rnd.choice(FOREIGN_OPS)
        table = self.delta_table(self.p.sink)
        self.outcomes[f"foreign_writers: {op}"] += 1
        if op == "compact":
            m = table.optimize.compact()
            return f"foreign OPTIMIZE compact of the sink: {m['numFilesRemoved']} files into {m['numFilesAdded']}"
        if op == "append":
            schema = pa.schema(table.schema().to_arrow())
            rows = []
            for i in range(self.rnd.randint(1, 4)):
                row: dict[str, Any] = {}
                for f in schema:
                    if f.name == "order_id":
                        row[f.name] = f"foreign-{self.seed}-{len(self.foreign_ids)}"
                        self.foreign_ids.append(row[f.name])
                    elif pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
                        row[f.name] = "foreign"
                    elif pa.types.is_floating(f.type):
                        row[f.name] = float(i)
                    elif pa.types.is_integer(f.type):
                        row[f.name] = i
                    elif pa.types.is_timestamp(f.type):
                        row[f.name] = dt.datetime.now(dt.timezone.utc)
                    else:
                        row[f.name] = None
                rows.append(row)
            write_deltalake(self.table_uri(self.p.sink), pa.Table.from_pylist(rows, schema=schema), mode="append",
                            storage_options=self.reader.storage_options() if self.reader else None)
            return f"foreign blind append of {len(rows)} rows to the sink"
        deleted = table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
        self.vacuumed = True
        staged = [f for f in deleted if f.startswith("eo_batches/")]
        return f"foreign VACUUM (retention 0, full) of the sink: {len(deleted)} files deleted, {len(staged)} under eo_batches/"

    def _get(self, uri: str) -> bytes:
        assert self.reader is not None, "the s3 backend only"
        b, k = self.reader.split(uri)
        return self.reader.s3.get_object(Bucket=b, Key=k)["Body"].read()

    def committed(self) -> int:
        from deltalake import DeltaTable

        if self.reader:
            try:
                return self.reader.table(self.remote.sink).transaction_version(self.p.name) or 0
            except Exception:  # no table yet
                return 0

        if not (self.local.sink / "_delta_log").exists():
            return 0
        return DeltaTable(str(self.local.sink)).transaction_version(self.p.name) or 0

    def progress(self) -> int:
        """Batches committed so far: the txn version; interval mode: commits carrying a txn
        (ABANDONED batch ids are never committed)."""
        if self.mode == "interval":
            return sum(1 for c in self.log_commits(self.p.sink) if c["txns"])
        return self.committed()

    def run(self) -> dict:
        t0 = time.time()
        self.runs = 0
        stopped = None
        try:
            self.drive()
        except (RuntimeError, AssertionError, subprocess.TimeoutExpired) as e:
            # the pipeline is stuck or a step broke its contract: check what the tables hold anyway
            stopped = f"stopped after run {self.runs}: {type(e).__name__}: {str(e)[-1500:]}"
            self.say(stopped)
        for z in self.zombies:
            try:
                z.wait(timeout=900)
            except subprocess.TimeoutExpired:
                z.kill()
        try:
            try:
                result = self.check()
            except Exception as e:  # noqa: BLE001 - e.g. a table whose snapshot names a deleted file
                result = {"batches": 0, "faults": sum(self.faults.values()), "duplicates": 0, "lost": 0,
                          "orphans": 0, "problems": [f"the check could not read the tables: {type(e).__name__}: "
                                                     f"{str(e)[-1000:]}"]}
        finally:
            if self.broker:
                self.broker.stop(kill=True)
            if self.s3:
                self.s3.stop(kill=True)
        if stopped:
            result["problems"].insert(0, stopped)
        result.update(runs=self.runs, seconds=round(time.time() - t0, 1), faults_by_kind=dict(self.faults),
                      out_of_time=self.out_of_time,
                      backend=self.backend, mode=self.mode, outcomes=dict(self.outcomes), repairs=self.repairs,
                      sink=self.sink)
        return result

    def drive(self) -> None:
        """The runs, then the drain (clean runs until every landed file is committed), recover and sweep."""
        kinds = self.only or kinds_for(self.backend, self.mode)
        until = time.time() + self.minutes * 60 if self.minutes else None
        while self.progress() < self.n and self.runs < self.n * 4:
            if until is not None and time.time() > until:
                self.out_of_time = True
                self.say(f"--minutes {self.minutes:g}: no run starts after {self.runs} runs; drain and check")
                break
            self.runs += 1
            label = ""
            if self.mode == "interval":
                label = " " + self.start_interval_run(land=True)
            elif self.rnd.random() < 0.8 or self.files == 0:
                self.land()
            fault = self.draw(kinds) if self.rnd.random() < self.fault_rate else None
            self.say(f"run {self.runs}{label} fault={fault or '-'}: {self.dag_run(fault)}")
        if self.mode == "interval":  # runs to retry, abandoned hours, then new (empty) hours
            while self.retry or self.backlog:
                label = self.start_interval_run(land=False)
                self.say(f"drain {label}: {self.dag_run(None)}")
            while True:
                label = self.start_interval_run(land=False)
                self.say(f"drain {label}: {self.dag_run(None)}")
                if self.nothing_new and not (self.retry or self.backlog):
                    break
        else:
            while True:
                out = self.dag_run(None)
                self.say(f"drain: {out}")
                if self.nothing_new:
                    break
        self.sides.drain()
        for z in self.zombies:  # zombies finish (late) before the last recover and sweep
            z.wait(timeout=900)
        r = self.verb("recover")
        if r.returncode != 0:
            raise RuntimeError(f"recover failed: {r.stderr[-2000:]}")
        r = subprocess.run([PY, "-m", "eobatch.cli", "sweep", self.p.name, "--all"], env=self.env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr

    def draw(self, kinds: list[str]) -> str:
        if not self.distinct:
            return self.rnd.choice(kinds)
        if not self.deck:
            self.deck = self.rnd.sample(kinds, len(kinds))
        return self.deck.pop()

    # -- the independent check (delta-rs, the raw _delta_log, raw ledger files) ----------------
    def log_commits(self, t) -> list[dict]:
        if self.reader:
            return self.reader.delta_log_commits(t)
        return delta_log_commits(Path(t))

    def rows_of(self, t) -> list[dict]:
        if not self.table_exists(t):
            return []
        return self.delta_table(t).to_pyarrow_table().to_pylist()

    def landed_files(self) -> set[str]:
        """Every landing file, spelled as the offsets spell it."""
        if self.reader:
            return {f"{self.remote.landing}/{k}" for k in self.reader.keys(self.remote.landing) if k.endswith(".jsonl")}
        hostile = tuple(self.hostile)
        return {str(f) for f in self.local.landing.rglob("*.jsonl")
                if not any(str(f) == h or str(f).startswith(h + "/") for h in hostile)}

    def files_under_staging(self, t) -> list[str]:
        if self.reader:
            return sorted(k for k in self.reader.keys(t) if k.startswith("eo_batches/"))
        root = Path(t) / "eo_batches"
        return sorted(str(f.relative_to(t)) for f in root.rglob("*") if f.is_file()) if root.exists() else []

    def raw_rewinds(self) -> set[int]:
        """Batches the ledger's raw rewinds/ records say are REWOUND."""
        if self.reader:
            names = [k for k in self.reader.keys(self.remote.sink) if k.startswith("_eo_ledger/rewinds/")]
            recs = [json.loads(self.reader.get(self.remote.sink, k)) for k in names if k.endswith(".json")]
        else:
            recs = [json.loads(f.read_bytes()) for f in (self.local.sink / "_eo_ledger" / "rewinds").glob("*.json")]
        return {b for r in recs for b in range(r["to_batch"], r["after_batch"] + 1)}

    @staticmethod
    def rewound_in_log(commits: list[dict]) -> set[int]:
        """Batches whose commit a later RESTORE commit took back (restored to a version before it)."""
        held: list[tuple[int, int]] = []  # (Delta version, batch) of the batch commits behind the snapshot
        out: set[int] = set()
        for c in commits:
            info = c["commitInfo"]
            if info.get("operation") == "RESTORE":
                to = int((info.get("operationParameters") or {}).get("version", -1))
                out.update(b for v, b in held if v > to)
                held = [(v, b) for v, b in held if v <= to]
            if c["txns"]:
                held.append((c["version"], c["txns"][0]["version"]))
        return out

    @staticmethod
    def files_in_log(commits: list[dict]) -> tuple[set[str], set[str]]:
        """(every path any commit added, the paths live in the last snapshot), unquoted."""
        ever, live = set(), set()
        for c in commits:
            for r in c["removes"]:
                live.discard(unquote(r["path"]))
            for a in c["adds"]:
                ever.add(unquote(a["path"]))
                live.add(unquote(a["path"]))
        return ever, live

    def check(self) -> dict:
        p = self.p
        foreign: collections.Counter[str] = collections.Counter()
        got: collections.Counter[str] = collections.Counter()
        for r in self.rows_of(p.sink) if not self.totals else []:  # totals: one row per customer, below
            (foreign if str(r["order_id"]).startswith("foreign-") else got)[r["order_id"]] += 1
        want = collections.Counter(r["order_id"] for r in p.landed)
        duplicates = sum(v - 1 for v in got.values() if v > 1) + sum(v for k, v in got.items() if k not in want)
        lost = sum(1 for k in want if k not in got)
        merge_problems: list[str] = []
        if self.merge:
            duplicates, lost, merge_problems = self.check_merge(p.landed)
        elif self.totals:
            duplicates, lost, merge_problems = self.check_totals(p.landed)
        qgot = collections.Counter(r["raw"] for r in self.rows_of(p.quarantine))
        qwant = collections.Counter(p.landed_bad)
        duplicates += sum(max(0, qgot[k] - qwant.get(k, 0)) for k in qgot)
        lost += sum(max(0, qwant[k] - qgot.get(k, 0)) for k in qwant)
        problems = list(self.anomalies) + merge_problems
        fwant = collections.Counter(self.foreign_ids)
        foreign_res = {"appended": len(fwant), "present": sum(1 for k in fwant if foreign[k] >= 1),
                       "duplicates": sum(max(0, foreign[k] - fwant.get(k, 0)) for k in foreign),
                       "lost": sum(1 for k in fwant if k not in foreign)}
        if foreign_res["duplicates"] or foreign_res["lost"]:
            problems.append(f"foreign rows: {foreign_res} (each must be present exactly once); missing "
                            f"{sorted(k for k in fwant if k not in foreign)[:5]}")
        all_commits = self.log_commits(p.sink)
        q_commits = self.log_commits(p.quarantine)
        commits = [c for c in all_commits if c["txns"]]
        versions = [c["txns"][0]["version"] for c in commits]
        if self.mode == "interval":
            if versions != sorted(set(versions)):
                problems.append(f"txn versions in the sink log are not increasing: {versions}")
        elif versions != list(range(1, len(versions) + 1)):
            problems.append(f"txn versions in the sink log are not 1..n: {versions}")
        rewound = self.rewound_in_log(all_commits)
        if self.rewound_in_log(q_commits) != rewound:
            problems.append(f"rewound batches: sink log {sorted(rewound)}, quarantine log "
                            f"{sorted(self.rewound_in_log(q_commits))}")
        if self.raw_rewinds() != rewound:
            problems.append(f"rewound batches: the Delta log says {sorted(rewound)}, the ledger's rewinds/ records "
                            f"{sorted(self.raw_rewinds())}")
        live_commits = [c for c in commits if c["txns"][0]["version"] not in rewound]
        if self.backend == "kafka":
            problems += self.check_kafka_offsets(live_commits)
        elif self.backend == "delta":
            problems += self.check_delta_offsets(live_commits)
        elif self.mode == "interval":
            problems += self.check_interval_offsets(commits, all_commits, q_commits)
        else:  # every landed file in exactly one live committed batch
            seen = collections.Counter(path for c in live_commits for path, _s, _m in
                                       json.loads(c["commitInfo"]["eo.offsets"]))
            landed = self.landed_files()
            if set(seen) != landed or any(v != 1 for v in seen.values()):
                problems.append(f"offsets: files in live batches {sum(seen.values())}, distinct {len(seen)}, "
                                f"landed {len(landed)}; twice: {sorted(k for k, v in seen.items() if v > 1)[:3]}, "
                                f"never: {sorted(landed - set(seen))[:3]}")
        qversions = [c["txns"][0]["version"] for c in q_commits if c["txns"]]
        if qversions != versions:
            problems.append(f"quarantine txn versions {qversions} != sink {versions}")
        ledger = self.ledger_rows()
        states = {b["batch_id"]: b["state"] for b in ledger}
        want_states = {v: ("REWOUND" if v in rewound else "COMMITTED") for v in versions}
        other = {b: s for b, s in states.items() if b not in want_states}
        if any(states.get(b) != s for b, s in want_states.items()) or \
                any(s != "ABANDONED" or self.mode != "interval" for s in other.values()):
            problems.append(f"ledger {sorted(states.items())} != table (committed {versions}, rewound "
                            f"{sorted(rewound)}; other batches must be ABANDONED, interval mode only)")
        orphan_files, tombstoned = [], 0
        for t, cs in ((p.sink, all_commits), (p.quarantine, q_commits)):
            ever, live = self.files_in_log(cs)
            staged = self.files_under_staging(t)
            orphan_files += [f"{t}/{f}" for f in staged if f not in ever]
            tombstoned += sum(1 for f in staged if f in ever and f not in live)
        if orphan_files:
            problems.append(f"orphan staged files (never committed, not swept): {orphan_files[:5]}")
        stuck = self.stuck()
        if stuck:
            problems.append(f"stuck: {stuck}")
        side = self.sides.check()  # issue 41's side pipelines, checked the same way
        problems += side["problems"]
        return {"batches": len(versions), "faults": sum(self.faults.values()),
                "duplicates": duplicates + side["duplicates"], "lost": lost + side["lost"],
                "orphans": len(orphan_files) + side["orphans"], "stuck": int(bool(stuck)) + side["stuck"],
                "problems": problems, "records": sum(want.values()), "bad_records": sum(qwant.values()),
                "foreign": foreign_res, "rewound": sorted(rewound), "tombstoned": tombstoned,
                "side_batches": side["batches"], "side": side["pipelines"]}

    def stuck(self) -> str | None:
        """What the product's stuck detector (``eobatch.core.stuck.find_stuck``, the recover task's
        alert) says of the chaos pipeline at the end: None when no batch is stuck."""
        from eobatch.core.stuck import find_stuck
        from eobatch.pipelines.loader import load_pipeline
        from eobatch.protocol import Protocol

        proto = Protocol(load_pipeline(str(self.p.yaml_path)))
        found = find_stuck(proto.ledger, proto.cfg)
        return None if found is None else " | ".join(found.lines())

    def check_merge(self, landed: list[dict]) -> tuple[int, int, list[str]]:
        """Merge sink: (duplicates, lost, problems). The sink must hold, per key, the landed record
        with the highest seq (one per record), none when that one deletes: a key published twice or
        that should not be there is a duplicate; a key missing, or holding another version, is lost.
        The tombstones table holds every batch of the sink."""
        latest: dict[str, dict] = {}
        for r in landed:
            if r["order_id"] not in latest or r["seq"] > latest[r["order_id"]]["seq"]:
                latest[r["order_id"]] = r
        want = {k: r["seq"] for k, r in latest.items() if r["op"] != "d"}
        rows = [r for r in self.rows_of(self.p.sink) if not str(r["order_id"]).startswith("foreign-")]
        got = collections.Counter(r["order_id"] for r in rows)
        duplicates = sum(v - 1 for v in got.values()) + sum(1 for k in got if k not in want)
        seqs = {r["order_id"]: r["seq"] for r in rows}
        wrong = sorted(k for k in want if k in seqs and seqs[k] != want[k])
        lost = sum(1 for k in want if k not in got) + len(wrong)
        problems = [f"merge: keys holding another version than their latest record: "
                    f"{[(k, seqs[k], want[k]) for k in wrong[:5]]}"] if wrong else []
        tomb = f"{self.table_uri(self.p.sink)}/_eo_tombstones"
        sink_txn, tomb_txn = (self.delta_table(t).transaction_version(self.p.name) for t in (self.p.sink, tomb))
        if sink_txn != tomb_txn:
            problems.append(f"merge: the sink holds batch {sink_txn}, its tombstones table batch {tomb_txn}")
        self.outcomes["merge: keys published"] = len(got)
        self.outcomes["merge: keys deleted last"] = sum(1 for r in latest.values() if r["op"] == "d")
        return duplicates, lost, problems

    def check_totals(self, landed: list[dict]) -> tuple[int, int, list[str]]:
        """Running totals: (duplicates, lost, problems). Per customer, the row must equal the totals
        recomputed from every good record landed (events, total, smallest, largest, last_seen): a
        customer published twice is a duplicate (a retried fold would show as a wrong total); a
        customer missing or with other totals is lost."""
        want: dict[str, dict] = {}
        for r in landed:
            w = want.setdefault(r["customer"], {"events": 0, "total": 0.0, "smallest": None, "largest": None,
                                                "last_seen": None})
            w["events"] += 1
            a = r["amount"]
            w["total"] += a
            w["smallest"] = a if w["smallest"] is None else min(w["smallest"], a)
            w["largest"] = a if w["largest"] is None else max(w["largest"], a)
            ts = dt.datetime.fromisoformat(r["ts"].replace("Z", "+00:00"))
            w["last_seen"] = ts if w["last_seen"] is None else max(w["last_seen"], ts)
        rows = [r for r in self.rows_of(self.p.sink) if r["customer"] != "foreign"]
        got = collections.Counter(r["customer"] for r in rows)
        duplicates = sum(v - 1 for v in got.values()) + sum(1 for k in got if k not in want)
        wrong = []
        for r in rows:
            if r["customer"] not in want:
                continue
            w = want[r["customer"]]
            if (r["events"], r["smallest"], r["largest"], r["last_seen"]) != (
                    w["events"], w["smallest"], w["largest"], w["last_seen"]) or \
                    abs(r["total"] - w["total"]) > 1e-6 * max(1.0, abs(w["total"])):
                wrong.append((r["customer"], {k: r[k] for k in w}, w))
        lost = sum(1 for k in want if k not in got) + len(wrong)
        problems = [f"totals: customers whose totals differ from a recomputation: {wrong[:3]}"] if wrong else []
        self.outcomes["totals: customers"] = len(got)
        self.outcomes["totals: events"] = sum(r["events"] for r in rows)
        return duplicates, lost, problems

    def check_interval_offsets(self, commits: list[dict], sink_log: list[dict], q_log: list[dict]) -> list[str]:
        """Every landed file is in the newest committed batch that holds its hour, which holds
        exactly the hour's landed files; no older batch's staged files of an hour are still live."""
        def hour_of(path: str) -> str | None:
            m = HOUR_DIR.search(path)
            return f"{m.group(1)}T{m.group(2)}" if m else None

        problems = []
        newest: dict[str | None, tuple[int, set]] = {}  # by hour (None: a path outside the hours)
        for c in commits:
            by_hour = collections.defaultdict(set)
            for path, _s, _m in json.loads(c["commitInfo"]["eo.offsets"]):
                by_hour[hour_of(path)].add(path)
            for h, paths in by_hour.items():
                newest[h] = (c["txns"][0]["version"], paths)
        landed = collections.defaultdict(set)
        for f in self.landed_files():
            landed[hour_of(f)].add(f)
        for h in sorted(set(landed) | set(newest), key=str):
            if h not in newest:
                problems.append(f"hour {h}: {len(landed[h])} landed files, never published")
            elif newest[h][1] != landed.get(h, set()):
                b, held = newest[h]
                problems.append(f"hour {h}: its newest batch {b} holds {len(held)} files, {len(landed.get(h, ()))} "
                                f"landed; missing {sorted(landed.get(h, set()) - held)[:3]}, "
                                f"extra {sorted(held - landed.get(h, set()))[:3]}")
        for name, log in (("sink", sink_log), ("quarantine", q_log)):
            _ever, live = self.files_in_log(log)
            for path in live:
                m = SLICE_DIR.match(path)
                if not m:
                    continue
                h = f"{m.group(2)}-{m.group(3)}-{m.group(4)}T{m.group(5)}"
                if h in newest and int(m.group(1)) != newest[h][0]:
                    problems.append(f"{name}: {path} of batch {int(m.group(1))} is live, but hour {h}'s newest "
                                    f"batch is {newest[h][0]} (slice not replaced)")
        return problems

    def check_delta_offsets(self, commits: list[dict]) -> list[str]:
        """The upstream versions of the live batches in the Delta history start at 0, are contiguous
        (a rewind's batch starts where the batch before the rewound ones ended), and end after the
        upstream's newest version."""
        problems: list[str] = []
        end = 0
        for c in commits:
            f, t = json.loads(c["commitInfo"]["eo.offsets"])["versions"]
            if f != end or t < f:
                problems.append(f"batch {c['txns'][0]['version']} reads upstream versions [{f}, {t}) after {end}")
            end = t
        latest = self._upstream_version()
        # versions after the last batch's end may only be ones that change no appended record (a compaction,
        # or a RESTORE back to what was read): the plan reads nothing from them
        if end <= latest and self.up_effect[end - 1 if end else 0] != self.up_effect[latest] and self.p.landed:
            problems.append(f"committed up to upstream version {end}, the upstream's newest is {latest}, and the "
                            f"versions in between change what is published")
        return problems

    def check_kafka_offsets(self, commits: list[dict]) -> list[str]:
        """Ranges of the live batches in the Delta history start at 0, are contiguous, and end at
        each partition's end."""
        from confluent_kafka import Consumer, TopicPartition

        problems: list[str] = []
        end: dict[str, int] = {}
        for c in commits:
            for part, (f, t) in json.loads(c["commitInfo"]["eo.offsets"])["partitions"].items():
                if f != end.get(part, 0) or t < f:
                    problems.append(f"partition {part}: batch {c['txns'][0]['version']} reads [{f}, {t}) after {end.get(part, 0)}")
                end[part] = t
        consumer = Consumer({"bootstrap.servers": self.kafka.bootstrap, "group.id": "chaos-check",
                             "isolation.level": "read_committed"})
        for part in range(3):
            _lo, hi = consumer.get_watermark_offsets(TopicPartition(self.topic, part), timeout=30)
            if end.get(str(part), 0) != hi:
                problems.append(f"partition {part}: committed up to {end.get(str(part), 0)}, the partition ends at {hi}")
        consumer.close()
        return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backend", choices=["files", "kafka", "s3", "delta"], default="files")
    ap.add_argument("--mode", choices=["continuous", "interval"], default="continuous",
                    help="interval: an hourly interval-mode pipeline, one run per hour (files backend only)")
    ap.add_argument("--sink", choices=list(SINKS), default="append",
                    help="merge: the sink upserts by key (order_id, sequence seq, op = 'd' deletes); totals: running "
                         "totals per customer (running_totals transform, an accumulating merge; continuous mode)")
    ap.add_argument("--master", default="local[*]", help="Spark master of the stage job (default local[*])")
    ap.add_argument("--workdir", default=None, help="kept after the run (default: a temporary folder, removed)")
    ap.add_argument("--fault-rate", type=float, default=0.6)
    ap.add_argument("--faults", default=None, help="comma-separated fault kinds to draw from (default: all "
                                                   "of the backend and mode)")
    ap.add_argument("--minutes", type=float, default=None,
                    help="a time budget: no run starts after it; the batches landed are drained and checked as "
                         "usual, and --batches is then the most it would have run (the long runs: make chaos "
                         "BATCHES=300 MINUTES=100)")
    ap.add_argument("--distinct", action="store_true", help="draw each fault kind once before any repeats")
    args = ap.parse_args(argv)
    if args.batches < 1:
        ap.error("--batches must be at least 1")
    if args.mode == "interval" and args.backend != "files":
        ap.error("--mode interval runs with --backend files only")
    only = [k for k in args.faults.split(",") if k] if args.faults else None
    kinds = kinds_for(args.backend, args.mode)
    known = set(FAULTS + KAFKA_FAULTS + S3_FAULTS + INTERVAL_FAULTS + DELTA_FAULTS)
    if only and not set(only) <= known:
        ap.error(f"unknown fault kinds {sorted(set(only) - known)}")
    if only and not set(only) <= set(kinds):
        ap.error(f"fault kinds {sorted(set(only) - set(kinds))} do not apply to backend {args.backend} in "
                 f"{args.mode} mode (those that do: {', '.join(kinds)})")
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="eobatch-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    chaos = Chaos(args.batches, args.seed, work, args.fault_rate, backend=args.backend, master=args.master,
                  only=only, distinct=args.distinct, mode=args.mode, sink=args.sink, minutes=args.minutes)
    try:
        res = chaos.run()
    finally:  # never leave a broker or an S3 server behind, whatever failed
        for service in (chaos.broker, chaos.s3):
            if service is not None:
                service.stop(kill=True)
    print(json.dumps(res, indent=1))
    f = res.get("foreign") or {}
    print(f"chaos: mode={res.get('mode')} backend={res.get('backend')} sink={res.get('sink')} runs={res.get('runs')} "
          f"seconds={res.get('seconds')} problems={len(res['problems'])} rewound={len(res.get('rewound') or [])} "
          f"repairs={len(res.get('repairs') or [])} foreign_rows={f.get('present', 0)}/{f.get('appended', 0)} "
          f"foreign_duplicates={f.get('duplicates', 0)} foreign_lost={f.get('lost', 0)} "
          f"side_pipelines={len(res.get('side') or {})} side_batches={res.get('side_batches', 0)}")
    ok = (res["duplicates"] == res["lost"] == res["orphans"] == res.get("stuck", 0) == 0 and not res["problems"]
          and (res["batches"] >= args.batches or res.get("out_of_time")))
    print(f"chaos: batches={res['batches']} faults={res['faults']} duplicates={res['duplicates']} "
          f"lost={res['lost']} orphans={res['orphans']} stuck={res.get('stuck', 0)}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
