"""Symbolic links in a landing zone are never followed, and are reported.

A link can point anywhere, e.g. at a credentials file: following it would read the secret and
land it in the quarantine table's ``raw`` column. The listing skips links to files, links to
folders and dangling links, and tells the caller about them; the planner names them in the batch
plan's notes; the stage job's last check (``changed_since_plan``) refuses a planned file that was
replaced by a link after the plan. A hard link is a regular file and is read as one.
Real files in tmp dirs.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

from eobatch.protocol import Protocol
from eobatch.sources.files import FilesSource, changed_since_plan
from eobatch.storage import LocalStorage

T0 = 1_700_000_000  # seconds
SECRET = '{"aws_secret": "s3cr3t"}\n'


def _land(path: Path, ids: range, mtime: int = T0) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"order_id": f"o{i}", "amount": float(i)}) + "\n" for i in ids))
    os.utime(path, (mtime, mtime))
    return str(path)


def _zone_with_links(tmp_path: Path, landing: Path) -> dict:
    """A regular file plus three kinds of link; returns their paths."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "credentials"
    secret.write_text(SECRET)
    folder = outside / "folder"
    _land(folder / "elsewhere.jsonl", range(3))
    paths = {"regular": _land(landing / "a.jsonl", range(2)),
             "file_link": str(landing / "creds.jsonl"),
             "dir_link": str(landing / "sub"),
             "dangling": str(landing / "gone.jsonl")}
    os.symlink(secret, paths["file_link"])
    os.symlink(folder, paths["dir_link"], target_is_directory=True)
    os.symlink(outside / "no-such-file.jsonl", paths["dangling"])
    return paths


def _links(paths: dict) -> list[str]:
    return sorted(paths[k] for k in ("file_link", "dir_link", "dangling"))


def test_list_files_follows_no_link_and_reports_each(tmp_path):
    landing = tmp_path / "landing"
    paths = _zone_with_links(tmp_path, landing)
    links: list = []
    files = list(LocalStorage().list_files(str(landing), links=links))
    assert [f.path for f in files] == [paths["regular"]]
    assert sorted(links) == _links(paths)
    # without the argument: the same files, and no crash on the dangling link
    assert [f.path for f in LocalStorage().list_files(str(landing))] == [paths["regular"]]


def test_stat_does_not_follow_a_link(tmp_path):
    target = tmp_path / "target.jsonl"
    target.write_text(SECRET)
    link = tmp_path / "link.jsonl"
    os.symlink(target, link)
    assert LocalStorage().stat(str(target)).size == len(SECRET)
    assert LocalStorage().stat(str(link)) is None  # a link never passes as a file
    os.symlink(tmp_path / "nothing", tmp_path / "dangling.jsonl")
    assert LocalStorage().stat(str(tmp_path / "dangling.jsonl")) is None


def test_the_plan_holds_only_the_regular_file_and_its_notes_name_the_links(make_cfg, caplog):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    paths = _zone_with_links(landing.parent, landing)
    with caplog.at_level(logging.WARNING, logger="eobatch.sources.files"):
        plan, is_new = Protocol(cfg).plan()
    assert is_new
    assert [f["path"] for f in plan.range["files"]] == [paths["regular"]]
    assert plan.rows_in == 2
    assert "s3cr3t" not in json.dumps(plan.range) and "s3cr3t" not in json.dumps(plan.notes)
    link_notes = [n for n in plan.notes if n.startswith("ignored symbolic link ")]
    assert len(link_notes) == 3
    for link in _links(paths):
        assert sum(f"ignored symbolic link {link} in the landing zone" in n for n in link_notes) == 1
    assert all("links are never followed" in n for n in link_notes)
    for link in _links(paths):
        assert any(f"ignored symbolic link {link} " in r.getMessage() for r in caplog.records)


def test_list_landing_keeps_the_links_for_the_planner(make_cfg):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    paths = _zone_with_links(landing.parent, landing)
    src = FilesSource(cfg)
    assert [f.path for f in src.list_landing()] == [paths["regular"]]
    assert sorted(src.links) == _links(paths)


def test_a_link_is_noted_in_one_plan_only(make_cfg):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    a = _land(landing / "a.jsonl", range(2))
    os.symlink(landing.parent / "elsewhere.jsonl", landing / "l.jsonl")
    src = FilesSource(cfg)
    rng1, _, notes1 = src.next_range([], 100)
    assert [f["path"] for f in rng1["files"]] == [a]
    assert len(notes1) == 1 and notes1[0].startswith(f"ignored symbolic link {landing / 'l.jsonl'} ")
    _land(landing / "b.jsonl", range(1), T0 + 1)
    plan1 = SimpleNamespace(range=rng1, notes=notes1)
    rng2, _, notes2 = src.next_range([plan1], 100)
    assert [f["path"] for f in rng2["files"]] == [str(landing / "b.jsonl")]
    assert notes2 == []  # already in the earlier plan's notes


def test_a_hard_link_is_a_regular_landing_file(make_cfg):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    elsewhere = _land(landing.parent / "produced.jsonl", range(4))
    os.link(elsewhere, landing / "h.jsonl")
    plan, _ = Protocol(cfg).plan()
    assert [f["path"] for f in plan.range["files"]] == [str(landing / "h.jsonl")]
    assert plan.rows_in == 4 and plan.notes == []
    assert changed_since_plan(plan.range) == []


def test_changed_since_plan_refuses_a_planned_file_replaced_by_a_link(make_cfg):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    a = _land(landing / "a.jsonl", range(2))
    plan, _ = Protocol(cfg).plan()
    planned = plan.range["files"][0]
    assert planned["path"] == a and changed_since_plan(plan.range) == []
    # a file outside the landing zone of the same size and modification time
    secret = landing.parent / "secret"
    secret.write_text("x" * (planned["size"] - 1) + "\n")
    os.utime(secret, ns=(os.stat(a).st_atime_ns, os.stat(a).st_mtime_ns))
    assert (os.stat(secret).st_size, os.stat(secret).st_mtime_ns) == (os.stat(a).st_size, os.stat(a).st_mtime_ns)
    os.remove(a)
    os.symlink(secret, a)
    problems = changed_since_plan(plan.range)
    assert problems == [f"{a}: is now a symbolic link; refusing to read it"]
    # a dangling link in its place is refused the same way
    os.remove(a)
    os.symlink(landing.parent / "nothing", a)
    assert changed_since_plan(plan.range) == [f"{a}: is now a symbolic link; refusing to read it"]
