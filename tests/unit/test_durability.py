"""LocalStorage writes survive a power loss once they return: the data is fsynced before its
name appears (link / replace), the folder holding the new name is fsynced after it, and so is
the parent of every folder the write created. Recorded by wrapping os.fsync, os.link and
os.replace, each fsynced descriptor resolved to its path through /proc/self/fd."""

from __future__ import annotations

import os

import pytest

from eobatch.storage import LocalStorage

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")


@pytest.fixture
def events(monkeypatch):
    """The ordered list of ("fsync", path) / ("link"|"replace", src, dst) calls."""
    log: list[tuple] = []
    real_fsync, real_link, real_replace = os.fsync, os.link, os.replace

    def fsync(fd):
        log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def link(src, dst, *a, **kw):
        log.append(("link", str(src), str(dst)))
        return real_link(src, dst, *a, **kw)

    def replace(src, dst, *a, **kw):
        log.append(("replace", str(src), str(dst)))
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "replace", replace)
    return log


def _check_durable(events: list, verb: str, root, target: str, new_dirs: list[str]) -> None:
    """The file's data before its name, its folder after, and every new folder's parent."""
    moves = [i for i, e in enumerate(events) if e[0] == verb]
    assert len(moves) == 1, events
    at = moves[0]
    tmp, dst = events[at][1], events[at][2]
    assert dst == target
    synced = [e[1] for e in events if e[0] == "fsync"]
    # the data: the temp file that becomes the name is fsynced before the link/replace
    assert ("fsync", tmp) in events[:at], events
    # the new name: the folder holding it is fsynced after the link/replace
    assert ("fsync", os.path.dirname(target)) in events[at + 1:], events
    # the new folders: each one's parent holds its name, and is fsynced
    for d in new_dirs:
        assert os.path.dirname(d) in synced, (d, events)
    # nothing outside the written path is fsynced, nothing twice
    assert len(synced) == len(set(synced)), events
    assert all(p == str(root) or p.startswith(str(root) + os.sep) for p in synced), events


def test_put_if_absent_in_new_nested_folders_fsyncs_file_then_folder_and_new_folders_parents(events, tmp_path):
    fs = LocalStorage()
    target = str(tmp_path / "ledger" / "prepared" / "b" / "0000000001.json")
    new_dirs = [str(tmp_path / "ledger"), str(tmp_path / "ledger" / "prepared"),
                str(tmp_path / "ledger" / "prepared" / "b")]
    assert fs.put_if_absent(target, b"prepared") is True
    _check_durable(events, "link", tmp_path, target, new_dirs)
    assert fs.read_bytes(target) == b"prepared"
    assert os.listdir(os.path.dirname(target)) == ["0000000001.json"]  # the temp name is gone


def test_write_atomic_in_new_nested_folders_fsyncs_file_then_folder_and_new_folders_parents(events, tmp_path):
    fs = LocalStorage()
    target = str(tmp_path / "archive" / "2026" / "plans" / "0000000001.json")
    new_dirs = [str(tmp_path / "archive"), str(tmp_path / "archive" / "2026"),
                str(tmp_path / "archive" / "2026" / "plans")]
    fs.write_atomic(target, b"plan")
    _check_durable(events, "replace", tmp_path, target, new_dirs)
    assert fs.read_bytes(target) == b"plan"


def test_a_write_into_an_existing_folder_costs_one_extra_fsync(events, tmp_path):
    fs = LocalStorage()
    (tmp_path / "plans").mkdir()
    target = str(tmp_path / "plans" / "0000000001.json")
    assert fs.put_if_absent(target, b"x") is True
    assert [e[0] for e in events] == ["fsync", "link", "fsync"], events  # the data, the name
    assert events[-1] == ("fsync", str(tmp_path / "plans"))
    events.clear()
    fs.write_atomic(target, b"y")
    assert [e[0] for e in events] == ["fsync", "replace", "fsync"], events
    assert events[-1] == ("fsync", str(tmp_path / "plans"))


def test_put_if_absent_that_loses_still_makes_the_winners_name_durable(events, tmp_path):
    """The loser goes on to act on the winner's record: that name must survive a power loss too."""
    fs = LocalStorage()
    target = str(tmp_path / "0000000001.json")
    assert fs.put_if_absent(target, b"first") is True
    events.clear()
    assert fs.put_if_absent(target, b"second") is False
    assert events[-1] == ("fsync", str(tmp_path)), events
    assert fs.read_bytes(target) == b"first" and os.listdir(tmp_path) == ["0000000001.json"]
