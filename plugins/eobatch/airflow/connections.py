"""The Airflow side's reader of connections (``eobatch.storage.credentials``), registered on import."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret
from airflow.sdk.log import redact as airflow_redact

from ..storage import credentials as connections

SECRET_WORDS = ("password", "secret", "jaas", "pem", "token", "key", "oauthbearer.config")


def is_secret(key: str) -> bool:
    """Whether a setting's value is (or holds) a secret, judged by its name."""
    return any(w in key.lower() for w in SECRET_WORDS)


def connection_extra(conn_id: str) -> dict[str, Any]:
    """The extra of Airflow connection ``conn_id``; the values of secret-looking keys registered
    with Airflow's secrets masker (never in a task log)."""
    extra = BaseHook.get_connection(conn_id).extra_dejson or {}
    if not isinstance(extra, dict):
        raise connections.TerminalError(f"the extra of Airflow connection {conn_id!r} must be a JSON object")
    for k, v in extra.items():
        if v and is_secret(str(k)):
            mask_secret(str(v))
    return dict(extra)


def redact(text: str) -> str:
    """``text`` with every value Airflow's secrets masker knows shown as ``***``."""
    return str(airflow_redact(text))


connections.register(connection_extra, redact)
