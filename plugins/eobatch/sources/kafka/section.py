"""The ``source:`` keys of ``kind: kafka`` as a typed model (``KafkaConfig`` is what it loads to)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import model_validator

from ...config.model import Check, ConnId, Invalid, NonNegativeInt, PosInt, one_of, required
from ..base import TOPIC_RE
from ..section import SourceSection, kafka_servers, kafka_topic
from .config import CHOICES, KafkaConfig


class KafkaSection(SourceSection):
    CONFIG = KafkaConfig
    INTERVAL_ONLY = ("settle_seconds", "open_transaction_wait_seconds")
    bootstrap_servers: Annotated[Any, Check(kafka_servers, {"type": "string", "description": "host:port[,host:port...]; "
                                          "or conn_id"})] = None
    conn_id: ConnId | None = None  # an Airflow connection (Kafka provider) whose extra is the client config
    topic: Annotated[Any, Check(required(kafka_topic), {"type": "string", "pattern": TOPIC_RE.pattern})]
    starting_offsets: Annotated[str, one_of(*CHOICES["starting_offsets"])] = CHOICES["starting_offsets"][0]
    isolation_level: Annotated[str, one_of(*CHOICES["isolation_level"])] = CHOICES["isolation_level"][0]
    on_data_loss: Annotated[str, one_of(*CHOICES["on_data_loss"])] = CHOICES["on_data_loss"][0]
    consumer_timeout_seconds: PosInt = 120
    open_transaction_wait_seconds: NonNegativeInt | None = None
    read_batch_bytes: PosInt | None = None

    @model_validator(mode="after")
    def _servers_or_connection(self) -> KafkaSection:
        if self.conn_id is not None and self.bootstrap_servers is not None:
            raise Invalid("give either bootstrap_servers or conn_id (whose extra holds bootstrap.servers), not both",
                          at="bootstrap_servers")
        if self.conn_id is None and self.bootstrap_servers is None:
            raise Invalid("is required", at="bootstrap_servers")
        return self

    def value(self) -> KafkaConfig:
        return self.CONFIG(**{k: getattr(self, k) for k in self.model_fields_set | {"kind", "bootstrap_servers"}})
