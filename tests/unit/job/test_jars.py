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
