"""Airflow connections for the modules the Spark job shares with the Airflow side (a source kind's
planner, say), which must not import Airflow: the Airflow side registers its reader here
(``eobatch.airflow.connections`` does on import); anywhere else reading one is a clear error."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..errors import TerminalError

_reader: Callable[[str], dict[str, Any]] | None = None
_masker: Callable[[str], str] | None = None  # the Airflow side's secrets masker (``register``)


# the password of a URI: scheme://user:PASSWORD@host, up to the last "@" of the token (a password may
# hold "@" or "/" unencoded: a malformed URI that Airflow could not parse, so nothing registered it)
URI_PASSWORD = re.compile(r"""([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@'"]*:)[^\s'"]*@""")


def scrub(text: str) -> str:
    """``text`` fit for a log, a mail or a page: every value Airflow's secrets masker knows
    (connection passwords, masked variables, S3 keys: ``mask_secret``) shown as ``***``, and the
    password of any URI in it too, parsed or not (``scheme://user:***@host``)."""
    text = URI_PASSWORD.sub(r"\1***@", str(text))
    return text if _masker is None else _masker(text)  # the Spark job's side: nothing registered


def register(reader: Callable[[str], dict[str, Any]], masker: Callable[[str], str] | None = None) -> None:
    """``reader(conn_id)``: the connection's extra as a mapping, its secrets masked; ``masker(text)``:
    ``text`` with every secret the Airflow side knows of masked (``scrub``)."""
    global _reader, _masker
    _reader, _masker = reader, masker


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
        # never the cause itself: its message can quote the connection (a URI and its password)
        raise TerminalError(scrub(f"the Airflow connection {conn_id!r} cannot be read ({type(e).__name__}: {e})")) \
            from None
