"""A model of a Kafka topic for the model-based tests: partitions of records with their own
timestamps (in any order), plain or in transactions that are open, committed or aborted; a
decided transaction writes a control marker (an offset no consumer reads) stamped with the
broker's time. ``ModelBroker`` answers the Kafka interval planner's questions as a broker
would (``eobatch.sources.kafka.intervals.Broker``); ``stage_kafka`` stages a batch with the
pyarrow stager, reading the planned hull as a ``read_committed`` consumer would and keeping the
records ``intervals.owner`` gives a slice, the stage job's rule.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field

from eobatch.sources.kafka import intervals
from eobatch.sources.kafka.intervals import owner
from support.pyarrow_stager import stage


@dataclass
class Entry:
    ts: int
    oid: str | None  # None: a control marker
    txn: int | None = None  # the transaction it belongs to (None: a plain record)


@dataclass
class Log:
    partitions: int = 2
    entries: list[list[Entry]] = field(default_factory=list)
    state: dict[int, str] = field(default_factory=dict)  # txn -> open | committed | aborted
    broker_now: int = 0  # the broker's clock (markers carry it)

    def __post_init__(self) -> None:
        self.entries = [[] for _ in range(self.partitions)]

    def append(self, part: int, ts: int, oid: str, txn: int | None = None) -> None:
        if txn is not None:
            self.state.setdefault(txn, "open")
            assert self.state[txn] == "open"
        self.entries[part].append(Entry(ts, oid, txn))

    def decide(self, txn: int, how: str) -> None:
        """Commit or abort an open transaction: a marker in each partition it wrote to."""
        assert self.state.get(txn) == "open"
        self.state[txn] = how
        for part in range(self.partitions):
            if any(e.txn == txn and e.oid is not None for e in self.entries[part]):
                self.entries[part].append(Entry(self.broker_now, None, txn))

    def visible(self, e: Entry, iso: str) -> bool:
        if e.oid is None:
            return False
        if e.txn is None or iso == "read_uncommitted":
            return True
        return self.state[e.txn] == "committed"

    def lso(self, part: int) -> int:
        for off, e in enumerate(self.entries[part]):
            if e.txn is not None and self.state[e.txn] == "open":
                return off
        return len(self.entries[part])

    def published_once(self) -> set[str]:
        """The records a reader of committed data reads: what must be published."""
        return {e.oid for es in self.entries for e in es if e.oid is not None and self.visible(e, "read_committed")}


class ModelBroker:
    """``intervals.Broker`` over a ``Log``."""

    def __init__(self, log: Log, topic: str = "orders", isolation_level: str = "read_committed"):
        self.log, self.topic, self.iso = log, topic, isolation_level

    def offsets(self, isolation_level: str | None = None) -> dict[int, tuple[int, int]]:
        iso = isolation_level or self.iso
        return {p: (0, self.log.lso(p) if iso == "read_committed" else len(self.log.entries[p]))
                for p in range(self.log.partitions)}

    def timestamps(self, partition: int, start: int, end: int, isolation_level: str | None = None):
        iso = isolation_level or self.iso
        for off in range(start, min(end, len(self.log.entries[partition]))):
            e = self.log.entries[partition][off]
            if self.log.visible(e, iso):
                yield off, e.ts


@contextlib.contextmanager
def model_broker(log: Log):
    """Inside the block the Kafka interval planner asks ``log`` instead of a broker."""
    real = intervals.Broker
    intervals.Broker = lambda *a, **kw: ModelBroker(log)  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        intervals.Broker = real  # type: ignore[misc]


def stage_records(proto, batch_id: int, records) -> str:
    """Stage a Kafka batch of ``proto`` from ``records`` (partition, offset, timestamp, raw bytes):
    every record of its planned hull a ``read_committed`` consumer reads: the stage job's rule,
    without Spark, with the job's offset account (``account.partition_entry``: the records that
    no slice holds are ``outside``; the offsets no record was read at, aborted records and
    markers, are counted as markers: verify checks only their sum)."""
    from eobatch.sources.kafka.account import Account, partition_entry

    plan = proto.ledger.plan(batch_id)
    lines: list = []
    kept: dict[str, list[int]] = {}
    read: dict[str, int] = {}
    for p, off, ts, raw in records:
        read[str(p)] = read.get(str(p), 0) + 1
        name = owner(plan.range, p, off, ts)
        if name is None:
            continue
        lines.append((name, f"{plan.range['topic']}/{p}", off, raw))
        n, a, b = kept.get(str(p), (0, off, off))
        kept[str(p)] = [n + 1, min(a, off), max(b, off)]
    positions = {}
    for p, (f, t) in plan.range["partitions"].items():
        n, lo, hi = kept.get(str(p), (0, None, None))
        delivered = read.get(str(p), 0)
        acct = Account(int(f), int(t), delivered=delivered, control=int(t) - int(f) - delivered)
        positions[str(p)] = partition_entry(n, lo, hi, [acct] if int(t) > int(f) else [], delivered - n)
    return stage(proto, batch_id, lines=lines, source_positions=positions)


def stage_kafka(proto, log: Log, batch_id: int) -> str:
    """Stage a Kafka batch of ``proto`` from the model ``log``."""
    plan = proto.ledger.plan(batch_id)
    return stage_records(proto, batch_id, (
        (int(p), off, e.ts, json.dumps({"order_id": e.oid}).encode())
        for p, (lo, hi) in plan.range["partitions"].items()
        for off, e in enumerate(log.entries[int(p)][lo:min(hi, log.lso(int(p)))], start=lo)
        if log.visible(e, "read_committed")))
