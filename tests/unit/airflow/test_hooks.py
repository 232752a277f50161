"""eobatch.airflow.hooks: the AWS credentials of a connection for a task and its spark-submit, and
whether they may travel as spark-submit's environment (the Spark hook's own answer)."""

from __future__ import annotations

import json

import pytest

from support.spark_hook import HOOK_MODULE, MASTERS, fake_secret

# The decision "may credentials travel as spark-submit's process environment?" is the Spark hook's
# own (never a guess from the master's spelling), and every credential value is known to Airflow's
# secrets masker before spark-submit starts.
#
# The hook here is the installed provider's real SparkSubmitHook, fed a connection through
# ``AIRFLOW_CONN_<ID>`` (JSON); only ``submit`` is replaced, so that no process is started:
# the replacement builds the real command line with the hook's real ``_build_spark_submit_command``.


def _token_on_real_command_line(conn_id: str, token: str) -> bool:
    """What the real hook does with env_vars holding a session token: on the command line or not."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    hook = SparkSubmitHook(conn_id=conn_id, env_vars={"AWS_SESSION_TOKEN": token})
    cmd = hook._build_spark_submit_command("stage_batch.py")
    return any(token in arg for arg in cmd)


@pytest.mark.parametrize("host,forwarded", MASTERS)
def test_the_decision_is_the_spark_hooks_own(spark_conn, host, forwarded):
    from eobatch.airflow.hooks import credentials_travel_as_env

    conn_id = spark_conn(host)
    on_cmd = _token_on_real_command_line(conn_id, fake_secret("FAKE-TOKEN-"))
    assert credentials_travel_as_env(conn_id) is (not on_cmd)
    assert credentials_travel_as_env(conn_id) is forwarded


def test_no_spark_connection_means_what_the_hook_defaults_to(spark_conn):
    """Without the connection the hook submits to yarn (env_vars become --conf): nothing is forwarded."""
    from eobatch.airflow.hooks import credentials_travel_as_env

    conn_id = spark_conn(None)
    assert _token_on_real_command_line(conn_id, fake_secret("FAKE-TOKEN-"))
    assert credentials_travel_as_env(conn_id) is False


def test_a_hook_that_cannot_be_built_forwards_nothing(spark_conn, monkeypatch):
    import importlib

    from eobatch.airflow.hooks import credentials_travel_as_env

    conn_id = spark_conn("k8s://https://k8s.example:6443")
    monkeypatch.delattr(importlib.import_module(HOOK_MODULE), "kube_client", raising=False)
    assert credentials_travel_as_env(conn_id) is False


def test_the_aws_connection_is_resolved_by_the_amazon_hook_from_a_profile(monkeypatch, tmp_path):
    """A connection naming a profile (no keys in it): the Amazon provider's hook resolves the
    profile's keys; endpoint from the connection's s3 service config; a stale session token of
    the environment does not survive (it would not match these keys); the keys are masked; the
    process environment is left as it is (the settings travel with the pipeline's calls)."""
    import os

    from airflow.sdk.log import redact

    from eobatch.airflow.hooks import aws_settings

    key, secret = fake_secret("AKIA"), fake_secret("secret-")
    creds = tmp_path / "credentials"
    creds.write_text(f"[lake]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "S3_ENDPOINT", "AWS_REGION"):
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SESSION_TOKEN", fake_secret("STALE-"))
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps({"conn_type": "aws", "extra": {
        "profile_name": "lake", "region_name": "eu-west-3",
        "service_config": {"s3": {"endpoint_url": "http://127.0.0.1:9999"}}}}))
    before = dict(os.environ)
    s = aws_settings("lake_s3")
    assert s is not None and (s.access_key, s.secret_key, s.session_token) == (key, secret, None)
    assert (s.endpoint, s.region) == ("http://127.0.0.1:9999", "eu-west-3")
    assert redact(f"<{key}> <{secret}>") == "<***> <***>"
    assert aws_settings("no_such_connection") is None
    assert dict(os.environ) == before
