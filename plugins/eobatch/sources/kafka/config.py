"""The ``source:`` keys of ``kind: kafka``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from ..base import ConfigContext, SourceConfig, legacy_fingerprint_dict

KEYS = frozenset({"kind", "bootstrap_servers", "conn_id", "topic", "max_records_per_batch", "starting_offsets",
                  "settle_seconds", "isolation_level", "on_data_loss", "consumer_timeout_seconds",
                  "open_transaction_wait_seconds", "read_batch_bytes"})
TOPIC_RE = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")
CHOICES = {"starting_offsets": ("earliest", "latest"), "isolation_level": ("read_committed", "read_uncommitted"),
           "on_data_loss": ("fail", "accept")}  # the first is the default
OPEN_TRANSACTION_WAIT = 3600  # s: longer than a Flink exactly-once sink's checkpoint interval


@dataclass(frozen=True, kw_only=True)
class KafkaConfig(SourceConfig):
    bootstrap_servers: str | None  # None with conn_id: the connection's bootstrap.servers
    topic: str
    starting_offsets: str = "earliest"  # where a new pipeline starts (earliest | latest)
    isolation_level: str = "read_committed"  # records of aborted transactions are never read
    on_data_loss: str = "fail"  # records deleted before they were read: fail | accept
    consumer_timeout_seconds: int = 120  # a stage read that makes no progress for this long fails
    conn_id: str | None = None  # an Airflow connection (Kafka provider) whose extra is the client config
    # interval mode: how long after the interval's end (+ settle_seconds) the plan waits for a
    # transaction holding records of the interval to be decided; None: OPEN_TRANSACTION_WAIT
    open_transaction_wait_seconds: int | None = None
    # the most bytes (values and keys) a stage read task buffers before handing them to Spark;
    # None: read.DEFAULT_READ_BATCH_BYTES (16 MiB). It changes no output: not in the fingerprint.
    read_batch_bytes: int | None = None
    path: ClassVar[str | None] = None  # no folder

    def describe(self) -> str:
        return f"kafka topic {self.topic} at " + (f"connection {self.conn_id}" if self.conn_id
                                                   else str(self.bootstrap_servers))

    def fingerprint_dict(self) -> dict:
        from dataclasses import replace

        return legacy_fingerprint_dict(replace(self, read_batch_bytes=None),
                                       added=("conn_id", "open_transaction_wait_seconds", "read_batch_bytes"))

    @property
    def transaction_wait_seconds(self) -> int:
        return OPEN_TRANSACTION_WAIT if self.open_transaction_wait_seconds is None else self.open_transaction_wait_seconds


def parse(src: dict, ctx: ConfigContext) -> KafkaConfig:
    from ...config import ConfigError, conn_id, interval_source_keys, non_negative_int, pos_int, require

    file = ctx.file
    limit = pos_int(src.get("max_records_per_batch", 100_000), file, "source.max_records_per_batch")
    conn = src.get("conn_id")
    if conn is not None:
        conn = conn_id(conn, file, "source.conn_id")
        if src.get("bootstrap_servers") is not None:
            raise ConfigError(file, "source.bootstrap_servers", "give either bootstrap_servers or conn_id (whose "
                              "extra holds bootstrap.servers), not both")
        servers = None
    else:
        servers = require(src, "bootstrap_servers", file, "source.")
        if not isinstance(servers, str) or not all(
                re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+:\d{1,5}", s.strip()) for s in servers.split(",")):
            raise ConfigError(file, "source.bootstrap_servers", f"{servers!r} must be host:port[,host:port...]")
        servers = servers.strip()
    topic = require(src, "topic", file, "source.")
    if not isinstance(topic, str) or not TOPIC_RE.fullmatch(topic):
        raise ConfigError(file, "source.topic", f"{topic!r} is not a valid Kafka topic name")
    vals = {}
    for k, allowed in CHOICES.items():
        v = src.get(k, allowed[0])
        if v not in allowed:
            raise ConfigError(file, f"source.{k}", f"{v!r} must be one of {', '.join(allowed)}")
        vals[k] = v
    timeout = pos_int(src.get("consumer_timeout_seconds", 120), file, "source.consumer_timeout_seconds")
    wait = None
    if "open_transaction_wait_seconds" in src:
        if ctx.mode != "interval":
            raise ConfigError(file, "source.open_transaction_wait_seconds", "only used in interval mode (set "
                                                                            "mode: interval, or remove it)")
        wait = non_negative_int(src["open_transaction_wait_seconds"], file, "source.open_transaction_wait_seconds")
    buffer = src.get("read_batch_bytes")
    if buffer is not None:
        buffer = pos_int(buffer, file, "source.read_batch_bytes")
    return KafkaConfig(kind=src["kind"], max_records_per_batch=limit, bootstrap_servers=servers, topic=topic,
                       conn_id=conn, consumer_timeout_seconds=timeout, open_transaction_wait_seconds=wait,
                       read_batch_bytes=buffer, **vals, **interval_source_keys(src, ctx.mode, file))
