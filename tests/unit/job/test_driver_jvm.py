"""The stage driver's Java options: the collector unless one is chosen already, the job's log
configuration (Spark at WARN unless asked), and the class-data archive only when the archive of
this pyspark and Java exists, after the options already there (the platform's spark-defaults.conf
included), never over a pipeline's or platform's own."""

from __future__ import annotations

import os
import stat

import pytest

from eobatch.job import driver_jvm, launch
from eobatch.job.driver_jvm import (
    COLLECTOR,
    JAVA_OPTIONS,
    LOG_CONFIG,
    LOG_LEVEL_ENV,
    archive_path,
    java_options,
    log_level,
    log_options,
    platform_java_options,
)

LOG = f"-Dlog4j2.configurationFile=file:{LOG_CONFIG} -Deobatch.spark.logLevel=WARN"


@pytest.fixture(autouse=True)
def _no_level(monkeypatch):
    monkeypatch.delenv(LOG_LEVEL_ENV, raising=False)


def _archive(cache) -> str:
    """An archive of this pyspark and Java in ``cache``, as ``class-archive`` installs it."""
    path = archive_path(str(cache))
    assert path is not None and path.startswith(str(cache))
    dump = os.path.join(os.path.dirname(str(cache)), "dump.jsa")
    with open(dump, "wb") as f:
        f.write(b"classes")
    driver_jvm.install_archive(dump, path)
    return path


def test_no_archive_no_archive_option(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    conf = {"spark.ui.enabled": "false"}
    assert java_options(conf, str(tmp_path)) == {**conf, JAVA_OPTIONS: f"{COLLECTOR} {LOG}"}


def test_a_collector_chosen_already_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    for own in ("-XX:+UseG1GC", "-Da=b -XX:+UseZGC -Xlog:gc", "-XX:+UseParallelGC"):
        assert java_options({JAVA_OPTIONS: own}, str(tmp_path)) == {JAVA_OPTIONS: f"{own} {LOG}"}
    for not_one in ("-XX:-UseParallelGC", "-XX:+UseGCOverheadLimit", "-XX:+UseStringDeduplication"):
        assert java_options({JAVA_OPTIONS: not_one}, str(tmp_path)) == {JAVA_OPTIONS: f"{not_one} {COLLECTOR} {LOG}"}


def test_the_archive_goes_after_the_options_there(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    path = _archive(tmp_path)
    assert java_options({}, str(tmp_path))[JAVA_OPTIONS] == f"{COLLECTOR} {LOG} -XX:SharedArchiveFile={path}"
    got = java_options({JAVA_OPTIONS: "-Dx=1"}, str(tmp_path))
    assert got[JAVA_OPTIONS] == f"-Dx=1 {COLLECTOR} {LOG} -XX:SharedArchiveFile={path}"


def test_the_platforms_spark_defaults_options_are_kept(tmp_path, monkeypatch):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "# platform\nspark.master  local[2]\nspark.driver.extraJavaOptions   -Djava.security.krb5.conf=/etc/krb5.conf -Da=b\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    assert platform_java_options() == "-Djava.security.krb5.conf=/etc/krb5.conf -Da=b"
    for line in ("spark.driver.extraJavaOptions=-Da=b -Dc=d", "spark.driver.extraJavaOptions\t-Da=b -Dc=d",
                 "  spark.driver.extraJavaOptions : -Da=b -Dc=d  "):  # the forms of a properties file
        (conf_dir / "spark-defaults.conf").write_text(f"# spark.driver.extraJavaOptions -Dno=1\n{line}\n")
        assert platform_java_options() == "-Da=b -Dc=d", line
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.driver.extraJavaOptions   -Djava.security.krb5.conf=/etc/krb5.conf -Da=b\n")
    path = _archive(tmp_path)
    assert java_options({}, str(tmp_path))[JAVA_OPTIONS] == (
        f"-Djava.security.krb5.conf=/etc/krb5.conf -Da=b {COLLECTOR} {LOG} -XX:SharedArchiveFile={path}")


def test_an_archive_option_of_its_own_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    _archive(tmp_path)
    for own in ("-XX:SharedArchiveFile=/opt/mine.jsa", "-XX:ArchiveClassesAtExit=/tmp/new.jsa"):
        assert java_options({JAVA_OPTIONS: own}, str(tmp_path)) == {JAVA_OPTIONS: f"{own} {COLLECTOR} {LOG}"}


def test_another_java_has_another_archive(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    ours = _archive(tmp_path)
    fake = tmp_path / "jdk" / "bin" / "java"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert archive_path(str(tmp_path)) != ours
    assert java_options({}, str(tmp_path)) == {JAVA_OPTIONS: f"{COLLECTOR} {LOG}"}  # no archive was built for that java


def test_the_stage_command_line_carries_it_and_the_peers_conf_does_not(tmp_path, monkeypatch):
    """spark_submit_argv (the stage operator's conf) gets the option; spark_conf, the --conf set
    the benchmark's peers run with, does not."""
    from support.harness import write_pipeline

    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    os.makedirs(tmp_path / "cache")
    path = _archive(tmp_path / "cache")
    cfg = write_pipeline(tmp_path, name="o").cfg
    argv = launch.spark_submit_argv(cfg, 1, "a1")
    assert f"{JAVA_OPTIONS}={COLLECTOR} {LOG} -XX:SharedArchiveFile={path}" in argv
    assert JAVA_OPTIONS not in launch.spark_conf(cfg)
    assert driver_jvm.archive_path() == path


def test_the_log_level_is_the_pipelines_else_the_deployments_else_warn(monkeypatch):
    assert log_level() == "WARN" and log_level("info") == "INFO"
    monkeypatch.setenv(LOG_LEVEL_ENV, "debug")
    assert log_level() == "DEBUG" and log_level("ERROR") == "ERROR"
    assert log_options("", "INFO") == f"-Dlog4j2.configurationFile=file:{LOG_CONFIG} -Deobatch.spark.logLevel=INFO"
    monkeypatch.setenv(LOG_LEVEL_ENV, "loud")
    with pytest.raises(ValueError, match=f"{LOG_LEVEL_ENV}='loud' is no log level: use one of OFF, .*INFO"):
        log_level()


def test_a_log_configuration_of_its_own_is_kept(monkeypatch):
    """A pipeline's or platform's own log4j configuration in the driver's Java options wins."""
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    for own in ("-Dlog4j2.configurationFile=/etc/spark/log4j2.xml", "-Dlog4j.configuration=file:/x.properties"):
        assert java_options({JAVA_OPTIONS: own}, "/nonexistent")[JAVA_OPTIONS] == f"{own} {COLLECTOR}"
    assert os.path.isfile(LOG_CONFIG)  # shipped with the job


def test_a_pyspark_that_is_not_installed_has_no_archive(tmp_path, monkeypatch):
    import importlib.metadata

    _archive(tmp_path)

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert archive_path(str(tmp_path)) is None
    assert java_options({"a": "b"}, str(tmp_path)) == {"a": "b", JAVA_OPTIONS: f"{COLLECTOR} {LOG}"}


def test_an_archive_is_installed_owner_only_with_its_sha256_beside_it(tmp_path):
    import hashlib

    cache = tmp_path / "cache"
    path = _archive(cache)
    assert cache.stat().st_mode & 0o077 == 0
    with open(path + driver_jvm.DIGEST_SUFFIX) as f:
        assert f.read().strip() == hashlib.sha256(b"classes").hexdigest()
    assert driver_jvm.archive_problem(path) is None
    os.remove(path + driver_jvm.DIGEST_SUFFIX)  # an archive of a version that recorded none
    assert "missing" in (driver_jvm.archive_problem(path) or "")


def test_class_archive_builds_again_an_archive_that_is_not_usable(tmp_path, monkeypatch):
    """``class-archive`` keeps an intact archive and builds a refused one again."""
    cache = tmp_path / "cache"
    path = _archive(cache)
    built = []

    def load(_yaml):
        built.append(True)
        raise RuntimeError("builds")

    monkeypatch.setattr(launch, "load_pipeline", load)
    assert launch.build_class_archive(cache_dir=str(cache), log=lambda _m: None) == path
    assert not built
    with open(path, "ab") as f:
        f.write(b"more")
    try:
        launch.build_class_archive(cache_dir=str(cache), log=lambda _m: None)
    except RuntimeError:
        pass
    assert built
