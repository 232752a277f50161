"""S3 settings from the environment: delta-rs options, s3a conf, no secret on a command line."""

from __future__ import annotations

import textwrap

import pytest

from eobatch import launch, s3conf
from eobatch.config import load_pipeline
from eobatch.storage import S3Storage, storage_for

ENV = {"S3_ENDPOINT": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE123",
       "AWS_SECRET_ACCESS_KEY": "s3cr3t/+value", "AWS_REGION": "eu-west-1"}


@pytest.fixture
def s3env(monkeypatch):
    for k in (*s3conf.ENV_KEYS, "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    return ENV


def test_settings_and_uris(s3env):
    s = s3conf.settings()
    assert (s.endpoint, s.access_key, s.secret_key, s.region, s.path_style, s.http) == (
        "http://127.0.0.1:9000", "AKIDEXAMPLE123", "s3cr3t/+value", "eu-west-1", True, True)
    assert s3conf.split("s3a://bkt/a/b.json") == ("bkt", "a/b.json")
    assert s3conf.split("s3://bkt") == ("bkt", "")
    assert s3conf.table_uri("s3a://bkt/lake/t") == "s3://bkt/lake/t"
    assert s3conf.table_uri("/lake/t") == "/lake/t"
    aws = s3conf.settings({"AWS_DEFAULT_REGION": "us-west-2"})
    assert aws.endpoint is None and not aws.path_style and aws.region == "us-west-2"


def test_delta_storage_options_use_conditional_put_never_unsafe_rename(s3env):
    opts = s3conf.delta_storage_options("s3a://bkt/lake/t")
    assert opts["aws_conditional_put"] == "etag"
    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in opts
    assert opts["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000" and opts["AWS_ALLOW_HTTP"] == "true"
    assert opts["AWS_ACCESS_KEY_ID"] == "AKIDEXAMPLE123" and opts["AWS_REGION"] == "eu-west-1"
    assert s3conf.delta_storage_options("/lake/t") is None


def test_spark_conf_of_an_s3_pipeline_holds_no_secret(s3env, tmp_path):
    y = tmp_path / "p.yaml"
    y.write_text(textwrap.dedent("""\
        name: p
        source: {kind: files, path: "s3://bkt/landing"}
        schema: "a STRING"
        sink: {table: s3a://bkt/lake/p}
        quarantine: {table: s3a://bkt/lake/p_bad}
        """))
    cfg = load_pipeline(str(y))
    assert cfg.source.path == "s3a://bkt/landing"  # one spelling everywhere
    assert launch.uses_s3(cfg)
    conf = launch.spark_conf(cfg)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    text = repr(conf)
    assert ENV["AWS_SECRET_ACCESS_KEY"] not in text and ENV["AWS_ACCESS_KEY_ID"] not in text
    import re

    assert re.search(conf["spark.redaction.regex"], "spark.executorEnv.AWS_ACCESS_KEY_ID")
    assert re.search(conf["spark.redaction.regex"], "spark.executorEnv.AWS_SECRET_ACCESS_KEY")


def test_local_pipelines_get_no_s3a_conf_nor_jars(tmp_path, monkeypatch):
    y = tmp_path / "p.yaml"
    y.write_text(textwrap.dedent(f"""\
        name: p
        source: {{kind: files, path: {tmp_path}/landing}}
        schema: "a STRING"
        sink: {{table: {tmp_path}/lake/p}}
        quarantine: {{table: {tmp_path}/lake/p_bad}}
        """))
    cfg = load_pipeline(str(y))
    assert not any(k.startswith("spark.hadoop.fs.s3a") for k in launch.spark_conf(cfg))
    jars_dir = tmp_path / "jars"
    jars_dir.mkdir()
    for name in ("delta-spark_4.2_2.13-4.4.0.jar", "hadoop-aws-3.5.0.jar", "bundle-2.35.4.jar"):
        (jars_dir / name).write_bytes(b"")
    monkeypatch.setenv("EOBATCH_JARS_DIR", str(jars_dir))
    assert [j.rsplit("/", 1)[1] for j in launch.jars(cfg)] == ["delta-spark_4.2_2.13-4.4.0.jar"]
    assert len(launch.jars()) == 3
    monkeypatch.setenv("EOBATCH_JARS_ON_NODES", "1")
    assert all(j.startswith("local:/") for j in launch.jars())


def test_redact_and_lazy_storage(s3env):
    text = f"failed with key {ENV['AWS_ACCESS_KEY_ID']} and {ENV['AWS_SECRET_ACCESS_KEY']}"
    assert s3conf.redact(text) == "failed with key *** and ***"
    fs = storage_for("s3a://bkt/x")  # no I/O: nothing listens on the endpoint
    assert isinstance(fs, S3Storage) and fs.arrow_path("s3a://bkt/a/b") == "bkt/a/b"
    fs.makedirs("s3a://bkt/a")
    fs.remove_empty_dirs("s3a://bkt/a")
    env = s3conf.credential_env()
    assert env == {**ENV}


def _client_error(code: str, status: int):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "PutObject")


def test_put_if_absent_retries_a_conditional_conflict_then_loses(s3env, monkeypatch):
    """409 ConditionalRequestConflict (another conditional write in flight) is decided again;
    412 PreconditionFailed means the key exists: this writer lost."""
    calls = []

    class Fake:
        def put_object(self, **kw):
            calls.append(kw)
            assert kw["IfNoneMatch"] == "*"
            raise (_client_error("ConditionalRequestConflict", 409) if len(calls) < 3
                   else _client_error("PreconditionFailed", 412))

    monkeypatch.setattr(s3conf, "boto3_client", lambda s=None: Fake())
    assert S3Storage().put_if_absent("s3a://bkt/plans/1.json", b"x") is False
    assert len(calls) == 3

    class Denied:
        def put_object(self, **kw):
            raise _client_error("AccessDenied", 403)

    monkeypatch.setattr(s3conf, "boto3_client", lambda s=None: Denied())
    from eobatch.storage import S3StorageError

    with pytest.raises(S3StorageError, match="AccessDenied") as e:
        S3Storage().put_if_absent("s3a://bkt/plans/1.json", b"x")
    assert ENV["AWS_SECRET_ACCESS_KEY"] not in str(e.value)
