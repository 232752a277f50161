"""Shared fixtures of the integration tests; the helpers they use live in ``support.harness``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.harness import VENV_BIN, DagRun, Pipeline, airflow_env, write_pipeline

# Every JVM the tests start (spark-submit drivers, the Kafka broker, S3Proxy, a standalone cluster)
# lives seconds and handles a few records: the C1 compiler alone costs a third less CPU than the
# tiered default (measured on a test of four stage jobs: 48 s against 74 s of CPU). Tests only:
# `make bench` and the product leave the JVM's defaults alone. EOBATCH_TEST_JAVA_TOOL_OPTIONS=""
# runs the tests with the defaults.
_JIT = os.environ.get("EOBATCH_TEST_JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")
if _JIT and "JAVA_TOOL_OPTIONS" not in os.environ:
    os.environ["JAVA_TOOL_OPTIONS"] = _JIT
# ... the stage jobs of the DAG runs too: their environment is an allow-list (eobatch.job.launch.spark_env)
# to which the platform, here the tests, adds names
if _JIT:
    os.environ.setdefault("EOBATCH_STAGE_ENV_ALLOW", "JAVA_TOOL_OPTIONS")


def pytest_collection_modifyitems(config, items):
    """The long files first (integration, then the model-based tests), the many short unit files
    after: `make test`'s workers (one file each at a time) then finish together instead of one
    of them running the last long file alone. Order within a file is kept."""
    rank = {"integration": 0, "model": 1}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).parent.name, 2))


@pytest.fixture
def pipeline(tmp_path) -> Pipeline:
    return write_pipeline(tmp_path)


@pytest.fixture(scope="session")
def local_spark():
    """The test process's own Spark session (local[2], UTC, with the stage job's JVM code), one per
    test session: a JVM started once keeps its first class path, so every in-process Spark test
    shares this one instead of building its own."""
    import os

    from pyspark.sql import SparkSession

    repo = Path(__file__).resolve().parents[1]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(repo / "plugins"), str(repo)])  # Python workers
    s = (SparkSession.builder.master("local[2]").appName("eobatch-tests")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.ui.enabled", "false")
         .config("spark.jars", str(repo / ".jars" / "eobatch-jvm.jar"))  # the stage job's fast parser
         .getOrCreate())
    yield s
    s.stop()


@pytest.fixture(scope="session")
def airflow_template(tmp_path_factory) -> Path:
    """An Airflow home whose SQLite database is migrated once per test session."""
    home = tmp_path_factory.mktemp("airflow-template")
    env = airflow_env(home, home)
    r = subprocess.run([str(VENV_BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return home


@pytest.fixture
def airflow(tmp_path, airflow_template):
    """Runs `airflow dags test` for a pipeline in a fresh Airflow home (copied template DB)."""
    home = tmp_path / "airflow"
    shutil.copytree(airflow_template, home)

    def run(p: Pipeline, extra_env: dict | None = None, conf: dict | None = None, timeout: int = 600,
            dag_id: str | None = None) -> DagRun:
        env = airflow_env(home, p.yaml_path.parent, extra_env)
        argv = [str(VENV_BIN / "airflow"), "dags", "test", dag_id or p.name]
        if conf is not None:
            argv += ["-c", json.dumps(conf)]
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        log = r.stdout + r.stderr
        state = None
        for line in log.splitlines():
            if "DagRun Finished:" in line and "state=" in line:
                state = line.split("state=")[1].split(",")[0].split()[0]
        return DagRun(r.returncode, log, state)

    run.home = home
    run.env = lambda p, extra=None: airflow_env(home, p.yaml_path.parent, extra)
    return run
