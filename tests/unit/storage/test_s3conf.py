"""eobatch.storage.s3conf: S3 settings from the environment: delta-rs options, redaction, the variables
handed on to a child process (the s3a conf of the stage job: test_launch.py)."""

from __future__ import annotations

import json
import os

import pytest

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


def test_a_bucket_in_another_store_is_served_by_its_own_settings(s3env, monkeypatch):
    """A store's bucket (a delta source's conn_id, ``using``): that bucket alone gets the other
    store's endpoint and credentials, in delta-rs options, boto3 and pyarrow (``settings_for``),
    s3a's per-bucket keys and redaction; every other bucket keeps the store's own settings; the
    process environment is never written, and outside the block nothing of the store is left."""
    monkeypatch.setenv(s3conf.BUCKETS_ENV, "")
    before = dict(os.environ)
    other = {"S3_ENDPOINT": "https://s3.other.example", "AWS_ACCESS_KEY_ID": "AKIDOTHER999",
             "AWS_SECRET_ACCESS_KEY": "other/secret+", "AWS_REGION": "ap-south-1"}
    second = s3conf.settings({"AWS_ACCESS_KEY_ID": "AKIDSECOND1", "AWS_SECRET_ACCESS_KEY": "x" * 8})
    store = s3conf.Store(s3conf.settings(), (("upstream", s3conf.settings(other)), ("second", second)))
    with s3conf.using(store):
        up, own = s3conf.settings_for("s3a://upstream/lake/t"), s3conf.settings_for("s3a://bkt/lake/t")
        assert (up.endpoint, up.access_key, up.region, up.http) == ("https://s3.other.example", "AKIDOTHER999",
                                                                    "ap-south-1", False)
        assert own == s3conf.settings() and own.access_key == ENV["AWS_ACCESS_KEY_ID"]
        assert s3conf.delta_storage_options("s3a://upstream/lake/t")["AWS_ACCESS_KEY_ID"] == "AKIDOTHER999"
        assert s3conf.delta_storage_options("s3a://bkt/lake/t")["AWS_ACCESS_KEY_ID"] == ENV["AWS_ACCESS_KEY_ID"]
        fs = storage_for("s3a://bkt/x")
        assert fs.settings_for("s3a://upstream/a") == up and fs.settings_for("s3a://bkt/a") == own
        conf = s3conf.bucket_hadoop_conf()
        assert {k: v for k, v in conf.items() if ".upstream." in k} == {
            "fs.s3a.bucket.upstream.endpoint.region": "ap-south-1",
            "fs.s3a.bucket.upstream.endpoint": "https://s3.other.example",
            "fs.s3a.bucket.upstream.path.style.access": "true",
            "fs.s3a.bucket.upstream.connection.ssl.enabled": "true",
            "fs.s3a.bucket.upstream.access.key": "AKIDOTHER999",
            "fs.s3a.bucket.upstream.secret.key": "other/secret+",
            "fs.s3a.bucket.upstream.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}
        assert not any("secret" in v for v in s3conf.spark_hadoop_conf().values())  # never a --conf
        assert s3conf.redact("keys AKIDOTHER999 other/secret+ and s3cr3t/+value") == "keys *** *** and ***"
        assert set(s3conf.bucket_settings()) == {"upstream", "second"}
        assert json.loads(s3conf.bucket_env(["upstream"])) == {"upstream": other}
        assert s3conf.carried(lambda: s3conf.current_store())() is store
    assert dict(os.environ) == before and s3conf.current_store() is None
    assert s3conf.bucket_settings() == {} and s3conf.settings_for("s3a://upstream/x") == s3conf.settings()
    monkeypatch.setenv(s3conf.BUCKETS_ENV, "[1, 2]")
    with pytest.raises(ValueError, match="EOBATCH_S3_BUCKETS must be a JSON object"):
        s3conf.settings_for("s3a://upstream/x")
