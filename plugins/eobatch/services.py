"""Local services on loopback for development and tests: a real Apache Kafka broker.

    python -m eobatch.services up   [--dir .services] [--kafka-port 9092]
    python -m eobatch.services down [--dir .services]

``up`` starts a single-node KRaft broker from the Maven Central jars in ``.jars-kafka/``
(``make kafka-jars``), with its data under ``<dir>/kafka``, and writes ``<dir>/env``: shell
exports of ``KAFKA_BOOTSTRAP`` (and the S3 variables once an S3 server is part of it).
``down`` stops it. The test fixtures use the same ``KafkaBroker`` class.
"""

from __future__ import annotations

import argparse
import base64
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
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
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


class KafkaBroker:
    """A single-node KRaft broker in ``home`` (data, config, log and pid file)."""

    def __init__(self, home: str, port: int | None = None, controller_port: int | None = None):
        self.home = os.path.abspath(home)
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> str:
        return os.path.join(self.home, "kafka.pid")

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
            f.write(SERVER_PROPERTIES.format(port=self.port, controller_port=self.controller_port, data=data))
        with open(os.path.join(self.home, "log4j2.properties"), "w") as f:
            f.write(LOG4J2.format(log=os.path.join(self.home, "kafka.log")))
        if not os.path.exists(os.path.join(data, "meta.properties")):
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            r = subprocess.run(self._java("kafka.tools.StorageTool", "format", "--standalone", "-t", cluster,
                                          "-c", props), capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"kafka storage format failed: {r.stdout}{r.stderr}")
        out = open(os.path.join(self.home, "kafka.out"), "ab")
        t0 = time.time()
        self.proc = subprocess.Popen(self._java("kafka.Kafka", props), stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        with open(self.pid_file, "w") as f:
            f.write(str(self.proc.pid))
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka broker exited with {self.proc.returncode}; see {self.home}/kafka.out "
                                   f"and kafka.log")
            if port_open(self.port) and self._ready():
                self.start_seconds = time.time() - t0
                return self
            time.sleep(0.3)
        self.stop()
        raise TimeoutError(f"kafka broker not ready on {self.bootstrap} after {timeout}s")

    def _ready(self) -> bool:
        try:
            from confluent_kafka.admin import AdminClient

            AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
            return True
        except Exception:
            return False

    def stop(self, kill: bool = False) -> None:
        pid = self.proc.pid if self.proc else _read_pid(self.pid_file)
        if pid:
            try:
                os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.time() + 60
            while time.time() < deadline and _alive(pid):
                time.sleep(0.2)
            if _alive(pid):
                os.killpg(pid, signal.SIGKILL)
        if self.proc:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if os.path.exists(self.pid_file):
            os.unlink(self.pid_file)

    def restart(self, kill: bool = False) -> "KafkaBroker":
        self.stop(kill=kill)
        return self.start()


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="eobatch.services", description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("--dir", default=os.path.join(REPO, ".services"))
    ap.add_argument("--kafka-port", type=int, default=int(os.environ.get("KAFKA_PORT", "9092")))
    args = ap.parse_args(argv)
    home = os.path.join(args.dir, "kafka")
    env_file = os.path.join(args.dir, "env")
    if args.action == "down":
        KafkaBroker(home).stop()
        if os.path.exists(env_file):
            os.unlink(env_file)
        print("services stopped")
        return 0
    pid = _read_pid(os.path.join(home, "kafka.pid"))
    if pid and _alive(pid):
        print(f"kafka already running (pid {pid}); see {env_file}")
        return 0
    if port_open(args.kafka_port):
        print(f"error: port {args.kafka_port} is taken; pass --kafka-port or KAFKA_PORT", file=sys.stderr)
        return 1
    broker = KafkaBroker(home, port=args.kafka_port).start()
    os.makedirs(args.dir, exist_ok=True)
    with open(env_file, "w") as f:
        f.write(f"export KAFKA_BOOTSTRAP={broker.bootstrap}\n")
    print(f"kafka broker ready on {broker.bootstrap} in {broker.start_seconds:.1f}s (data: {home}/data)")
    print(f"wrote {env_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
