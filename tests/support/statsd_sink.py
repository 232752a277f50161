"""A real UDP socket receiving what Airflow's own StatsD client sends from a process configured
like an Airflow task with ``[metrics] statsd_on``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def received_by_statsd(tmp_path: Path, code: str, want: set[str]) -> set[str]:
    """Run ``code`` in a process configured like an Airflow task with StatsD on, towards a real UDP
    socket; the lines received (once all of ``want`` have arrived)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(20)
    env = {**os.environ, "AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(sock.getsockname()[1]), "AIRFLOW_HOME": str(tmp_path / "af"),
           "PYTHONPATH": str(PLUGINS)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got: set[str] = set()
    try:
        while not want <= got:  # Airflow may send metrics of its own too
            got |= set(sock.recv(65536).decode().splitlines())
    finally:
        sock.close()
    return got


class StatsdSink:
    """A UDP socket on loopback that keeps every StatsD line it receives (a background thread),
    for a whole Airflow (scheduler, task processes) pointed at it with ``env()``."""

    def __init__(self):
        import threading

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._recv, daemon=True)
        self._thread.start()

    def env(self) -> dict[str, str]:
        return {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(self.port)}

    def _recv(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._lines.extend(data.decode(errors="replace").splitlines())

    def lines(self, prefix: str = "") -> list[str]:
        with self._lock:
            return [x for x in self._lines if x.startswith(prefix)]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
