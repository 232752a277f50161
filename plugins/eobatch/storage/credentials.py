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


# The password of a URI (RFC 3986: scheme "://" [userinfo "@"] host, userinfo = user ":" password),
# as people paste it too: unencoded "@", "/", spaces and quotes in the password, the URI in quotes.
# Where a URI starts: a scheme at a word boundary; its user runs to the first ":" (no space, quote,
# "/"; an unencoded "@" of an e-mail address is kept). Where its password ends is ``_password_end``.
URI_USER = re.compile(r"""(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://)([^\s:/'"]*):""")
# the next URI on the line ends the password of the one before it
NEXT_URI = re.compile(r"""(?<![^\s'"(<\[{=,;])[A-Za-z][A-Za-z0-9+.-]*://""")
# "host:port" with no userinfo (http://host:8080/x): a port, not a password
PORT_ONLY = re.compile(r"""\d{1,5}(?=[/?#\s'"]|$)""")
HOST_START = re.compile(r"""[^\s@'"/]""")


def _password_end(text: str, start: int, quote: str) -> int:
    """The index of the "@" that ends the password beginning at ``start`` (-1: not a password).

    The password may hold anything but a line break, so it runs to the last "@" before the end of
    the line or the next URI (hiding more text than the password rather than part of it). In
    quotes, the last "@" whose host runs to the closing quote ends it ('smtp://u:it's x@mail:25').
    A port (``http://host:8080/x``) is no password.
    """
    stop = len(text)
    for sep in ("\n", "\r"):
        i = text.find(sep, start)
        stop = stop if i < 0 else min(stop, i)
    nxt = NEXT_URI.search(text, start, stop)
    if nxt:
        stop = nxt.start()
    seg = text[start:stop]
    token = seg.split(None, 1)[0] if seg[:1].strip() else ""  # the word right after "user:"
    if PORT_ONLY.match(seg) and "@" not in token:
        return -1
    if quote:
        ends = [m.start() for m in re.finditer(rf"@[^\s@{quote}]*{quote}", seg)]
        if ends:
            return start + ends[-1]
    last = at = seg.rfind("@")
    while at >= 0 and not HOST_START.match(seg, at + 1):  # rather an "@" with a host right after it
        at = seg.rfind("@", 0, at)
    at = at if at >= 0 else last
    return start + at if at >= 0 else -1


def scrub_uris(text: str) -> str:
    """``text`` with the password of every URI in it shown as ``***`` (``scheme://user:***@host``)."""
    out, pos = [], 0
    while True:
        m = URI_USER.search(text, pos)
        if m is None:
            break
        before = text[m.start() - 1] if m.start() else ""
        end = _password_end(text, m.end(), before if before in "'\"" else "")
        if end < 0:
            out.append(text[pos:m.end()])
            pos = m.end()
            continue
        out.append(text[pos:m.end()] + "***")
        pos = end
    return "".join(out) + text[pos:]


def scrub(text: str) -> str:
    """``text`` fit for a log, a mail or a page: every value Airflow's secrets masker knows
    (connection passwords, masked variables, S3 keys: ``mask_secret``) shown as ``***``, and the
    password of any URI in it too, parsed or not (``scrub_uris``: ``scheme://user:***@host``)."""
    text = scrub_uris(str(text))
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
