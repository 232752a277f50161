"""Spark side of the Kafka kind: one exact offset range per Spark task (pure Python + confluent-kafka).

Spark's own Kafka source (spark-sql-kafka-0-10) needs spark-token-provider-kafka-0-10, which
the Maven registry this project builds from does not serve, so the stage job reads its ranges
with this reader instead: one Spark task per (partition, offset slice), a consumer assigned
to exactly ``[start, end)`` with the plan's isolation level, no consumer group commits.

Every offset of a slice is accounted for (``account``): delivered, a record of an aborted
transaction, a transaction marker, or unreadable; the task checks its account before it
ends and the job records the accounts for verify.

* ``read_committed``: records of aborted transactions and transaction markers are never
  delivered; the end is detected by the consumer's position (or the partition end), not by
  counting. The offsets it skipped are read again by a ``read_uncommitted`` consumer: those it
  delivers are records of aborted transactions, the others transaction markers.
* an error at an offset is never skipped: the same error at the same offset ``REPEATS`` times in
  a row (a batch larger than ``receive.message.max.bytes``, a failed CRC) makes that offset
  unreadable: one row with a null value and the reason, quarantined at its position, and the
  read goes on after it. Any other error at an offset of the range fails the task (retried).
  A response too large says nothing of the offset it was fetched at, and the client fetches
  ahead of what it delivers (past markers and aborted records its position may not show yet):
  before an offset is called unreadable, a fresh consumer that can receive any record reads from
  it (``_View.first_delivered``); when the first offset it delivers is later, the offsets
  between are skipped ones (markers, aborted records), never rows of their own.
* ``auto.offset.reset=error``: an offset deleted by retention is an error, never a silent jump;
  the earliest available offset is also checked before reading (data loss fails the batch).
* a range that makes no progress for ``timeout`` seconds (broker down) fails the task, so
  the stage fails and is retried; nothing partial is ever published.
* memory: a task hands its records to Spark in Arrow batches of at most ``batch`` records and
  about ``max_bytes`` bytes of values and keys (``source.read_batch_bytes``); a single record
  larger than that is a batch of its own.
"""

from __future__ import annotations

import bisect
import sys
import time
from typing import Iterator

import pyarrow as pa

from ...errors import RetryableError
from .account import Account, partition_entry
from .client import consumer_settings, servers_of

# What a read task returns, per record (raw and key stay bytes: Spark casts them to strings and
# flags invalid UTF-8 itself). The topic, the record's source and its position are derived in
# Spark from these: nothing per record is built in Python that Spark can build per column.
# _eo_unreadable: why the record at that offset could not be read (null for a record read);
# classify quarantines such a row with that reason.
FIELDS = ("raw", "_kafka_partition", "_kafka_offset", "_kafka_key", "_kafka_timestamp", "_eo_unreadable")
SPARK_SCHEMA = ("raw BINARY, _kafka_partition INT, _kafka_offset BIGINT, _kafka_key BINARY, _kafka_timestamp TIMESTAMP, "
                "_eo_unreadable STRING")
DEFAULT_READ_BATCH_BYTES = 16 << 20  # source.read_batch_bytes: far below the heap and Arrow's 2 GiB per array
REPEATS = 3  # the same error at the same offset this many reads in a row: that record cannot be read
GAP_SPAN = 10_000  # skipped offsets this close together are read again in one pass, not one seek each
PROBE_RECEIVE_BYTES = 1 << 30  # a probe's receive limit: librdkafka's is 2 GiB; a batch is bounded by the topic's
PROBE_SECONDS = 10.0  # how long a probe waits for a first record


class KafkaReadError(RetryableError):
    """A Kafka read inside the stage job that failed or made no progress (the stage is retried)."""


def slices(partitions: dict, max_per_slice: int) -> list[tuple[int, int, int]]:
    """(partition, start, end) pieces of at most ``max_per_slice`` offsets, for parallel tasks."""
    out = []
    for p, (f, t) in sorted(partitions.items(), key=lambda x: int(x[0])):
        s = int(f)
        while s < int(t):
            e = min(int(t), s + max_per_slice)
            out.append((int(p), s, e))
            s = e
    return out


def _unreadable_codes() -> frozenset:
    """Errors that say the record at an offset cannot be read as it is (asking again may cure a
    glitch on the wire, not these when they repeat)."""
    # confluent-kafka: a Kafka source only
    from confluent_kafka import KafkaError

    return frozenset(getattr(KafkaError, n) for n in ("_BAD_MSG", "_BAD_COMPRESSION", "MSG_SIZE_TOO_LARGE",
                                                      "CORRUPT_MESSAGE", "INVALID_RECORD") if hasattr(KafkaError, n))


class _View:
    """One consumer of one partition at one isolation level: ``walk`` yields what it delivers."""

    def __init__(self, client: str | dict, topic: str, partition: int, isolation_level: str, timeout: float,
                 batch: int):
        # confluent-kafka: a Kafka source only
        from confluent_kafka import Consumer

        self.topic, self.partition, self.timeout, self.batch = topic, partition, timeout, batch
        self.client, self.isolation_level = client, isolation_level
        self.servers = servers_of(client)
        self.errors: list = []  # the client's own error reports (a response too large to receive is one)
        self.c = Consumer(self._settings())

    def _settings(self, **over) -> dict:
        return {**consumer_settings(
                    self.client,
                    **{"group.id": f"eobatch-reader-{self.topic}",  # never committed: offsets live in the ledger
                       "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760, "check.crcs": True,
                       "client.id": f"eobatch-stage-{self.topic}-{self.partition}"}),
                "isolation.level": self.isolation_level, "error_cb": self.errors.append, **over}

    def first_delivered(self, at: int, seconds: float = PROBE_SECONDS) -> int | None:
        """The first offset at or after ``at`` that a fresh consumer of this isolation level
        delivers when it can receive any record the broker holds (its receive limit raised to
        ``PROBE_RECEIVE_BYTES``, one batch a fetch), or the partition's end when it reaches that
        first; None when it gets nothing in ``seconds`` (the offset cannot be read even so)."""
        # confluent-kafka: a Kafka source only
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        probe = Consumer(self._settings(**{"receive.message.max.bytes": PROBE_RECEIVE_BYTES,
                                           "max.partition.fetch.bytes": 1, "error_cb": lambda _e: None,
                                           "client.id": f"eobatch-probe-{self.topic}-{self.partition}"}))
        tp = TopicPartition(self.topic, self.partition)
        try:
            probe.assign([TopicPartition(self.topic, self.partition, at)])
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                for m in probe.consume(num_messages=1, timeout=0.5):
                    err, off = m.error(), m.offset()
                    if err is None and off is not None and off >= at:
                        return int(off)
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        p = probe.position([tp])[0].offset
                        if p is not None and p > at:
                            return int(p)
            return None
        finally:
            probe.close()

    def where(self) -> str:
        return f"kafka {self.servers}: {self.topic}/{self.partition}"

    def low_watermark(self) -> int:
        # confluent-kafka: a Kafka source only
        from confluent_kafka import TopicPartition

        try:
            return self.c.get_watermark_offsets(TopicPartition(self.topic, self.partition), timeout=self.timeout,
                                                cached=False)[0]
        except Exception as e:  # KafkaException: broker unreachable
            raise KafkaReadError(f"kafka {self.servers}: cannot read the offsets of {self.topic}/{self.partition}: "
                                 f"{e}") from e

    def walk(self, start: int, end: int) -> Iterator[tuple[int, object]]:
        """``(offset, message)`` for each record delivered in ``[start, end)`` and ``(offset, reason)``
        for each offset found unreadable, in offset order; the offsets between them are the ones
        this consumer skips (not delivered at its isolation level, or transaction markers)."""
        # confluent-kafka: a Kafka source only
        from confluent_kafka import KafkaError, TopicPartition

        unreadable = _unreadable_codes()
        tp = TopicPartition(self.topic, self.partition)
        self.c.assign([TopicPartition(self.topic, self.partition, start)])
        last_progress = time.time()
        pos = start
        strikes: tuple[int, int] = (-1, 0)  # (offset, reads in a row that failed there)
        while pos < end:
            before = pos
            self.errors.clear()
            msgs = self.c.consume(num_messages=self.batch, timeout=1.0)
            failed: tuple[int, str] | None = None  # (offset, why) of an error that says it cannot be read
            for m in msgs:
                err = m.error()
                if err is not None:
                    code, off = err.code(), m.offset()
                    if code == KafkaError._PARTITION_EOF:
                        p = self.c.position([tp])[0].offset
                        if p is not None and p >= 0:
                            pos = max(pos, min(p, end))
                        if off is not None and off >= end:
                            pos = end
                        continue
                    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        raise KafkaReadError(f"data loss: topic {self.topic!r} partition {self.partition}: offset "
                                             f"{pos} is out of range (deleted before it was read): {err}")
                    at = pos if off is None or off < 0 else off
                    if code in unreadable and at < end:
                        # at an offset below ours: the batch that holds ours (it began before it)
                        failed = (max(at, pos), f"{err.name()}: {err.str()}")
                        continue
                    if (pos <= at < end and off is not None and off >= 0) or err.fatal():
                        raise KafkaReadError(f"{self.where()}: offset {at} of [{start}, {end}): {err}; the offset "
                                             f"cannot be accounted for, the stage is retried")
                    continue  # the client's, not an offset's (a broker unreachable): the progress timeout rules
                off = m.offset()
                if off is None:  # the client sets one on every message without an error
                    raise KafkaReadError(f"{self.where()}: a message without an offset at {pos} of [{start}, {end})")
                if off < pos:
                    continue  # delivered again (the client fetched it twice): already accounted for
                if off >= end:
                    pos = end
                    break
                yield off, m
                pos = off + 1
            if pos == before:
                p = self.c.position([tp])[0].offset  # past offsets it does not deliver (markers...)
                if p is not None and p >= 0 and p > pos:
                    pos = min(p, end)
            if pos == before and failed is None:
                failed = self._too_large(pos)
            if failed is not None and pos <= failed[0]:
                at, why = failed
                strikes = (at, strikes[1] + 1 if strikes[0] == at else 1)
                if strikes[1] >= REPEATS:
                    first = self.first_delivered(at)
                    if first is not None and first > at:
                        # the error was of a fetch past ``at``: [at, first) holds only offsets this
                        # view never delivers (the gap view tells markers from aborted records)
                        pos = min(first, end)
                    else:
                        yield at, (f"unreadable: {self.topic}/{self.partition} offset {at} could not be read "
                                   f"{REPEATS} times in a row: {why}")
                        pos = at + 1
                    if pos < end:
                        self.c.assign([TopicPartition(self.topic, self.partition, pos)])
                    strikes = (-1, 0)
            if pos > before:
                last_progress = time.time()
            elif time.time() - last_progress > self.timeout:
                raise KafkaReadError(f"kafka {self.servers}: no progress reading {self.topic}/{self.partition} at "
                                     f"offset {pos} of [{start}, {end}) for {self.timeout:.0f}s")

    def _too_large(self, pos: int) -> tuple[int, str] | None:
        """(pos, why) when the client reported a response larger than receive.message.max.bytes: it
        drops it and asks again for the same offset, forever; it says so only in its own error reports."""
        # confluent-kafka: a Kafka source only
        from confluent_kafka import KafkaError

        big = [e for e in self.errors if e.code() == KafkaError._BAD_MSG and "receive.message.max.bytes" in e.str()]
        return (pos, f"{big[-1].name()}: {big[-1].str()}") if big else None

    def close(self) -> None:
        self.c.close()


def _runs_spans(runs: list[list[int]], span: int) -> list[tuple[int, int]]:
    """The runs ``[a, b)`` merged where they are less than ``span`` offsets apart."""
    out: list[list[int]] = []
    for a, b in runs:
        if out and a - out[-1][1] < span:
            out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def read_range(client: str | dict, topic: str, partition: int, start: int, end: int, isolation_level: str,
               timeout: float = 120.0, batch: int = 5000, max_bytes: int = DEFAULT_READ_BATCH_BYTES,
               account: Account | None = None) -> Iterator[Columns]:
    """Yield ``Columns`` of ``topic``/``partition`` in [start, end), each of at most ``batch``
    records and about ``max_bytes`` bytes (one record more than that is a batch of its own).
    ``client``: the bootstrap servers or the client settings (``client.for_job``). ``account``
    (when given) is filled in with where every offset went, and checked: an offset not
    accounted for fails the read (KafkaReadError)."""
    acct = account if account is not None else Account(start, end)
    if end <= start:
        return
    view = _View(client, topic, partition, isolation_level, timeout, batch)
    skipped: list[list[int]] = []  # runs [a, b) of offsets the consumer skipped
    try:
        low = view.low_watermark()
        if low > start:
            raise KafkaReadError(f"data loss: topic {topic!r} partition {partition}: offsets [{start}, {low}) "
                                 f"of the planned range [{start}, {end}) were deleted before they were read")
        cols = Columns(partition)
        at = start
        for off, m in view.walk(start, end):
            if off > at:
                skipped.append([at, off])
            if isinstance(m, str):
                cols.add_unreadable(off, m)
                acct.unreadable += 1
            else:
                cols.add(m, off)
                acct.delivered += 1
            at = off + 1
            if len(cols.offsets) >= batch or cols.nbytes >= max_bytes:
                yield cols
                cols = Columns(partition)
        if at < end:
            skipped.append([at, end])
    finally:
        view.close()
    gaps, lost_in_gaps = sum(b - a for a, b in skipped), 0
    if skipped and isolation_level == "read_committed":
        # the same offsets as read_uncommitted sees them: what it delivers was aborted
        starts = [a for a, _b in skipped]
        other = _View(client, topic, partition, "read_uncommitted", timeout, batch)
        try:
            for a, b in _runs_spans(skipped, GAP_SPAN):
                for off, m in other.walk(a, b):
                    i = bisect.bisect_right(starts, off) - 1
                    if i < 0 or off >= skipped[i][1]:
                        continue  # read by the first consumer already
                    if isinstance(m, str):
                        cols.add_unreadable(off, m)
                        acct.unreadable += 1
                        lost_in_gaps += 1
                    else:
                        acct.aborted += 1
        finally:
            other.close()
    acct.control = gaps - acct.aborted - lost_in_gaps
    problems = acct.problems(partition)
    if problems:
        raise KafkaReadError(f"kafka {servers_of(client)}: topic {topic!r}: " + "; ".join(problems))
    if cols.offsets:
        yield cols


class Columns:
    """The records of one read call, column by column (no tuple per record)."""

    __slots__ = ("partition", "values", "offsets", "keys", "timestamps", "unreadable", "nbytes")

    def __init__(self, partition: int):
        self.partition = partition
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.keys: list[bytes | None] = []
        self.timestamps: list[int | None] = []
        self.unreadable: list[str | None] | None = None  # None: every record was read
        self.nbytes = 0  # of the values and keys held

    def add(self, m, off: int) -> None:
        ts_type, ts = m.timestamp()
        v, k = m.value(), m.key()
        self.values.append(v)
        self.offsets.append(off)
        self.keys.append(k)
        self.nbytes += (len(v) if v else 0) + (len(k) if k else 0)
        # TIMESTAMP_NOT_AVAILABLE (type 0) or a negative timestamp: none
        self.timestamps.append(ts if ts_type != 0 and ts is not None and ts >= 0 else None)
        if self.unreadable is not None:
            self.unreadable.append(None)

    def add_unreadable(self, off: int, reason: str) -> None:
        """A row for a record that could not be read: no value, no key, the reason."""
        if self.unreadable is None:
            self.unreadable = [None] * len(self.offsets)
        for col in (self.values, self.keys, self.timestamps):
            col.append(None)
        self.offsets.append(off)
        self.unreadable.append(reason)

    def to_arrow(self):
        n = len(self.offsets)
        ts = pa.array(self.timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
        return pa.RecordBatch.from_arrays([
            pa.array(self.values, pa.binary()), pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()), pa.array(self.keys, pa.binary()), ts,
            pa.nulls(n, pa.string()) if self.unreadable is None else pa.array(self.unreadable, pa.string()),
        ], names=list(FIELDS))


class SliceAccounts:
    """Spark accumulator param: {"<partition>:<start>:<end>": Account JSON} of the slices read.
    A slice read twice (a task run again) must account the same way; when it does not, both are
    kept under ``conflicts`` and verify refuses the attempt."""

    def zero(self, value):
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:
        for k, v in b.items():
            if k == "conflicts":
                a.setdefault("conflicts", {}).update(v)
            elif k in a and a[k] != v:
                a.setdefault("conflicts", {})[k] = [a[k], v]
            else:
                a[k] = v
        return a


def read_lines(spark, rng: dict, client: str | dict, timeout: float, slice_size: int = 250_000,
               max_bytes: int = DEFAULT_READ_BATCH_BYTES):
    """``(lines, accounts)``: one row per record of the planned offset ranges, plus _kafka_* metadata
    columns (and ``_eo_unreadable``); ``accounts`` is the Spark accumulator (``SliceAccounts``) of
    where every offset went, complete once an action has read every row.

    One Spark task per (partition, slice of at most ``slice_size`` offsets), each reading with
    ``read_range``.
    """
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    topic, iso = rng["topic"], rng.get("isolation_level", "read_committed")
    pieces = slices(rng["partitions"], slice_size)
    accounts = spark.sparkContext.accumulator({}, SliceAccounts())

    def consume(batches):
        for b in batches:
            for part, start, end in zip(*(b.column(i).to_pylist() for i in range(3))):
                began, busy, n = time.time(), 0.0, 0
                acct = Account(start, end)
                reader = read_range(client, topic, part, start, end, iso, timeout=timeout, max_bytes=max_bytes,
                                    account=acct)
                while True:  # busy: the time spent in the consumer, not waiting for Spark to take a batch
                    t = time.perf_counter()
                    cols = next(reader, None)
                    busy += time.perf_counter() - t
                    if cols is None:
                        break
                    n += len(cols.offsets)
                    yield cols.to_arrow()
                accounts.add({f"{part}:{start}:{end}": acct.to_json()})
                print(f"[eobatch] kafka read {topic}/{part} [{start}, {end}): {n} records, {busy:.3f}s in the "
                      f"consumer, from {began:.3f} to {time.time():.3f}; offsets: {acct.describe()}", file=sys.stderr,
                      flush=True)

    if pieces:
        tasks = spark.createDataFrame(spark.sparkContext.parallelize(pieces, len(pieces)),
                                      "partition INT, start BIGINT, end BIGINT")
        df = tasks.mapInArrow(consume, SPARK_SCHEMA)
    else:
        df = spark.createDataFrame([], SPARK_SCHEMA)
    lines = df.select(F.concat(F.lit(f"{topic}/"), F.col("_kafka_partition").cast("string")).alias("source"),
                      F.col("_kafka_offset").alias("position"), F.col("raw").cast("string").alias("raw"),
                      F.lit(topic).alias("_kafka_topic"), "_kafka_partition", "_kafka_offset",
                      F.make_valid_utf8(F.col("_kafka_key").cast("string")).alias("_kafka_key"), "_kafka_timestamp",
                      "_eo_unreadable")
    return lines, accounts


def partition_positions(lines, accounts: dict, outside: dict | None = None) -> dict:
    """{"<partition>": ``account.partition_entry``} of what the job read (``lines``: its rows,
    ``accounts``: the value of ``read_lines``' accumulator; ``outside``: per partition, the rows
    read and left out because no interval slice of the batch holds them), for verify."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    rows = {str(r["p"]): (r["n"], r["lo"], r["hi"]) for r in lines.groupBy(F.col("_kafka_partition").alias("p"))
            .agg(F.count("*").alias("n"), F.min("position").alias("lo"), F.max("position").alias("hi")).collect()}
    per: dict[str, list[Account]] = {}
    for key, a in accounts.items():
        if key != "conflicts":
            per.setdefault(key.split(":")[0], []).append(Account(**a))
    out = {p: partition_entry(*rows.get(p, (0, None, None)), per.get(p, []), int((outside or {}).get(p) or 0))
           for p in sorted(set(rows) | set(per))}
    for key, both in (accounts.get("conflicts") or {}).items():
        p = key.split(":")[0]
        out.setdefault(p, partition_entry(0, None, None, [])).setdefault("conflicts", {})[key] = both
    return out
