"""Offsets: what the broker says each partition holds, and where a batch starts reading.

``partition_offsets`` asks the broker (an AdminClient that tells an authentication failure from a
broker that cannot be reached); ``start_offsets``, ``judge_loss`` and ``spread`` decide, from those
answers and the previous batch's range, where the next range starts, what retention deleted
before it was read, and how a record limit is shared among the partitions. The plan
(``planner``) and the interval plan (``intervals``) both decide here. confluent-kafka is imported
inside the functions: an optional client, needed only where a broker is asked.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ...errors import RetryableError, TerminalError
from .client import as_settings, servers_of

log = logging.getLogger(__name__)


class DataLossError(TerminalError):
    """Records were deleted (retention) before they were read, and ``on_data_loss`` is ``fail``."""


class KafkaUnavailable(RetryableError):
    """The broker or the topic cannot be reached now (the plan task is retried)."""


class KafkaAuthFailed(TerminalError):
    """The broker refused the client's credentials: a person must fix the connection."""


class _Admin:
    """An AdminClient that keeps the errors the client reports on its own (librdkafka tells an
    authentication failure there; the failed call only says the transport failed)."""

    def __init__(self, client: str | dict):
        # confluent-kafka: a Kafka source only
        from confluent_kafka.admin import AdminClient

        self.servers = servers_of(client)
        self.errors: list = []
        conf: dict[str, Any] = {"socket.timeout.ms": 10000, "client.id": "eobatch-plan", **as_settings(client),
                                "error_cb": self.errors.append}
        self.admin = AdminClient(conf)

    def failure(self, what: str, e: Exception) -> Exception:
        """The error to raise for call ``what`` that failed with ``e``."""
        # confluent-kafka: a Kafka source only
        from confluent_kafka import KafkaError

        self.admin.poll(0)  # serves the client's own error reports
        auth = next((x for x in self.errors if x.code() == KafkaError._AUTHENTICATION), None)
        if auth is not None:
            return KafkaAuthFailed(f"kafka {self.servers}: {what}: authentication failed: {auth.str()}; check the "
                                   "credentials of the pipeline's Kafka connection (source.conn_id)")
        return KafkaUnavailable(f"kafka {self.servers}: {what}: {e}")


def partition_offsets(client: str | dict, topic: str, isolation_level: str = "read_committed",
                      timeout: float = 30.0) -> dict[int, tuple[int, int]]:
    """{partition: (earliest, end)} where end is what a consumer of that isolation level can read.
    ``client``: the bootstrap servers or the client settings (``client.settings``)."""
    # confluent-kafka: a Kafka source only
    from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    servers = servers_of(client)
    adm = _Admin(client)
    admin = adm.admin
    try:
        md = admin.list_topics(topic, timeout=timeout)
    except KafkaException as e:
        raise adm.failure(f"cannot read metadata of topic {topic!r}", e) from e
    t = md.topics.get(topic)
    if t is None or (t.error is not None and t.error.code() != 0):
        raise KafkaUnavailable(f"kafka {servers}: topic {topic!r} is not available: {t.error if t else 'unknown'}")
    parts = sorted(t.partitions)
    if not parts:
        raise KafkaUnavailable(f"kafka {servers}: topic {topic!r} has no partitions")
    iso = IsolationLevel.READ_COMMITTED if isolation_level == "read_committed" else IsolationLevel.READ_UNCOMMITTED
    deadline = time.monotonic() + timeout
    while True:
        try:
            lows = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.earliest() for p in parts},
                                      request_timeout=timeout)
            highs = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in parts},
                                       isolation_level=iso, request_timeout=timeout)
            low = {tp.partition: f.result().offset for tp, f in lows.items()}
            high = {tp.partition: f.result().offset for tp, f in highs.items()}
            return {p: (low[p], high[p]) for p in parts}
        except KafkaException as e:
            # a broker that just restarted answers retriable errors (UNKNOWN_LEADER_EPOCH, NOT_LEADER...)
            # for a moment: ask again until the timeout, then say it is unavailable
            if not _retriable(e) or time.monotonic() > deadline:
                raise adm.failure(f"cannot list offsets of topic {topic!r}", e) from e
            log.info("kafka %s: %s; asking again", servers, e)
            time.sleep(0.5)


def _retriable(e) -> bool:
    """A Kafka error that asking again soon can cure (a leader moving, a broker just restarted)."""
    # confluent-kafka: a Kafka source only
    from confluent_kafka import KafkaError

    err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    if err is None:
        return False
    codes = {KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION,
             KafkaError.LEADER_NOT_AVAILABLE, KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT,
             KafkaError._TRANSPORT, KafkaError._TIMED_OUT}
    return err.retriable() or err.code() in codes


def spread(limit: int, backlog: dict[int, int]) -> dict[int, int]:
    """How many offsets to take per partition: all when the backlog fits, else in proportion."""
    total = sum(backlog.values())
    if total <= limit:
        return dict(backlog)
    take = {p: (n * limit) // total for p, n in backlog.items()}
    left = limit - sum(take.values())
    for p in sorted(backlog, key=lambda q: backlog[q] - take[q], reverse=True):
        if left <= 0:
            break
        if take[p] < backlog[p]:
            take[p] += 1
            left -= 1
    return take


def judge_loss(src, msg: str, accept_does: str, notes: list[str]) -> None:
    """Records lost (``msg``): DataLossError, or with ``on_data_loss: accept`` a warning and a note."""
    if src.on_data_loss != "accept":
        raise DataLossError(msg + f"; nothing was planned. Set source.on_data_loss: accept to {accept_does} "
                                  "(the loss is recorded in the ledger)")
    log.warning("%s; accepted (on_data_loss: accept)", msg)
    notes.append(msg + "; accepted (on_data_loss: accept)")


def start_offsets(src, topic: str, offsets: dict[int, tuple[int, int]], done: dict | None,
                  accept_does: str) -> tuple[dict[int, int], dict[str, list[int]], list[str]]:
    """(first offset to read per partition, lost ranges, notes): where the ledger says the
    pipeline's reading ended (``done``: {"<p>": [from, to)} of the newest live batch; None for
    its first batch: ``starting_offsets``). Offsets deleted (retention) before they were read
    are data loss: DataLossError, or with ``on_data_loss: accept`` skipped and recorded."""
    notes: list[str] = []
    start: dict[int, int] = {}
    lost: dict[str, list[int]] = {}
    if done is not None:
        gone = sorted(set(int(p) for p in done) - set(offsets))
        if gone:
            raise DataLossError(f"topic {topic!r}: partitions {gone} were read before and no longer exist")
    for p, (low, high) in offsets.items():
        if done is not None:
            start[p] = int(done.get(str(p), [0, 0])[1])
        else:
            start[p] = low if src.starting_offsets == "earliest" else high
        if start[p] < low:
            msg = (f"data loss: topic {topic!r} partition {p}: offsets [{start[p]}, {low}) were deleted "
                   f"(retention) before they were read" + (f" (the ledger says it read up to {start[p]})"
                                                           if done is not None else ""))
            judge_loss(src, msg, accept_does, notes)
            lost[str(p)] = [start[p], low]
            start[p] = low
        if start[p] > high:
            raise DataLossError(f"topic {topic!r} partition {p}: the pipeline has read up to offset "
                                f"{start[p]} but the partition ends at {high}: was the topic recreated?")
    return start, lost, notes
