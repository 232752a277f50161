"""eobatch.storage.s3conf: S3 settings from the environment: delta-rs options, redaction, the variables
handed on to a child process (the s3a conf of the stage job: test_launch.py)."""

from __future__ import annotations

from eobatch.storage import s3conf
from eobatch.storage.fs import S3Storage, storage_for
from support.s3env import ENV


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


def test_redact_and_lazy_storage(s3env):
    text = f"failed with key {ENV['AWS_ACCESS_KEY_ID']} and {ENV['AWS_SECRET_ACCESS_KEY']}"
    assert s3conf.redact(text) == "failed with key *** and ***"
    fs = storage_for("s3a://bkt/x")  # no I/O: nothing listens on the endpoint
    assert isinstance(fs, S3Storage) and fs.arrow_path("s3a://bkt/a/b") == "bkt/a/b"
    fs.makedirs("s3a://bkt/a")
    fs.remove_empty_dirs("s3a://bkt/a")
    env = s3conf.credential_env()
    assert env == {**ENV}
