"""The confluent-kafka client settings of a pipeline's broker: one definition for the plan's admin
client, the backlog, and the stage job's consumers.

* ``source.bootstrap_servers`` alone: ``{"bootstrap.servers": ...}``.
* ``source.conn_id``: the Airflow connection of that id, of the Kafka provider's type: its extra
  *is* the confluent-kafka config (``bootstrap.servers``, ``security.protocol``, ``sasl.*``,
  ``ssl.*``...), so SASL and SSL clusters work. It is read where Airflow runs (``settings``).

The product's own consumer settings (``PRODUCT``: no group offsets, isolation, end-of-partition
events) always win over a connection's; tuning settings (fetch sizes, client id) are defaults
a connection may change.

To the stage job: ``bootstrap.servers`` goes in the job spec like today; every other setting of
the connection travels as the environment variable ``CLIENT_ENV`` of spark-submit (its values
registered with Airflow's secrets masker, never on a command line), and the job hands the
settings to its read tasks inside their closures. No Airflow import at module level: the stage
job imports this module.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ...errors import TerminalError
from ...storage.credentials import extra

CLIENT_ENV = "EOBATCH_KAFKA_CLIENT_CONFIG"
# settings the product decides for its readers: a connection cannot change them
PRODUCT = {"enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "error",
           "enable.partition.eof": True}


def servers_of(client: str | dict) -> str:
    return client if isinstance(client, str) else str(client.get("bootstrap.servers", "?"))


def as_settings(client: str | dict) -> dict[str, Any]:
    """A bootstrap servers string or a settings mapping, as a settings mapping (a copy)."""
    return {"bootstrap.servers": client} if isinstance(client, str) else dict(client)


def settings(source) -> dict[str, Any]:
    """The client settings of a ``KafkaConfig`` where Airflow runs (the plan, the backlog, the
    stage task before spark-submit): from its connection when it names one."""
    if not source.conn_id:
        return {"bootstrap.servers": source.bootstrap_servers}
    config = extra(source.conn_id)
    if not config.get("bootstrap.servers"):
        raise TerminalError(f"source.conn_id: the extra of Airflow connection {source.conn_id!r} must be the "
                            "confluent-kafka config (the Kafka provider's connection type), with bootstrap.servers")
    return {str(k): v for k, v in config.items()}


def job_env(client: dict) -> dict[str, str]:
    """What spark-submit's environment carries to the job: every setting but bootstrap.servers
    (nothing when there is none)."""
    rest = {k: v for k, v in client.items() if k != "bootstrap.servers"}
    return {CLIENT_ENV: json.dumps(rest, sort_keys=True)} if rest else {}


def for_job(bootstrap_servers: str, environ=None) -> dict[str, Any]:
    """In the stage job's driver: the settings the read tasks use (the spec's servers and what
    ``CLIENT_ENV`` carried)."""
    raw = (os.environ if environ is None else environ).get(CLIENT_ENV)
    return {**(json.loads(raw) if raw else {}), "bootstrap.servers": bootstrap_servers}


def consumer_settings(client: str | dict, **defaults) -> dict[str, Any]:
    """A reader's settings: ``defaults`` (tuning), then the connection's, then ``PRODUCT``."""
    return {**defaults, **as_settings(client), **PRODUCT}
