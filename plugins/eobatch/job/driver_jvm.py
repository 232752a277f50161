"""The stage job's driver JVM: its garbage collector and its class-data archive.

Every batch is a new ``spark-submit``; in local mode its driver JVM is the executor too, so
what it starts with sets both the fixed cost of a batch and the cost of each record.

* **The throughput collector** (``-XX:+UseParallelGC``, ``COLLECTOR``) instead of Java's default
  G1: the job allocates at a high rate and keeps little (Spark 4.2's ``from_json`` alone makes an
  8 KiB decoder buffer per record), and G1's concurrent bookkeeping costs the job CPU that a
  short batch job never needs back as short pauses. Measured on 2 cores, 5 pairs of stage jobs:
  5M records 28.6 s -> 26.7 s (-8 %) with a lower peak RSS (1031 -> 940 MiB); 1,000 records
  10.1 s -> 9.5 s. Not added when the Java options already choose a collector.
* **The class-data archive**: a new JVM loads and verifies thousands of Spark classes before
  the first record is read: about 2.5 s of a 1,000-record stage job on 2 cores (11.5 s -> 9.0 s,
  measured). Java's class-data sharing (CDS, JEP 350) keeps those classes in an archive mapped
  at start-up: ``make setup`` runs one small stage job with ``-XX:ArchiveClassesAtExit``
  (``build``), with the collector the stage jobs run with, and each stage job's driver then
  runs with ``-XX:SharedArchiveFile`` (``java_options``).

Both apply to the driver only: on a cluster the executors are other JVMs, on other machines,
which start as the platform starts them.

* The archive is named by what it was made with: pyspark's version, the Java runtime and
  COLLECTOR (a platform that chooses its own collector has it dumped with that one under the
  same name: ``python -m eobatch.cli class-archive --force`` after changing it). Another Java or
  Spark finds no archive and starts as usual (an archive whose classpath or JVM does not match
  is ignored by the JVM too, with a warning; one dumped with another collector still maps, a
  little slower, measured at 1,000 records). It is written whole under a temporary name,
  checked by a JVM that loads it, then renamed: a partial archive is never used (a truncated
  one crashes the JVM that maps it). Building one removes the archives of other pyspark
  versions, Javas or collectors from the cache folder.
* A pipeline or platform that sets its own ``-XX:SharedArchiveFile`` / ``-XX:ArchiveClassesAtExit``
  or its own collector in ``spark.driver.extraJavaOptions`` keeps them.

No Airflow, no pyspark imports.
"""

from __future__ import annotations

import glob
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
COLLECTOR = "-XX:+UseParallelGC"
_A_COLLECTOR = re.compile(r"-XX:\+Use\w+GC\b")  # -XX:+UseG1GC, -XX:+UseZGC, -XX:+UseSerialGC, ...


def with_collector(options: str) -> str:
    """``options`` with COLLECTOR appended, unless they choose a collector already."""
    return options if _A_COLLECTOR.search(options) else f"{options} {COLLECTOR}".strip()


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
    key = f"{spark_version}|{java}|{stamp}|{COLLECTOR}"
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
    """``conf`` with the stage driver's Java options: the ones there (the given ones, else the
    platform's), then COLLECTOR unless they choose one, then the archive when there is one."""
    own = conf.get(JAVA_OPTIONS) or platform_java_options()
    options = with_collector(own)
    path = archive_path(cache_dir)
    if path is not None and os.path.exists(path) and not any(o in own for o in _OWN):
        options = f"{options} -XX:SharedArchiveFile={path}"
    return {**conf, JAVA_OPTIONS: options}


SAMPLE = [b'{"id": "a%d", "n": %d, "x": %d.5, "ts": "2026-01-01T00:00:%02dZ"}' % (i, i, i, i % 60) for i in range(200)]


def build(master: str = "local[*]", cache_dir: str | None = None, log=print, force: bool = False) -> str:
    """Run one stage job of a small pipeline (valid, bad and blank lines: the sink and the
    quarantine are both written) with ``-XX:ArchiveClassesAtExit``; return the archive's path.
    An archive already there for this pyspark and this Java is kept unless ``force``."""
    from ..config.loader import load_pipeline
    from ..core.protocol import Protocol
    from .launch import new_attempt_id, spark_env, spark_submit_argv

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
        dumping = {JAVA_OPTIONS: f"{with_collector(platform_java_options())} -XX:ArchiveClassesAtExit={dump}"}
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
    for old in glob.glob(os.path.join(os.path.dirname(target), "stage-classes-*.jsa")):
        if old != target:  # made with another pyspark, Java or collector (a JVM mapping one keeps its mapping)
            os.remove(old)
            log(f"class archive: removed {old}, made for another pyspark, Java or collector")
    log(f"class archive: {target} ({os.path.getsize(target) >> 20} MiB)")
    return target
