"""A real Airflow on loopback for tests: api-server, scheduler and dag-processor processes
on a PostgreSQL server started from Debian's packages, driven through the REST API and the CLI.
(SQLite is not made for several Airflow processes writing at once: under a busy scheduler,
`airflow backfill create` failed with "database is locked" and left a half-created backfill
behind.) The executor is a parameter: the LocalExecutor (tasks run by the scheduler's own
processes), or the Celery executor with a Redis server (Debian's ``redis-server``) as the broker,
PostgreSQL as the result backend, and ``airflow celery worker`` processes (``CeleryWorker``: each
its own name, queues and environment, as if on a machine of its own).

Nothing is mocked: runs are created by the scheduler, by `airflow backfill create`, by
`airflow dags trigger` and by POST /api/v2/dags/{id}/dagRuns, and executed by the executor.

``ui_stack`` is the Airflow of `make ui-up` (tests/support/services.py) and of the UI tests: the
same processes on SQLite in its Airflow home (nothing to install), with Airflow's simple auth
manager and a real user and password instead of "everyone is admin".
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
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


class Redis:
    """A throw-away Redis server (Debian's ``redis-server``) on a loopback port, nothing persisted
    (no RDB snapshot, no append-only file): the Celery executor's broker."""

    def __init__(self):
        found = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin:/usr/sbin")
        if found is None:
            raise RuntimeError("redis-server not found: install Debian's redis-server package (.ci/run does)")
        self.bin = found
        self.dir = tempfile.mkdtemp(prefix="eobatch-redis-")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30) -> str:
        """Start it, wait until it answers PING, return its URL (database 0)."""
        log = os.path.join(self.dir, "redis.log")
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [self.bin, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", self.dir, "--daemonize", "no"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.dir)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                with open(log, "rb") as f:
                    raise RuntimeError(f"redis-server exited with {self.proc.returncode}: "
                                       f"{f.read()[-2000:].decode(errors='replace')}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return self.url
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass(frozen=True)
class CeleryWorker:
    """One ``airflow celery worker`` of a stack, as if on a machine of its own: ``name`` is its
    Celery hostname and the hostname its task instances report (Airflow's ``hostname_callable``,
    set for it alone); ``queues`` the Celery queues it consumes; ``env`` what its environment adds
    to the stack's (its own caches, say); ``concurrency`` the task slots it runs at once."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    queues: tuple[str, ...] = ("default",)
    concurrency: int = 1

    @property
    def process(self) -> str:
        """Its name among the stack's processes (log and pid files)."""
        return f"worker-{self.name}"


# Airflow's ``[core] hostname_callable`` of a stack's workers: the hostname a task instance
# reports is the worker's name, not this machine's (they all run here). In the Airflow home's
# config/ folder, which Airflow puts on sys.path.
WORKER_HOSTNAME_MODULE = "stack_worker_hostname"
WORKER_NAME_ENV = "AIRFLOW_STACK_WORKER_NAME"


def _names(root: Path, procs: dict[str, subprocess.Popen] | None) -> list[str]:
    """The processes a stack under ``root`` may have: the three of every stack, those of ``procs``,
    and the workers whose pid files are there."""
    workers = sorted(p.name.removesuffix(".pid") for p in root.glob("worker-*.pid"))
    return list(dict.fromkeys([*AirflowStack.PROCESSES, *(procs or {}), *workers]))


def stop_processes(root: Path, procs: dict[str, subprocess.Popen] | None = None, grace: float = 30) -> list[str]:
    """SIGTERM to each process group of ``AirflowStack.PROCESSES`` and of its Celery workers (from
    ``procs``, or from the pid files in ``root``: `make ui-down` is another process), SIGKILL after
    ``grace`` seconds; the pid files are removed. Returns the names of the processes that were running."""
    pids: dict[str, int] = {}
    for name in _names(root, procs):
        p = (procs or {}).get(name)
        pid_file = root / f"{name}.pid"
        if p is not None:
            pids[name] = p.pid
        elif pid_file.exists():
            try:
                pid = int(pid_file.read_text().strip())
            except ValueError:
                continue
            if _is_airflow(pid):  # a pid file can outlive its process, and the pid be reused
                pids[name] = pid
    running = [name for name, pid in pids.items() if _alive(pid)]
    for pid in pids.values():
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.time() + grace
    for name, pid in pids.items():
        p = (procs or {}).get(name)
        while time.time() < deadline and _alive(pid):
            if p is not None:
                try:
                    p.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    pass
            else:
                time.sleep(0.2)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if p is not None:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        (root / f"{name}.pid").unlink(missing_ok=True)
    return running


def _is_airflow(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"airflow" in f.read()
    except OSError:
        return False


def running(root: Path) -> dict[str, int]:
    """The processes of a stack under ``root`` that are still running ({name: pid}, from pid files)."""
    out = {}
    for name in _names(root, None):
        try:
            pid = int((root / f"{name}.pid").read_text().strip())
        except (OSError, ValueError):
            continue
        if _alive(pid) and _is_airflow(pid):
            out[name] = pid
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class AirflowStack:
    """api-server, scheduler and dag-processor under ``root`` (their logs and pid files).

    ``database``: "postgres" (a throw-away server, see ``Postgres``) or "sqlite" (the home's
    ``airflow.db``, or ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` of ``env``). ``users``: {name:
    password} of Airflow's simple auth manager (role admin); None: every request is an admin
    (``simple_auth_manager_all_admins``). With users, ``login()`` gets a JWT that ``rest`` sends.

    ``executor``: "local" (Airflow's default, the LocalExecutor), or "celery": the CeleryExecutor,
    a ``Redis`` broker, PostgreSQL as Celery's result backend, and one ``airflow celery worker``
    per ``workers`` entry (``CeleryWorker``), started with the rest and stopped with it.
    """

    EXECUTORS = {"local": None, "celery": "CeleryExecutor"}

    def __init__(self, root: Path, env: dict, *, home: Path | None = None, database: str = "postgres",
                 users: dict[str, str] | None = None, port: int | None = None, executor: str = "local",
                 workers: Sequence[CeleryWorker] = ()):
        if executor not in self.EXECUTORS:
            raise ValueError(f"executor {executor!r}: one of {sorted(self.EXECUTORS)}")
        if executor == "celery" and (database != "postgres" or not workers):
            raise ValueError("the Celery executor needs PostgreSQL (its result backend too) and at least one worker")
        if executor != "celery" and workers:
            raise ValueError("workers are the Celery executor's")
        if len({w.name for w in workers}) != len(workers):
            raise ValueError(f"two workers of one name: {[w.name for w in workers]}")
        self.executor = executor
        self.workers = tuple(workers)
        self.redis = Redis() if executor == "celery" else None
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.home = home or root / "airflow"
        self.home.mkdir(parents=True, exist_ok=True)
        self.pg = Postgres() if database == "postgres" else None
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.users = users
        self.token: str | None = None
        self.env = {
            **env,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False" if users else "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,  # links in task logs and alerts
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(32).hex(),
            "AIRFLOW__API_AUTH__JWT_ISSUER": "eobatch-tests",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # Airflow's default: every pipeline is written before the stack starts (``start`` waits
            # until its DAGs are listed); a re-parse every 5 s cost an idle stack 19 CPU-seconds a
            # minute (5 s at 30), which the tests running beside it on 2 cores paid
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
        }
        if database == "sqlite":
            self.env.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{self.home / 'airflow.db'}")
        if self.EXECUTORS[executor]:
            self.env["AIRFLOW__CORE__EXECUTOR"] = self.EXECUTORS[executor]
        if users:
            self.env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = ",".join(f"{u}:admin" for u in users)
            self.env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(self.passwords_file)
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def passwords_file(self) -> Path:
        """The simple auth manager's passwords (JSON {user: password}, mode 0600): written here
        before the api-server starts, so the auth manager keeps them instead of generating some."""
        return self.home / "simple_auth_manager_passwords.json"

    def _write_passwords(self) -> None:
        assert self.users is not None
        path = self.passwords_file
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.users, f)
        os.chmod(path, 0o600)

    # -- processes ---------------------------------------------------------------------
    def airflow_bin(self) -> str:
        airflow = shutil.which("airflow", path=self.env["PATH"])
        if airflow is None:
            raise RuntimeError(f"no `airflow` executable on PATH={self.env['PATH']}")
        return airflow

    PROCESSES = ("api-server", "scheduler", "dag-processor")

    def start(self, dag_ids: list[str], timeout: float = 180) -> None:
        """Migrate the database, start the three processes and the Celery workers (each in its own
        session, its pid in ``root/<name>.pid``) and wait until the API lists ``dag_ids`` (logging
        in first when the stack has users) and every worker is ready."""
        airflow = self.airflow_bin()
        try:
            if self.pg is not None:
                self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = self.pg.start()
            if self.redis is not None:
                self.env["AIRFLOW__CELERY__BROKER_URL"] = self.redis.start()
                self.env["AIRFLOW__CELERY__RESULT_BACKEND"] = "db+" + self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
            if self.users:
                self._write_passwords()
            r = subprocess.run([airflow, "db", "migrate"], env=self.env, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise RuntimeError(f"airflow db migrate failed: {r.stderr[-3000:]}")
            for name in self.PROCESSES:
                self._spawn(name, [airflow, name], self.env)
            if self.workers:
                self._write_worker_hostname()
            for w in self.workers:
                self._spawn(w.process, [airflow, "celery", "worker", "--celery-hostname", w.name, "--queues",
                                        ",".join(w.queues), "--concurrency", str(w.concurrency), "--skip-serve-logs"],
                            {**self.env, **w.env, "AIRFLOW__CORE__HOSTNAME_CALLABLE":
                             f"{WORKER_HOSTNAME_MODULE}.hostname", WORKER_NAME_ENV: w.name})
            self._wait_listed(dag_ids, timeout)
            self._wait_workers(timeout)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, argv: list[str], env: dict) -> None:
        with open(self.root / f"{name}.log", "wb") as out:
            self.procs[name] = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                start_new_session=True)
        (self.root / f"{name}.pid").write_text(str(self.procs[name].pid))

    def _write_worker_hostname(self) -> None:
        config = self.home / "config"
        config.mkdir(parents=True, exist_ok=True)
        (config / f"{WORKER_HOSTNAME_MODULE}.py").write_text(textwrap.dedent(f"""\
            # [core] hostname_callable of the test stack's Celery workers (tests/support/airflow_stack.py)
            import os


            def hostname() -> str:
                return os.environ["{WORKER_NAME_ENV}"]
            """))

    def _wait_workers(self, timeout: float) -> None:
        """Until each worker's log says it is ready (connected to the broker, consuming its queues)."""
        deadline = time.time() + timeout
        waiting = list(self.workers)
        while waiting and time.time() < deadline:
            for w in list(waiting):
                p = self.procs[w.process]
                if p.poll() is not None:
                    raise RuntimeError(f"airflow celery worker {w.name} exited with {p.returncode}:\n"
                                       f"{self.log_tail(w.process)}")
                if f"@{w.name} ready." in self.log_tail(w.process, 200_000):  # celery@<name> ready.
                    waiting.remove(w)
            if waiting:
                time.sleep(1)
        if waiting:
            raise TimeoutError(f"Celery workers {[w.name for w in waiting]} not ready within {timeout}s:\n"
                               + "\n".join(self.log_tail(w.process) for w in waiting))

    def _wait_listed(self, dag_ids: list[str], timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"airflow {name} exited with {p.returncode}:\n{self.log_tail(name)}")
            try:
                if self.users and self.token is None:
                    user, password = next(iter(self.users.items()))
                    self.token = self.login(user, password)
                status, body = self.rest("GET", "/api/v2/dags?limit=100")
                if status == 200 and set(dag_ids) <= {d["dag_id"] for d in body["dags"]}:
                    return
            except (OSError, ValueError):  # not listening yet, or not answering JSON yet
                pass
            time.sleep(1)
        raise TimeoutError(f"Airflow did not list {dag_ids} within {timeout}s:\n{self.log_tail('dag-processor')}")

    def login(self, username: str, password: str) -> str:
        """A JWT from Airflow's own ``POST /auth/token`` (raises ValueError when refused)."""
        req = urllib.request.Request(self.url + "/auth/token", method="POST",
                                     data=json.dumps({"username": username, "password": password}).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())["access_token"]
        except urllib.error.HTTPError as e:
            raise ValueError(f"POST /auth/token: {e.code} {e.read()[:300]!r}") from None

    def stop(self, grace: float = 5.0) -> None:
        """Stop every process, SIGKILL after ``grace`` seconds: a stack stops when its work is done (the
        api-server alone takes about 11 s to exit after SIGTERM, six stacks a test session)."""
        stop_processes(self.root, self.procs, grace=grace)
        self.procs = {}
        if self.redis is not None:
            self.redis.stop()
        if self.pg is not None:
            self.pg.stop()

    def log_tail(self, name: str, n: int = 4000) -> str:
        path = self.root / f"{name}.log"
        return path.read_bytes()[-n:].decode(errors="replace") if path.exists() else ""

    # -- REST and CLI --------------------------------------------------------------------
    def rest(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, {"detail": text.decode(errors="replace")}

    def trigger(self, dag_id: str, conf: dict | None = None, run_id: str | None = None) -> tuple[int, dict]:
        body: dict = {"logical_date": None, "conf": conf or {}}
        if run_id is not None:
            body["dag_run_id"] = run_id
        return self.rest("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)

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


# -- the Airflow of `make ui-up` ---------------------------------------------------------------
UI_USER = "admin"


def ui_stack(root: Path, env: dict, home: Path | None = None, port: int | None = None,
             user: str = UI_USER) -> AirflowStack:
    """The Airflow of `make ui-up` and of the UI tests (not started): SQLite in ``home``, Airflow's
    simple auth manager with one admin ``user``, whose password is generated once per home and
    kept in its passwords file (mode 0600), so a browser session survives a restart of the UI."""
    home = home or root / "airflow"
    password = None
    try:
        password = json.loads((home / "simple_auth_manager_passwords.json").read_text()).get(user)
    except (OSError, ValueError, AttributeError):
        pass
    if not password:
        import secrets

        password = secrets.token_urlsafe(18)
    return AirflowStack(root, env, home=home, database="sqlite", users={user: password}, port=port)


def ui_env(stack: AirflowStack) -> dict[str, str]:
    """What `make ui-up` writes to .services/ui-env: the URL, the user and the password."""
    assert stack.users
    user, password = next(iter(stack.users.items()))
    return {"AIRFLOW_UI_URL": stack.url, "AIRFLOW_UI_USER": user, "AIRFLOW_UI_PASSWORD": password}
