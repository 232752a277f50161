"""Scale-out: landing files and Delta tables on S3, the stage job on a Spark standalone cluster.

A real S3-compatible server (S3Proxy, filesystem backend, started from its Maven Central jar)
and a real standalone cluster (a master and two workers from pyspark's own spark-class) on
loopback, shared by the module. Everything is checked through S3 by an independent reader
(tests/support/s3checks.py: boto3 listings, raw _delta_log, delta-rs with explicit storage options).
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import subprocess
import threading
import time
import uuid

import pytest

from eobatch.job import launch
from eobatch.sinks import CommitConflict, StagedFile
from eobatch.sinks.delta import DeltaParticipant
from eobatch.storage.fs import S3Storage, S3StorageError
from support.delta_races import race_first_commit
from support.harness import REPO, base_env, kill_group, orders, stage, wait_for
from support.protocol_runs import run_next
from support.s3checks import BUCKET, S3Pipeline, S3Reader, s3_pipeline
from support.services import S3Server, SparkCluster

pytestmark = pytest.mark.integration
ONE_PARTITION_PER_FILE = {"spark.sql.files.openCostInBytes": str(1 << 30)}
# The DAG test ships the jars with --jars (each executor fetches them from the driver); the
# others take them from the same path on every node (the workers share this disk), which
# spares copying the ~690 MB AWS SDK bundle into every executor.
JARS_ON_NODES = {"EOBATCH_JARS_ON_NODES": "1"}


# -- fixtures ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """The S3 server; its endpoint and credentials are in this process's environment (as
    `source .services/env` would put them) for the product code and the child processes."""
    srv = S3Server(str(tmp_path_factory.mktemp("s3"))).start()
    srv.create_bucket(BUCKET)
    with srv.in_environment():
        yield srv
    srv.stop(kill=True)


@pytest.fixture(scope="module")
def reader(s3) -> S3Reader:
    return S3Reader(s3.endpoint, s3.access_key, s3.secret_key, s3.region)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SparkCluster(str(tmp_path_factory.mktemp("spark")), workers=2, cores=1, memory="2g").start()
    yield c
    c.stop()


def stage_on(cluster: SparkCluster, p, batch_id: int, attempt: str, env: dict | None = None, wait: bool = True,
             conf: dict | None = None):
    """The stage task's spark-submit, against the standalone master (client deploy mode)."""
    return stage(p, batch_id, attempt, env=env, wait=wait, conf=conf, master=cluster.master_url)


def run_batch_on(cluster, p) -> int | None:
    proto = p.protocol()
    proto.recover()
    plan, _ = proto.plan()
    if plan is None:
        return None
    attempt = launch.new_attempt_id(1)
    r = stage_on(cluster, p, plan.batch_id, attempt)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    return plan.batch_id


# -- S3Storage against the real server ------------------------------------------------------
def test_s3_put_if_absent_second_writer_loses(s3):
    fs = S3Storage()
    uri = f"s3a://{BUCKET}/unit/{uuid.uuid4().hex}/plans/0000000001.json"
    assert fs.put_if_absent(uri, b"first") is True
    assert fs.put_if_absent(uri, b"second") is False
    assert fs.read_bytes(uri) == b"first"
    # many racing writers: exactly one wins
    uri2 = uri.replace("0000000001", "0000000002")
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append((i, fs.put_if_absent(uri2, b"w%d" % i))))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, won in results if won]
    assert len(winners) == 1, results
    assert fs.read_bytes(uri2) == b"w%d" % winners[0]


def test_s3_listing_stat_delete(s3):
    fs = S3Storage()
    root = f"s3a://{BUCKET}/unit/{uuid.uuid4().hex}"
    for i in range(7):
        fs.write_atomic(f"{root}/d{i % 3}/f{i}.jsonl", b"x" * i)
    fs.write_atomic(f"{root}/d0/.f.jsonl.abc.tmp", b"temp")  # a temp name: never listed
    listed = list(fs.list_files(root, page_size=2))  # 4 pages
    assert sorted(f.path for f in listed) == sorted(f"{root}/d{i % 3}/f{i}.jsonl" for i in range(7))
    assert {f.path.rsplit("/", 1)[1]: f.size for f in listed}["f5.jsonl"] == 5
    assert fs.list_dirs(root) == ["d0", "d1", "d2"]
    assert list(fs.list_files(f"{root}/d1", recursive=False)) and not list(fs.list_files(root, recursive=False))
    st = fs.stat(f"{root}/d2/f5.jsonl")
    assert st.size == 5 and abs(st.mtime_ms / 1000 - time.time()) < 120
    assert st.mtime_ms == next(f.mtime_ms for f in listed if f.path.endswith("f5.jsonl"))
    assert fs.stat(f"{root}/nope") is None and not fs.exists(f"{root}/nope")
    with pytest.raises(FileNotFoundError):
        fs.read_bytes(f"{root}/nope")
    with fs.open_read(f"{root}/d2/f5.jsonl") as fh:
        assert fh.read() == b"xxxxx"
    fs.delete(f"{root}/d2/f5.jsonl")
    fs.delete(f"{root}/d2/f5.jsonl")  # idempotent
    assert fs.stat(f"{root}/d2/f5.jsonl") is None
    assert list(fs.list_files(f"s3a://{BUCKET}/no-such-prefix")) == []
    assert fs.arrow_path(f"{root}/d0/f0.jsonl") == f"{root[len('s3a://'):]}/d0/f0.jsonl"


def test_s3_listing_after_a_path_is_the_objects_after_it_and_its_list_calls_are_theirs(s3, monkeypatch):
    """Issue 44: listing from a position on is S3's own StartAfter: the objects whose key sorts
    after it, in as many LIST calls as pages of those objects (not of the prefix)."""
    fs = S3Storage()
    root = f"s3a://{BUCKET}/after/{uuid.uuid4().hex}"
    for d in range(3):
        for i in range(4):
            fs.write_atomic(f"{root}/dt=0{d}/f{i}.jsonl", b"x")
    calls: list[dict] = []
    real = fs._list
    monkeypatch.setattr(fs, "_list", lambda prefix, kw: calls.append(dict(kw)) or real(prefix, kw))
    after = f"{root}/dt=01/f2.jsonl"
    got = [f.path for f in fs.list_files(root, page_size=2, after=after)]
    assert got == [f"{root}/dt=01/f3.jsonl", *(f"{root}/dt=02/f{i}.jsonl" for i in range(4))]
    assert len(calls) == 3 and calls[0]["StartAfter"] == after.split(f"{BUCKET}/", 1)[1], calls
    calls.clear()
    assert len(list(fs.list_files(root, page_size=2))) == 12 and len(calls) == 6


def test_s3_listing_of_keys_holding_an_equals_sign_lists_each_once_page_by_page(s3):
    """Date-partitioned landing keys (``dt=.../``) over more than one page: with the continuation
    token, S3Proxy sent every next page back to the prefix's start (the token comes back URL-encoded,
    ``dt%3D01/...``, and is read as a key that sorts before every ``dt=`` key): the listing never ended.
    Pages are asked for after the last key instead."""
    fs = S3Storage()
    root = f"s3a://{BUCKET}/eq/{uuid.uuid4().hex}"
    want = sorted(f"{root}/dt=0{d}/hour=0{h}/f.jsonl" for d in range(3) for h in range(3))
    for path in want:
        fs.write_atomic(path, b"x")
    got = list(itertools.islice(fs.list_files(root, page_size=2), 50))  # bounded: a loop fails, never hangs
    assert [f.path for f in got] == want
    # a listing of one level (Delimiter): pages of files and folders; each next page starts above the
    # last folder's keys
    for name in ("a.jsonl", "dt=00x.jsonl", "z.jsonl"):
        fs.write_atomic(f"{root}/{name}", b"x")
    flat = list(itertools.islice(fs.list_files(root, recursive=False, page_size=2), 50))
    assert [f.path.rsplit("/", 1)[1] for f in flat] == ["a.jsonl", "dt=00x.jsonl", "z.jsonl"]
    assert fs.list_dirs(root) == ["dt=00", "dt=01", "dt=02"]


def test_s3_errors_never_show_credentials(s3, monkeypatch):
    from eobatch.storage import s3conf

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-" + s3.secret_key)
    fs = S3Storage()
    with pytest.raises(S3StorageError) as e:
        fs.write_atomic(f"s3a://{BUCKET}/unit/x.json", b"x")
    msg = str(e.value)
    assert "SignatureDoesNotMatch" in msg or "AccessDenied" in msg, msg
    assert s3.secret_key not in msg and s3.access_key not in msg
    assert s3conf.redact(f"k={s3.access_key} s={'wrong-' + s3.secret_key}") == "k=*** s=***"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_key)
    monkeypatch.setenv("S3_ENDPOINT", f"http://127.0.0.1:{s3.port + 1 if s3.port < 65535 else 1}")
    with pytest.raises(S3StorageError) as e:  # server unreachable
        S3Storage().stat(f"s3a://{BUCKET}/unit/x.json")
    assert s3.secret_key not in str(e.value) and s3.access_key not in str(e.value)


def test_two_committers_racing_on_one_s3_table_never_lose_a_commit(s3, reader):
    """delta-rs commits on S3 with If-None-Match on the log entry: of two writers racing for one
    version one gets it, the other retries on top (different appIds) or conflicts (same appId)."""
    import pyarrow as pa

    table = f"s3a://{BUCKET}/race/{uuid.uuid4().hex[:8]}"
    schema = pa.schema([("x", pa.int64())])
    DeltaParticipant("sink", table).ensure_table(schema, [])
    n = 6
    errors, versions = [], []

    def commit(app: str, batch: int, retries: int = 0):
        """Like the commit task: a failed commit is retried after a delay (Airflow's retry_delay,
        shortened); one that happened is not redone."""
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(0.2 * attempt)
            part = DeltaParticipant("sink", table)
            if part.committed_batch(app) >= batch:
                return
            try:
                versions.append(part.commit(
                    app, batch, [StagedFile(f"eo_batches/{app}-{batch}.parquet", 1)], schema, [],
                    {"eo.pipeline": app, "eo.batchId": str(batch)}))
                return
            except Exception as e:  # noqa: BLE001
                errors.append((app, e))

    # different appIds at once: every commit lands once, each in its own version (a loser of
    # the race for a version fails or retries; retried like the commit task, none is lost)
    threads = [threading.Thread(target=commit, args=(f"app{i}", 1, 12)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    commits = reader.delta_log_commits(table)
    assert [c["version"] for c in commits] == list(range(n + 1)), (commits, errors)
    assert sorted(t["appId"] for c in commits for t in c["txns"]) == sorted(f"app{i}" for i in range(n))
    # one appId, one batch, twice at once: exactly one commit, the other is told
    errors.clear()
    threads = [threading.Thread(target=commit, args=("same", 1)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    same = [c for c in reader.delta_log_commits(table) for t in c["txns"] if t["appId"] == "same"]
    assert len(same) == 1, same
    # a racer that got an error is told it may have lost (CommitConflict): the protocol then
    # re-reads the txn and finds the batch committed (by itself or by the other)
    assert all(isinstance(e, CommitConflict) for _, e in errors), errors
    assert DeltaParticipant("sink", table).committed_batch("same") == 1


def test_committers_racing_to_create_an_s3_table_each_see_it_and_commit_once(s3, reader):
    """The first batch of a pipeline: two (or more) committers find no table and create it at
    once. Whichever create wins, every racer must then see the table and either commit the
    batch or be told another did; none may fail on a table that is not there yet, and the
    table is created once."""
    for _ in range(40):  # the old code lost the race about once in 15 rounds
        race_first_commit(f"s3a://{BUCKET}/create-race/{uuid.uuid4().hex[:8]}", reader.delta_log_commits)


def test_overlapping_replays_racing_on_an_s3_landing_zone_publish_each_record_once(s3, tmp_path, reader):
    """`make replay` twice at once, overlapping selections, on a pipeline whose landing zone and
    ledger are on S3: the replay records are conditional PUTs, so each quarantined record lands
    in one replay file, and the next run publishes each once (staged without Spark: the replay
    file is an ordinary landing file to the job)."""
    p = s3_pipeline(tmp_path, reader)
    relaxed = p.yaml_path.read_text()
    p.yaml_path.write_text(relaxed.replace("customer STRING", "customer STRING NOT NULL"))
    p.land("a.jsonl", [{"order_id": "o1", "customer": "c"}, {"order_id": "anon1"}, {"order_id": "anon2"}],
           bad=["{not json"])
    assert run_next(p.protocol()) == 1
    p.yaml_path.write_text(relaxed)  # the rule was wrong: customer is optional
    env = {**base_env(), "PIPELINES_DIR": str(p.yaml_path.parent)}
    racers = [subprocess.Popen(["make", "-s", "-o", "venv", "replay", "PIPELINE=orders", "BATCH=1", *selection],
                               cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for selection in (["REASON=customer"], [])]
    outs = [r.communicate(timeout=300)[0] for r in racers]
    assert sorted(r.returncode for r in racers) in ([0, 0], [0, 2]), outs
    assert run_next(p.protocol()) == 2 and run_next(p.protocol()) is None
    published = collections.Counter(r["order_id"] for r in reader.read_rows(p.sink))
    assert published == collections.Counter(["o1", "anon1", "anon2"]), outs
    assert len(reader.keys(f"{p.landing}/replay")) == 1 + all(r.returncode == 0 for r in racers), outs
    assert sorted(r["batch_id"] for r in reader.read_rows(p.quarantine)) == [1, 1, 1, 2]  # {not json, again


# -- landing objects overwritten between plan and read -----------------------------------------
def _three_orders(kind: str, prefix: str) -> bytes:
    """Three records as a landing object of ``kind``; the same size for any 1-letter ``prefix``."""
    rows = [{"order_id": f"{prefix}-{i}", "customer": "c", "amount": 1.0} for i in range(3)]
    if kind == "files":
        return "".join(json.dumps(r) + "\n" for r in rows).encode()
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out, compression="NONE", use_dictionary=False)
    return out.getvalue()


def test_a_landing_object_read_while_it_is_overwritten_stops_at_the_overwrite(s3):
    """The plan's count reads the object HEAD saw (every ranged GET with If-Match of its ETag):
    an overwrite after the HEAD, or between two reads, raises ObjectChanged; two objects are never
    counted as one."""
    from eobatch.storage.fs import ObjectChanged

    fs = S3Storage()
    uri = f"s3a://{BUCKET}/unit/{uuid.uuid4().hex}/a.jsonl"
    fs.write_atomic(uri, b"a" * 100)
    f, info = fs.open_landing(uri)
    assert info.identity == [s3.client().head_object(Bucket=BUCKET, Key=uri.split("/", 3)[3])["ETag"], None,
                             info.mtime_ms]
    fs.write_atomic(uri, b"b" * 100)
    with pytest.raises(ObjectChanged, match="overwritten or deleted while read"):
        f.read(10)
    big = b"a" * (9 << 20)  # more than the reader's buffer: two GETs
    fs.write_atomic(uri, big)
    f, info = fs.open_landing(uri)
    assert f.read(10) == b"a" * 10
    fs.write_atomic(uri, b"b" * len(big))
    f.seek(len(big) - 10)
    with pytest.raises(ObjectChanged, match=f"{uri}"):
        f.read(10)


@pytest.mark.parametrize("kind", ["files", "parquet"])
def test_a_landing_object_overwritten_after_the_plan_within_its_second_and_size_is_never_read(s3, tmp_path, reader,
                                                                                              kind):
    """An object put again under the planned key, same size, within the same second (S3's
    LastModified has whole seconds, so size and mtime are unchanged): the plan recorded its ETag,
    and the stage job refuses the new object, naming it, before reading anything.

    The store is told the overwrite's time (the backing file's mtime set to the planned second)
    rather than the test racing the clock: a plan slower than the rest of its second, which a
    loaded machine gives five times in a row, made the race lose."""
    name = "a.jsonl" if kind == "files" else "a.parquet"
    p = s3_pipeline(tmp_path, reader, kind=kind)
    uri = f"{p.landing}/{name}"
    reader.put(uri, _three_orders(kind, "a"))
    plan, _ = p.protocol().plan()
    planned = plan.range["files"][0]
    reader.put(uri, _three_orders(kind, "x"))
    backing = os.path.join(s3.home, "data", *uri.split("/", 2)[2].split("/"))
    second = planned["mtime_ms"] / 1000 + 0.5
    os.utime(backing, (second, second))
    now = S3Storage().stat(uri)
    assert (now.size, now.mtime_ms) == (planned["size"], planned["mtime_ms"]), (now, planned)
    assert plan.rows_in == 3 and planned["identity"][0] != now.identity[0]
    r = stage(p, plan.batch_id, "a1")
    out = r.stdout + r.stderr
    assert r.returncode != 0 and f"{uri}: another object than the one planned is there now" in out, out[-3000:]
    assert p.protocol().ledger.stage_summary(plan.batch_id, "a1") is None


def test_a_json_lines_object_overwritten_after_the_jobs_check_is_never_read(s3, tmp_path, reader):
    """JSON lines: each of Spark's reads of a planned object is pinned to the ETag the plan
    recorded (the line reader opens it with the planned status: s3a's If-Match), so an object put
    under the key after the job's check and before Spark opens it fails the read, naming the
    object; its records are never read."""
    import base64

    from eobatch.sources.files import FilesSource

    p = s3_pipeline(tmp_path, reader)
    uri = f"{p.landing}/a.jsonl"
    reader.put(uri, _three_orders("files", "a"))
    rng, n, _ = FilesSource(p.cfg).next_range([], 100)
    spec = {"range": rng, "root": p.landing, "overwrite": _three_orders("files", "x").decode()}
    argv = ["spark-submit", "--master", "local[1]", "--jars", ",".join(launch.jars(p.cfg))]
    for k, v in launch.spark_conf(p.cfg).items():
        argv += ["--conf", f"{k}={v}"]
    argv += [str(REPO / "tests" / "support" / "s3_read_after_overwrite.py"),
             base64.b64encode(json.dumps(spec).encode()).decode()]
    r = subprocess.run(argv, env=base_env(), capture_output=True, text=True, timeout=600)
    result = [json.loads(x[len("RESULT "):]) for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert result, r.stdout[-2000:] + r.stderr[-4000:]
    assert "raws" not in result[0], result  # before: the records of the object put since
    assert uri.split("/", 2)[2] in result[0]["error"] and "412" in result[0]["error"], result[0]["error"][-2000:]


def test_an_object_overwritten_while_the_job_reads_fails_verify_and_a_plan_from_before_etags_reads_as_before(
        s3, tmp_path, reader):
    """What the stage job records after its reads (``read.seen``, in its stage summary) is the
    object under the key then: verify refuses the batch, naming the object, when it is not the
    planned one (put again while Spark read, which s3a pins per stream, not per batch). A range
    recorded without identities (an older ledger) is checked by size and mtime before the read and
    not after it: it stages as it did."""
    from eobatch.sources.files import FilesRange, FilesSource, changed_since_plan
    from eobatch.sources.files.read import seen
    from support.records import stage_summary

    def summary(rng: dict):
        return stage_summary(3, seen(rng, None))

    p = s3_pipeline(tmp_path, reader)
    uri = f"{p.landing}/a.jsonl"
    reader.put(uri, _three_orders("files", "a"))
    rng, n, _ = FilesSource(p.cfg).next_range([], 100)
    old = {"files": [{k: v for k, v in f.items() if k != "identity"} for f in rng["files"]]}
    assert n == 3 and changed_since_plan(old) == changed_since_plan(rng) == []
    assert FilesRange.from_json(rng).check_stage(summary(rng)) == []
    reader.put(uri, _three_orders("files", "x"))  # as if while the job read
    problems = FilesRange.from_json(rng).check_stage(summary(rng))
    assert len(problems) == 1 and problems[0].startswith(f"{uri}: the stage job read another file, or a changed one")
    assert FilesRange.from_json(old).check_stage(summary(old)) == []


# -- the cluster ---------------------------------------------------------------------------
def test_cluster_deploy_mode_is_refused_for_python_on_standalone(cluster, s3, tmp_path, reader):
    """Spark standalone cannot run a Python application's driver on the cluster: spark-submit
    refuses before anything runs. The product submits in client mode (documented)."""
    p = s3_pipeline(tmp_path, reader)
    argv = launch.spark_submit_argv(p.cfg, 1, "t1-x", master=cluster.master_url)
    argv[1:1] = ["--deploy-mode", "cluster"]
    r = subprocess.run(argv, env=base_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "Cluster deploy mode is currently not supported for python applications on standalone clusters" \
        in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]


def _ok(run):
    assert run.rc == 0 and run.state == "success", run.log[-6000:]


def test_dag_runs_files_on_s3_to_delta_on_s3_on_the_cluster(cluster, s3, tmp_path, reader, airflow):
    """The real DAG (airflow dags test) with only locations and connections changed: s3a://
    paths in the YAML, spark_default -> spark://127.0.0.1:<port>, S3 credentials from the
    connection the YAML names (``aws_conn_id: lake_s3``), resolved by the Amazon provider's hook
    from an AWS profile of a shared credentials file (the environment has no keys). They never
    appear in the task logs."""
    p = s3_pipeline(tmp_path, reader, max_records=300, extra="aws_conn_id: lake_s3\n")
    p.land("2026/a.jsonl", orders("a", 300), bad=["{not json", '{"order_id": null}'])
    p.land("2026/b.jsonl", orders("b", 200), bad=['{"order_id": "b-x", "amount": "lots"}'])
    profiles = tmp_path / "aws-credentials"
    profiles.write_text(f"[eobatch-lake]\naws_access_key_id = {s3.access_key}\n"
                        f"aws_secret_access_key = {s3.secret_key}\n")
    env = {
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1",
                                                  "port": cluster.port}),
        "AIRFLOW_CONN_LAKE_S3": json.dumps({"conn_type": "aws", "extra": {
            "profile_name": "eobatch-lake", "endpoint_url": s3.endpoint, "region_name": s3.region}}),
        "AWS_SHARED_CREDENTIALS_FILE": str(profiles), "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "S3_ENDPOINT": "", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
    }
    # one run carries both batches (max_batches_per_run defaults to 10): one application on the cluster
    run = airflow(p, extra_env=env)
    _ok(run)
    assert s3.secret_key not in run.log and s3.access_key not in run.log
    assert f"--master spark://127.0.0.1:{cluster.port}" in run.log, run.log[-3000:]
    assert "verify: batch 1 PREPARED" in run.log and "commit: batch 2 COMMITTED" in run.log, run.log[-3000:]
    reader.assert_exactly_once(p, batches=2)
    ledger = p.protocol().ledger
    summaries = [ledger.stage_summary(b, ledger.attempts(b)[0]) for b in (1, 2)]
    assert summaries[0].spark_app_id.startswith("app-"), summaries[0].spark_app_id  # a standalone app, not local-*
    assert summaries[0].spark_app_id == summaries[1].spark_app_id  # staged by one application
    again = airflow(p, extra_env=env)
    _ok(again)
    assert "nothing new" in again.log


def test_dag_reads_an_upstream_delta_table_in_another_store_through_its_own_connection(cluster, s3, tmp_path,
                                                                                        reader, airflow):
    """source.conn_id: the upstream Delta table is on another S3 server with other credentials (a
    second S3Proxy, written by a foreign writer, delta-rs); the pipeline's own tables on the first.
    The DAG on the cluster plans from the upstream's log, its executors read the upstream's files
    and write the pipeline's tables, each store with its own settings; the upstream's keys never
    appear in the task logs; every upstream row is published once, and a second run finds nothing."""
    import pyarrow as pa
    from deltalake import write_deltalake

    other = S3Server(str(tmp_path / "other-s3")).start()
    try:
        other.create_bucket("upstream")
        up_reader = S3Reader(other.endpoint, other.access_key, other.secret_key, other.region)
        upstream = "s3a://upstream/lake/orders"
        for part in (orders("u", 3), orders("v", 2)):  # two upstream versions
            write_deltalake("s3://upstream/lake/orders", pa.Table.from_pylist(part), mode="append",
                            storage_options=up_reader.storage_options())
        root = f"s3a://{BUCKET}/{uuid.uuid4().hex[:8]}/lake"
        yaml_path = tmp_path / "pipelines" / "silver.yaml"
        yaml_path.parent.mkdir(parents=True, exist_ok=True)
        yaml_path.write_text(f"""\
name: silver
source: {{kind: delta, table: {upstream}, conn_id: upstream_s3, max_records_per_batch: 3}}
schema: "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"
sink: {{table: {root}/silver}}
quarantine: {{table: {root}/silver_bad}}
spark: {{conf: {{spark.executor.memory: 1g}}}}
retries: {{stage: 0, commit: 3, delay_seconds: 2}}
""")
        p = S3Pipeline(yaml_path, "silver", "", f"{root}/silver", f"{root}/silver_bad", reader)
        env = {
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1",
                                                      "port": cluster.port}),
            "AIRFLOW_CONN_UPSTREAM_S3": json.dumps({"conn_type": "aws", "login": other.access_key,
                                                    "password": other.secret_key, "extra": {
                                                        "endpoint_url": other.endpoint, "region_name": other.region}}),
        }
        run = airflow(p, extra_env=env)
        _ok(run)
        assert other.secret_key not in run.log and other.access_key not in run.log
        assert "commit: batch 2 COMMITTED" in run.log, run.log[-3000:]  # versions 0 and 1: 3 + 2 records
        rows = reader.read_rows(p.sink)
        assert sorted(r["order_id"] for r in rows) == sorted(o["order_id"] for o in orders("u", 3) + orders("v", 2))
        plans = [p.protocol().ledger.plan(b) for b in (1, 2)]
        assert [pl.range["versions"] for pl in plans] == [[0, 1], [1, 2]]
        assert not [k for k in up_reader.keys(upstream) if not k.startswith(("_delta_log/", "part-"))]  # read only
        again = airflow(p, extra_env=env)
        _ok(again)
        assert "nothing new" in again.log
    finally:
        other.stop(kill=True)


def test_worker_killed_mid_stage_then_s3_restarted_between_verify_and_commit(cluster, s3, tmp_path, reader):
    p = s3_pipeline(tmp_path, reader)
    p.land("a.jsonl", orders("a", 400), bad=["nope"])
    p.land("b.jsonl", orders("b", 400))
    proto = p.protocol()
    plan, _ = proto.plan()
    once = tmp_path / "once"
    once.mkdir()
    pause = {"EOBATCH_PAUSE": "stage.after_first_file", "EOBATCH_CRASH_ONCE_DIR": str(once)}
    conf = {**ONE_PARTITION_PER_FILE, **{f"spark.executorEnv.{k}": v for k, v in pause.items()}}
    attempt = launch.new_attempt_id(1)
    proc = stage_on(cluster, p, plan.batch_id, attempt, wait=False, conf=conf, env=JARS_ON_NODES)
    marker = once / "pause-stage.after_first_file"
    try:
        wait_for(lambda: marker.exists() and marker.read_text().strip(), timeout=300,
                 what="a task paused mid-write")
        victim = cluster.worker_of(int(marker.read_text()))
        assert victim is not None, "the paused task runs under no worker"
        cluster.kill_worker(victim)  # the machine running that task is gone, executor and all
        out, _ = proc.communicate(timeout=420)
    except BaseException:
        kill_group(proc)  # never leave a driver behind
        raise
    print(f"worker {victim} killed mid-stage; spark-submit exited {proc.returncode}; "
          f"lost executor seen by the driver: {'Lost executor' in out or 'ExecutorLost' in out}")
    if proc.returncode != 0:  # the attempt failed instead of rescheduling: abort, next attempt
        proto.abort(plan.batch_id, attempt, "worker lost")
        attempt = launch.new_attempt_id(2)
        r = stage_on(cluster, p, plan.batch_id, attempt, conf=ONE_PARTITION_PER_FILE, env=JARS_ON_NODES)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    restart = threading.Thread(target=cluster.start_worker, args=(victim,))
    restart.start()
    prepared = proto.verify(plan.batch_id, attempt)
    assert prepared.rows_published == 800 and prepared.rows_quarantined == 1

    # the S3 server goes down after PREPARED and comes back (same data) while commit retries
    s3.stop(kill=True)
    errors = []
    with pytest.raises(Exception) as e:
        p.protocol().commit(plan.batch_id)
    errors.append(str(e.value))
    back = threading.Thread(target=lambda: (time.sleep(2), s3.start()))
    back.start()
    committed = None
    for _ in range(10):  # the commit task's retries
        try:
            committed = p.protocol().commit(plan.batch_id)
            break
        except Exception as err:  # noqa: BLE001
            errors.append(str(err))
            time.sleep(2)
    back.join()
    assert committed is not None, errors[-3:]
    assert all(s3.secret_key not in m and s3.access_key not in m for m in errors)
    rec = p.protocol().recover()  # the next run: sweeps what the lost task attempt left
    assert rec.committed == 1 and rec.pending is None
    restart.join()
    reader.assert_exactly_once(p, batches=1)


def test_zombie_driver_only_one_attempt_publishes_and_the_loser_is_swept(cluster, s3, tmp_path, reader):
    """A retried stage task while the first spark-submit still runs (lost heartbeat): two
    drivers on the cluster at once, one executor each. Both stage; only one is PREPARED (a
    conditional PUT on S3); two committers at once publish it once; the loser's files go."""
    p = s3_pipeline(tmp_path, reader)
    p.land("a.jsonl", orders("a", 300), bad=["{"])
    proto = p.protocol()
    plan, _ = proto.plan()
    a1, a2 = launch.new_attempt_id(1), launch.new_attempt_id(2)
    procs = [stage_on(cluster, p, plan.batch_id, a, wait=False, conf={"spark.cores.max": "1"}, env=JARS_ON_NODES)
             for a in (a1, a2)]
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, out[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_group(proc)
    results = {}
    threads = [threading.Thread(target=lambda a=a: results.__setitem__(a, p.protocol().verify(plan.batch_id, a)))
               for a in (a1, a2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winner = results[a1].attempt
    assert results[a2].attempt == winner  # one PREPARED, the same answer for both
    loser = a2 if winner == a1 else a1
    assert any(f"/{loser}/" in k for k in reader.orphans(p.sink)), "the loser's files exist until swept"
    versions = []
    threads = [threading.Thread(target=lambda: versions.append(p.protocol().commit(plan.batch_id).delta_versions))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(versions) == 2 and versions[0] == versions[1], versions
    commits = [c for c in reader.delta_log_commits(p.sink) if c["txns"]]
    assert len(commits) == 1 and commits[0]["commitInfo"]["eo.attempt"] == winner
    p.protocol().recover()  # the next run sweeps the loser
    reader.assert_exactly_once(p, batches=1)


def test_two_committers_creating_a_new_s3_table_at_once(s3, reader):
    """The first batch of a new pipeline, committed twice at once (a zombie and its retry): the
    table is created once, the batch committed once, the loser told it lost (CommitConflict),
    never another error."""
    import pyarrow as pa

    schema = pa.schema([("x", pa.int64())])
    for _ in range(4):
        table = f"s3a://{BUCKET}/create-race/{uuid.uuid4().hex[:8]}"
        errors = []
        both_see_no_table = threading.Barrier(2, timeout=30)

        class Racing(DeltaParticipant):
            waited = False

            def _table(self):
                t = super()._table()
                if t is None and not self.waited:  # both decide to create the table, then go
                    self.waited = True
                    both_see_no_table.wait()
                return t

        def commit():  # the threads run, and are joined, within this iteration (B023 does not apply)
            try:
                Racing("sink", table).commit("app", 1, [StagedFile("eo_batches/f.parquet", 1)],
                                             schema, [], {"eo.pipeline": "app", "eo.batchId": "1"})
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=commit) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(isinstance(e, CommitConflict) for e in errors), errors
        commits = reader.delta_log_commits(table)
        assert sum(len(c["txns"]) for c in commits) == 1, commits
        assert DeltaParticipant("sink", table).committed_batch("app") == 1
