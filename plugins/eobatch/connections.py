"""Airflow connections for the modules the Spark job shares with the Airflow side (a source kind's
planner, say), which must not import Airflow: the Airflow side registers its reader here
(``eobatch.airflow_conn`` does on import); anywhere else reading one is a clear error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import TerminalError

_reader: Callable[[str], dict[str, Any]] | None = None


def register(reader: Callable[[str], dict[str, Any]]) -> None:
    """``reader(conn_id)``: the connection's extra as a mapping, its secrets masked."""
    global _reader
    _reader = reader


def extra(conn_id: str) -> dict[str, Any]:
    """The extra of Airflow connection ``conn_id`` (TerminalError when it cannot be read)."""
    if _reader is None:
        raise TerminalError(f"connection {conn_id!r}: Airflow connections are read by the pipeline's Airflow "
                            "tasks and UI; this process has no access to them")
    try:
        return _reader(conn_id)
    except TerminalError:
        raise
    except Exception as e:  # noqa: BLE001 - a missing connection is an operator's error
        raise TerminalError(f"the Airflow connection {conn_id!r} cannot be read ({type(e).__name__}: {e})") from e
