"""A real Airflow on loopback for tests: api-server, scheduler and dag-processor processes
(LocalExecutor) on a PostgreSQL server started from Debian's packages, driven through the
REST API and the CLI. (SQLite is not made for several Airflow processes writing at once: under
a busy scheduler, `airflow backfill create` failed with "database is locked" and left a
half-created backfill behind.)

Nothing is mocked: runs are created by the scheduler, by `airflow backfill create`, by
`airflow dags trigger` and by POST /api/v2/dags/{id}/dagRuns, and executed by the executor.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

TERMINAL = {"success", "failed"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bin() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin): "
                           "install Debian's postgresql package (.ci/run does)")
    return os.path.dirname(found[-1])


class Postgres:
    """A throw-away PostgreSQL server on a loopback port (run as user postgres when we are root)."""

    def __init__(self):
        import tempfile

        self.bin = pg_bin()
        self.dir = tempfile.mkdtemp(prefix="eobatch-pg-")
        self.port = free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.dir, "postgres", "postgres")
        self.data = os.path.join(self.dir, "data")

    def _run(self, *argv: str) -> None:
        r = subprocess.run(self.as_user + list(argv), capture_output=True, text=True, timeout=120, cwd="/")
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")

    def start(self) -> str:
        self._run(f"{self.bin}/initdb", "-D", self.data, "-U", "airflow", "--auth=trust", "-E", "UTF8")
        self._run(f"{self.bin}/pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "pg.log"), "-w", "-o",
                  f"-p {self.port} -h 127.0.0.1 -k {self.dir} -c fsync=off -c max_connections=200", "start")
        self._run(f"{self.bin}/createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "airflow", "airflow")
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/airflow"

    def stop(self) -> None:
        try:
            self._run(f"{self.bin}/pg_ctl", "-D", self.data, "-m", "immediate", "stop")
        except RuntimeError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


class AirflowStack:
    def __init__(self, root: Path, env: dict):
        self.root = root
        self.home = root / "airflow"
        self.home.mkdir(parents=True, exist_ok=True)
        self.pg = Postgres()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **env,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(32).hex(),
            "AIRFLOW__API_AUTH__JWT_ISSUER": "eobatch-tests",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
        }
        self.procs: dict[str, subprocess.Popen] = {}

    # -- processes ---------------------------------------------------------------------
    def airflow_bin(self) -> str:
        airflow = shutil.which("airflow", path=self.env["PATH"])
        if airflow is None:
            raise RuntimeError(f"no `airflow` executable on PATH={self.env['PATH']}")
        return airflow

    def start(self, dag_ids: list[str], timeout: float = 180) -> None:
        airflow = self.airflow_bin()
        self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = self.pg.start()
        r = subprocess.run([airflow, "db", "migrate"], env=self.env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed: {r.stderr[-3000:]}")
        for name in ("api-server", "scheduler", "dag-processor"):
            out = open(self.root / f"{name}.log", "wb")
            self.procs[name] = subprocess.Popen([airflow, name], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                                start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"airflow {name} exited with {p.returncode}:\n{self.log_tail(name)}")
            try:
                status, body = self.rest("GET", "/api/v2/dags?limit=100")
                if status == 200 and set(dag_ids) <= {d["dag_id"] for d in body["dags"]}:
                    return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError(f"Airflow did not list {dag_ids} within {timeout}s:\n{self.log_tail('dag-processor')}")

    def stop(self) -> None:
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 30
        for p in self.procs.values():
            try:
                p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.pg.stop()

    def log_tail(self, name: str, n: int = 4000) -> str:
        path = self.root / f"{name}.log"
        return path.read_bytes()[-n:].decode(errors="replace") if path.exists() else ""

    # -- REST and CLI --------------------------------------------------------------------
    def rest(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, {"detail": text.decode(errors="replace")}

    def trigger(self, dag_id: str, conf: dict | None = None) -> tuple[int, dict]:
        return self.rest("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        airflow = self.airflow_bin()
        return subprocess.run([airflow, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def runs(self, dag_id: str) -> list[dict]:
        status, body = self.rest("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=run_after")
        assert status == 200, body
        return body["dag_runs"]

    def run(self, dag_id: str, run_id: str) -> dict:
        status, body = self.rest("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")
        assert status == 200, body
        return body

    def wait_runs(self, dag_id: str, run_ids: list[str], timeout: float = 600) -> dict[str, dict]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = {r: self.run(dag_id, r) for r in run_ids}
            if all(g["state"] in TERMINAL for g in got.values()):
                return got
            time.sleep(2)
        raise TimeoutError(f"runs {run_ids} of {dag_id} not finished after {timeout}s: "
                           f"{[(r, g['state']) for r, g in got.items()]}\n{self.log_tail('scheduler')}")

    def wait_backfills_done(self, dag_id: str, timeout: float = 120) -> list[dict]:
        """Until the scheduler has marked every backfill of ``dag_id`` completed (after its runs)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, body = self.rest("GET", f"/api/v2/backfills?dag_id={dag_id}")
            assert status == 200, body
            if all(b["completed_at"] for b in body["backfills"]):
                return body["backfills"]
            time.sleep(1)
        raise TimeoutError(f"backfills of {dag_id} not completed after {timeout}s: {body}")

    def wait_success(self, dag_id: str, run_ids: list[str], timeout: float = 600) -> dict[str, dict]:
        got = self.wait_runs(dag_id, run_ids, timeout)
        assert all(g["state"] == "success" for g in got.values()), self.explain(dag_id, got)
        return got

    def explain(self, dag_id: str, runs: dict[str, dict]) -> str:
        """For an assertion message: each failed run's task states and its failed tasks' log tails."""
        out = []
        for run_id, run in runs.items():
            if run.get("state") == "success":
                continue
            status, body = self.rest(
                "GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances")
            tis = body.get("task_instances", []) if status == 200 else []
            out.append(f"run {run_id}: {run.get('state')}; tasks "
                       + ", ".join(f"{t['task_id']}={t['state']}(try {t.get('try_number')})" for t in tis))
            for t in tis:
                if t["state"] in ("failed", "up_for_retry", "upstream_failed"):
                    out.append(f"--- log of {t['task_id']} (last 4000 chars):\n"
                               + self.task_log(dag_id, run_id, t["task_id"])[-4000:])
        return "\n".join(out)

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.log")))
