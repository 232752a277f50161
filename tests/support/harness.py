"""Test helpers: real Spark (spark-submit), real Delta tables on local disk, real Airflow CLI.

Nothing here mocks a part: helpers build pipeline YAMLs in a temporary folder, launch the
same spark-submit command the stage task launches, run `airflow dags test` in a fresh
Airflow home, and read results back with independent readers (delta-rs, raw _delta_log).

Imported as ``harness``, never as ``conftest``: pytest loads every conftest.py of the tree under
that one module name, so a ``from conftest import`` gets whichever was loaded last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests"))

from eobatch.job import launch  # noqa: E402
from eobatch.pipelines.loader import load_pipeline  # noqa: E402
from eobatch.protocol import Protocol  # noqa: E402

VENV_BIN = Path(sys.executable).parent


def base_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO / "plugins")
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYSPARK_PYTHON"] = sys.executable
    env.update(extra or {})
    return env


@dataclass
class Pipeline:
    """A pipeline under a temporary folder: its YAML, landing folder and tables."""

    root: Path
    name: str
    yaml_path: Path
    landing: Path
    sink: Path
    quarantine: Path
    landed: list = field(default_factory=list)  # every good record written, in order
    landed_bad: list = field(default_factory=list)  # every bad line written

    @property
    def cfg(self):
        return load_pipeline(str(self.yaml_path))

    def protocol(self) -> Protocol:
        return Protocol(self.cfg)

    def land(self, name: str, records: list[dict], bad: Sequence[str] = (), mtime: float | None = None) -> Path:
        """Land a JSON-lines file atomically (temp name, then rename)."""
        path = self.landing / name
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(r) for r in records] + list(bad)
        tmp = path.parent / f".{path.name}.tmp"
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        self.landed.extend(records)
        self.landed_bad.extend(bad)
        return path


def write_pipeline(root: Path, name: str = "orders", schema: str | None = None, transform: str = "passthrough",
                   extra: str = "", partition_by: list[str] | None = None, max_records: int = 100000,
                   options: dict | None = None, mode: str = "continuous", schedule: str | None = None,
                   interval_prefix: str | None = None, merge: dict | None = None) -> Pipeline:
    """A files pipeline under ``root``; ``merge``: a merge sink with that ``sink.merge``."""
    pipelines = root / "pipelines"
    pipelines.mkdir(parents=True, exist_ok=True)
    landing, sink, quarantine = root / "landing" / name, root / "lake" / name, root / "lake" / f"{name}_bad"
    landing.mkdir(parents=True, exist_ok=True)
    schema = schema or "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"
    tr = transform if not options else json.dumps({"name": transform, "options": options})
    text = textwrap.dedent(f"""\
        name: {name}
        mode: {mode}
        schedule: {json.dumps(schedule)}
        source:
          kind: files
          path: {landing}
          max_records_per_batch: {max_records}
        {"  interval_prefix: " + json.dumps(interval_prefix) if interval_prefix else ""}
        schema: "{schema}"
        transform: {tr}
        sink:
          table: {sink}
          partition_by: {json.dumps(partition_by or [])}
        {f"  mode: merge{chr(10)}          merge: {json.dumps(merge)}" if merge else ""}
        quarantine:
          table: {quarantine}
        retries:
          stage: 0
          commit: 2
          delay_seconds: 1
        """) + extra
    path = pipelines / f"{name}.yaml"
    path.write_text(text)
    return Pipeline(root, name, path, landing, sink, quarantine)


def write_kafka_pipeline(root: Path, bootstrap: str, topic: str, name: str = "events", max_records: int = 100000,
                         extra_source: str = "", schema: str | None = None, conn_id: str | None = None) -> Pipeline:
    """A Kafka pipeline at ``bootstrap``, or through the Airflow connection ``conn_id`` instead."""
    pipelines = root / "pipelines"
    pipelines.mkdir(parents=True, exist_ok=True)
    sink, quarantine = root / "lake" / name, root / "lake" / f"{name}_bad"
    schema = schema or "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"
    text = textwrap.dedent(f"""\
        name: {name}
        source:
          kind: kafka
          {f"conn_id: {conn_id}" if conn_id else f'bootstrap_servers: "{bootstrap}"'}
          topic: {topic}
          max_records_per_batch: {max_records}
          consumer_timeout_seconds: 15
        """) + textwrap.indent(extra_source, "  ") + textwrap.dedent(f"""\
        schema: "{schema}"
        sink:
          table: {sink}
        quarantine:
          table: {quarantine}
        retries:
          plan: 0
          stage: 0
          commit: 2
          delay_seconds: 1
        """)
    path = pipelines / f"{name}.yaml"
    path.write_text(text)
    return Pipeline(root, name, path, root / "unused-landing", sink, quarantine)


def write_delta_pipeline(root: Path, name: str, table: Path | str, source_extra: str = "", schema: str | None = None,
                         rest: str = "", sink_extra: str = "", retries: str = "stage: 0\ncommit: 2\ndelay_seconds: 1\n",
                         ) -> Pipeline:
    """A pipeline reading the Delta table ``table`` (source kind: delta) under ``root``; ``source_extra``,
    ``sink_extra``: more keys of those sections (YAML lines), ``rest``: top-level keys (a transform)."""
    pipelines = root / "pipelines"
    pipelines.mkdir(parents=True, exist_ok=True)
    sink, quarantine = root / "lake" / name, root / "lake" / f"{name}_bad"
    schema = schema or "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"
    path = pipelines / f"{name}.yaml"
    path.write_text(f"name: {name}\nsource:\n  kind: delta\n  table: {table}\n" + textwrap.indent(source_extra, "  ")
                    + f'schema: "{schema}"\n' + rest + f"sink:\n  table: {sink}\n" + textwrap.indent(sink_extra, "  ")
                    + f"quarantine:\n  table: {quarantine}\nretries:\n" + textwrap.indent(retries, "  "))
    return Pipeline(root, name, path, root / "unused-landing", sink, quarantine)


def orders(prefix: str, n: int, start: int = 0) -> list[dict]:
    return [{"order_id": f"{prefix}-{i:05d}", "customer": f"c{i % 7}", "amount": float(i) + 0.5,
             "ts": f"2026-01-01T00:{i % 60:02d}:00Z"} for i in range(start, start + n)]


# -- Spark -----------------------------------------------------------------------------
def stage(p: Pipeline, batch_id: int, attempt: str, env: dict | None = None, wait: bool = True,
          conf: dict | None = None, master: str = "local[*]"):
    """The same spark-submit the stage task runs. Returns CompletedProcess or Popen."""
    argv = launch.spark_submit_argv(p.cfg, batch_id, attempt, master=master)
    for k, v in (conf or {}).items():
        argv[1:1] = ["--conf", f"{k}={v}"]
    e = base_env(env)
    if not wait:
        return subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    r = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=600)
    return r


def spark_read(*tables: Path, where: tuple[str, ...] = ()) -> dict:
    """Each table as delta-spark reads it (``spark_read_delta.py``): {table: {rows, history, ...}};
    ``where``: SQL filters; then only {table: {"where": {filter: rows}}}."""
    argv = ["spark-submit", "--master", "local[2]", "--jars", ",".join(launch.jars()),
            str(REPO / "tests" / "support" / "spark_read_delta.py"), *map(str, tables)]
    r = subprocess.run(argv, env={**base_env(), "EOBATCH_READ_WHERE": json.dumps(list(where))},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            d = json.loads(line[len("RESULT "):])
            out[d["table"]] = d
    return out


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def run_batch(p: Pipeline, max_records: int | None = None, interval: tuple[str, str] | None = None,
              run_id: str | None = None) -> int | None:
    """recover -> plan -> stage -> verify -> commit through the library (what the DAG calls)."""
    proto = p.protocol()
    proto.recover(run_id=run_id)
    plan, _ = proto.plan(max_records, interval={"start": interval[0], "end": interval[1]} if interval else None,
                         run_id=run_id)
    if plan is None:
        return None
    attempt = launch.new_attempt_id(1)
    r = stage(p, plan.batch_id, attempt)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    return plan.batch_id


# -- Airflow ---------------------------------------------------------------------------


def airflow_env(home: Path, pipelines_dir: Path, extra: dict | None = None) -> dict:
    return base_env({
        "AIRFLOW_HOME": str(home),
        "PIPELINES_DIR": str(pipelines_dir),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__LOAD_DEFAULT_CONNECTIONS": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
        **(extra or {}),
    })


@dataclass
class DagRun:
    rc: int
    log: str
    state: str | None

    def task_lines(self, task: str) -> list[str]:
        return [line for line in self.log.splitlines() if f"] {task}: " in line or f" {task}: " in line]


def wait_for(pred, timeout: float = 120, interval: float = 0.2, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
