"""Spark side of the Kafka kind: one exact offset range per Spark task (pure Python + confluent-kafka).

Spark's own Kafka source (spark-sql-kafka-0-10) needs spark-token-provider-kafka-0-10, which
the Maven registry this project builds from does not serve, so the stage job reads its ranges
with this reader instead: one Spark task per (partition, offset slice), a consumer assigned
to exactly ``[start, end)`` with the plan's isolation level, no consumer group commits.

* ``read_committed``: records of aborted transactions and transaction markers are never
  delivered; their offsets are gaps, which is why the end is detected by the consumer's
  position (or the partition end), not by counting.
* ``auto.offset.reset=error``: an offset deleted by retention is an error, never a silent jump;
  the earliest available offset is also checked before reading (data loss fails the batch).
* a range that makes no progress for ``timeout`` seconds (broker down) fails the task, so
  the stage fails and is retried; nothing partial is ever published.
"""

from __future__ import annotations

import time
from typing import Iterator

from ...errors import RetryableError
from .client import consumer_settings, servers_of

# What a read task returns, per record (raw and key stay bytes: Spark casts them to strings and
# flags invalid UTF-8 itself). The topic, the record's source and its position are derived in
# Spark from these: nothing per record is built in Python that Spark can build per column.
FIELDS = ("raw", "_kafka_partition", "_kafka_offset", "_kafka_key", "_kafka_timestamp")
SPARK_SCHEMA = "raw BINARY, _kafka_partition INT, _kafka_offset BIGINT, _kafka_key BINARY, _kafka_timestamp TIMESTAMP"


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


def read_range(client: str | dict, topic: str, partition: int, start: int, end: int, isolation_level: str,
               timeout: float = 120.0, batch: int = 5000) -> Iterator[Columns]:
    """Yield ``Columns`` of at most about ``batch`` records of ``topic``/``partition`` in [start, end).
    ``client``: the bootstrap servers or the client settings (``client.for_job``)."""
    from confluent_kafka import OFFSET_END, Consumer, KafkaError, TopicPartition  # noqa: F401

    if end <= start:
        return
    servers = servers_of(client)
    c = Consumer({
        **consumer_settings(
            client,
            **{"group.id": f"eobatch-reader-{topic}",  # never committed: offsets live in the ledger
               "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
               "client.id": f"eobatch-stage-{topic}-{partition}"}),
        "isolation.level": isolation_level,
    })
    try:
        tp = TopicPartition(topic, partition)
        try:
            low, _high = c.get_watermark_offsets(tp, timeout=timeout, cached=False)
        except Exception as e:  # KafkaException: broker unreachable
            raise KafkaReadError(f"kafka {servers}: cannot read the offsets of {topic}/{partition}: {e}") from e
        if low > start:
            raise KafkaReadError(f"data loss: topic {topic!r} partition {partition}: offsets [{start}, {low}) "
                                 f"of the planned range [{start}, {end}) were deleted before they were read")
        c.assign([TopicPartition(topic, partition, start)])
        cols = Columns(partition)
        last_progress = time.time()
        pos = start
        while pos < end:
            before = pos
            msgs = c.consume(num_messages=batch, timeout=1.0)
            if not msgs:
                p = c.position([tp])[0].offset
                if p is not None and p >= 0 and p > pos:
                    pos, last_progress = p, time.time()
                elif time.time() - last_progress > timeout:
                    raise KafkaReadError(f"kafka {servers}: no progress reading {topic}/{partition} at offset "
                                         f"{pos} of [{start}, {end}) for {timeout:.0f}s")
                continue
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        p = c.position([tp])[0].offset
                        if p is not None and p >= 0:
                            pos = max(pos, p)
                        if pos < end:
                            eof_at = m.offset()
                            if eof_at is not None and eof_at >= end:
                                pos = end
                        continue
                    if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        raise KafkaReadError(f"data loss: topic {topic!r} partition {partition}: offset {pos} is "
                                             f"out of range (deleted before it was read): {err}")
                    if err.retriable() or not err.fatal():
                        continue
                    raise KafkaReadError(f"kafka {servers}: {topic}/{partition}: {err}")
                off = m.offset()
                if off is None:  # the client sets one on every message without an error
                    raise KafkaReadError(f"kafka {servers}: {topic}/{partition}: a message without an offset "
                                         f"at {pos} of [{start}, {end})")
                if off >= end:
                    pos = end
                    break
                if off < start:
                    continue
                cols.add(m, off)
                pos = off + 1
            if pos > before:
                last_progress = time.time()
            if len(cols.offsets) >= batch:
                yield cols
                cols = Columns(partition)
        if cols.offsets:
            yield cols
    finally:
        c.close()


class Columns:
    """The records of one read call, column by column (no tuple per record)."""

    __slots__ = ("partition", "values", "offsets", "keys", "timestamps")

    def __init__(self, partition: int):
        self.partition = partition
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.keys: list[bytes | None] = []
        self.timestamps: list[int | None] = []

    def add(self, m, off: int) -> None:
        ts_type, ts = m.timestamp()
        self.values.append(m.value())
        self.offsets.append(off)
        self.keys.append(m.key())
        # TIMESTAMP_NOT_AVAILABLE (type 0) or a negative timestamp: none
        self.timestamps.append(ts if ts_type != 0 and ts is not None and ts >= 0 else None)

    def to_arrow(self):
        import pyarrow as pa

        n = len(self.offsets)
        ts = pa.array(self.timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
        return pa.RecordBatch.from_arrays([
            pa.array(self.values, pa.binary()), pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()), pa.array(self.keys, pa.binary()), ts,
        ], names=list(FIELDS))


def read_lines(spark, rng: dict, client: str | dict, timeout: float, slice_size: int = 250_000):
    """One row per record of the planned offset ranges, plus _kafka_* metadata columns.

    One Spark task per (partition, slice of at most ``slice_size`` offsets), each reading with
    ``read_range``.
    """
    from pyspark.sql import functions as F

    topic, iso = rng["topic"], rng.get("isolation_level", "read_committed")
    pieces = slices(rng["partitions"], slice_size)

    def consume(batches):
        import sys

        for b in batches:
            for part, start, end in zip(*(b.column(i).to_pylist() for i in range(3))):
                began, busy, n = time.time(), 0.0, 0
                reader = read_range(client, topic, part, start, end, iso, timeout=timeout)
                while True:  # busy: the time spent in the consumer, not waiting for Spark to take a batch
                    t = time.perf_counter()
                    cols = next(reader, None)
                    busy += time.perf_counter() - t
                    if cols is None:
                        break
                    n += len(cols.offsets)
                    yield cols.to_arrow()
                print(f"[eobatch] kafka read {topic}/{part} [{start}, {end}): {n} records, {busy:.3f}s in the "
                      f"consumer, from {began:.3f} to {time.time():.3f}", file=sys.stderr, flush=True)

    if pieces:
        tasks = spark.createDataFrame(spark.sparkContext.parallelize(pieces, len(pieces)),
                                      "partition INT, start BIGINT, end BIGINT")
        df = tasks.mapInArrow(consume, SPARK_SCHEMA)
    else:
        df = spark.createDataFrame([], SPARK_SCHEMA)
    return df.select(F.concat(F.lit(f"{topic}/"), F.col("_kafka_partition").cast("string")).alias("source"),
                     F.col("_kafka_offset").alias("position"), F.col("raw").cast("string").alias("raw"),
                     F.lit(topic).alias("_kafka_topic"), "_kafka_partition", "_kafka_offset",
                     F.make_valid_utf8(F.col("_kafka_key").cast("string")).alias("_kafka_key"), "_kafka_timestamp")


def partition_positions(lines) -> dict:
    """{"<partition>": [records, min offset, max offset]} of what the job read, for verify."""
    from pyspark.sql import functions as F

    return {str(r["p"]): [r["n"], r["lo"], r["hi"]] for r in lines.groupBy(F.col("_kafka_partition").alias("p"))
            .agg(F.count("*").alias("n"), F.min("position").alias("lo"), F.max("position").alias("hi")).collect()}
