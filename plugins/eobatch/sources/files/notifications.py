"""``source.discovery: notification``: new landing objects from the object store's event notifications
in a Kafka topic, instead of a listing.

Object stores publish an event per new object to a queue: S3 event notifications (through SQS/SNS
or EventBridge, forwarded to Kafka by a connector), MinIO and Ceph bucket notifications straight to a
Kafka topic. A plan reads the topic from where the newest plan stopped (``positions``: the next
offset of each partition, recorded in the plan's range and carried by the batch's Delta commits in
``eo.offsets``), turns each event into the landing path it names, and asks the store for that object
(a HEAD): what it finds is planned like a listed file. So events are consumed exactly once: a
range's positions move past an event only when its object is planned in that range, was consumed
before (a duplicated event), is gone, or is not one the pipeline reads; an event whose object cannot
be read now stops its partition's position there (the next plan asks again). A plan records what
it read; retries read the same range from the record, never from the topic.

Events never carry data: whether an object was consumed is the ledger's answer (the consumed-file
index), as for a listing. An event that is lost (a connector's gap, a topic's retention passed while
the pipeline was paused, an object written before notifications were set up) is found by the
reconciliation listing, a full listing every ``full_listing_hours`` (made in path order over as many
plans as it takes: ``listed_after``), like Auto Loader's backfill listing.

Accepted message formats (JSON; anything else is skipped with a note, never a stopped pipeline):

* S3 event notification records, as S3 (through SNS/SQS/a connector), MinIO and Ceph send them:
  ``{"Records": [{"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": B}, "object": {"key": K}}}]}``
  (``K`` URL-encoded, ``+`` for a space; MinIO prefixes event names with ``s3:``); a test event
  (``"Event": "s3:TestEvent"``) is skipped;
* EventBridge: ``{"source": "aws.s3", "detail-type": "Object Created", "detail": {"bucket": {"name": B},
  "object": {"key": K}}}`` (``K`` not encoded).

Only object-created events are read; removals and other events are passed over.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from ...errors import RetryableError, TerminalError
from ..base import NotificationsConfig

log = logging.getLogger("eobatch")

MAX_EVENT_BYTES = 1 << 20  # a message larger than this is not an event notification: skipped
EVENTS_PER_PLAN = 100_000  # messages a plan reads at most (the rest wait for the next plan)
POLL_SECONDS = 10.0  # a read that makes no progress for this long ends (a broker that is down: retried)


@dataclass(frozen=True)
class Event:
    """One message of the topic: the landing objects it names (``s3a://bucket/key``), or why none."""

    partition: int
    offset: int
    paths: tuple[str, ...]
    problem: str | None = None


def object_paths(value: bytes | None) -> tuple[tuple[str, ...], str | None]:
    """(the ``s3a://`` paths of the objects a message says were created, why it says none or could
    not be read). A message naming no created object (a removal, a test event) is (), None."""
    if value is None:
        return (), "an empty message"
    if len(value) > MAX_EVENT_BYTES:
        return (), f"a message of {len(value)} bytes, more than {MAX_EVENT_BYTES} (not an event notification)"
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, ValueError) as e:
        return (), f"not JSON ({type(e).__name__})"
    except RecursionError:
        return (), "not JSON (nested too deep)"
    if not isinstance(doc, dict):
        return (), "not an S3 event notification (not a JSON object)"
    try:
        if "Records" in doc:
            return tuple(p for r in doc["Records"] if (p := _record_path(r)) is not None), None
        if doc.get("source") == "aws.s3" and "detail" in doc:
            if doc.get("detail-type") != "Object Created":
                return (), None
            d = doc["detail"]
            return (_s3a(d["bucket"]["name"], d["object"]["key"]),), None
        if doc.get("Event") == "s3:TestEvent":
            return (), None
    except (KeyError, TypeError, AttributeError) as e:
        return (), f"an S3 event notification without {e} (bucket name or object key)"
    return (), "not an S3 event notification (no Records, no EventBridge detail)"


def _record_path(r: Any) -> str | None:
    name = str(r.get("eventName", "")).removeprefix("s3:")
    if not name.startswith("ObjectCreated:"):
        return None
    s3 = r["s3"]
    return _s3a(s3["bucket"]["name"], unquote_plus(str(s3["object"]["key"])))


def _s3a(bucket: Any, key: Any) -> str:
    if not isinstance(bucket, str) or not isinstance(key, str) or not bucket or not key:
        raise TypeError("bucket name or object key")
    return f"s3a://{bucket}/{key}"


def same_object(path: str, root: str) -> str | None:
    """``path`` (``s3a://``) as a path below the landing folder ``root`` (``s3a://`` or ``s3://``),
    in ``root``'s own scheme; None when it is not below it."""
    rest = path.removeprefix("s3a://")
    scheme, sep, root_rest = root.partition("://")
    if not sep or scheme not in ("s3", "s3a"):
        return None
    base = root_rest.rstrip("/") + "/"
    return f"{scheme}://{rest}" if rest.startswith(base) else None


class EventReader:
    """Reads a notification topic's messages after given positions (what a plan asks)."""

    def __init__(self, cfg: NotificationsConfig):
        # the Kafka kind's one definition of a broker's client settings (loaded by a notification pipeline only)
        from ..kafka.client import consumer_settings, settings

        self.client, self.topic = settings(cfg), cfg.topic
        self._settings = consumer_settings
        self.lost: list[int] = []  # ``read``: the partitions whose unread offsets retention removed

    def check(self) -> str:
        """``eobatch doctor``: the topic's partitions and how many messages each holds (metadata only)."""
        consumer = self._consumer()
        try:
            parts = self._partitions(consumer)
            held = sum(hi - lo for lo, hi in (consumer.get_watermark_offsets(self._tp(p), timeout=POLL_SECONDS)
                                              for p in parts))
            return f"notification topic {self.topic}: {len(parts)} partitions, {held} messages kept"
        finally:
            consumer.close()

    def _consumer(self):
        """A consumer of the topic (``read_committed``; no group offsets: positions are the ledger's)."""
        from confluent_kafka import Consumer  # confluent-kafka: loaded by a notification pipeline's plan only

        return Consumer(self._settings(self.client, **{"group.id": "eobatch-notifications", "socket.timeout.ms": 10000,
                                                       "isolation.level": "read_committed"}))

    def _tp(self, partition: int, offset: int | None = None):
        from confluent_kafka import TopicPartition  # confluent-kafka: as ``_consumer``

        return TopicPartition(self.topic, partition) if offset is None else TopicPartition(self.topic, partition, offset)

    def _partitions(self, consumer) -> list[int]:
        from confluent_kafka import KafkaException  # confluent-kafka: as ``_consumer``

        try:
            meta = consumer.list_topics(self.topic, timeout=POLL_SECONDS)
        except KafkaException as e:
            raise RetryableError(f"source.notifications: the broker cannot be reached ({e})") from e
        topic = meta.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise TerminalError(f"source.notifications: topic {self.topic!r} does not exist or cannot be read "
                                f"({topic.error if topic is not None else 'not found'}); create it, or correct "
                                f"source.notifications.topic")
        return sorted(topic.partitions)

    def read(self, positions: dict[int, int], max_events: int = EVENTS_PER_PLAN,
             ) -> tuple[list[Event], dict[int, int], list[str]]:
        """(the messages after ``positions`` up to each partition's end as the read found it, at most
        ``max_events`` in all, in offset order per partition; the position after the last one read of
        each partition; notes). A partition missing from ``positions`` starts at its first offset.
        When retention removed offsets after a position, the read starts at the first offset kept,
        with a note (the events lost are found by the reconciliation listing: ``lost``)."""
        notes: list[str] = []
        self.lost = []
        consumer = self._consumer()
        try:
            ends: dict[int, int] = {}
            starts: dict[int, int] = {}
            for p in self._partitions(consumer):
                lo, hi = consumer.get_watermark_offsets(self._tp(p), timeout=POLL_SECONDS)
                at = positions.get(p, lo)
                if at < lo:
                    self.lost.append(p)
                    notes.append(f"notification topic {self.topic} partition {p}: offsets {at}..{lo - 1} were removed "
                                 f"(retention) before they were read; the reconciliation listing finds their objects")
                    at = lo
                starts[p], ends[p] = at, max(at, hi)
            events: list[Event] = []
            next_at = dict(starts)
            todo = [p for p in starts if starts[p] < ends[p]]
            if todo:
                consumer.assign([self._tp(p, starts[p]) for p in todo])
                open_parts = set(todo)
                while open_parts and len(events) < max_events:
                    msgs = consumer.consume(min(1000, max_events - len(events)), timeout=POLL_SECONDS)
                    if not msgs:
                        raise RetryableError(f"source.notifications: no progress reading topic {self.topic} for "
                                             f"{POLL_SECONDS:.0f} s (partitions {sorted(open_parts)}); retried")
                    for m in msgs:
                        err = m.error()
                        if err is not None:
                            if err.code() == -191:  # _PARTITION_EOF: the end the read found
                                open_parts.discard(m.partition())
                                next_at[m.partition()] = max(next_at[m.partition()], m.offset())
                                continue
                            raise RetryableError(f"source.notifications: reading topic {self.topic}: {err}")
                        p = m.partition()
                        if p not in open_parts:
                            continue
                        paths, problem = object_paths(m.value())
                        events.append(Event(p, m.offset(), paths, problem))
                        next_at[p] = m.offset() + 1
                        if next_at[p] >= ends[p]:
                            open_parts.discard(p)
            return events, next_at, notes
        finally:
            consumer.close()
