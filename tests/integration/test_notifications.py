"""``source.discovery: notification`` (issue 44): new landing objects from S3 event notifications in a
Kafka topic, with a real broker (KRaft, from the Maven jars) and a real S3 server (S3Proxy), the
events in the formats S3, MinIO and EventBridge send. Batches are planned, staged (the pyarrow
stager: the Spark job is not what is under test), verified and committed by the product; the
sink is read back by an independent reader.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.parse import quote_plus

import pytest

from eobatch.errors import TerminalError
from eobatch.pipelines.loader import load_pipeline
from eobatch.protocol import Protocol
from eobatch.sources import source_for
from eobatch.storage.fs import S3Storage
from support.checks import delta_log_commits, read_rows
from support.pyarrow_stager import stage
from support.s3checks import BUCKET
from support.services import KafkaBroker, S3Server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = KafkaBroker(str(tmp_path_factory.mktemp("kafka"))).start()
    yield b
    b.stop(kill=True)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    srv = S3Server(str(tmp_path_factory.mktemp("s3"))).start()
    srv.create_bucket(BUCKET)
    with srv.in_environment():
        yield srv
    srv.stop(kill=True)


def create_topic(broker: KafkaBroker, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        f.result()


def send(broker: KafkaBroker, topic: str, messages: list[tuple[int, bytes]]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for partition, value in messages:
        p.produce(topic, value=value, partition=partition)
    assert p.flush(30) == 0


def s3_event(key: str, name: str = "ObjectCreated:Put", minio: bool = False) -> bytes:
    """An S3 event notification of one object, as S3 (through SNS/SQS) or MinIO sends it."""
    record = {"eventVersion": "2.1", "eventSource": "minio:s3" if minio else "aws:s3",
              "eventName": ("s3:" if minio else "") + name, "eventTime": "2026-11-29T00:00:00.000Z",
              "s3": {"s3SchemaVersion": "1.0", "bucket": {"name": BUCKET, "arn": f"arn:aws:s3:::{BUCKET}"},
                     "object": {"key": quote_plus(key), "size": 1, "eTag": "x", "sequencer": "0"}}}
    doc: dict[str, Any] = {"Records": [record]}
    if minio:
        doc = {"EventName": record["eventName"], "Key": f"{BUCKET}/{key}", **doc}
    return json.dumps(doc).encode()


def eventbridge_event(key: str) -> bytes:
    return json.dumps({"version": "0", "source": "aws.s3", "detail-type": "Object Created",
                       "detail": {"bucket": {"name": BUCKET}, "object": {"key": key, "size": 1}}}).encode()


def test_notification_discovery_publishes_each_object_once_through_duplicates_a_lost_event_and_a_broker_restart(
        broker, s3, tmp_path, monkeypatch):
    topic = f"landing-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, 2)
    prefix = f"n-{uuid.uuid4().hex[:8]}/landing"
    landing = f"s3a://{BUCKET}/{prefix}"
    (tmp_path / "pipelines").mkdir()
    yaml = tmp_path / "pipelines" / "orders.yaml"
    yaml.write_text(f"""\
name: orders
source:
  kind: files
  path: {landing}
  discovery: notification
  notifications:
    topic: {topic}
    bootstrap_servers: {broker.bootstrap}
  full_listing_hours: 1
schema: "order_id STRING NOT NULL, amount DOUBLE"
sink:
  table: {tmp_path / 'lake' / 'orders'}
quarantine:
  table: {tmp_path / 'lake' / 'orders_bad'}
""")
    fs = S3Storage()
    listings: list[str] = []
    real_list = S3Storage.list_files
    monkeypatch.setattr(S3Storage, "list_files", lambda self, prefix_, *a, **kw: (
        listings.append(kw.get("after") or "") or real_list(self, prefix_, *a, **kw))
        if prefix_ == landing else real_list(self, prefix_, *a, **kw))
    landed: list[str] = []

    def land(name: str) -> str:
        fs.write_atomic(f"{landing}/{name}", json.dumps({"order_id": name, "amount": 1.0}).encode() + b"\n")
        landed.append(name)
        return f"{landing}/{name}"

    def run_batch() -> list[str]:
        proto = Protocol(load_pipeline(str(yaml)))
        plan, _new = proto.plan()
        if plan is None:
            return []
        proto.verify(plan.batch_id, stage(proto, plan.batch_id))
        proto.commit(plan.batch_id)
        return sorted(f["path"].rsplit("/", 1)[1] for f in plan.range["files"])

    # an object landed before the events were set up: the first plan's reconciliation listing finds it
    land("dt=01/before.jsonl")
    assert run_batch() == ["before.jsonl"] and len(listings) == 1
    # new objects by their events: S3's and MinIO's records, EventBridge, a duplicate in the other
    # partition, a removal, another prefix's object, a name it does not read, bytes that are no event
    a, b, c = land("dt=02/a b.jsonl"), land("dt=02/b.jsonl"), land("dt=03/c.jsonl")
    fs.write_atomic(f"s3a://{BUCKET}/other/x.jsonl", b'{"order_id":"x","amount":1}\n')
    fs.write_atomic(f"{landing}/dt=02/notes.txt", b"not read")
    send(broker, topic, [(0, s3_event(f"{prefix}/dt=02/a b.jsonl")), (1, s3_event(f"{prefix}/dt=02/b.jsonl", minio=True)),
                         (0, eventbridge_event(f"{prefix}/dt=03/c.jsonl")), (1, s3_event(f"{prefix}/dt=02/a b.jsonl")),
                         (0, s3_event(f"{prefix}/dt=02/b.jsonl", name="ObjectRemoved:Delete")),
                         (1, s3_event("other/x.jsonl")), (0, s3_event(f"{prefix}/dt=02/notes.txt")),
                         (1, b"\xff not json"), (0, b'{"Records": [{"eventName": "ObjectCreated:Put"}]}')])
    listings.clear()
    assert run_batch() == ["a b.jsonl", "b.jsonl", "c.jsonl"]
    assert listings == []  # found by their events: no listing
    proto = Protocol(load_pipeline(str(yaml)))
    newest = proto.ledger.plan(proto.ledger.latest_batch_id())
    assert newest.range["events"] == {"topic": topic, "positions": {"0": 5, "1": 4}}
    skipped = [n for n in newest.notes if "notification topic" in n]
    assert len(skipped) == 2, newest.notes  # the undecodable message and the record without an object
    commit = [c for c in delta_log_commits(tmp_path / "lake" / "orders") if c["txns"]][-1]
    assert json.loads(commit["commitInfo"]["eo.offsets"])["events"] == newest.range["events"]  # in the same commit
    # events of objects already consumed, only: nothing planned; the positions move on (kept, advisory)
    send(broker, topic, [(0, s3_event(f"{prefix}/dt=02/a b.jsonl")), (1, s3_event(f"{prefix}/dt=03/c.jsonl"))])
    assert run_batch() == []
    with open(proto.layout.discovery, "rb") as f:
        kept = json.load(f)["state"]
    assert kept["events"]["positions"] == {"0": 6, "1": 5}
    # an object whose event never comes; the broker goes down and comes back; a new object's event
    lost = land("dt=04/lost.jsonl")
    assert run_batch() == []
    broker.restart()
    land("dt=05/e.jsonl")
    send(broker, topic, [(1, s3_event(f"{prefix}/dt=05/e.jsonl")), (0, s3_event(f"{prefix}/dt=05/e.jsonl"))])
    listings.clear()
    assert run_batch() == ["e.jsonl"] and listings == []
    # the reconciliation listing, once full_listing_hours have passed, finds the object of the lost event
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3601)
    assert run_batch() == ["lost.jsonl"] and listings == [""]
    assert run_batch() == []  # the listing is done: the next plan reads events only
    assert listings == [""]
    # every object published once, exactly its records
    rows = read_rows(tmp_path / "lake" / "orders")
    assert sorted(r["order_id"] for r in rows) == sorted(landed)
    assert lost.endswith("lost.jsonl") and a and b and c
    # eobatch doctor's check of the source names the topic; a topic that does not exist is refused
    cfg = load_pipeline(str(yaml))
    assert f"notification topic {topic}: 2 partitions" in source_for(cfg).check_readable()
    yaml.write_text(yaml.read_text().replace(f"topic: {topic}", "topic: no-such-topic"))
    with pytest.raises(TerminalError, match="no-such-topic"):
        run_batch()
