"""What a stage job needs on the machine that launches it, one definition of each check: Java,
``spark-submit``, the JVM jars of the pipeline's sets, and the Spark connection. ``eobatch doctor``
prints them (``doctor.py``); the stage task makes them before it launches (``stage_problems``) and
fails with the same sentences, terminally, instead of a raw Spark error (YARN's "either
HADOOP_CONF_DIR or YARN_CONF_DIR must be set", ``spark-class: ... No such file``) after retries.

Each check looks at the environment the stage job's spark-submit gets (``launch.spark_env``: the
task's PATH with this Python's folder, JAVA_HOME, SPARK_HOME, HADOOP_CONF_DIR, ...), so doctor and
the stage task give the same answer. Airflow is imported only by the connection's check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from . import paths
from .job import jars
from .job.driver_jvm import java
from .job.launch import spark_env


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    text: str
    warn: bool = False  # passes, but says loudly what is open

    def line(self) -> str:
        return f"{'FAIL' if not self.ok else 'WARN' if self.warn else 'ok  '} {self.name}: {self.text}"


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return spark_env() if environ is None else environ  # by default, what the stage job's spark-submit gets


def java_check(environ: Mapping[str, str] | None = None) -> Check:
    """The java spark-submit runs (JAVA_HOME, else PATH) exists and starts."""
    found = java(_env(environ))
    if found is None:
        return Check("java", False, "no java (JAVA_HOME or PATH): install a Java 17 runtime, e.g. "
                                    "`apt-get install openjdk-17-jre-headless`, or set JAVA_HOME")
    r = subprocess.run([found, "-version"], capture_output=True, text=True)
    said = [ln for ln in (r.stderr + r.stdout).splitlines() if " version " in ln]
    if r.returncode != 0:
        return Check("java", False, f"{found} does not run (exit {r.returncode}): install a Java 17 runtime, "
                                    f"or set JAVA_HOME to one")
    return Check("java", True, f"{found}: {said[0] if said else 'runs'}")


def spark_check(environ: Mapping[str, str] | None = None, binary: str | None = None) -> Check:
    """``spark-submit`` (or the stage operator's ``spark_binary``; of SPARK_HOME, else on PATH), which
    the Spark provider runs."""
    env = _env(environ)
    home, binary = env.get("SPARK_HOME"), binary or "spark-submit"
    submit = os.path.join(home, "bin", binary) if home else shutil.which(binary, path=env.get("PATH"))
    if not submit or not os.path.exists(submit):
        beside = os.path.join(os.path.dirname(sys.executable), "spark-submit")
        fix = (f"put {os.path.dirname(beside)} on the PATH of the Airflow workers" if os.path.exists(beside) else
               "install pyspark in this environment (`pip install eobatch` brings it) or set SPARK_HOME")
        return Check("spark", False, f"no {binary} on PATH nor in SPARK_HOME (the Spark provider runs "
                                     f"`{binary}`): {fix}")
    try:
        import pyspark  # the job's side of the version check: the JVM jar is built for this Spark
        version = pyspark.__version__
    except ImportError:
        version = "unknown (pyspark not importable)"
    return Check("spark", True, f"{submit} (pyspark {version})")


def jars_check(sets: tuple[str, ...] | None = None) -> Check:
    """The check every launch makes (``jars.checked``, ``jars.own_jvm_jar``) for the jars of ``sets``
    (default: all), made now."""
    folder = paths.jars_dir()
    try:
        found = jars.checked(folder, sets=sets)
        own = jars.own_jvm_jar(folder)
    except (jars.JarsRefused, FileNotFoundError) as e:
        return Check("jars", False, str(e))
    chosen = sets or jars.SETS
    return Check("jars", True, f"{folder}: the {len(found)} listed jars of the set(s) {', '.join(chosen)}, "
                               f"unchanged, and {own}")


def missing_spark_connection(conn_id: str) -> str:
    """What a Spark connection not defined in Airflow means, and how to define it."""
    return (f"(without it spark-submit falls back to the Spark provider's default, master 'yarn'; e.g. "
            f"AIRFLOW_CONN_{conn_id.upper()}='{{\"conn_type\": \"spark\", \"host\": \"local[*]\"}}' for local mode, "
            f"or spark://<master>:7077)")


HOW_TO_ADD = "add it (Admin > Connections, `airflow connections add`, or AIRFLOW_CONN_<ID>)"


def spark_connection_problem(conn_id: str, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """None when the Spark connection ``conn_id`` can launch a job from here; else (``"missing"``, the
    consequence and an example: ``missing_spark_connection``) when Airflow has no connection of that
    id, or (``"yarn"``, the sentence) when it resolves to YARN and neither HADOOP_CONF_DIR nor
    YARN_CONF_DIR is set for spark-submit (which refuses to start without one). Needs Airflow."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # optional: only with Airflow
    from airflow.sdk import BaseHook  # optional: only where Airflow is installed

    try:
        BaseHook.get_connection(conn_id)
    except Exception as e:
        if "NotFound" not in type(e).__name__:  # a database or secrets backend that is down: the task retries
            raise
        return "missing", missing_spark_connection(conn_id)
    try:
        hook = SparkSubmitHook(conn_id=conn_id, keytab="")  # keytab="": no file written
        master, is_yarn = str(hook._connection["master"]), bool(hook._is_yarn)
    except Exception as e:  # noqa: BLE001 - the reason is the answer
        return "invalid", f"the Spark connection {conn_id!r} cannot be used: {type(e).__name__}: {e}"
    env = _env(environ)
    if is_yarn and not (env.get("HADOOP_CONF_DIR") or env.get("YARN_CONF_DIR")):
        return "yarn", (f"the Spark connection {conn_id!r} has master {master!r} (YARN), and neither HADOOP_CONF_DIR "
                        f"nor YARN_CONF_DIR is set where the stage task runs (spark-submit needs one to find the "
                        f"cluster): set one to the folder of the cluster's Hadoop configuration on the Airflow "
                        f"workers, or point the connection at another master (e.g. host local[*] or "
                        f"spark://<master>:7077)")
    return None


def spark_connection_sentence(conn_id: str, problem: tuple[str, str]) -> str:
    """The stage task's sentence for ``spark_connection_problem``'s answer."""
    kind, text = problem
    if kind == "missing":
        return f"the pipeline's Spark connection {conn_id!r} (spark.conn_id) is not defined in Airflow {text}: {HOW_TO_ADD}"
    return text


def stage_problems(sets: tuple[str, ...], conn_id: str, environ: Mapping[str, str] | None = None,
                   spark_binary: str | None = None) -> list[Check]:
    """The checks of a stage task, before it launches: Java, spark-submit (``spark_binary``), the jars
    of ``sets`` and the Spark connection ``conn_id``; the failed ones ([] when it may launch)."""
    env = _env(environ)
    checks = [java_check(env), spark_check(env, spark_binary), jars_check(sets)]
    problem = spark_connection_problem(conn_id, env)
    if problem is not None:
        checks.append(Check("connections", False, spark_connection_sentence(conn_id, problem)))
    return [c for c in checks if not c.ok]
