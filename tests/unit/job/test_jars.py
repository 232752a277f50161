"""eobatch.job.jars: the jars folder checked against the shipped SHA-256 list."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from eobatch import paths
from eobatch.errors import UsageError
from eobatch.job import jars


def _folder(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, Path]:
    folder = tmp_path / "jars"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    listing = tmp_path / "list.sha256"
    listing.write_text("".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in files.items()))
    return folder, listing


def test_missing_unexpected_and_changed_jars_are_named_and_the_own_jar_is_never_listed(tmp_path):
    folder, listing = _folder(tmp_path, {"a.jar": b"a", "b.jar": b"b"})
    (folder / paths.JVM_EXTENSION).write_bytes(b"built here")
    assert jars.problems(str(folder), str(listing)) == []
    (folder / "b.jar").write_bytes(b"changed")
    (folder / "c.jar").write_bytes(b"c")
    (folder / "a.jar").unlink()
    assert jars.problems(str(folder), str(listing)) == ["missing a.jar", "not in the list: c.jar",
                                                        "b.jar does not have the listed SHA-256"]


def test_the_checkouts_resolved_jars_are_the_shipped_list():
    assert jars.problems(str(Path(paths.CHECKOUT) / ".jars")) == []
    assert len(jars.listed()) >= 5


def test_without_maven_it_says_how_to_get_the_jars(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert shutil.which("mvn") is None
    with pytest.raises(UsageError, match=r"needs Maven .* or put the listed jars .* yourself \(EOBATCH_JARS_DIR names another folder\)"):
        jars.resolve(str(tmp_path / "jars"), log=lambda _m: None)


def test_a_launch_hashes_each_jar_once_per_identity_even_in_a_new_process(tmp_path, monkeypatch):
    """The check at each launch costs a stat per jar once a jar is known: its digest is remembered
    by (device, inode, size, mtime, ctime) in the owner-only cache folder, which a new process (an
    Airflow task) reads; a jar touched is hashed again."""
    from eobatch.job import integrity

    folder, listing = _folder(tmp_path, {"a.jar": b"a" * 1000, "b.jar": b"b" * 1000})
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    hashed = []
    real = integrity._hash
    monkeypatch.setattr(integrity, "_hash", lambda f: hashed.append(f.name) or real(f))
    assert [Path(p).name for p in jars.checked(str(folder), str(listing))] == ["a.jar", "b.jar"]
    assert len(hashed) == 2
    jars.checked(str(folder), str(listing))
    monkeypatch.setattr(integrity, "_MEMO", {})  # what a new process starts with
    jars.checked(str(folder), str(listing))
    assert len(hashed) == 2
    (folder / "b.jar").touch()
    jars.checked(str(folder), str(listing))
    assert [Path(p).name for p in hashed[2:]] == ["b.jar"]
    assert (tmp_path / "cache").stat().st_mode & 0o077 == 0


def test_a_refused_folder_names_what_is_wrong_and_the_command(tmp_path, monkeypatch):
    folder, listing = _folder(tmp_path, {"a.jar": b"a", "b.jar": b"b"})
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    (folder / "a.jar").unlink()
    with pytest.raises(jars.JarsRefused, match=rf"missing a.jar.* Run `{jars.JARS_COMMAND}`: it resolves the listed jars again"):
        jars.checked(str(folder), str(listing))
    (folder / "b.jar").unlink()
    with pytest.raises(FileNotFoundError, match=rf"no JVM jars in .*run `{jars.JARS_COMMAND}`"):
        jars.checked(str(folder), str(listing))


def test_an_installed_products_jvm_jar_is_the_packages(tmp_path, monkeypatch):
    folder, _ = _folder(tmp_path, {"a.jar": b"a"})
    monkeypatch.setattr(paths, "BUNDLED_JVM_JAR", str(tmp_path / "missing" / paths.JVM_EXTENSION))
    (folder / paths.JVM_EXTENSION).write_bytes(b"built by make jars")
    monkeypatch.setattr(paths, "CHECKOUT", None)
    with pytest.raises(FileNotFoundError, match="install the eobatch wheel again"):
        jars.own_jvm_jar(str(folder))
    monkeypatch.setattr(paths, "CHECKOUT", str(tmp_path))
    assert jars.own_jvm_jar(str(folder)) == str(folder / paths.JVM_EXTENSION)  # a checkout builds its own
