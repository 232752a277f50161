"""The stage job's class-data archive: its driver JVM starts from classes loaded once, at setup.

Every batch is a new ``spark-submit``, and a new JVM loads and verifies thousands of Spark
classes before the first record is read: about 2.5 s of a 1,000-record stage job on 2 cores
(11.5 s -> 9.0 s, measured). Java's class-data sharing (CDS, JEP 350) keeps those classes in an
archive mapped at start-up: ``make setup`` runs one small stage job with
``-XX:ArchiveClassesAtExit`` (``build``), and each stage job's driver then runs with
``-XX:SharedArchiveFile`` (``java_options``).

* Only the driver: in local mode it is the executor too; on a cluster the executors are other
  JVMs, on other machines, which start as they always do.
* The archive is named by what it was made with (pyspark's version, the Java runtime); another
  Java or Spark finds no archive and starts as usual (an archive whose classpath or JVM does
  not match is ignored by the JVM too, with a warning). It is written whole under a temporary
  name, checked by a JVM that loads it, then renamed: a partial archive is never used (a
  truncated one crashes the JVM that maps it).
* A pipeline that sets its own ``-XX:SharedArchiveFile`` / ``-XX:ArchiveClassesAtExit`` in
  ``spark.driver.extraJavaOptions`` keeps them.

No Airflow, no pyspark imports.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import tempfile
import textwrap

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_OWN = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit")


def _java() -> str | None:
    """The java spark-submit runs: $JAVA_HOME/bin/java, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def archive_path(cache_dir: str | None = None) -> str | None:
    """Where the archive of this pyspark and this Java lives (whether or not it exists); None
    without a java or an installed pyspark."""
    from .launch import default_cache_dir

    java = _java()
    try:
        spark_version = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:  # a pyspark from SPARK_HOME: no archive of ours
        return None
    if java is None:
        return None
    modules = os.path.join(os.path.dirname(os.path.dirname(java)), "lib", "modules")
    stamp = os.stat(modules).st_mtime_ns if os.path.exists(modules) else 0
    key = f"{spark_version}|{java}|{stamp}"
    return os.path.join(cache_dir or default_cache_dir(), f"stage-classes-{hashlib.sha256(key.encode()).hexdigest()[:12]}.jsa")


def platform_java_options() -> str:
    """The driver's Java options of the platform's spark-defaults.conf ($SPARK_CONF_DIR, else
    $SPARK_HOME/conf): a ``--conf`` of the same key replaces them, so ours are appended to them."""
    folder = os.environ.get("SPARK_CONF_DIR") or os.path.join(os.environ.get("SPARK_HOME", ""), "conf")
    path = os.path.join(folder, "spark-defaults.conf")
    if not os.path.isfile(path):
        return ""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:  # a Java properties file: "key value", "key=value" or "key: value"; # or ! comments
            m = re.match(r"\s*([^\s=:#!][^\s=:]*)\s*[=:\s]\s*(.*?)\s*$", line)
            if m and m.group(1) == JAVA_OPTIONS:
                return m.group(2)
    return ""


def java_options(conf: dict, cache_dir: str | None = None) -> dict:
    """``conf`` with the archive added to the driver's Java options (after the platform's or the
    given ones), when there is one."""
    path = archive_path(cache_dir)
    own = conf.get(JAVA_OPTIONS) or platform_java_options()
    if path is None or not os.path.exists(path) or any(o in own for o in _OWN):
        return conf
    return {**conf, JAVA_OPTIONS: f"{own} -XX:SharedArchiveFile={path}".strip()}


SAMPLE = [b'{"id": "a%d", "n": %d, "x": %d.5, "ts": "2026-01-01T00:00:%02dZ"}' % (i, i, i, i % 60) for i in range(200)]


def build(master: str = "local[*]", cache_dir: str | None = None, log=print, force: bool = False) -> str:
    """Run one stage job of a small pipeline (valid, bad and blank lines: the sink and the
    quarantine are both written) with ``-XX:ArchiveClassesAtExit``; return the archive's path.
    An archive already there for this pyspark and this Java is kept unless ``force``."""
    from .config import load_pipeline
    from .launch import new_attempt_id, spark_env, spark_submit_argv
    from .protocol import Protocol

    target = archive_path(cache_dir)
    if target is None:
        raise FileNotFoundError("no java: set JAVA_HOME or put java on PATH")
    if os.path.exists(target) and not force:
        log(f"class archive: {target} is up to date")
        return target
    with tempfile.TemporaryDirectory(prefix="eobatch-class-archive-") as tmp:
        landing, dump = os.path.join(tmp, "landing"), os.path.join(tmp, "classes.jsa")
        os.makedirs(landing)
        with open(os.path.join(landing, "sample.jsonl"), "wb") as f:
            f.write(b"\n".join(SAMPLE + [b"{not json", b"", b'{"id": "b", "n": "NaN?"}']) + b"\n")
        yaml = os.path.join(tmp, "warmup.yaml")
        with open(yaml, "w") as f:
            f.write(textwrap.dedent(f"""\
                name: class_archive_warmup
                source: {{kind: files, path: {landing}}}
                schema: "id STRING NOT NULL, n BIGINT, x DOUBLE, ts TIMESTAMP"
                sink: {{table: {tmp}/lake/sink}}
                quarantine: {{table: {tmp}/lake/bad}}
                """))
        cfg = load_pipeline(yaml)
        proto = Protocol(cfg)
        proto.recover()
        plan, _ = proto.plan()
        if plan is None:
            raise RuntimeError("the warm-up pipeline planned nothing")
        dumping = {JAVA_OPTIONS: f"{platform_java_options()} -XX:ArchiveClassesAtExit={dump}".strip()}
        argv = spark_submit_argv(cfg, plan.batch_id, new_attempt_id(1), master=master, conf=dumping)
        log(f"class archive: one stage job of {len(SAMPLE) + 2} records, -XX:ArchiveClassesAtExit")
        r = subprocess.run(argv, env=spark_env(), capture_output=True, text=True, timeout=900)
        if r.returncode != 0 or not os.path.exists(dump):
            raise RuntimeError(f"the warm-up stage job failed (exit {r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
        check = subprocess.run([_java() or "java", f"-XX:SharedArchiveFile={dump}", "-version"],
                               capture_output=True, text=True, timeout=120)
        if check.returncode != 0:
            raise RuntimeError(f"a JVM cannot start from the new archive {dump}:\n{check.stderr[-2000:]}")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        part = f"{target}.{os.getpid()}.tmp"
        shutil.copyfile(dump, part)
        os.replace(part, target)
    log(f"class archive: {target} ({os.path.getsize(target) >> 20} MiB)")
    return target
