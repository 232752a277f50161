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
  (``eobatch.job.launch.build_class_archive``), with the collector the stage jobs run with, and each stage job's driver then
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
* The archive is code the driver runs: it lives in an owner-only folder (``integrity.private_dir``,
  like the code zip), with the SHA-256 of its bytes recorded beside it when it was built
  (``<archive>.sha256``). Each launch checks it (``archive_problem``: hashed once per file identity,
  a ``stat`` after): an archive altered, truncated, replaced or linked elsewhere, or in a folder
  other users can write, is not used (a note says why), and ``class-archive`` builds it again.
* A pipeline or platform that sets its own ``-XX:SharedArchiveFile`` / ``-XX:ArchiveClassesAtExit``
  or its own collector in ``spark.driver.extraJavaOptions`` keeps them.

No Airflow, no pyspark imports.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import stat
import sys

from ..config.pipeline import LOG_LEVELS
from ..paths import CHECKOUT, SPARK_JOBS, cache_dir
from . import integrity

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_OWN = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit")
COLLECTOR = "-XX:+UseParallelGC"
DIGEST_SUFFIX = ".sha256"  # beside the archive: the SHA-256 of its bytes, recorded when it was built
BUILD_COMMAND = "make class-archive" if CHECKOUT else "eobatch class-archive"
# The stage job's log4j2 configuration, shipped with the job (spark_jobs/): Spark at WARN unless
# asked otherwise (``log_level``), so that a task's log holds the product's lines, not Spark's INFO.
LOG_CONFIG = os.path.join(SPARK_JOBS, "log4j2.properties")
LOG_LEVEL_ENV = "EOBATCH_SPARK_LOG_LEVEL"  # the deployment's level (a pipeline's spark.log_level first)
DEFAULT_LOG_LEVEL = "WARN"
_LOG_CONFIGURED = re.compile(r"-Dlog4j2?\.configuration(File)?=")
_A_COLLECTOR = re.compile(r"-XX:\+Use\w+GC\b")  # -XX:+UseG1GC, -XX:+UseZGC, -XX:+UseSerialGC, ...


def with_collector(options: str) -> str:
    """``options`` with COLLECTOR appended, unless they choose a collector already."""
    return options if _A_COLLECTOR.search(options) else f"{options} {COLLECTOR}".strip()


def default_cache_dir() -> str:
    """Where the code zip and the class-data archive are kept (``paths.cache_dir``)."""
    return cache_dir()


def java(environ=None) -> str | None:
    """The java spark-submit runs: $JAVA_HOME/bin/java, else the first on PATH (of ``environ``,
    default this process's environment)."""
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java", path=env.get("PATH"))
    return os.path.realpath(found) if found and os.path.exists(found) else None


def archive_path(cache_dir: str | None = None) -> str | None:
    """Where the archive of this pyspark and this Java lives (whether or not it exists); None
    without a java or an installed pyspark."""
    java_bin = java()
    try:
        spark_version = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:  # a pyspark from SPARK_HOME: no archive of ours
        return None
    if java_bin is None:
        return None
    modules = os.path.join(os.path.dirname(os.path.dirname(java_bin)), "lib", "modules")
    stamp = os.stat(modules).st_mtime_ns if os.path.exists(modules) else 0
    key = f"{spark_version}|{java_bin}|{stamp}|{COLLECTOR}"
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


def log_level(pipeline_level: str | None = None, environ=None) -> str:
    """The stage job's Spark log level: the pipeline's ``spark.log_level``, else the deployment's
    EOBATCH_SPARK_LOG_LEVEL, else WARN; ValueError naming the setting when it is no log4j level."""
    env = os.environ if environ is None else environ
    level, where = ((pipeline_level, "spark.log_level") if pipeline_level
                    else (env.get(LOG_LEVEL_ENV, "").strip(), LOG_LEVEL_ENV))
    if not level:
        return DEFAULT_LOG_LEVEL
    if level.upper() not in LOG_LEVELS:
        raise ValueError(f"{where}={level!r} is no log level: use one of {', '.join(LOG_LEVELS)} (e.g. INFO)")
    return level.upper()


def log_options(own: str, level: str | None = None) -> str:
    """The driver's Java options that give the stage job its log configuration (``LOG_CONFIG``) at
    ``level`` (default: ``log_level()``); none when ``own`` (the pipeline's or the platform's Java
    options) names a log4j configuration already: theirs is kept."""
    if _LOG_CONFIGURED.search(own):
        return ""
    return f"-Dlog4j2.configurationFile=file:{LOG_CONFIG} -Deobatch.spark.logLevel={level or log_level()}"


def java_options(conf: dict, cache_dir: str | None = None, log_level: str | None = None) -> dict:
    """``conf`` with the stage driver's Java options: the ones there (the given ones, else the
    platform's), then COLLECTOR unless they choose one, then the job's log configuration at
    ``log_level`` (``log_options``), then the archive when there is one."""
    own = conf.get(JAVA_OPTIONS) or platform_java_options()
    options = f"{with_collector(own)} {log_options(own, log_level)}".strip()
    path = archive_path(cache_dir)
    if path is not None and os.path.lexists(path) and not any(o in own for o in _OWN):
        problem = archive_problem(path)
        if problem is None:
            options = f"{options} -XX:SharedArchiveFile={path}"
        else:
            print(f"eobatch: the class-data archive {path} is not used: {problem}; `{BUILD_COMMAND}` builds it "
                  f"again", file=sys.stderr)
    return {**conf, JAVA_OPTIONS: options}


def _owned_file(path: str) -> str | None:
    """Why ``path`` is not a regular file of this user that only this user can write, or None."""
    try:
        st = os.lstat(path)
    except OSError:
        return "it is missing"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return "it is not a file only this user can write"
    return None


def archive_problem(path: str) -> str | None:
    """Why the archive at ``path`` must not be used, or None: it and the SHA-256 recorded beside it
    are files of this user in an owner-only folder, and its bytes have that SHA-256."""
    folder = os.path.dirname(path)
    if not integrity.is_private(folder):
        return f"its folder {folder} is not a folder of this user that only this user can write"
    why = _owned_file(path) or _owned_file(path + DIGEST_SUFFIX)
    if why:
        return why if _owned_file(path) else f"{path}{DIGEST_SUFFIX}: {why}"
    with open(path + DIGEST_SUFFIX, encoding="ascii", errors="replace") as f:
        recorded = f.read().strip()
    try:
        if integrity.sha256(path, folder) != recorded:
            return "its bytes are not the ones recorded when it was built (altered, truncated or replaced)"
    except OSError as e:
        return f"it cannot be checked ({e})"
    return None


def install_archive(dump: str, target: str) -> str:
    """Put the archive ``dump`` (one a JVM has loaded) at ``target``, in an owner-only folder, with
    the SHA-256 of its bytes beside it; each under a temporary name first, then renamed (a partial
    archive is never used: a truncated one crashes the JVM that maps it). Returns ``target``."""
    integrity.private_dir(os.path.dirname(target))
    part, digest_part = f"{target}.{os.getpid()}.tmp", f"{target}{DIGEST_SUFFIX}.{os.getpid()}.tmp"
    shutil.copyfile(dump, part)
    os.chmod(part, 0o644)
    with open(part, "rb") as f:
        digest = integrity._hash(f)
    with open(os.open(digest_part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "w", encoding="ascii") as f:
        f.write(digest + "\n")
    os.replace(digest_part, target + DIGEST_SUFFIX)
    os.replace(part, target)
    return target
