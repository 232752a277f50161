"""``source.discovery: notification`` without a broker: the messages it accepts and refuses, the
objects they name, and the configuration it needs (the broker and the store: tests/integration/
test_notifications.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eobatch.errors import ConfigError
from eobatch.sources.files.notifications import object_paths, same_object

ROOT = "s3a://bucket/landing/orders"


def record(key: str, name: str = "ObjectCreated:Put", bucket: str = "bucket") -> dict:
    return {"eventName": name, "s3": {"bucket": {"name": bucket}, "object": {"key": key}}}


@pytest.mark.parametrize("message, paths", [
    ({"Records": [record("landing/orders/a+b%2Bc.jsonl")]}, ("s3a://bucket/landing/orders/a b+c.jsonl",)),
    ({"Records": [record("k1", "s3:ObjectCreated:CompleteMultipartUpload"), record("k2", "ObjectCreated:Copy")]},
     ("s3a://bucket/k1", "s3a://bucket/k2")),
    ({"Records": [record("k", "ObjectRemoved:Delete"), record("k", "s3:ObjectAccessed:Get")]}, ()),
    ({"source": "aws.s3", "detail-type": "Object Created", "detail": {"bucket": {"name": "b"}, "object": {"key": "a b"}}},
     ("s3a://b/a b",)),
    ({"source": "aws.s3", "detail-type": "Object Deleted", "detail": {}}, ()),
    ({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "bucket"}, ()),
])
def test_the_objects_an_event_names(message, paths):
    assert object_paths(json.dumps(message).encode()) == (paths, None)


@pytest.mark.parametrize("value, why", [
    (None, "an empty message"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"hello": 1}', "no Records"),
    (b'{"Records": [{"eventName": "ObjectCreated:Put"}]}', "without 's3'"),
    (b'{"Records": [{"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": ""}, "object": {"key": "k"}}}]}',
     "bucket name or object key"),
    (b'{"Records": 5}', "without"),
    (b"[" * 100_000, "not JSON"),
    (b" " * (2 << 20), "more than"),
])
def test_a_message_that_names_no_object_says_why(value, why):
    paths, problem = object_paths(value)
    assert paths == () and why in problem


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400) | st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                              lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
                                              max_leaves=12).map(lambda d: json.dumps({"Records": [d]}).encode()))
def test_any_bytes_give_paths_or_a_reason_never_an_error(value):
    paths, problem = object_paths(value)
    assert all(p.startswith("s3a://") for p in paths) and (problem is None or isinstance(problem, str))


def test_an_object_is_the_landing_folders_only_below_it():
    assert same_object("s3a://bucket/landing/orders/x/a.jsonl", ROOT) == "s3a://bucket/landing/orders/x/a.jsonl"
    assert same_object("s3a://bucket/landing/orders/a.jsonl", "s3://bucket/landing/orders/") == \
        "s3://bucket/landing/orders/a.jsonl"
    assert same_object("s3a://bucket/landing/orders-old/a.jsonl", ROOT) is None  # a same-prefix neighbour
    assert same_object("s3a://other/landing/orders/a.jsonl", ROOT) is None
    assert same_object("s3a://bucket/landing/orders/a.jsonl", "/local/landing") is None


@pytest.mark.parametrize("source, error", [
    ({"discovery": "notification"}, "needs source.notifications"),
    ({"discovery": "notification", "path": "s3a://bucket/landing", "notifications": {"topic": "t"}}, "either bootstrap_servers"),
    ({"discovery": "notification", "path": "s3a://bucket/landing",
      "notifications": {"topic": "t", "bootstrap_servers": "k:9092", "conn_id": "kafka_default"}}, "either bootstrap_servers"),
    ({"discovery": "notification", "notifications": {"topic": "t", "bootstrap_servers": "k:9092"}}, "must be an s3a://"),
    ({"notifications": {"topic": "t", "bootstrap_servers": "k:9092"}}, "only with discovery: notification"),
    ({"discovery": "notification", "path": "s3a://bucket/landing", "notifications": {"topic": "bad topic!",
                                                                           "bootstrap_servers": "k:9092"}}, "topic"),
    ({"discovery": "notification", "path": "s3a://bucket/landing", "notifications": "landing-events"}, "needs a mapping"),
])
def test_notification_discovery_is_refused_at_load_without_what_it_needs(make_cfg, source, error):
    src = {"kind": "files", "path": str(make_cfg().source.path), **source}
    with pytest.raises(ConfigError, match=error):
        make_cfg(source=src)


def test_the_notification_keys_load_and_keep_the_fingerprint(make_cfg):
    plain = make_cfg(source={"kind": "files", "path": "s3a://bucket/landing"})
    cfg = make_cfg(source={"kind": "files", "path": "s3a://bucket/landing", "discovery": "notification",
                           "notifications": {"topic": "landing.events", "conn_id": "kafka_landing"}})
    assert cfg.source.notifications.topic == "landing.events" and cfg.source.notifications.conn_id == "kafka_landing"
    assert cfg.fingerprint() == plain.fingerprint()  # how files are found, not what a batch means
