"""eobatch.airflow.operators: the Airflow operators and sensors only translate: the product's errors by
kind, in one place (``_step``); S3 credentials for spark-submit; the late-files metric."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from eobatch import errors
from eobatch.core.formats import BatchPlan, PreparedBatch, StagedFile, fingerprint_of
from eobatch.core.ledger import Ledger
from eobatch.job import launch
from eobatch.job.jars import checked as REAL_CHECKED
from eobatch.protocol import Protocol
from eobatch.protocol.batch_run import BatchRun, Report
from support.protocol_runs import land, run
from support.spark_hook import MASTERS, fake_secret


class _TI:
    """A task instance as the operators use it: XCom pulls answered from ``xcoms`` (the plan task's
    batch 1 when not given), pushes recorded; first try."""

    try_number = 1

    def __init__(self, xcoms: dict | None = None, dag_runs: tuple[str, ...] = ("r",)):
        self.xcoms = {("plan", "return_value"): 1} if xcoms is None else xcoms
        self.pushed: dict = {}
        self.dag_runs = dag_runs  # the DAG runs Airflow holds

    def get_dr_count(self, dag_id, run_ids=None, **_):
        return sum(1 for r in run_ids or () if r in self.dag_runs)

    def xcom_pull(self, task_ids=None, key="return_value"):
        return self.xcoms.get((task_ids, key))

    def xcom_push(self, key, value):
        self.pushed[key] = value


# -- errors: each kind translated in one place (_step) ----------------------------------------------


@pytest.mark.parametrize("sensor", [True, False])
def test_airflow_translates_each_kind_in_one_place(sensor):
    from airflow.sdk import BaseOperator, BaseSensorOperator
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from eobatch.airflow.operators import _step

    task = (BaseSensorOperator(task_id="s") if sensor else BaseOperator(task_id="t"))

    def raises(e):
        def fn():
            raise e
        return fn

    wait = errors.BatchInFlight("batch 3 of run r is not decided yet")
    if sensor:
        assert _step(task, "plan", raises(wait)) is None  # the sensor pokes again
    else:
        with pytest.raises(errors.BatchInFlight):  # any other task: Airflow's retry
            _step(task, "recover", raises(wait))
    with pytest.raises(AirflowFailException, match="cannot be committed"):
        _step(task, "commit", raises(errors.CommitBlocked("PREPARED batch 1 cannot be committed")))
    with pytest.raises(errors.RetryableError):  # a retryable error is raised as it is: Airflow's retries
        _step(task, "commit", raises(errors.RetryableError("S3 is down")))
    with pytest.raises(AirflowSkipException, match="nothing new"):
        _step(task, "plan", lambda: Report(lines=["x"], skip="nothing new"))
    r = _step(task, "verify", lambda: Report(lines=["PREPARED"], warnings=["late"], value=7))
    assert r.value == 7


# A terminal protocol error fails the task at once (AirflowFailException: no retries), never after
# eight retries with backoff.


def test_commit_of_a_prepared_batch_whose_files_are_gone_fails_without_retry(make_cfg, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from eobatch.airflow.operators import CommitOperator
    from eobatch.protocol import Protocol

    cfg = make_cfg()
    proto = Protocol(cfg)
    assert proto.ledger.put_plan(BatchPlan(pipeline="orders", batch_id=1, source_kind="files", range={"files": []},
                                           rows_in=1, config_fingerprint="f", planned_at="t"))
    adds = {"sink": [StagedFile("eo_batches/b0000000001/a1/part-0.parquet", 10, {}, 0, "{}")], "quarantine": []}
    assert proto.ledger.put_prepared(PreparedBatch(
        pipeline="orders", batch_id=1, attempt="a1", adds=adds, arrow_schema={}, partition_by={},
        fingerprint=fingerprint_of(adds), rows_in=1, rows_valid=1, rows_quarantined=0, rows_published=1,
        bytes=10, files=1, prepared_at="t", verify_seconds=0.0, stage_seconds=0.0))
    op = CommitOperator(task_id="commit", pipeline_file=cfg.file)
    xcoms = {("plan", "return_value"): [1], ("stage", "attempts"): {"1": "a1"},  # what the run's tasks left
             ("verify", "return_value"): {"1": {"attempt": "a1", "fingerprint": fingerprint_of(adds)}}}
    ctx = {"ti": _TI(xcoms), "params": {}, "dag_run": None, "run_id": "r1"}
    with pytest.raises(AirflowFailException, match="PREPARED batch 1 cannot be committed.*is gone"):
        op.execute(ctx)


# -- S3 credentials and spark-submit ---------------------------------------------------------------


# ---- the stage task itself: the real operator, the real hook, no spark-submit process ----


@pytest.fixture
def s3_stage(tmp_path, monkeypatch, write_yaml, base_cfg):
    """run(conn_id) -> (command line, process env of spark-submit) of a stage task on an S3 pipeline."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("delta-spark_2.13-4.0.0.jar", "hadoop-aws-3.5.0.jar", "bundle-2.29.52.jar", "eobatch-jvm.jar"):
        (jars / name).write_bytes(b"")
    monkeypatch.setenv("EOBATCH_JARS_DIR", str(jars))
    # these tests look at the command line and the environment: the jars' own check has its tests
    # (tests/security/test_supply_chain.py, tests/unit/job/test_jars.py)
    from eobatch.job import jars as jar_check

    monkeypatch.setattr(jar_check, "checked", lambda *_a, **_kw: sorted(str(j) for j in jars.glob("*.jar")
                                                                         if j.name != "eobatch-jvm.jar"))
    monkeypatch.setattr(jar_check, "own_jvm_jar", lambda *_a: str(jars / "eobatch-jvm.jar"))
    # a YARN master needs the cluster's configuration folder where the stage task runs (preflight)
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path / "hadoop-conf"))
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    # unset, and restored after the test: the stage task exports the aws connection into os.environ
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "S3_ENDPOINT", "AWS_ENDPOINT_URL",
              "AWS_REGION", "AIRFLOW_CONN_AWS_DEFAULT"):
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    doc = dict(base_cfg)
    doc["sink"] = {"table": "s3a://bkt/lake/orders", "partition_by": []}
    doc["quarantine"] = {"table": "s3a://bkt/lake/orders_bad"}
    (tmp_path / "landing").mkdir(exist_ok=True)
    pipeline_file = write_yaml(doc)

    seen = {}

    def fake_submit(self, application="", **kwargs):
        from airflow.sdk.log import redact

        seen["cmd"] = self._build_spark_submit_command(application)
        # the environment of spark-submit's process, as the provider's submit gives it to Popen (a
        # copy of os.environ updated with its ``_env`` when it has one; tests/security/test_stage_env.py
        # runs the provider's own submit)
        seen["env"] = {**os.environ, **self._env} if self._env else dict(kwargs.get("env") or os.environ)
        seen["masked"] = {v: redact(f"<{v}>") for v in seen.get("watch", ())}

    monkeypatch.setattr(SparkSubmitHook, "submit", fake_submit)
    # the task's check of the file against the batch's plan reads the ledger, on a bucket that is not
    # there: what these tests look at is the command line (test_the_stage_task_refuses_... checks it)
    monkeypatch.setattr(BatchRun, "check_stage", lambda _self, _batch_id: Report())
    monkeypatch.setattr(Ledger, "prepared", lambda _self, _batch_id: None)  # (and whether it is staged already)
    monkeypatch.setattr(Protocol, "staged_attempt", lambda _self, _batch_id: None)
    # (and the job's spec is a file of that ledger: the spec's own test writes and reads it, test_launch.py)
    monkeypatch.setattr(launch, "spec_args", lambda _cfg, todo: ["--spec-file", f"s3a://bkt/job-{min(todo)}.json",
                                                                 "--spec-sha256", "0" * 64])

    def _run(conn_id: str, watch=(), **changes):
        from eobatch.airflow.operators import StageOperator

        if changes:  # top-level keys of the pipeline's YAML
            write_yaml(dict(doc, **changes))
        seen.clear()
        seen["watch"] = tuple(watch)
        op = StageOperator(task_id="stage", pipeline_file=pipeline_file, conn_id=conn_id)
        op.execute({"ti": _TI(), "params": {}, "dag_run": None, "run_id": "r1"})
        return seen

    return _run


def test_the_stage_task_refuses_a_file_edited_since_the_plan_before_it_builds_the_job(
        spark_conn, monkeypatch, make_cfg, tmp_path):
    """The job is built from the pipeline file the stage task reads: a key the batch depends on
    that changed since its plan fails the task at once (ConfigChanged, naming key, values and
    repair), before an attempt id is handed out or spark-submit starts; put back, it stages."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk.exceptions import AirflowFailException

    from eobatch.airflow.operators import StageOperator

    submitted = []
    monkeypatch.setattr(SparkSubmitHook, "submit", lambda self, application="", **_kw: submitted.append(application))
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    cfg = make_cfg()
    land(cfg, "a.jsonl", ["o1", "o2"])
    plan, _new = Protocol(cfg).plan()
    assert plan is not None
    schema = cfg.schema
    make_cfg(schema=schema + ", note9 STRING")  # the same file, edited
    op = StageOperator(task_id="stage", pipeline_file=cfg.file, conn_id=spark_conn("local[*]"))
    ti = _TI()
    with pytest.raises(AirflowFailException, match=r"schema was .* when batch 1 was planned and is now .*note9.*Repair: "):
        op.execute({"ti": ti, "params": {}, "dag_run": None, "run_id": "r1"})
    assert not submitted and "attempt" not in ti.pushed
    make_cfg(schema=schema)  # put back, as the refusal says
    StageOperator(task_id="stage", pipeline_file=cfg.file, conn_id=spark_conn("local[*]")).execute(
        {"ti": ti, "params": {}, "dag_run": None, "run_id": "r1"})
    assert len(submitted) == 1 and ti.pushed["attempt"]


# ---- the stage task checks what `eobatch doctor` checks before it launches (eobatch.preflight) ----


@pytest.fixture
def local_stage(spark_conn, monkeypatch, make_cfg, tmp_path):
    """stage(conn_id=None) -> what was submitted: the real stage task of a planned local pipeline,
    with the checkout's real jars; spark-submit's start recorded, never run."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from eobatch.airflow.operators import StageOperator

    submitted: list[str] = []
    monkeypatch.setattr(SparkSubmitHook, "submit", lambda self, application="", **_kw: submitted.append(application))
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    cfg = make_cfg()
    land(cfg, "a.jsonl", ["o1", "o2"])
    assert Protocol(cfg).plan()[0] is not None

    def _stage(conn_id: str | None = None) -> list[str]:
        op = StageOperator(task_id="stage", pipeline_file=cfg.file, conn_id=conn_id or spark_conn("local[*]"))
        op.execute({"ti": _TI(), "params": {}, "dag_run": None, "run_id": "r1"})
        return submitted

    _stage.submitted = submitted
    return _stage


def test_a_worker_without_java_fails_the_stage_with_doctors_sentence_not_sparks(local_stage, monkeypatch, tmp_path):
    """JAVA_HOME naming a folder with no java, and no java on PATH: the task fails terminally (no
    retry) with doctor's sentence, and spark-submit never starts (no `spark-class: ... No such file`)."""
    from airflow.sdk.exceptions import AirflowFailException

    from eobatch import preflight

    empty = tmp_path / "no-jdk"
    empty.mkdir()
    monkeypatch.setenv("JAVA_HOME", str(empty))
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # spark-submit and python, no java
    sentence = preflight.java_check().text
    assert sentence.startswith("no java (JAVA_HOME or PATH): install a Java 17 runtime")
    with pytest.raises(AirflowFailException, match=r"not launched, this worker cannot run its Spark job: FAIL java: "
                                                   + re.escape(sentence)) as e:
        local_stage()
    assert "`eobatch doctor` makes the same checks" in str(e.value)
    assert not local_stage.submitted


def test_a_missing_spark_connection_fails_the_stage_naming_it_and_how_to_define_it(local_stage, spark_conn):
    """No such Airflow connection: the Spark provider would fall back to YARN and fail with "either
    HADOOP_CONF_DIR or YARN_CONF_DIR must be set"; the task says what is missing instead."""
    from airflow.sdk.exceptions import AirflowFailException

    conn_id = spark_conn(None)  # named, never defined
    with pytest.raises(AirflowFailException, match=rf"FAIL connections: the pipeline's Spark connection '{conn_id}' "
                                                   rf"\(spark.conn_id\) is not defined in Airflow .*master 'yarn'.*"
                                                   rf"AIRFLOW_CONN_{conn_id.upper()}=.*: add it"):
        local_stage(conn_id)
    assert not local_stage.submitted


def test_a_yarn_connection_without_the_clusters_configuration_fails_the_stage_naming_both(local_stage, spark_conn,
                                                                                        monkeypatch, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    conn_id = spark_conn("yarn")
    with pytest.raises(AirflowFailException, match=rf"the Spark connection '{conn_id}' has master 'yarn' \(YARN\), "
                                                   r"and neither HADOOP_CONF_DIR nor YARN_CONF_DIR is set"):
        local_stage(conn_id)
    assert not local_stage.submitted
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))  # the cluster's configuration: launched
    assert local_stage(conn_id)


def test_an_s3_pipeline_with_only_the_core_jars_fails_the_stage_naming_the_command(spark_conn, s3_stage,
                                                                                   monkeypatch, tmp_path):
    """The jars folder holds the core set (Delta, checked against the list); the pipeline has s3a://
    locations: refused before spark-submit, naming the command that fetches the s3 set."""
    import shutil

    from airflow.sdk.exceptions import AirflowFailException

    from eobatch import paths
    from eobatch.job import jars as jar_check

    monkeypatch.setattr(jar_check, "checked", REAL_CHECKED)  # the real jar check, not the fixture's
    core = tmp_path / "core-jars"
    core.mkdir()
    for name in jar_check.listed(sets=("core",)):
        shutil.copy2(Path(paths.CHECKOUT) / ".jars" / name, core / name)
    monkeypatch.setattr(jar_check, "own_jvm_jar", lambda *_a: str(Path(paths.CHECKOUT) / ".jars" / paths.JVM_EXTENSION))
    monkeypatch.setenv("EOBATCH_JARS_DIR", str(core))
    monkeypatch.setattr(paths, "CHECKOUT", None)  # as installed: the console command is named
    with pytest.raises(AirflowFailException, match=r"FAIL jars: the jars folder .*core-jars holds only the core jars "
                                                   r".*run `eobatch jars --with s3`"):
        s3_stage(spark_conn("local[*]"))


@pytest.mark.parametrize("host,forwarded", MASTERS)
def test_stage_never_puts_a_session_token_on_the_command_line(spark_conn, s3_stage, monkeypatch, host, forwarded):
    token = fake_secret("FAKE-TOKEN-")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", fake_secret("AKIA"))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", fake_secret("secret-"))
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    seen = s3_stage(spark_conn(host))
    assert not any(token in arg for arg in seen["cmd"]), seen["cmd"]
    assert ("AWS_SESSION_TOKEN" in seen["env"]) is forwarded


def test_stage_masks_credentials_from_the_environment_before_spark_submit(spark_conn, s3_stage, monkeypatch):
    """No aws_default connection: the environment's credentials are masked all the same."""
    values = {"AWS_ACCESS_KEY_ID": fake_secret("AKIA"), "AWS_SECRET_ACCESS_KEY": fake_secret("secret-"),
              "AWS_SESSION_TOKEN": fake_secret("FAKE-TOKEN-")}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    seen = s3_stage(spark_conn("local[*]"), watch=values.values())
    assert seen["masked"] == {v: "<***>" for v in values.values()}


def test_stage_masks_credentials_from_the_aws_connection_before_spark_submit(spark_conn, s3_stage, monkeypatch):
    values = {"login": fake_secret("AKIA"), "password": fake_secret("secret-"), "token": fake_secret("FAKE-TOKEN-")}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({
        "conn_type": "aws", "login": values["login"], "password": values["password"],
        "extra": {"aws_session_token": values["token"], "region_name": "eu-west-1"}}))
    seen = s3_stage(spark_conn("yarn"), watch=values.values())
    assert seen["masked"] == {v: "<***>" for v in values.values()}
    assert not any(values["token"] in arg for arg in seen["cmd"])


@pytest.mark.parametrize("host,forwarded", MASTERS)
def test_a_kafka_connections_settings_travel_as_env_or_the_stage_refuses(spark_conn, s3_stage, monkeypatch, host,
                                                                         forwarded):
    """source.conn_id: the connection's settings but the servers go to spark-submit's environment,
    never its command line; a Spark connection that would not keep them there fails the stage."""
    from airflow.sdk.exceptions import AirflowFailException

    from eobatch.sources.kafka.client import CLIENT_ENV

    secret = fake_secret("pw-")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROD", json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": "b1:9093", "security.protocol": "SASL_SSL", "sasl.password": secret}}))
    source = {"kind": "kafka", "conn_id": "kafka_prod", "topic": "orders"}
    if not forwarded:
        with pytest.raises(AirflowFailException, match="client deploy mode"):
            s3_stage(spark_conn(host), source=source)
        return
    seen = s3_stage(spark_conn(host), watch=[secret], source=source)
    assert json.loads(seen["env"][CLIENT_ENV]) == {"security.protocol": "SASL_SSL", "sasl.password": secret}
    assert not any(secret in arg for arg in seen["cmd"]) and seen["masked"] == {secret: "<***>"}


@pytest.mark.parametrize("host,forwarded", MASTERS)
def test_an_upstream_tables_own_connection_serves_its_bucket_as_env_or_the_stage_refuses(
        spark_conn, s3_stage, monkeypatch, host, forwarded):
    """A delta source's conn_id (an upstream table in another store): the connection's endpoint and
    credentials serve that bucket alone and reach spark-submit as its environment
    (EOBATCH_S3_BUCKETS), masked, never on its command line; the pipeline's own tables keep the
    pipeline's credentials; a Spark connection that would not keep the environment fails the stage."""
    from airflow.sdk.exceptions import AirflowFailException

    from eobatch.storage import s3conf

    monkeypatch.setenv(s3conf.BUCKETS_ENV, "")  # restored (unset) after the test: the task writes it
    key, secret = fake_secret("AKIA"), fake_secret("secret-")
    monkeypatch.setenv("AIRFLOW_CONN_UPSTREAM_S3", json.dumps({"conn_type": "aws", "login": key, "password": secret,
                                                               "extra": {"endpoint_url": "http://127.0.0.1:9",
                                                                         "region_name": "eu-west-2"}}))
    source = {"kind": "delta", "table": "s3a://upstream/lake/orders", "conn_id": "upstream_s3"}
    if not forwarded:
        with pytest.raises(AirflowFailException, match="client deploy mode"):
            s3_stage(spark_conn(host), source=source)
        return
    seen = s3_stage(spark_conn(host), watch=[key, secret], source=source)
    assert json.loads(seen["env"][s3conf.BUCKETS_ENV]) == {"upstream": {
        "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "S3_ENDPOINT": "http://127.0.0.1:9",
        "AWS_REGION": "eu-west-2"}}
    assert seen["env"].get("AWS_ACCESS_KEY_ID") != key  # the pipeline's own tables: not the upstream's keys
    assert not any(secret in arg or key in arg for arg in seen["cmd"]), seen["cmd"]
    assert seen["masked"] == {key: "<***>", secret: "<***>"}


def test_an_upstream_connection_that_airflow_does_not_have_fails_the_task_naming_it(spark_conn, s3_stage,
                                                                                      monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from eobatch.storage import s3conf

    monkeypatch.setenv(s3conf.BUCKETS_ENV, "")
    source = {"kind": "delta", "table": "s3a://upstream/lake/orders", "conn_id": "upstream_s3"}
    with pytest.raises(AirflowFailException, match=r"source.conn_id 'upstream_s3': there is no Airflow connection of "
                                                   r"that id .* serve bucket 'upstream'"):
        s3_stage(spark_conn("local[*]"), source=source)


def test_the_stage_uses_the_connection_the_yaml_names(spark_conn, s3_stage, monkeypatch, tmp_path):
    key, secret = fake_secret("AKIA"), fake_secret("secret-")
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({"conn_type": "aws", "login": "not-this",
                                                               "password": "not-this"}))
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps({"conn_type": "aws", "login": key, "password": secret}))
    seen = s3_stage(spark_conn("local[*]"), aws_conn_id="lake_s3")
    assert (seen["env"]["AWS_ACCESS_KEY_ID"], seen["env"]["AWS_SECRET_ACCESS_KEY"]) == (key, secret)
    assert not any(secret in arg for arg in seen["cmd"])


# -- the late files metric: what the plan found late, counted through Airflow's StatsD client ----------


def test_the_plan_records_what_was_late_and_a_statsd_metric_counts_it(by_prefix, tmp_path):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    land(by_prefix, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])
    plan = run(proto, 1)
    assert [(x["interval"].split("/")[0], [p.rsplit("/", 1)[-1] for p in x["files"]], x["action"])
            for x in plan.late] == [("2026-01-01T00:00:00+00:00", ["late.jsonl"], "republish")]
    # the plan task's metrics, through Airflow's own StatsD client, received by a real UDP socket
    from support.statsd_sink import received_by_statsd

    code = ("from eobatch.airflow import metrics; "
            f"metrics.send(metrics.late_file_metrics('orders', {plan.late!r}))")
    want = {"airflow.eobatch.orders.late_files:1|c", "airflow.eobatch.orders.late_files_republish:1|c"}
    assert want <= received_by_statsd(tmp_path, code, want)


# -- asset events: one per committed batch, through the pipeline's alias ----------------------------
# The operators run as the DAG factory declares them (outlets), against batches of the real protocol
# (pyarrow stager, real delta-rs tables). What they add is read back with the Task SDK's own
# _serialize_outlet_events: the payload the task runner sends to Airflow when the task succeeds.


def _prepared_batch(proto: Protocol, ids: range, name: str) -> tuple[int, str]:
    from support.protocol_runs import land_ids
    from support.pyarrow_stager import stage

    land_ids(proto.cfg, name, ids)
    plan, _ = proto.plan(run_id="r")
    assert plan is not None
    attempt = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, attempt)
    return plan.batch_id, attempt


def _task_of_factory_dag(cfg, task_id: str):
    from eobatch.airflow.dag_factory import build_dag

    return build_dag(cfg).get_task(task_id)


class _StoredEvents:
    """The asset events Airflow stored (those of task runs that succeeded), as the Task SDK's
    ``inlet_events[alias]`` reads them: newest first, up to a limit. (The real one is read in
    tests/integration/test_asset_events.py.)"""

    def __init__(self, dag_runs: tuple[str, ...] = ("r",)):
        self.events: list[dict] = []
        self.dag_runs = dag_runs

    def __getitem__(self, alias):
        return self

    def ascending(self, ascending: bool = True):
        assert not ascending
        return self

    def limit(self, n: int) -> list:
        import types

        return [types.SimpleNamespace(extra=e["extra"]) for e in reversed(self.events)][:n]


def _run_task(task, batch_id: int, attempt: str | dict[int, str] | None, dry_run: bool = False, airflow: _StoredEvents | None = None,
              dies: bool = False) -> list[dict]:
    """Execute ``task`` as Airflow's task runner would; the asset events it would send on success,
    stored in ``airflow`` unless the task ``dies`` before its success is recorded."""
    import types

    from airflow.sdk.execution_time.context import OutletEventAccessors
    from airflow.sdk.execution_time.task_runner import _serialize_outlet_events

    airflow = _StoredEvents() if airflow is None else airflow
    conf = {"dry_run": True} if dry_run else {}
    xcoms: dict[tuple[str, str], object]
    if isinstance(attempt, dict):  # a run of several batches: {batch: attempt}
        xcoms = {("plan", "return_value"): sorted(attempt), ("stage", "attempts"): {str(b): a for b, a in attempt.items()},
                 ("verify", "return_value"): {str(b): {"attempt": a, "dry_run": dry_run} for b, a in attempt.items()}}
    else:
        xcoms = {("plan", "return_value"): batch_id, ("stage", "attempt"): attempt,
                 ("verify", "return_value"): {"attempt": attempt, "dry_run": dry_run}}
    events = OutletEventAccessors()
    ctx = {"ti": _TI(xcoms, airflow.dag_runs), "params": dict(conf), "dag_run": types.SimpleNamespace(conf=conf),
           "run_id": "r", "outlet_events": events, "inlet_events": airflow}
    task.execute(ctx)
    out = list(_serialize_outlet_events(events))
    if not dies:
        airflow.events += out
    return out


def _sink_versions(table: str) -> dict[int, int]:
    """{batch id: Delta version} from the raw _delta_log (txn actions)."""
    out = {}
    for f in sorted((Path(table) / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn:
                out[txn["version"]] = int(f.stem)
    return out


def test_a_committed_batch_emits_one_event_per_table_and_a_recommit_none(make_cfg):
    from eobatch.airflow.assets import asset_uri

    cfg = make_cfg()
    proto = Protocol(cfg)
    batch_id, attempt = _prepared_batch(proto, range(5), "a.jsonl")
    commit = _task_of_factory_dag(cfg, "commit")
    assert [o.name for o in commit.outlets] == ["eobatch-orders"]  # an alias, never a static Asset
    airflow = _StoredEvents()
    events = _run_task(commit, batch_id, attempt, airflow=airflow)
    assert [(e["source_alias_name"], e["dest_asset_key"]["uri"]) for e in events] == [
        ("eobatch-orders", asset_uri(cfg.sink_table)), ("eobatch-orders", asset_uri(cfg.quarantine_table))]
    sink = events[0]["extra"]
    assert asset_uri(cfg.sink_table) == "file://" + cfg.sink_table
    assert (sink["pipeline"], sink["batch_id"], sink["table"]) == ("orders", 1, "sink")
    assert sink["delta_version"] == _sink_versions(cfg.sink_table)[1]
    assert events[1]["extra"]["delta_version"] == _sink_versions(cfg.quarantine_table)[1]
    assert (sink["rows_in"], sink["rows_published"], sink["rows_quarantined"]) == (5, 5, 0)
    assert sink["range"]["files"] == [str(Path(cfg.source.path) / "a.jsonl")]
    json.dumps(events)  # what Airflow stores: JSON
    # the same commit again (a cleared task, a retry after the batch was committed): no event
    assert _run_task(commit, batch_id, attempt, airflow=airflow) == []


def test_a_dry_run_emits_nothing(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    batch_id, _ = _prepared_batch(proto, range(3), "a.jsonl")
    proto.commit(batch_id)
    # the next batch, verified as a dry run (not PREPARED), then the dry run's commit step
    from support.protocol_runs import land_ids
    from support.pyarrow_stager import stage

    land_ids(cfg, "b.jsonl", range(3, 6))
    plan, _ = proto.plan(run_id="dry")
    assert plan is not None
    attempt = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, attempt, dry_run=True)
    assert _run_task(_task_of_factory_dag(cfg, "commit"), plan.batch_id, attempt, dry_run=True) == []
    assert proto.ledger.committed(plan.batch_id) is None and max(_sink_versions(cfg.sink_table)) == batch_id


def test_a_batch_committed_by_recovery_emits_its_event_there_once(make_cfg):
    """A run's commit that never happened (PREPARED, then the run died): the next run's recover
    commits the batch and emits its event; the dead run's commit, cleared later, emits none."""
    cfg = make_cfg()
    proto = Protocol(cfg)
    batch_id, attempt = _prepared_batch(proto, range(4), "a.jsonl")
    recover = _task_of_factory_dag(cfg, "recover")
    airflow = _StoredEvents()
    events = _run_task(recover, 0, None, airflow=airflow)
    assert [(e["extra"]["batch_id"], e["extra"]["table"]) for e in events] == [(1, "sink"), (1, "quarantine")]
    assert events[0]["extra"]["delta_version"] == _sink_versions(cfg.sink_table)[batch_id]
    assert "emitted_late" not in events[0]["extra"]
    assert _run_task(recover, 0, None, airflow=airflow) == []
    assert _run_task(_task_of_factory_dag(cfg, "commit"), batch_id, attempt, airflow=airflow) == []


@pytest.mark.parametrize("emitter", ["commit", "recover"])
def test_events_lost_by_a_task_killed_before_its_success_are_emitted_once_later(make_cfg, emitter):
    """The commit task wrote the COMMITTED record and added its events, then died before Airflow
    stored its success (so Airflow holds no event). Its retry (``commit``) or the next run's
    ``recover`` emits them, said so in the extra; one that dies too stores nothing, and the one
    after it emits them; then no more."""
    cfg = make_cfg()
    proto = Protocol(cfg)
    batch_id, attempt = _prepared_batch(proto, range(4), "a.jsonl")
    airflow = _StoredEvents()
    commit, task = _task_of_factory_dag(cfg, "commit"), _task_of_factory_dag(cfg, emitter)
    assert len(_run_task(commit, batch_id, attempt, airflow=airflow, dies=True)) == 2
    assert proto.ledger.committed(batch_id) is not None and airflow.events == []
    assert len(_run_task(task, batch_id, attempt, airflow=airflow, dies=True)) == 2
    assert airflow.events == []
    late = _run_task(task, batch_id, attempt, airflow=airflow)
    assert [(e["extra"]["batch_id"], e["extra"]["table"], e["extra"]["emitted_late"]) for e in late] == [
        (1, "sink", True), (1, "quarantine", True)]
    assert late[0]["extra"]["delta_version"] == _sink_versions(cfg.sink_table)[batch_id]
    for t in (commit, task, _task_of_factory_dag(cfg, "recover")):
        assert _run_task(t, batch_id, attempt, airflow=airflow) == []
    assert len(airflow.events) == 2


def test_late_events_are_not_taken_for_those_of_an_earlier_pipeline_of_the_same_name(make_cfg):
    """Airflow holds events of batch 1 of an earlier pipeline of the same name (other tables: the
    pipeline was created again, or its tables moved): they are not this batch 1's. Found by the
    integration test of late events run after another test's pipeline of the same name."""
    cfg = make_cfg()
    proto = Protocol(cfg)
    batch_id, attempt = _prepared_batch(proto, range(3), "a.jsonl")
    airflow = _StoredEvents()
    for table in ("sink", "quarantine"):
        airflow.events.append({"extra": {"pipeline": cfg.name, "batch_id": batch_id, "table": table,
                                         "table_uri": f"file:///elsewhere/{table}", "fingerprint": "other"}})
    commit, recover = _task_of_factory_dag(cfg, "commit"), _task_of_factory_dag(cfg, "recover")
    assert len(_run_task(commit, batch_id, attempt, airflow=airflow, dies=True)) == 2
    late = _run_task(recover, batch_id, attempt, airflow=airflow)
    assert [(e["extra"]["table"], e["extra"]["emitted_late"]) for e in late] == [("sink", True), ("quarantine", True)]
    assert _run_task(recover, batch_id, attempt, airflow=airflow) == []


def test_a_run_of_three_batches_gets_an_event_per_table_of_each_and_its_lost_events_back(make_cfg):
    """A run carries batches 1..3: its commit task adds two events of each (sink, quarantine), in
    order. A commit task that dies after its commits loses all six (Airflow stores a task's events
    with its success); the next run's recover emits the six, once."""
    from support.protocol_runs import land_ids
    from support.pyarrow_stager import stage

    c = make_cfg()
    cfg = make_cfg(source={"kind": "files", "path": c.source.path, "max_records_per_batch": 2})
    proto = Protocol(cfg)
    for i in range(3):
        land_ids(cfg, f"f{i}.jsonl", range(2 * i, 2 * i + 2))
    plans, _ = proto.plan_batches(run_id="r", max_batches=3)
    attempts = {p.batch_id: stage(proto, p.batch_id) for p in plans}
    for b, a in attempts.items():
        proto.verify(b, a)
    commit, recover = _task_of_factory_dag(cfg, "commit"), _task_of_factory_dag(cfg, "recover")
    airflow = _StoredEvents()
    sent = _run_task(commit, 1, attempts, airflow=airflow, dies=True)
    assert [(e["extra"]["batch_id"], e["extra"]["table"]) for e in sent] == [
        (b, t) for b in (1, 2, 3) for t in ("sink", "quarantine")]
    assert _sink_versions(cfg.sink_table) == {1: 1, 2: 2, 3: 3}
    late = _run_task(recover, 0, None, airflow=airflow)
    assert sorted((e["extra"]["batch_id"], e["extra"]["table"], e["extra"]["emitted_late"]) for e in late) == sorted(
        (b, t, True) for b in (1, 2, 3) for t in ("sink", "quarantine"))
    assert _run_task(recover, 0, None, airflow=airflow) == []
    assert _run_task(commit, 1, attempts, airflow=airflow) == [], "a commit task run again: nothing twice"


def test_no_late_event_for_a_batch_another_airflow_ran(make_cfg):
    """A batch planned by a DAG run this Airflow does not hold (`make demo`'s, another Airflow's):
    its events are that Airflow's; this one's recover emits none."""
    cfg = make_cfg()
    proto = Protocol(cfg)
    batch_id, _ = _prepared_batch(proto, range(2), "a.jsonl")
    proto.commit(batch_id)
    assert _run_task(_task_of_factory_dag(cfg, "recover"), 0, None, airflow=_StoredEvents(dag_runs=())) == []


def test_operators_without_outlets_commit_and_emit_nothing(make_cfg):
    """The operators used alone (no alias declared): the batch commits, no outlet event is added."""
    from eobatch.airflow.operators import CommitOperator

    cfg = make_cfg()
    proto = Protocol(cfg)
    batch_id, attempt = _prepared_batch(proto, range(2), "a.jsonl")
    assert _run_task(CommitOperator(task_id="commit", pipeline_file=cfg.file), batch_id, attempt) == []
    assert proto.ledger.committed(batch_id) is not None


# -- the plan task and its landing folder ---------------------------------------------------------


def test_the_plan_task_fails_on_a_missing_landing_folder_and_reports_files_not_taken_through_statsd(make_cfg, tmp_path):
    """The plan task (its poke, as Airflow runs it, in a process with StatsD on): a landing folder
    that does not exist fails it without retries (AirflowFailException naming the folder and the
    setting; gauge ``landing_unreadable`` 1); once the folder is there, a plan reports the file whose
    name it does not take (gauges ``landing_not_taken`` 1, ``landing_unreadable`` 0)."""
    from support.statsd_sink import received_by_statsd

    cfg = make_cfg()
    landing = Path(cfg.source.path)
    landing.rmdir()
    code = f"""
import os, pathlib
from airflow.sdk.exceptions import AirflowFailException
from eobatch.airflow.operators import PlanOperator
ctx = {{"params": {{}}, "dag_run": None, "run_id": "r1"}}
op = PlanOperator(task_id="plan", pipeline_file={cfg.file!r})
try:
    op.poke(ctx)
    raise SystemExit("the plan of a missing landing folder did not fail")
except AirflowFailException as e:
    assert "the landing folder {landing} (source.path of {cfg.file}) does not exist" in str(e), e
landing = pathlib.Path({str(landing)!r})
landing.mkdir()
(landing / "a.jsonl").write_text('{{"order_id": "a"}}\\n')
(landing / "part-0004.json").write_text('{{"order_id": "b"}}\\n')
assert op.poke(ctx).is_done
"""
    want = {"airflow.eobatch.orders.landing_unreadable:1|g", "airflow.eobatch.orders.landing_not_taken:1|g",
            "airflow.eobatch.orders.landing_unreadable:0|g", "airflow.eobatch.orders.landing_skipped:1|g"}
    assert want <= received_by_statsd(tmp_path, code, want)
    plan = Protocol(cfg).ledger.plan(1)
    assert [n for n in plan.notes if n.startswith("not taken: 1 landing file(s)") and "part-0004.json" in n]
