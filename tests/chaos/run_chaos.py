"""make chaos: batches through the real pipeline with faults at every phase boundary.

    python tests/chaos/run_chaos.py --batches N --seed S [--backend files|kafka|s3] [--master M] [--workdir DIR]
                                      [--faults k1,k2] [--distinct] [--fault-rate R]

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
  broker_restart   (kafka) the broker is restarted between stage and verify
  broker_kill      (kafka) the broker is killed during the stage, started again after it failed
  s3_restart       (s3) the S3 server is killed after PREPARED; the commit fails until it is back

BACKEND=kafka produces JSON records to a 3-partition topic of a real broker (some inside
producer transactions that commit, some in transactions that abort and must never appear).
BACKEND=s3 lands the files and keeps both tables and the ledger on a real S3 server (S3Proxy
on loopback, its own for the run); the checks read through S3 (boto3, delta-rs). ``--master``
submits the stage job elsewhere than local[*] (e.g. a standalone cluster of `make cluster-up`).

At the end, without the product's code, it checks with delta-rs and the raw _delta_log:
published rows = the good records landed (no duplicate, none lost), quarantined rows = the bad
lines landed, every landed file in exactly one committed batch's offsets (Kafka: contiguous
offset ranges), the ledger agrees with the table, and no orphan staged files after the sweep.
Last line: ``chaos: batches=<n> faults=<f> duplicates=<d> lost=<l> orphans=<o>``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests"))

from checks import delta_log_commits, orphans  # noqa: E402
from conftest import base_env, write_kafka_pipeline, write_pipeline  # noqa: E402

from eobatch import launch  # noqa: E402

FAULTS = ["stage_crash", "stage_kill", "plan_crash", "verify_fail", "verify_crash", "commit_transient",
          "commit_crash", "ledger_crash", "zombie", "land_during"]
KAFKA_FAULTS = FAULTS + ["broker_restart", "broker_kill"]
S3_FAULTS = FAULTS + ["s3_restart"]
PY = sys.executable


class Chaos:
    def __init__(self, batches: int, seed: int, workdir: Path, fault_rate: float = 0.6, quiet: bool = False,
                 backend: str = "files", master: str = "local[*]", only: list[str] | None = None,
                 distinct: bool = False):
        self.n, self.seed, self.rnd = batches, seed, random.Random(seed)
        self.distinct, self.deck = distinct, []  # distinct: each kind once before any repeats
        self.root = workdir
        self.backend = backend
        self.broker = None
        self.s3 = self.reader = None
        self.master = master
        self.only = only
        extra_env = {}
        if backend == "s3":
            from s3checks import S3Reader, s3_pipeline

            from eobatch.services import S3Server

            self.s3 = S3Server(str(workdir / "s3")).start()
            self.s3.create_bucket("chaos")
            extra_env = self.s3.env()
            os.environ.update(extra_env)  # for this process's own product calls (the pipeline's cfg)
            self.reader = S3Reader(self.s3.endpoint, self.s3.access_key, self.s3.secret_key, self.s3.region)
            self.p = s3_pipeline(self.root, self.reader, name="chaos", max_records=60, bucket="chaos")
        elif backend == "kafka":
            from eobatch.services import KafkaBroker

            self.broker = KafkaBroker(str(workdir / "kafka")).start()
            self.topic = "chaos"
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
            for f in admin.create_topics([NewTopic(self.topic, num_partitions=3, replication_factor=1)]).values():
                f.result()
            self.p = write_kafka_pipeline(self.root, self.broker.bootstrap, self.topic, name="chaos", max_records=60)
            self.txn_no = 0
        else:
            self.p = write_pipeline(self.root, name="chaos")
            text = self.p.yaml_path.read_text().replace("max_records_per_batch: 100000", "max_records_per_batch: 60")
            self.p.yaml_path.write_text(text)
        self.env = base_env({"PIPELINES_DIR": str(self.p.yaml_path.parent), **extra_env})
        self.fault_rate = fault_rate
        self.faults = collections.Counter()
        self.zombies: list[subprocess.Popen] = []
        self.files = 0
        self.quiet = quiet
        self.log_lines: list[str] = []

    def say(self, msg: str) -> None:
        line = f"[chaos seed={self.seed}] {msg}"
        self.log_lines.append(line)
        if not self.quiet:
            print(line, flush=True)

    # -- input --------------------------------------------------------------------------
    def land(self) -> None:
        self.files += 1
        k = self.files
        good = [{"order_id": f"s{self.seed}-f{k}-{i}", "customer": f"c{i % 5}", "amount": float(i),
                 "ts": "2026-01-01T00:00:00Z"} for i in range(self.rnd.randint(5, 40))]
        bad = [f'{{"order_id": "bad-{self.seed}-{k}-{j}", "amount": "x{j}"}}' for j in range(self.rnd.randint(0, 2))]
        if self.backend == "kafka":
            self.produce(good, bad)
        else:
            self.p.land(f"d{k % 3}/f{k:04d}.jsonl", good, bad=bad)

    def produce(self, good: list[dict], bad: list[str]) -> None:
        """Records to random partitions; sometimes in a transaction, which sometimes aborts."""
        from confluent_kafka import Producer

        mode = self.rnd.choice(["plain", "plain", "commit", "abort"])
        conf = {"bootstrap.servers": self.broker.bootstrap, "linger.ms": 5}
        if mode != "plain":
            self.txn_no += 1
            conf["transactional.id"] = f"chaos-{self.seed}-{self.txn_no}"
        prod = Producer(conf)
        if mode != "plain":
            prod.init_transactions(30)
            prod.begin_transaction()
        for v in [json.dumps(r) for r in good] + bad:
            prod.produce(self.topic, value=v.encode(), partition=self.rnd.randrange(3))
        prod.flush(30)
        if mode == "abort":
            prod.abort_transaction(30)  # these records must never be published
            return
        if mode == "commit":
            prod.commit_transaction(30)
        self.p.landed.extend(good)
        self.p.landed_bad.extend(bad)

    # -- one process per step, as Airflow runs each task -----------------------------------
    def verb(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([PY, "-m", "eobatch.cli", args[0], self.p.name, *args[1:]],
                              env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=300)

    def crash_env(self, point: str) -> dict:
        return {"EOBATCH_CRASH": point}

    def staged_files(self, batch: int, attempt: str, tables=None) -> list:
        if self.reader:  # S3: URIs of the attempt's Parquet objects
            prefix = f"eo_batches/b{batch:010d}/{attempt}/"
            return sorted(f"{t}/{k}" for t in tables or (self.p.sink, self.p.quarantine)
                          for k in self.reader.keys(t) if k.startswith(prefix) and k.endswith(".parquet"))
        out = []
        for t in tables or (self.p.sink, self.p.quarantine):
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

    def dag_run(self, fault: str | None) -> str:
        r = self.verb("recover")
        if r.returncode != 0:
            raise RuntimeError(f"recover failed: {r.stderr[-2000:]}")
        plan_env = self.crash_env("plan.after_record") if fault == "plan_crash" else None
        r = self.verb("plan", env=plan_env)
        if fault == "plan_crash" and r.returncode == 6:
            return "nothing new (no plan to crash after)"
        if fault == "plan_crash" and r.returncode == 0:
            fault = None  # a pending batch was handed back for re-staging: no new record to crash after
        if fault and r.returncode != 6:
            self.faults[fault] += 1  # counted when it is injected, not when there was no batch
        if fault == "plan_crash":
            assert r.returncode == 137, r.stderr[-1000:]
            return "plan process killed after recording the plan"
        if r.returncode == 6:
            return "nothing new"
        if r.returncode != 0:
            raise RuntimeError(f"plan failed: {r.stderr[-2000:]}")
        batch = json.loads(r.stdout)["batch_id"]
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
            return f"batch {batch}: spark-submit killed mid-write"
        if fault == "land_during":
            proc = self.stage(batch, attempt, wait=False)
            time.sleep(self.rnd.uniform(0.5, 4))
            self.land()
            rc = proc.wait()
        elif fault == "broker_kill":
            proc = self.stage(batch, attempt, wait=False)
            time.sleep(self.rnd.uniform(0.0, 3))
            self.broker.stop(kill=True)
            rc = proc.wait()
            self.broker.start()
            if rc == 0:  # the job had read everything before the broker went down
                fault = None
        else:
            env = self.crash_env("stage.after_first_file") if fault == "stage_crash" else None
            rc = self.stage(batch, attempt, env=env).returncode
        if rc != 0:
            assert fault in ("stage_crash", "broker_kill"), f"stage failed without an injected fault (rc {rc})"
            self.verb("abort", str(batch), attempt)
            return f"batch {batch}: stage failed, attempt aborted"
        if fault == "broker_restart":
            self.broker.restart()
        if fault == "verify_fail":
            files = self.staged_files(batch, attempt, tables=(self.p.sink,))
            if files and self.reader:
                uri = self.rnd.choice(files)
                self.reader.put(uri, self._get(uri) + b"damage")
            elif files:
                with open(self.rnd.choice(files), "ab") as f:
                    f.write(b"damage")
            elif self.reader:
                m = next(k for k in self.reader.keys(self.p.sink)
                         if f"/{attempt}/manifests/" in k and k.rsplit("/", 1)[1].startswith("part-"))
                b, k = self.reader.split(f"{self.p.sink}/{m}")
                self.reader.s3.delete_object(Bucket=b, Key=k)
            else:  # nothing published in the sink: drop a manifest instead
                m = next((self.p.sink / "_eo_ledger" / "attempts").rglob(f"{attempt}/manifests/*/part-*.json"))
                m.unlink()
        r = self.verb("verify", str(batch), attempt,
                      env=self.crash_env("verify.after_prepared") if fault == "verify_crash" else None)
        if fault == "verify_fail":
            assert r.returncode == 4, (r.returncode, r.stderr[-1000:])
            self.verb("abort", str(batch), attempt)
            return f"batch {batch}: verification failed, attempt aborted"
        if fault == "verify_crash":
            assert r.returncode == 137
            return f"batch {batch}: verify process killed after PREPARED"
        if r.returncode != 0:
            raise RuntimeError(f"verify failed: {r.stderr[-2000:]}")
        env = None
        once = str(self.root / f"once-{self.faults.total()}")
        if fault == "commit_transient":
            env = {"EOBATCH_FAIL": "commit.before_delta_commit", "EOBATCH_CRASH_ONCE_DIR": once}
        elif fault == "commit_crash":
            env = self.crash_env("commit.after_first_participant")
        elif fault == "ledger_crash":
            env = self.crash_env("commit.after_delta_commit")
        elif fault == "s3_restart":  # S3 goes away after PREPARED: the commit fails until it is back
            self.s3.stop(kill=True)
            r = self.verb("commit", str(batch))
            assert r.returncode != 0, "commit succeeded with the S3 server down"
            assert self.s3.secret_key not in r.stdout + r.stderr, "the S3 secret is in the commit's output"
            self.s3.start()
        for attempt_no in range(5):  # commit retries, as the commit task's retries do
            r = self.verb("commit", str(batch), env=env)
            if r.returncode == 0:
                return f"batch {batch}: committed" + (f" after {attempt_no} retries" if attempt_no else "")
            if r.returncode == 137:
                return f"batch {batch}: commit process killed ({fault})"
            if "injected transient storage error" not in r.stderr:
                raise RuntimeError(f"commit failed: {r.stderr[-2000:]}")
        raise RuntimeError("commit did not succeed after 5 tries")

    def _get(self, uri: str) -> bytes:
        b, k = self.reader.split(uri)
        return self.reader.s3.get_object(Bucket=b, Key=k)["Body"].read()

    def committed(self) -> int:
        from deltalake import DeltaTable

        if self.reader:
            try:
                return self.reader.table(self.p.sink).transaction_version(self.p.name) or 0
            except Exception:  # no table yet
                return 0

        if not (self.p.sink / "_delta_log").exists():
            return 0
        return DeltaTable(str(self.p.sink)).transaction_version(self.p.name) or 0

    def run(self) -> dict:
        t0 = time.time()
        runs = 0
        while self.committed() < self.n and runs < self.n * 4:
            runs += 1
            if self.rnd.random() < 0.8 or self.files == 0:
                self.land()
            kinds = self.only or {"kafka": KAFKA_FAULTS, "s3": S3_FAULTS}.get(self.backend, FAULTS)
            fault = self.draw(kinds) if self.rnd.random() < self.fault_rate else None
            self.say(f"run {runs} fault={fault or '-'}: {self.dag_run(fault)}")
        # drain: clean runs until every landed file is committed, then wait for zombies, sweep
        while True:
            out = self.dag_run(None)
            self.say(f"drain: {out}")
            if out == "nothing new":
                break
        for z in self.zombies:
            z.wait(timeout=900)
        self.verb("recover")
        r = subprocess.run([PY, "-m", "eobatch.cli", "sweep", self.p.name, "--all"], env=self.env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        try:
            result = self.check()
        finally:
            if self.broker:
                self.broker.stop(kill=True)
            if self.s3:
                self.s3.stop(kill=True)
        result.update(runs=runs, seconds=round(time.time() - t0, 1), faults_by_kind=dict(self.faults),
                      backend=self.backend)
        return result

    def draw(self, kinds: list[str]) -> str:
        if not self.distinct:
            return self.rnd.choice(kinds)
        if not self.deck:
            self.deck = self.rnd.sample(kinds, len(kinds))
        return self.deck.pop()

    # -- the independent check --------------------------------------------------------------
    def check(self) -> dict:
        from deltalake import DeltaTable

        p = self.p
        if self.reader:
            return self.check_s3()
        rows = DeltaTable(str(p.sink)).to_pyarrow_table().to_pylist() if (p.sink / "_delta_log").exists() else []
        got = collections.Counter(r["order_id"] for r in rows)
        want = collections.Counter(r["order_id"] for r in p.landed)
        duplicates = sum(v - 1 for v in got.values() if v > 1) + sum(v for k, v in got.items() if k not in want)
        lost = sum(1 for k in want if k not in got)
        qrows = DeltaTable(str(p.quarantine)).to_pyarrow_table().to_pylist() if (p.quarantine / "_delta_log").exists() else []
        qgot, qwant = collections.Counter(r["raw"] for r in qrows), collections.Counter(p.landed_bad)
        duplicates += sum(max(0, qgot[k] - qwant.get(k, 0)) for k in qgot)
        lost += sum(max(0, qwant[k] - qgot.get(k, 0)) for k in qwant)
        # offsets: every landed file in exactly one committed batch, batches contiguous from 1
        problems = []
        seen = collections.Counter()
        commits = [c for c in delta_log_commits(p.sink) if c["txns"]]
        versions = [c["txns"][0]["version"] for c in commits]
        if versions != list(range(1, len(versions) + 1)):
            problems.append(f"txn versions in the sink log are not 1..n: {versions}")
        if self.backend == "kafka":
            problems += self.check_kafka_offsets(commits)
        else:
            for c in commits:
                for path, _size, _mtime in json.loads(c["commitInfo"]["eo.offsets"]):
                    seen[path] += 1
            landed_files = {str(f) for f in p.landing.rglob("*.jsonl")}
            if set(seen) != landed_files or any(v != 1 for v in seen.values()):
                problems.append(f"offsets: files committed {sum(seen.values())}, distinct {len(seen)}, "
                                f"landed {len(landed_files)}")
        qversions = [c["txns"][0]["version"] for c in delta_log_commits(p.quarantine) if c["txns"]]
        if qversions != versions:
            problems.append(f"quarantine txn versions {qversions} != sink {versions}")
        ledger = json.loads(subprocess.run([PY, "-m", "eobatch.cli", "ledger", p.name, "--format", "json"],
                                           env=self.env, capture_output=True, text=True, check=True).stdout)
        if [b["batch_id"] for b in ledger] != versions or any(b["state"] != "COMMITTED" for b in ledger):
            problems.append(f"ledger {[(b['batch_id'], b['state']) for b in ledger]} != table {versions}")
        orphan_files = orphans(p.sink) + orphans(p.quarantine)
        return {"batches": len(versions), "faults": sum(self.faults.values()), "duplicates": duplicates,
                "lost": lost, "orphans": len(orphan_files), "problems": problems,
                "records": sum(want.values()), "bad_records": sum(qwant.values())}


    def check_s3(self) -> dict:
        """The same checks, through S3: delta-rs with storage options and boto3 listings."""
        p, r = self.p, self.reader

        def rows_of(t):
            return r.read_rows(t) if any(k.startswith("_delta_log/") for k in r.keys(t)) else []

        got = collections.Counter(x["order_id"] for x in rows_of(p.sink))
        want = collections.Counter(x["order_id"] for x in p.landed)
        duplicates = sum(v - 1 for v in got.values() if v > 1) + sum(v for k, v in got.items() if k not in want)
        lost = sum(1 for k in want if k not in got)
        qgot, qwant = collections.Counter(x["raw"] for x in rows_of(p.quarantine)), collections.Counter(p.landed_bad)
        duplicates += sum(max(0, qgot[k] - qwant.get(k, 0)) for k in qgot)
        lost += sum(max(0, qwant[k] - qgot.get(k, 0)) for k in qwant)
        problems = []
        commits = [c for c in r.delta_log_commits(p.sink) if c["txns"]]
        versions = [c["txns"][0]["version"] for c in commits]
        if versions != list(range(1, len(versions) + 1)):
            problems.append(f"txn versions in the sink log are not 1..n: {versions}")
        seen = collections.Counter(path for c in commits for path, _s, _m in json.loads(c["commitInfo"]["eo.offsets"]))
        landed_files = {f"{p.landing}/{k}" for k in r.keys(p.landing) if k.endswith(".jsonl")}
        if set(seen) != landed_files or any(v != 1 for v in seen.values()):
            problems.append(f"offsets: files committed {sum(seen.values())}, distinct {len(seen)}, "
                            f"landed {len(landed_files)}")
        qversions = [c["txns"][0]["version"] for c in r.delta_log_commits(p.quarantine) if c["txns"]]
        if qversions != versions:
            problems.append(f"quarantine txn versions {qversions} != sink {versions}")
        ledger = json.loads(subprocess.run([PY, "-m", "eobatch.cli", "ledger", p.name, "--format", "json"],
                                           env=self.env, capture_output=True, text=True, check=True).stdout)
        if [b["batch_id"] for b in ledger] != versions or any(b["state"] != "COMMITTED" for b in ledger):
            problems.append(f"ledger {[(b['batch_id'], b['state']) for b in ledger]} != table {versions}")
        orphan_files = r.orphans(p.sink) + r.orphans(p.quarantine)
        return {"batches": len(versions), "faults": sum(self.faults.values()), "duplicates": duplicates,
                "lost": lost, "orphans": len(orphan_files), "problems": problems,
                "records": sum(want.values()), "bad_records": sum(qwant.values())}

    def check_kafka_offsets(self, commits: list[dict]) -> list[str]:
        """Ranges in the Delta history start at 0, are contiguous, and end at each partition's end."""
        from confluent_kafka import Consumer, TopicPartition

        problems, end = [], {}
        for c in commits:
            for part, (f, t) in json.loads(c["commitInfo"]["eo.offsets"])["partitions"].items():
                if f != end.get(part, 0) or t < f:
                    problems.append(f"partition {part}: batch {c['txns'][0]['version']} reads [{f}, {t}) after {end.get(part, 0)}")
                end[part] = t
        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap, "group.id": "chaos-check",
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
    ap.add_argument("--backend", choices=["files", "kafka", "s3"], default="files")
    ap.add_argument("--master", default="local[*]", help="Spark master of the stage job (default local[*])")
    ap.add_argument("--workdir", default=None, help="kept after the run (default: a temporary folder, removed)")
    ap.add_argument("--fault-rate", type=float, default=0.6)
    ap.add_argument("--faults", default=None, help="comma-separated fault kinds to draw from (default: all)")
    ap.add_argument("--distinct", action="store_true", help="draw each fault kind once before any repeats")
    args = ap.parse_args(argv)
    if args.batches < 1:
        ap.error("--batches must be at least 1")
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="eobatch-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    only = args.faults.split(",") if args.faults else None
    known = set(FAULTS + KAFKA_FAULTS + S3_FAULTS)
    if only and not set(only) <= known:
        ap.error(f"unknown fault kinds {sorted(set(only) - known)}")
    chaos = Chaos(args.batches, args.seed, work, args.fault_rate, backend=args.backend, master=args.master,
                  only=only, distinct=args.distinct)
    try:
        res = chaos.run()
    finally:  # never leave a broker or an S3 server behind, whatever failed
        for service in (chaos.broker, chaos.s3):
            if service is not None:
                service.stop(kill=True)
    print(json.dumps(res, indent=1))
    ok = (res["duplicates"] == res["lost"] == res["orphans"] == 0 and not res["problems"]
          and res["batches"] >= args.batches)
    print(f"chaos: batches={res['batches']} faults={res['faults']} duplicates={res['duplicates']} "
          f"lost={res['lost']} orphans={res['orphans']}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
