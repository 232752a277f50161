"""Local services on loopback for development and tests: a real Apache Kafka broker, an
S3-compatible server, and a Spark standalone cluster.

    python tests/support/services.py up   [--dir .services] [--kafka-port 9092] [--s3-port 9000]
    python tests/support/services.py down [--dir .services]
    python tests/support/services.py cluster-up   [--dir .services] [--master-port 7077]
    python tests/support/services.py cluster-down [--dir .services]
    python tests/support/services.py ui-up   [--dir .services] [--ui-port 0]
    python tests/support/services.py ui-down [--dir .services]

``up`` starts a single-node KRaft broker from the Maven Central jars in ``.jars-kafka/``
(``make kafka-jars``), with its data under ``<dir>/kafka``, and S3Proxy (``make s3-jars``,
filesystem backend: its data under ``<dir>/s3/data`` survives a restart) with a bucket
``eobatch``, and writes ``<dir>/env``: shell exports of ``KAFKA_BOOTSTRAP``, ``S3_ENDPOINT``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (random per ``up``, file mode 0600) and
``AWS_REGION``. ``down`` stops them.
``cluster-up`` starts a Spark master and two workers (1 core, 2 GB each) on loopback from
pyspark's own ``bin/spark-class`` and writes ``<dir>/cluster-env`` (the ``spark_default``
Airflow connection pointing at ``spark://127.0.0.1:<port>``).
``ui-up`` starts a real Airflow on loopback for the project's pipelines (``PIPELINES_DIR``
honoured): api-server, scheduler and dag-processor, SQLite in ``$AIRFLOW_HOME`` (the Makefile's
default: ``.services/airflow``), Airflow's simple auth manager with one admin user; it returns
once the API answers and lists the pipelines' DAGs, and writes ``<dir>/ui-env`` (mode 0600):
exports of ``AIRFLOW_UI_URL``, ``AIRFLOW_UI_USER``, ``AIRFLOW_UI_PASSWORD``. Logs and pid files
in ``<dir>/ui/``. ``ui-down`` stops it.
The test fixtures use the same ``KafkaBroker``, ``S3Server``, ``SparkCluster`` classes and
``airflow_stack.ui_stack``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import glob
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KAFKA_JARS = os.environ.get("EOBATCH_KAFKA_JARS_DIR") or os.path.join(REPO, ".jars-kafka")

SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}{sasl_listener}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}{sasl_listener}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
log.dirs={data}
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=1000
log.segment.delete.delay.ms=0
"""

# a second listener that needs a user name and password (SASL/PLAIN), for clients configured
# through an Airflow connection
SASL_PROPERTIES = """\
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \\
  required username="{user}" password="{password}" user_{user}="{password}";
"""

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = warn
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class _Service:
    """A server process of ours: started in its own session (so a stop takes its children),
    its pid in ``home/<name>.pid`` (so ``down`` finds it from another process), ready when
    its port answers and ``_ready()`` says so."""

    name = "service"

    def __init__(self, home: str, port: int | None = None):
        self.home = os.path.abspath(home)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.start_seconds = 0.0

    @property
    def pid_file(self) -> str:
        return os.path.join(self.home, f"{self.name}.pid")

    def _ready(self) -> bool:
        return True

    def start(self, timeout: float = 60.0) -> "_Service":
        """Start the server and wait until it serves (each service says how)."""
        raise NotImplementedError

    def _spawn(self, argv: list[str], timeout: float, poll: float = 0.2):
        """Start ``argv`` (output to ``home/<name>.out``) and wait until it serves."""
        out = open(os.path.join(self.home, f"{self.name}.out"), "ab")
        t0 = time.time()
        self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        with open(self.pid_file, "w") as f:
            f.write(str(self.proc.pid))
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see "
                                   f"{self.home}/{self.name}.out")
            if port_open(self.port) and self._ready():
                self.start_seconds = time.time() - t0
                return self
            time.sleep(poll)
        self.stop()
        raise TimeoutError(f"{self.name} not ready on 127.0.0.1:{self.port} after {timeout}s")

    def stop(self, kill: bool = False) -> None:
        _stop_group(self.proc.pid if self.proc else _read_pid(self.pid_file), kill)
        if self.proc:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if os.path.exists(self.pid_file):
            os.unlink(self.pid_file)

    def restart(self, kill: bool = False, down_seconds: float = 0.0) -> "_Service":
        self.stop(kill=kill)
        if down_seconds:
            time.sleep(down_seconds)
        return self.start()


class KafkaBroker(_Service):
    """A single-node KRaft broker in ``home`` (data, config, log and pid file). ``sasl``: also a
    SASL_PLAINTEXT listener with one user (``sasl_client`` holds a client's settings for it)."""

    name = "kafka"

    def __init__(self, home: str, port: int | None = None, controller_port: int | None = None, sasl: bool = False):
        super().__init__(home, port)
        self.controller_port = controller_port or free_port()
        self.sasl_port = free_port() if sasl else None
        self.sasl_user, self.sasl_password = "eobatch", uuid.uuid4().hex

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_client(self) -> dict[str, str]:
        """confluent-kafka settings of a client of the SASL listener (what a Kafka connection's extra holds)."""
        assert self.sasl_port, "started without sasl=True"
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN", "sasl.username": self.sasl_user, "sasl.password": self.sasl_password}

    def _classpath(self) -> str:
        if not glob.glob(os.path.join(KAFKA_JARS, "kafka_2.13-*.jar")):
            raise FileNotFoundError(f"no Kafka broker jars in {KAFKA_JARS}: run `make kafka-jars`")
        return os.path.join(KAFKA_JARS, "*")

    def _java(self, *args: str, **kw) -> list[str]:
        return ["java", "-Xms128m", "-Xmx512m", "-XX:+UseG1GC",
                f"-Dlog4j2.configurationFile={os.path.join(self.home, 'log4j2.properties')}",
                "-cp", self._classpath(), *args]

    def start(self, timeout: float = 90.0) -> "KafkaBroker":
        os.makedirs(self.home, exist_ok=True)
        data = os.path.join(self.home, "data")
        props = os.path.join(self.home, "server.properties")
        with open(props, "w") as f:
            sasl = f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}" if self.sasl_port else ""
            f.write(SERVER_PROPERTIES.format(port=self.port, controller_port=self.controller_port, data=data,
                                             sasl_listener=sasl))
            if self.sasl_port:
                f.write(SASL_PROPERTIES.format(user=self.sasl_user, password=self.sasl_password))
        with open(os.path.join(self.home, "log4j2.properties"), "w") as f:
            f.write(LOG4J2.format(log=os.path.join(self.home, "kafka.log")))
        if not os.path.exists(os.path.join(data, "meta.properties")):
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            r = subprocess.run(self._java("kafka.tools.StorageTool", "format", "--standalone", "-t", cluster,
                                          "-c", props), capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"kafka storage format failed: {r.stdout}{r.stderr}")
        return self._spawn(self._java("kafka.Kafka", props), timeout, poll=0.3)

    def _ready(self) -> bool:
        try:
            from confluent_kafka.admin import AdminClient

            AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
            return True
        except Exception:
            return False


def _read_pid(path: str) -> int | None:
    try:
        return int(open(path).read().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


S3PROXY_JARS = os.environ.get("EOBATCH_S3PROXY_JARS_DIR") or os.path.join(REPO, ".jars-s3proxy")

S3PROXY_CONF = """\
s3proxy.endpoint=http://127.0.0.1:{port}
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity={key}
s3proxy.credential={secret}
jclouds.provider=filesystem-nio2
jclouds.filesystem.basedir={data}
"""


class S3Server(_Service):
    """S3Proxy (filesystem-nio2 backend) on loopback, data in ``home/data``.

    ``restart()`` keeps the port, the credentials and the data (they are files on disk):
    what a real S3 outage looks like to clients, connection refused, then the same objects.
    """

    name = "s3proxy"

    def __init__(self, home: str, port: int | None = None, access_key: str | None = None,
                 secret_key: str | None = None, region: str = "us-east-1"):
        import secrets as _secrets

        super().__init__(home, port)
        self.access_key = access_key or "eobatch-" + _secrets.token_hex(6)
        self.secret_key = secret_key or _secrets.token_urlsafe(24)
        self.region = region

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict:
        return {"S3_ENDPOINT": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": self.region}

    @contextlib.contextmanager
    def in_environment(self):
        """While it runs: its endpoint and credentials in this process's environment (as `source
        .services/env` would put them), for the product's code and the child processes; the
        environment as it was after."""
        from eobatch.storage.s3conf import ENV_KEYS

        saved = {k: os.environ.get(k) for k in (*ENV_KEYS, "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")}
        for k in saved:
            os.environ.pop(k, None)
        os.environ.update(self.env())
        try:
            yield self
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v

    def _jar(self) -> str:
        found = sorted(glob.glob(os.path.join(S3PROXY_JARS, "s3proxy-*.jar")))
        if not found:
            raise FileNotFoundError(f"no S3Proxy jar in {S3PROXY_JARS}: run `make s3-jars`")
        return found[-1]

    def start(self, timeout: float = 60.0) -> "S3Server":
        data = os.path.join(self.home, "data")
        os.makedirs(data, exist_ok=True)
        conf = os.path.join(self.home, "s3proxy.conf")
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds the secret
        with os.fdopen(fd, "w") as f:
            f.write(S3PROXY_CONF.format(port=self.port, key=self.access_key, secret=self.secret_key, data=data))
        return self._spawn(["java", "-Xms64m", "-Xmx512m", "-cp", self._jar(), "org.gaul.s3proxy.Main",
                            "--properties", conf], timeout, poll=0.1)

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name=self.region,
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def _ready(self) -> bool:
        try:
            self.client().list_buckets()
            return True
        except Exception:
            return False

    def create_bucket(self, name: str) -> None:
        c = self.client()
        try:
            c.create_bucket(Bucket=name)
        except Exception as e:  # already there (e.g. after a restart)
            if "BucketAlready" not in type(e).__name__ and "BucketAlready" not in str(e):
                raise


def _stop_group(pid: int | None, kill: bool = False, grace: float = 30.0) -> None:
    if not pid:
        return
    try:
        os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + grace
    while time.time() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            children.setdefault(_ppid(int(d)), []).append(int(d))
    out, stack = [], [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


class SparkCluster:
    """A Spark standalone cluster on loopback: one master, ``workers`` workers.

    Started from pyspark's own ``bin/spark-class`` with the Master / Worker classes; each
    process in its own session (``kill_worker`` kills a worker and its executors, like a lost
    machine). Work and log folders under ``home``.
    """

    def __init__(self, home: str, workers: int = 2, cores: int = 1, memory: str = "2g",
                 port: int | None = None, webui_port: int | None = None):
        self.home = os.path.abspath(home)
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.port = port or free_port()
        self.webui_port = webui_port or free_port()
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen | None] = [None] * workers
        self.start_seconds = 0.0

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self, name: str) -> dict:
        import sys

        env = dict(os.environ)
        env.update({
            "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1",
            "SPARK_LOG_DIR": os.path.join(self.home, "logs"), "SPARK_DAEMON_MEMORY": "512m",
            "SPARK_LOCAL_DIRS": os.path.join(self.home, "local", name),
            "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON") or sys.executable,
        })
        bindir = os.path.dirname(sys.executable)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        return env

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        os.makedirs(os.path.join(self.home, "local", name), exist_ok=True)
        out = open(os.path.join(self.home, f"{name}.out"), "ab")
        p = subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), *args], env=self._env(name),
                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        with open(os.path.join(self.home, f"{name}.pid"), "w") as f:
            f.write(str(p.pid))
        return p

    def start_worker(self, i: int, timeout: float = 120.0) -> None:
        """(Re)start worker ``i`` and wait until every worker is registered again."""
        if self.workers[i] is None:
            self._start_worker(i)
        self.wait_workers(self.n_workers, timeout)

    def _start_worker(self, i: int) -> None:
        work = os.path.join(self.home, f"work-{i}")
        os.makedirs(work, exist_ok=True)
        self.workers[i] = self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                                      "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                                      "--work-dir", work, "--webui-port", str(free_port()))

    def start(self, timeout: float = 120.0) -> "SparkCluster":
        os.makedirs(os.path.join(self.home, "logs"), exist_ok=True)
        t0 = time.time()
        self.master = self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                  "--port", str(self.port), "--webui-port", str(self.webui_port))
        for i in range(self.n_workers):
            self._start_worker(i)
        self.wait_workers(self.n_workers, timeout)
        self.start_seconds = time.time() - t0
        return self

    def state(self) -> dict:
        import json
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=3) as r:
            return json.loads(r.read())

    def alive_workers(self) -> int:
        try:
            return int(self.state().get("aliveworkers", 0))
        except Exception:
            return 0

    def wait_workers(self, n: int, timeout: float = 120.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.master is not None and self.master.poll() is not None:
                raise RuntimeError(f"spark master exited; see {self.home}/master.out")
            if self.alive_workers() >= n:
                return
            time.sleep(0.5)
        raise TimeoutError(f"{n} spark worker(s) not registered with {self.master_url} after {timeout}s; "
                           f"see {self.home}/*.out")

    def kill_worker(self, i: int) -> None:
        """kill -9 of worker ``i`` and every process below it (executors, their Python workers,
        which PySpark puts in process groups of their own): a lost machine."""
        p = self.workers[i]
        if p is not None:
            for pid in [p.pid, *_descendants(p.pid)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait(timeout=30)
            self.workers[i] = None

    def worker_of(self, pid: int) -> int | None:
        """Index of the worker that ``pid`` runs under (None if none)."""
        roots = {w.pid: i for i, w in enumerate(self.workers) if w is not None}
        while pid > 1:
            if pid in roots:
                return roots[pid]
            pid = _ppid(pid)
        return None

    def restart_worker(self, i: int, timeout: float = 120.0) -> None:
        self.kill_worker(i)
        self._start_worker(i)
        self.wait_workers(self.n_workers, timeout)

    def stop(self) -> None:
        for i in range(self.n_workers):
            p = self.workers[i]
            _stop_group(p.pid if p else _read_pid(os.path.join(self.home, f"worker-{i}.pid")))
            self.workers[i] = None
        _stop_group(self.master.pid if self.master else _read_pid(os.path.join(self.home, "master.pid")))
        for p in [self.master]:
            if p is not None:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
        self.master = None
        for name in ["master"] + [f"worker-{i}" for i in range(self.n_workers)]:
            pid_file = os.path.join(self.home, f"{name}.pid")
            if os.path.exists(pid_file):
                os.unlink(pid_file)


def _write_env(path: str, values: dict) -> None:
    import shlex

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        for k, v in values.items():
            f.write(f"export {k}={shlex.quote(str(v))}\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tests/support/services.py", description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["up", "down", "cluster-up", "cluster-down", "ui-up", "ui-down"])
    ap.add_argument("--dir", default=os.path.join(REPO, ".services"))
    ap.add_argument("--kafka-port", type=int, default=int(os.environ.get("KAFKA_PORT", "9092")))
    ap.add_argument("--s3-port", type=int, default=int(os.environ.get("S3_PORT", "9000")))
    ap.add_argument("--master-port", type=int, default=int(os.environ.get("SPARK_MASTER_PORT", "7077")))
    ap.add_argument("--bucket", default=os.environ.get("S3_BUCKET", "eobatch"))
    ap.add_argument("--ui-port", type=int, default=int(os.environ.get("AIRFLOW_UI_PORT", "0")),
                    help="the api-server's port (default: a free one)")
    args = ap.parse_args(argv)
    if args.action.startswith("cluster"):
        return _cluster(args)
    if args.action.startswith("ui"):
        return _ui(args)
    home = os.path.join(args.dir, "kafka")
    s3_home = os.path.join(args.dir, "s3")
    env_file = os.path.join(args.dir, "env")
    if args.action == "down":
        KafkaBroker(home).stop()
        S3Server(s3_home).stop()
        if os.path.exists(env_file):
            os.unlink(env_file)
        print("services stopped")
        return 0
    pid = _read_pid(os.path.join(home, "kafka.pid"))
    if pid and _alive(pid):
        print(f"services already running (kafka pid {pid}); see {env_file}")
        return 0
    for name, port in (("kafka", args.kafka_port), ("S3", args.s3_port)):
        if port_open(port):
            print(f"error: port {port} for {name} is taken; pass --{name.lower()}-port or "
                  f"{name.upper()}_PORT", file=sys.stderr)
            return 1
    broker = KafkaBroker(home, port=args.kafka_port).start()
    print(f"kafka broker ready on {broker.bootstrap} in {broker.start_seconds:.1f}s (data: {home}/data)")
    try:
        s3 = S3Server(s3_home, port=args.s3_port).start()
        s3.create_bucket(args.bucket)
    except Exception:
        broker.stop()
        raise
    print(f"S3 server (S3Proxy) ready on {s3.endpoint} in {s3.start_seconds:.1f}s, bucket s3a://{args.bucket} "
          f"(data: {s3_home}/data)")
    os.makedirs(args.dir, exist_ok=True)
    _write_env(env_file, {"KAFKA_BOOTSTRAP": broker.bootstrap, **s3.env(), "S3_BUCKET": args.bucket})
    print(f"wrote {env_file}")
    return 0


def _ui(args) -> int:
    from pathlib import Path

    sys.path.insert(0, os.path.join(REPO, "tests"))
    sys.path.insert(0, os.path.join(REPO, "plugins"))
    from eobatch.pipelines.loader import load_all, pipelines_dir
    from support.airflow_stack import running, stop_processes, ui_env, ui_stack

    root = Path(args.dir) / "ui"
    env_file = os.path.join(args.dir, "ui-env")
    if args.action == "ui-down":
        stopped = stop_processes(root)
        if os.path.exists(env_file):
            os.unlink(env_file)
        print(f"airflow stopped ({', '.join(stopped)})" if stopped else "airflow was not running")
        return 0
    alive = running(root)
    if alive:
        print(f"airflow already running ({', '.join(f'{n} pid {p}' for n, p in alive.items())}); see {env_file}")
        return 0
    if args.ui_port and port_open(args.ui_port):
        print(f"error: port {args.ui_port} is taken; pass --ui-port or AIRFLOW_UI_PORT", file=sys.stderr)
        return 1
    good, errors = load_all()
    for file, err in sorted(errors.items()):
        print(f"warning: {file}: {err} (an import error of the DAG file in the UI)", file=sys.stderr)
    home = Path(os.environ.get("AIRFLOW_HOME") or os.path.join(args.dir, "airflow")).resolve()
    # the example downstream DAG of pipeline orders (dags/example_asset_consumer.py), unless set
    env = {"EOBATCH_EXAMPLE_CONSUMERS": "orders", **os.environ}
    stack = ui_stack(root, env, home=home, port=args.ui_port or None)
    t0 = time.time()
    stack.start(sorted(good), timeout=300)
    os.makedirs(args.dir, exist_ok=True)
    _write_env(env_file, ui_env(stack))
    print(f"airflow (api-server, scheduler, dag-processor) ready on {stack.url} in {time.time() - t0:.0f}s; "
          f"AIRFLOW_HOME={home}, pipelines from {pipelines_dir()}: {', '.join(sorted(good)) or 'none'}")
    print(f"log in as {ui_env(stack)['AIRFLOW_UI_USER']}, password: `source {env_file}; echo $AIRFLOW_UI_PASSWORD`")
    print(f"ledger pages: {stack.url}/eobatch/pipelines/<pipeline>; logs in {root}; wrote {env_file}")
    return 0


def _cluster(args) -> int:
    import json

    home = os.path.join(args.dir, "spark")
    env_file = os.path.join(args.dir, "cluster-env")
    state_file = os.path.join(home, "cluster.json")
    if args.action == "cluster-down":
        try:
            st = json.load(open(state_file))
        except OSError:
            st = {}
        SparkCluster(home, workers=int(st.get("workers", 2)), port=st.get("port") or 1).stop()
        for f in (env_file, state_file):
            if os.path.exists(f):
                os.unlink(f)
        print("spark cluster stopped")
        return 0
    pid = _read_pid(os.path.join(home, "master.pid"))
    if pid and _alive(pid):
        print(f"spark cluster already running (master pid {pid}); see {env_file}")
        return 0
    if port_open(args.master_port):
        print(f"error: port {args.master_port} is taken; pass --master-port or SPARK_MASTER_PORT", file=sys.stderr)
        return 1
    c = SparkCluster(home, port=args.master_port).start()
    with open(state_file, "w") as out:
        json.dump({"port": c.port, "webui_port": c.webui_port, "workers": c.n_workers}, out)
    conn = json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": c.port,
                       "extra": {"deploy-mode": "client"}})
    _write_env(env_file, {"AIRFLOW_CONN_SPARK_DEFAULT": conn, "SPARK_MASTER_URL": c.master_url})
    print(f"spark master {c.master_url} with {c.n_workers} workers ready in {c.start_seconds:.1f}s "
          f"(UI http://127.0.0.1:{c.webui_port}); wrote {env_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
