"""The ``source:`` keys of ``kind: kafka`` as a typed model (``KafkaConfig`` is what it loads to)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import model_validator

from ...config.model import Check, ConnId, Invalid, NonNegativeInt, PosInt, one_of, required
from ..section import SourceSection
from .config import CHOICES, TOPIC_RE, KafkaConfig


def _servers(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or not all(re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+:\d{1,5}", s.strip()) for s in v.split(",")):
        raise Invalid(f"{v!r} must be host:port[,host:port...]")
    return v.strip()


def _topic(v: Any) -> str:
    if not isinstance(v, str) or not TOPIC_RE.fullmatch(v):
        raise Invalid(f"{v!r} is not a valid Kafka topic name")
    return v


class KafkaSection(SourceSection):
    CONFIG = KafkaConfig
    INTERVAL_ONLY = ("settle_seconds", "open_transaction_wait_seconds")
    bootstrap_servers: Annotated[Any, Check(_servers, {"type": "string", "description": "host:port[,host:port...]; "
                                          "or conn_id"})] = None
    conn_id: ConnId | None = None  # an Airflow connection (Kafka provider) whose extra is the client config
    topic: Annotated[Any, Check(required(_topic), {"type": "string", "pattern": TOPIC_RE.pattern})]
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
