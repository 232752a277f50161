"""A real SMTP server on loopback (aiosmtpd) that keeps every mail it receives, and the Airflow
connection that points the SMTP provider at it."""

from __future__ import annotations

import email
import email.policy
import json
import socket
import threading
import time
from email.message import EmailMessage


class SmtpSink:
    """aiosmtpd on 127.0.0.1 (plain SMTP, no auth) in a background thread; ``mails`` are the
    parsed messages with their envelope recipients (``X-Rcpt-To``)."""

    def __init__(self):
        from aiosmtpd.controller import Controller

        self._mails: list[EmailMessage] = []
        self._lock = threading.Lock()
        sink = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
                msg = email.message_from_bytes(envelope.original_content or envelope.content,
                                               policy=email.policy.default)
                msg["X-Rcpt-To"] = ", ".join(envelope.rcpt_tos)
                with sink._lock:
                    sink._mails.append(msg)
                return "250 OK"

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self._controller.start()

    def connection_uri_json(self, from_email: str = "eobatch@localhost") -> str:
        """An Airflow connection (JSON form of ``AIRFLOW_CONN_<ID>``) for the SMTP provider."""
        return json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": self.port,
                           "extra": {"disable_tls": True, "disable_ssl": True, "from_email": from_email,
                                     "timeout": 10, "retry_limit": 1}})

    def env(self, conn_id: str) -> dict[str, str]:
        return {f"AIRFLOW_CONN_{conn_id.upper()}": self.connection_uri_json()}

    @property
    def mails(self) -> list[EmailMessage]:
        with self._lock:
            return list(self._mails)

    def wait_for(self, predicate, timeout: float = 120) -> list[EmailMessage]:
        """The mails matching ``predicate`` once at least one arrived (AssertionError after ``timeout``)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = [m for m in self.mails if predicate(m)]
            if got:
                return got
            time.sleep(0.5)
        raise AssertionError(f"no matching mail within {timeout}s; received: {[m['Subject'] for m in self.mails]}")

    def close(self) -> None:
        self._controller.stop()


def body(msg: EmailMessage) -> str:
    """The text of a received mail (its HTML part's source)."""
    part = msg.get_body(preferencelist=("html", "plain"))
    return part.get_content() if part is not None else ""
