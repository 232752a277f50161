"""Kafka planner: exact offset ranges per partition, from a real broker.

A batch's range is ``{"topic": t, "partitions": {"<p>": [from, to)}}`` for every partition of
the topic, ``from`` being the previous batch's ``to`` (a partition new to the pipeline starts at
offset 0, i.e. at its first record). ``to`` is at most the partition's end as a
``read_committed`` consumer sees it (the last stable offset), so every transaction inside the
range is decided: committed records are read, aborted ones and transaction markers are not.
The record limit is spread over the partitions in proportion to their backlog.

Records deleted by retention before they were read are data loss: planning fails with an error
naming topic, partition and the missing range, unless the pipeline says
``on_data_loss: accept``; then the plan starts at the first available offset and records the
lost range in its notes and in the range itself (``lost``), so the ledger shows it.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ...errors import RetryableError, TerminalError
from ..base import BacklogAsk
from .client import as_settings, servers_of, settings

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
        from confluent_kafka.admin import AdminClient

        self.servers = servers_of(client)
        self.errors: list = []
        conf: dict[str, Any] = {"socket.timeout.ms": 10000, "client.id": "eobatch-plan", **as_settings(client),
                                "error_cb": self.errors.append}
        self.admin = AdminClient(conf)

    def failure(self, what: str, e: Exception) -> Exception:
        """The error to raise for call ``what`` that failed with ``e``."""
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
    import time

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


class KafkaSource:
    kind = "kafka"

    def __init__(self, cfg):
        self.cfg = cfg
        self.src = cfg.source
        self.late: list = []  # late records are told in the plan's notes (intervals.plan_interval)

    @functools.cached_property
    def client(self) -> dict:
        """The client settings (from the pipeline's connection when it names one), read once."""
        return settings(self.src)

    def describe(self) -> str:
        return self.src.describe()

    def next_range(self, previous_plans, limit: int) -> tuple[dict | None, int | None, list[str]]:
        topic = self.src.topic
        prev = previous_plans[-1].range if previous_plans else None
        if prev is not None and prev.get("topic") != topic:
            raise DataLossError(f"the last batch read topic {prev.get('topic')!r}, the pipeline now names "
                                f"{topic!r}; changing the topic of a pipeline needs a new pipeline name")
        offsets = partition_offsets(self.client, topic, self.src.isolation_level)
        start, lost, notes = start_offsets(self.src, topic, offsets, prev["partitions"] if prev is not None else None,
                                           "skip the lost records")
        backlog = {p: offsets[p][1] - start[p] for p in offsets}
        if prev is None and self.src.starting_offsets == "latest":
            # The first batch of a pipeline that starts at the latest offsets records where it
            # starts, even when it reads nothing: later batches continue from there.
            notes.append(f"first batch: starting at the latest offsets of topic {topic!r} "
                         f"{ {str(p): high for p, (_low, high) in offsets.items()} }")
            return ({"topic": topic, "isolation_level": self.src.isolation_level,
                     "partitions": {str(p): [start[p], start[p]] for p in sorted(offsets)}}, None, notes)
        if sum(backlog.values()) == 0 and not lost:
            return None, None, notes
        take = spread(limit, backlog)
        rng = {"topic": topic, "isolation_level": self.src.isolation_level,
               "partitions": {str(p): [start[p], start[p] + take[p]] for p in sorted(offsets)}}
        if lost:
            rng["lost"] = lost
        return rng, None, notes

    def backlog(self, previous_plans, unpublished: dict | None, ask: BacklogAsk) -> dict[str, Any]:
        """``Planner.backlog``: per partition, the end offset minus where the newest plan stopped
        (its ``scan`` in interval mode); no age (a record's timestamp is known only by reading it)."""
        src = self.src
        offsets = partition_offsets(self.client, src.topic, src.isolation_level, timeout=ask.timeout)
        prev = previous_plans[-1].range if previous_plans else None
        parts = {}
        for p, (low, high) in sorted(offsets.items()):
            if prev is not None and prev.get("topic") == src.topic:
                start = int((prev.get("scan") or prev.get("partitions", {})).get(str(p), [0, 0])[1])
            else:
                start = low if src.starting_offsets == "earliest" else high
            parts[str(p)] = max(0, high - max(start, low))
        notes = [f"records: end offsets of topic {src.topic!r} minus where the newest plan stopped"]
        pending = (prev or {}).get("pending") or {}
        if pending:  # interval mode: records read already, kept for intervals that have not run
            notes.append(f"{sum(c.get('records') or 0 for c in pending.values())} record(s) read for "
                         f"{len(pending)} interval(s) that have not run yet are waiting for their runs")
        notes.append("age of the oldest unpublished record: not known (a Kafka record's timestamp is only "
                     "known by reading it, which this page does not do)")
        return {"partitions": parts, "records": sum(parts.values()), "notes": notes}

    def interval_range(self, start_ms: int, end_ms: int, limit: int, earlier=None, *, previous=None,
                       holder=None, first_start_ms: int | None = None, cron: str | None = None,
                       now_ms: int | None = None) -> tuple[dict | None, int | None, list[str]]:
        """Interval mode: the records whose own timestamps fall in [start_ms, end_ms), by reading
        them (``intervals``: never from Kafka's time index, which non-monotonic timestamps and
        transaction markers contradict). ``previous``: the newest live plan; ``holder(name)``: the
        newest committed live plan that published interval slice ``name``; ``cron``: the schedule."""
        import time

        from .intervals import Broker, plan_interval

        if cron is None:
            raise ValueError("interval_range of a Kafka source needs the pipeline's schedule (cron)")
        broker = Broker(self.client, self.src.topic, self.src.isolation_level,
                        float(self.src.consumer_timeout_seconds))
        return plan_interval(self.src, broker, cron, start_ms, end_ms, limit, previous,
                             holder or (lambda _name: None), first_start_ms,
                             int(time.time() * 1000) if now_ms is None else now_ms)
