"""S3 credentials and spark-submit: the decision "may credentials travel as spark-submit's
process environment?" is the Spark hook's own (never a guess from the master's spelling),
and every credential value is known to Airflow's secrets masker before spark-submit starts.

The hook here is the installed provider's real SparkSubmitHook, fed a connection through
``AIRFLOW_CONN_<ID>`` (JSON); only ``submit`` is replaced, so that no process is started:
the replacement builds the real command line with the hook's real ``_build_spark_submit_command``.
"""

from __future__ import annotations

import json
import uuid

import pytest

HOOK_MODULE = "airflow.providers.apache.spark.hooks.spark_submit"

MASTERS = [
    ("local[*]", True),
    ("spark://127.0.0.1:7077", True),
    ("spark://yarn-gw.example:7077", False),  # a standalone master whose name contains "yarn"
    ("yarn", False),
    ("k8s://https://k8s.example:6443", False),
]


def _fake(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex}"


@pytest.fixture
def spark_conn(monkeypatch):
    """spark_conn(host) -> conn_id: a spark connection given via AIRFLOW_CONN_<ID> (JSON)."""
    import importlib

    hook_module = importlib.import_module(HOOK_MODULE)

    def _conn(host: str | None) -> str:
        conn_id = f"eo_spark_{uuid.uuid4().hex[:8]}"
        if host is not None:
            monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "spark", "host": host}))
        if host and "k8s" in host and getattr(hook_module, "kube_client", None) is None:
            # the hook refuses a k8s master without the cncf.kubernetes provider; nothing here talks to k8s
            monkeypatch.setattr(hook_module, "kube_client", object(), raising=False)
        return conn_id

    return _conn


def _token_on_real_command_line(conn_id: str, token: str) -> bool:
    """What the real hook does with env_vars holding a session token: on the command line or not."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    hook = SparkSubmitHook(conn_id=conn_id, env_vars={"AWS_SESSION_TOKEN": token})
    cmd = hook._build_spark_submit_command("stage_batch.py")
    return any(token in arg for arg in cmd)


@pytest.mark.parametrize("host,forwarded", MASTERS)
def test_the_decision_is_the_spark_hooks_own(spark_conn, host, forwarded):
    from eobatch.airflow_ops import credentials_travel_as_env

    conn_id = spark_conn(host)
    on_cmd = _token_on_real_command_line(conn_id, _fake("FAKE-TOKEN-"))
    assert credentials_travel_as_env(conn_id) is (not on_cmd)
    assert credentials_travel_as_env(conn_id) is forwarded


def test_no_spark_connection_means_what_the_hook_defaults_to(spark_conn):
    """Without the connection the hook submits to yarn (env_vars become --conf): nothing is forwarded."""
    from eobatch.airflow_ops import credentials_travel_as_env

    conn_id = spark_conn(None)
    assert _token_on_real_command_line(conn_id, _fake("FAKE-TOKEN-"))
    assert credentials_travel_as_env(conn_id) is False


def test_a_hook_that_cannot_be_built_forwards_nothing(spark_conn, monkeypatch):
    import importlib

    from eobatch.airflow_ops import credentials_travel_as_env

    conn_id = spark_conn("k8s://https://k8s.example:6443")
    monkeypatch.delattr(importlib.import_module(HOOK_MODULE), "kube_client", raising=False)
    assert credentials_travel_as_env(conn_id) is False


# ---- the stage task itself: the real operator, the real hook, no spark-submit process ----


class _TI:
    try_number = 1

    def __init__(self):
        self.pushed = {}

    def xcom_pull(self, task_ids=None, key="return_value"):
        return 1

    def xcom_push(self, key, value):
        self.pushed[key] = value


@pytest.fixture
def s3_stage(tmp_path, monkeypatch, write_yaml, base_cfg):
    """run(conn_id) -> (command line, process env of spark-submit) of a stage task on an S3 pipeline."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("delta-spark_2.13-4.0.0.jar", "hadoop-aws-3.5.0.jar", "bundle-2.29.52.jar"):
        (jars / name).write_bytes(b"")
    monkeypatch.setenv("EOBATCH_JARS_DIR", str(jars))
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
        seen["env"] = dict(self._env or {})
        seen["masked"] = {v: redact(f"<{v}>") for v in seen.get("watch", ())}

    monkeypatch.setattr(SparkSubmitHook, "submit", fake_submit)

    def _run(conn_id: str, watch=()):
        from eobatch.airflow_ops import StageOperator

        seen.clear()
        seen["watch"] = tuple(watch)
        op = StageOperator(task_id="stage", pipeline_file=pipeline_file, conn_id=conn_id)
        op.execute({"ti": _TI(), "params": {}, "dag_run": None, "run_id": "r1"})
        return seen

    return _run


@pytest.mark.parametrize("host,forwarded", MASTERS)
def test_stage_never_puts_a_session_token_on_the_command_line(spark_conn, s3_stage, monkeypatch, host, forwarded):
    token = _fake("FAKE-TOKEN-")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", _fake("AKIA"))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", _fake("secret-"))
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    seen = s3_stage(spark_conn(host))
    assert not any(token in arg for arg in seen["cmd"]), seen["cmd"]
    assert ("AWS_SESSION_TOKEN" in seen["env"]) is forwarded


def test_stage_masks_credentials_from_the_environment_before_spark_submit(spark_conn, s3_stage, monkeypatch):
    """No aws_default connection: the environment's credentials are masked all the same."""
    values = {"AWS_ACCESS_KEY_ID": _fake("AKIA"), "AWS_SECRET_ACCESS_KEY": _fake("secret-"),
              "AWS_SESSION_TOKEN": _fake("FAKE-TOKEN-")}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    seen = s3_stage(spark_conn("local[*]"), watch=values.values())
    assert seen["masked"] == {v: "<***>" for v in values.values()}


def test_stage_masks_credentials_from_the_aws_connection_before_spark_submit(spark_conn, s3_stage, monkeypatch):
    values = {"login": _fake("AKIA"), "password": _fake("secret-"), "token": _fake("FAKE-TOKEN-")}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({
        "conn_type": "aws", "login": values["login"], "password": values["password"],
        "extra": {"aws_session_token": values["token"], "region_name": "eu-west-1"}}))
    seen = s3_stage(spark_conn("yarn"), watch=values.values())
    assert seen["masked"] == {v: "<***>" for v in values.values()}
    assert not any(values["token"] in arg for arg in seen["cmd"])
