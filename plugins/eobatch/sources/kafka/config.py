"""The config of ``kind: kafka``: what its ``source:`` keys load to (``section.KafkaSection``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..base import SourceConfig, legacy_fingerprint_dict

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
        return legacy_fingerprint_dict(replace(self, read_batch_bytes=None),
                                       added=("conn_id", "open_transaction_wait_seconds", "read_batch_bytes"))

    @property
    def transaction_wait_seconds(self) -> int:
        return OPEN_TRANSACTION_WAIT if self.open_transaction_wait_seconds is None else self.open_transaction_wait_seconds
