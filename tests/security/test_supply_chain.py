"""What another party can do to the files the stage job runs, and what it gets: the jars folder and
the class-data archive are checked at each launch, so a jar altered, added or planted, or an
archive altered, truncated or replaced, never reaches a JVM.

The parties: anyone but the platform operator who can write the jars folder or the cache folder (a
pipeline author's transform running as the worker's user in local mode, another user of a shared
machine, a stale image layer). docs/site/security.md "Jars and code are checked at each launch".
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from eobatch import paths
from eobatch.errors import EobatchError
from eobatch.job import driver_jvm, jars, launch
from eobatch.job.driver_jvm import JAVA_OPTIONS

LISTED = {"delta-spark_4.2_2.13-4.4.0.jar": b"delta " * 100, "delta-storage-4.4.0.jar": b"storage " * 50}


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A jars folder holding the listed jars, with its list; the wheel's own JVM jar elsewhere."""
    jars_dir = tmp_path / "jars"
    jars_dir.mkdir()
    for name, data in LISTED.items():
        (jars_dir / name).write_bytes(data)
    listing = tmp_path / "spark.sha256"
    listing.write_text("".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in LISTED.items()))
    bundled = tmp_path / "site-packages" / "eobatch" / "job" / paths.JVM_EXTENSION
    bundled.parent.mkdir(parents=True)
    bundled.write_bytes(b"the wheel's own classes")
    monkeypatch.setenv("EOBATCH_JARS_DIR", str(jars_dir))
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EOBATCH_JARS_ON_NODES", raising=False)
    monkeypatch.setattr(jars, "LIST_FILE", str(listing), raising=False)
    monkeypatch.setattr(paths, "BUNDLED_JVM_JAR", str(bundled))
    monkeypatch.setattr(launch, "BUNDLED_JVM_JAR", str(bundled), raising=False)
    return jars_dir


def _names(found: list[str]) -> list[str]:
    return sorted(os.path.basename(j) for j in found)


def test_the_listed_jars_and_the_wheels_jvm_jar_are_launched(folder):
    found = launch.jars()
    assert _names(found) == sorted([*LISTED, paths.JVM_EXTENSION])
    assert paths.BUNDLED_JVM_JAR in found


@pytest.mark.parametrize("when", ["first launch", "after a launch that checked it"])
def test_a_jar_altered_in_the_jars_folder_is_refused_at_launch(folder, when):
    jar = folder / "delta-storage-4.4.0.jar"
    if when != "first launch":
        launch.jars()  # checked and remembered by its identity
    st = jar.stat()
    with open(jar, "r+b") as f:  # other bytes, same name, same size, the same mtime put back
        f.write(b"EVIL")
    os.utime(jar, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert jar.stat().st_size == st.st_size and jar.stat().st_mtime_ns == st.st_mtime_ns
    with pytest.raises(EobatchError) as e:
        launch.jars()
    assert e.value.kind == "terminal"
    assert "delta-storage-4.4.0.jar" in str(e.value) and "SHA-256" in str(e.value)
    assert f"`{launch.JARS_COMMAND}`" in str(e.value)


def test_a_jar_replaced_by_another_file_is_refused(folder, tmp_path):
    launch.jars()
    other = tmp_path / "other.jar"
    other.write_bytes(b"x" * len(LISTED["delta-storage-4.4.0.jar"]))
    os.replace(other, folder / "delta-storage-4.4.0.jar")
    with pytest.raises(EobatchError, match="delta-storage-4.4.0.jar"):
        launch.jars()


def test_an_unknown_jar_in_the_folder_never_reaches_the_class_path(folder):
    (folder / "aaa-shadows-delta-1.0.jar").write_bytes(b"classes of someone else")
    try:
        found = launch.jars()
    except EobatchError as e:  # refused, naming it and the way back
        assert "aaa-shadows-delta-1.0.jar" in str(e) and f"`{launch.JARS_COMMAND}`" in str(e)
    else:
        assert "aaa-shadows-delta-1.0.jar" not in _names(found)


def test_an_eobatch_jvm_jar_planted_in_the_folder_does_not_replace_the_wheels(folder):
    (folder / paths.JVM_EXTENSION).write_bytes(b"planted classes")
    found = launch.jars()
    own = [j for j in found if os.path.basename(j) == paths.JVM_EXTENSION]
    assert own == [paths.BUNDLED_JVM_JAR]
    assert str(folder / paths.JVM_EXTENSION) not in found


def test_a_jar_folder_any_user_can_write_is_refused(folder):
    os.chmod(folder, 0o777)
    with pytest.raises(EobatchError, match="other users can write"):
        launch.jars()


# -- the class-data archive --------------------------------------------------------------------------------

ARCHIVE_BYTES = b"a class-data archive " * 1000


def _install_archive(cache: Path) -> str:
    """An archive of this pyspark and Java in ``cache``, as ``make class-archive`` installs it."""
    cache.mkdir(mode=0o700, exist_ok=True)
    path = driver_jvm.archive_path(str(cache))
    assert path is not None
    dump = cache.parent / "dump.jsa"
    dump.write_bytes(ARCHIVE_BYTES)
    install = getattr(driver_jvm, "install_archive", None)
    if install is not None:
        install(str(dump), path)
    else:  # before archives were checked: a plain copy
        shutil.copyfile(dump, path)
    return path


def _uses_archive(cache: Path) -> bool:
    return "-XX:SharedArchiveFile=" in driver_jvm.java_options({}, str(cache))[JAVA_OPTIONS]


@pytest.mark.parametrize("tamper", ["bytes changed", "truncated", "replaced", "a link to another file"])
def test_a_class_archive_altered_is_not_used(tmp_path, monkeypatch, tamper):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    cache = tmp_path / "cache"
    path = Path(_install_archive(cache))
    assert _uses_archive(cache)  # intact: used (and its check remembered)
    st = path.stat()
    if tamper == "bytes changed":
        with open(path, "r+b") as f:
            f.seek(100)
            f.write(b"EVIL")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif tamper == "truncated":
        with open(path, "r+b") as f:
            f.truncate(st.st_size // 2)
    elif tamper == "replaced":
        other = tmp_path / "other.jsa"
        other.write_bytes(b"another archive " * 100)
        os.replace(other, path)
    else:
        other = tmp_path / "other.jsa"
        other.write_bytes(ARCHIVE_BYTES)  # even the same bytes: not a file of the folder
        path.unlink()
        path.symlink_to(other)
    assert not _uses_archive(cache)


def test_a_class_archive_in_a_folder_others_can_write_is_not_used(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    cache = tmp_path / "cache"
    _install_archive(cache)
    assert _uses_archive(cache)
    os.chmod(cache, 0o777)
    assert not _uses_archive(cache)
