"""Issue 42, a shared Airflow: a pipeline's transform and its YAML SQL never see the worker's secrets.

The stage job's environment is an allow-list (``launch.spark_env``), handed to spark-submit's
process by the stage task's hook (``StageSubmitHook``) in place of the task's whole environment;
SQL of a pipeline YAML that reaches the JVM, a file or a shell (``java_method``, a subquery, ...)
is refused at load (``sql_guard.refusal``) and, for a spec past the loader, by the job on Spark's
own parse (``sql_guard.job_refusal``)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import textwrap
import uuid

import pytest

from eobatch.config import sql_guard
from eobatch.errors import ConfigError
from eobatch.job import launch
from eobatch.pipelines.loader import load_pipeline
from support.harness import REPO, base_env, orders, write_pipeline

SECRET_VAR = "AIRFLOW_CONN_SECRET_DB"
# set by spark-submit's scripts, the JVM or the Python worker's launcher, not inherited
SET_BY_SPARK = {"MASTER", "PWD", "OLDPWD", "SHLVL", "_", "OMP_NUM_THREADS"}


def _secret() -> str:
    return f"postgres://u:TOPSECRET-{uuid.uuid4().hex}@h/db"


# -- the environment ----------------------------------------------------------------------------------


def test_the_stage_jobs_environment_is_the_allow_list_and_the_pipelines_own_settings():
    secret = _secret()
    environ = {
        "PATH": "/usr/bin", "HOME": "/home/w", "LC_ALL": "C.UTF-8", "JAVA_HOME": "/jdk", "HADOOP_CONF_DIR": "/etc/h",
        "EOBATCH_CRASH": "stage.between_batches", "MY_CA_FILE": "/etc/ca.pem", "CORP_PROXY": "http://p:3128",
        SECRET_VAR: secret, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": secret, "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_ACCESS_KEY_ID": "AKIAOTHER", "EOBATCH_S3_BUCKETS": json.dumps({"other": {"AWS_SECRET_ACCESS_KEY": secret}}),
        "KAFKA_PASSWORD": secret, "EOBATCH_STAGE_ENV_ALLOW": "MY_CA_FILE, CORP_*",
    }
    env = launch.spark_env({"AWS_ACCESS_KEY_ID": "AKIAMINE"}, environ=environ)
    assert secret not in json.dumps(env)
    assert {k: env[k] for k in ("HOME", "LC_ALL", "JAVA_HOME", "HADOOP_CONF_DIR", "EOBATCH_CRASH", "MY_CA_FILE",
                                "CORP_PROXY")} == {k: environ[k] for k in ("HOME", "LC_ALL", "JAVA_HOME",
                                                                           "HADOOP_CONF_DIR", "EOBATCH_CRASH",
                                                                           "MY_CA_FILE", "CORP_PROXY")}
    assert env["AWS_ACCESS_KEY_ID"] == "AKIAMINE"  # the pipeline's own, given by the caller
    assert not {SECRET_VAR, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AWS_SECRET_ACCESS_KEY", "EOBATCH_S3_BUCKETS",
                "KAFKA_PASSWORD"} & set(env)
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1" and env["PATH"].endswith("/usr/bin")


class _TI:
    try_number = 1

    def __init__(self):
        self.pushed: dict = {}

    def xcom_pull(self, task_ids=None, key="return_value"):
        return 1 if (task_ids, key) == ("plan", "return_value") else None

    def xcom_push(self, key, value):
        self.pushed[key] = value


class _Done:
    """spark-submit as Popen returns it, finished at once with nothing to say."""

    stdout: list[str] = []
    returncode = 0

    def wait(self):
        return 0

    def poll(self):
        return 0


@pytest.mark.parametrize("master", ["local[*]", "yarn"])
def test_the_stage_task_starts_spark_submit_with_the_stage_environment_only(tmp_path, monkeypatch, master):
    """The real operator and the provider's own ``submit``: the environment Popen receives holds no
    variable of the task's environment outside the allow-list (the provider would give it a copy
    of os.environ), whatever the master (YARN: the provider sets its ``_env`` too)."""
    import importlib

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from eobatch.airflow.operators import StageOperator
    from eobatch.protocol import Protocol

    hook_module = importlib.import_module(SparkSubmitHook.__module__)
    secret = _secret()
    monkeypatch.setenv(SECRET_VAR, secret)
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", secret)
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AIRFLOW_CONN_EO_SPARK_ENV", json.dumps({"conn_type": "spark", "host": master}))
    p = write_pipeline(tmp_path)
    p.land("a.jsonl", orders("a", 3))
    plan, _ = Protocol(p.cfg).plan()
    assert plan is not None
    if master == "yarn":  # the task's check before it launches (preflight): YARN needs the cluster's configuration
        monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path / "hadoop-conf"))
    popen = []
    real_popen = subprocess.Popen  # the preflight's `java -version` runs; spark-submit is recorded

    def fake_popen(argv, **kw):
        if os.path.basename(str(argv[0])) != "spark-submit":
            return real_popen(argv, **kw)
        popen.append((argv, kw))
        return _Done()

    monkeypatch.setattr(hook_module.subprocess, "Popen", fake_popen)
    op = StageOperator(task_id="stage", pipeline_file=str(p.yaml_path), conn_id="eo_spark_env")
    op.execute({"ti": _TI(), "params": {}, "dag_run": None, "run_id": "r1"})
    [(argv, kw)] = popen
    env = kw["env"]
    assert secret not in json.dumps(env) and secret not in " ".join(argv)
    assert set(env) <= {k for k in os.environ if launch.stage_env_allowed(k)} | set(launch.spark_env())
    assert env["PYSPARK_PYTHON"] and "PATH" in env


# -- the transform, through the DAG: the real stage task, hook, spark-submit and Python workers --------

ENV_DUMP = '''\
import json
import os

from pyspark.sql import functions as F


def transform(df, ctx):
    """Every row carries the driver's environment and the Python worker's (a UDF runs there)."""
    worker = F.udf(lambda _: json.dumps(dict(os.environ)))
    return df.withColumn("driver_env", F.lit(json.dumps(dict(os.environ)))).withColumn(
        "worker_env", worker(F.col("order_id")))
'''


@pytest.mark.integration
def test_a_transform_sees_no_secret_of_the_worker_and_none_reaches_the_table(tmp_path, airflow):
    from support.checks import read_rows

    p = write_pipeline(tmp_path, transform="env_dump")
    own = p.yaml_path.parent / "transforms"
    own.mkdir()
    (own / "env_dump.py").write_text(ENV_DUMP)
    p.land("a.jsonl", orders("a", 5))
    secret, key = _secret(), f"FAKEKEY{uuid.uuid4().hex}"
    run = airflow(p, extra_env={SECRET_VAR: secret, "AIRFLOW__CORE__FERNET_KEY": key,
                                "AWS_SECRET_ACCESS_KEY": key})
    assert run.rc == 0 and run.state == "success", run.log[-6000:]
    rows = read_rows(p.sink)
    assert len(rows) == 5
    text = json.dumps(rows, default=str)
    assert secret not in text and key not in text and "TOPSECRET" not in text
    for row in rows:
        for column in ("driver_env", "worker_env"):
            env = json.loads(row[column])
            assert "PATH" in env, env  # the dump ran, in the driver and in a Python worker
            assert not [k for k in env if k.startswith("AIRFLOW") or k == "AWS_SECRET_ACCESS_KEY"], sorted(env)
            assert [k for k in env if not (launch.stage_env_allowed(k) or k in SET_BY_SPARK
                                           or k.startswith(("SPARK_", "PYSPARK_", "PYTHON")))] == []


# -- SQL that reaches the JVM ---------------------------------------------------------------------------

REFUSED = [
    "java_method('java.lang.System', 'getenv', 'AIRFLOW_CONN_SECRET_DB') IS NULL",
    "`REFLECT`('java.lang.System', 'getenv', 'X') = 'a'",
    "system.builtin.try_reflect('java.lang.System', 'getenv', 'X') IS NULL",
    "exists(transform(array(customer), c -> java_method('java.lang.System', 'getenv', c) IS NOT NULL), x -> x)",
    "IDENTIFIER('java_method')('java.lang.System', 'getenv', 'X') IS NULL",
    "contains((FROM text.`/proc/self/environ`), 'TOPSECRET') OR amount > 0",
    "customer IN (SELECT value FROM text.`/etc/hostname`)",
    "(MAP customer USING 'env' AS (v)) = 'a'",
    "amount > 0 OR EXISTS (TABLE t)",
    "r'\\' = java_method('java.lang.System', 'getenv', 'X') OR amount > 0",  # a raw string's backslash escapes nothing
]
ALLOWED = ["amount >= 0", "customer RLIKE '^c[0-9]+$' AND url_decode(customer) = customer",
           "input_file_name() IS NOT NULL OR amount > 0", "extract(YEAR FROM ts) > 2000",
           "trim(BOTH 'c' FROM customer) <> '' OR amount > 0", "customer <> 'select * from t, java_method('"]


@pytest.mark.parametrize("expr", REFUSED)
def test_an_expectation_that_reaches_the_jvm_a_file_or_a_shell_is_refused_at_load(tmp_path, expr):
    p = write_pipeline(tmp_path, extra=textwrap.dedent(f"""\
        expectations:
          - {{name: ok, expr: "amount >= 0"}}
          - {{name: probe, expr: {json.dumps(expr)}}}
        """))
    with pytest.raises(ConfigError, match=r"orders.yaml: expectations\[1\].expr: ") as got:
        load_pipeline(str(p.yaml_path))
    assert "an expression of a pipeline" in str(got.value)


@pytest.mark.parametrize("expr", ALLOWED)
def test_built_in_functions_over_the_record_still_load(tmp_path, expr):
    p = write_pipeline(tmp_path, extra=f"expectations:\n  - {{name: fine, expr: {json.dumps(expr)}}}\n")
    assert p.cfg.expectations[0].expr == expr


def test_a_merge_sinks_delete_when_that_reaches_the_jvm_is_refused_at_load(tmp_path):
    p = write_pipeline(tmp_path, merge={"keys": ["order_id"], "sequence_by": "ts",
                                        "delete_when": "java_method('java.lang.System', 'getenv', 'X') = 'y'"})
    with pytest.raises(ConfigError, match=r"sink.merge.delete_when: .*java_method"):
        load_pipeline(str(p.yaml_path))


@pytest.mark.integration
def test_the_job_refuses_on_sparks_own_parse_what_the_loader_did_not_see(local_spark):
    """``job_refusal`` in the Spark session: every refused form, however written, on Spark's parse
    and analysis; built-ins over the record pass; a merge sink's delete_when is refused too."""
    from eobatch.sinks.delta_merge.job import latest_per_key

    df = local_spark.createDataFrame([("o1", "c1", 1.5, None)], "order_id string, customer string, amount double, "
                                                                "ts timestamp")
    for expr in REFUSED:
        assert sql_guard.job_refusal(df, expr), expr
    local_spark.conf.set("spark.sql.ansi.doubleQuotedIdentifiers", "true")  # a setting a pipeline may set
    try:
        assert sql_guard.job_refusal(df, '"java_method"(\'java.lang.System\', \'getenv\', \'X\') IS NULL')
    finally:
        local_spark.conf.unset("spark.sql.ansi.doubleQuotedIdentifiers")
    for expr in ALLOWED[:-1]:
        assert sql_guard.job_refusal(df, expr) is None, expr
    local_spark.udf.register("eo_probe", lambda x: x)  # a function a transform registered: not a built-in
    assert "UDF" in (sql_guard.job_refusal(df, "eo_probe(customer) = 'c1'") or "")
    with pytest.raises(SystemExit, match="delete_when .*java_method"):
        latest_per_key(df, ["order_id"], "ts", "java_method('java.lang.System', 'getenv', 'X') = 'y'")


@pytest.mark.integration
def test_an_expectation_written_into_the_spec_past_the_loader_is_refused_by_the_stage_job(tmp_path):
    """A spec crafted by hand (the loader never saw its expectation): the stage job refuses it on
    Spark's own parse before anything is read, staged or evaluated."""
    from eobatch.protocol import Protocol

    p = write_pipeline(tmp_path, extra='expectations:\n  - {name: probe, expr: "amount >= 0"}\n')
    p.land("a.jsonl", orders("a", 5))
    plan, _ = Protocol(p.cfg).plan()
    assert plan is not None
    argv = launch.spark_submit_argv(p.cfg, plan.batch_id, launch.new_attempt_id(1))
    at = argv.index("--spec-file")
    with open(argv[at + 1], "rb") as f:
        spec = json.load(f)
    spec["common"]["expectations"][0]["expr"] = "java_method('java.lang.System', 'getenv', 'SECRET_DB') IS NULL"
    argv[at:at + 4] = ["--spec", base64.b64encode(json.dumps(spec).encode()).decode()]
    r = subprocess.run(argv, env=base_env({"SECRET_DB": _secret()}), capture_output=True, text=True, timeout=600,
                       cwd=REPO)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    assert "expectation probe: " in out and "calls java_method()" in out, out[-3000:]
    assert not list(p.sink.glob("eo_batches/**/*.parquet")) and not list(p.sink.glob("eo_batches/**/*summary*"))
