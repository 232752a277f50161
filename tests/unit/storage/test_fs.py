"""eobatch.storage.fs: the storage primitives the protocol relies on (LocalStorage; S3Storage's
conditional put with its client replaced)."""

from __future__ import annotations

import os
import threading

import pytest

from eobatch.storage import s3conf
from eobatch.storage.fs import FileInfo, LinkRefused, LocalStorage, S3Storage, join, relpath, storage_for
from support.landing import SECRET
from support.landing import links_of as _links
from support.landing import zone_with_links as _zone_with_links
from support.s3env import ENV


@pytest.fixture
def fs():
    return LocalStorage()


def _names(tmp_path, infos):
    return sorted(os.path.relpath(f.path, tmp_path) for f in infos)


def test_put_if_absent_creates_once_and_never_overwrites(fs, tmp_path):
    p = str(tmp_path / "ledger" / "plans" / "0000000001.json")  # parent folders are created
    assert fs.put_if_absent(p, b"first") is True
    assert fs.put_if_absent(p, b"second") is False
    assert fs.read_bytes(p) == b"first"
    assert fs.put_if_absent(p, b"") is False
    assert fs.read_bytes(p) == b"first"
    # no temp file is left behind by either call
    assert os.listdir(tmp_path / "ledger" / "plans") == ["0000000001.json"]


def test_put_if_absent_does_not_replace_existing_file_written_otherwise(fs, tmp_path):
    p = tmp_path / "x.json"
    p.write_bytes(b"already")
    assert fs.put_if_absent(str(p), b"new") is False
    assert p.read_bytes() == b"already"


def test_put_if_absent_within_a_folder_never_writes_through_a_link(fs, tmp_path):
    """A landing zone is written by others: a link planted as a folder on the way or as the name
    itself (dangling: following it would create its target) is refused, nothing written anywhere."""
    root, elsewhere = tmp_path / "landing", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    target = root / "replay" / "a.jsonl"
    (root / "replay").symlink_to(elsewhere)
    with pytest.raises(LinkRefused, match=f"{root / 'replay'} is a symbolic link"):
        fs.put_if_absent(str(target), b"x", within=str(root))
    (root / "replay").unlink()
    (root / "replay").mkdir()
    target.symlink_to(elsewhere / "a.jsonl")
    with pytest.raises(LinkRefused, match=f"{target} is a symbolic link"):
        fs.put_if_absent(str(target), b"x", within=str(root))
    assert list(elsewhere.iterdir()) == [] and os.listdir(root / "replay") == ["a.jsonl"]  # no temp file left
    target.unlink()
    assert fs.put_if_absent(str(target), b"x", within=str(root)) is True
    assert fs.put_if_absent(str(target), b"y", within=str(root)) is False and target.read_bytes() == b"x"
    assert fs.put_if_absent(str(root / "d" / "e" / "f.jsonl"), b"z", within=str(root)) is True  # folders made
    with pytest.raises(ValueError, match="not under"):
        fs.put_if_absent(str(elsewhere / "b.jsonl"), b"x", within=str(root))


def test_put_if_absent_concurrent_exactly_one_winner(fs, tmp_path):
    p = str(tmp_path / "race" / "0000000007.json")
    n = 8
    barrier = threading.Barrier(n)
    results: list[tuple[int, bool]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(i):
        try:
            barrier.wait(timeout=10)
            won = fs.put_if_absent(p, f"writer-{i}".encode() * 1000)
            with lock:
                results.append((i, won))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert len(results) == n
    winners = [i for i, won in results if won]
    assert len(winners) == 1
    assert fs.read_bytes(p) == f"writer-{winners[0]}".encode() * 1000  # the winner's bytes, whole
    assert os.listdir(tmp_path / "race") == ["0000000007.json"]


def test_write_atomic_creates_and_replaces(fs, tmp_path):
    p = str(tmp_path / "a" / "b" / "attempt" / "aborted.json")
    fs.write_atomic(p, b"one")
    assert fs.read_bytes(p) == b"one"
    fs.write_atomic(p, b"two, longer")
    assert fs.read_bytes(p) == b"two, longer"
    fs.write_atomic(p, b"3")
    assert fs.read_bytes(p) == b"3"
    assert os.listdir(os.path.dirname(p)) == ["aborted.json"]


def test_file_uri_is_accepted(fs, tmp_path):
    p = tmp_path / "u.json"
    assert fs.put_if_absent("file://" + str(p), b"x") is True
    assert p.read_bytes() == b"x"
    assert fs.exists("file://" + str(p))
    assert fs.stat("file://" + str(p)).size == 1


def test_list_files_recursive_and_flat_skip_temp_files(fs, tmp_path):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "a.json").write_bytes(b"12345")
    (tmp_path / "sub" / "b.parquet").write_bytes(b"")
    (tmp_path / "sub" / "deeper" / "c.txt").write_bytes(b"c")
    # what write_atomic / put_if_absent leave while writing: .<name>.<hex>.tmp
    (tmp_path / ".a.json.0123456789abcdef.tmp").write_bytes(b"partial")
    (tmp_path / "sub" / ".b.parquet.ffff.tmp").write_bytes(b"partial")
    # not temp files of ours: listed
    (tmp_path / ".hidden").write_bytes(b"h")
    (tmp_path / "data.tmp").write_bytes(b"t")

    infos = list(fs.list_files(str(tmp_path)))
    assert all(isinstance(f, FileInfo) for f in infos)
    assert _names(tmp_path, infos) == sorted([
        ".hidden", "a.json", "data.tmp", os.path.join("sub", "b.parquet"),
        os.path.join("sub", "deeper", "c.txt"),
    ])
    sizes = {os.path.basename(f.path): f.size for f in infos}
    assert sizes["a.json"] == 5 and sizes["b.parquet"] == 0

    flat = list(fs.list_files(str(tmp_path), recursive=False))
    assert _names(tmp_path, flat) == [".hidden", "a.json", "data.tmp"]


def test_list_files_with_trailing_slash_and_missing_folder(fs, tmp_path):
    (tmp_path / "x.json").write_bytes(b"x")
    assert [os.path.basename(f.path) for f in fs.list_files(str(tmp_path) + "/")] == ["x.json"]
    assert list(fs.list_files(str(tmp_path / "missing"))) == []
    assert list(fs.list_files(str(tmp_path / "x.json"))) == []  # a file is not a folder


def test_list_files_mtime_matches_stat(fs, tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"{}\n")
    os.utime(p, ns=(1_700_000_000_123_000_000, 1_700_000_000_123_000_000))
    (listed,) = list(fs.list_files(str(tmp_path)))
    st = fs.stat(str(p))
    assert st == FileInfo(str(p), 3, 1_700_000_000_123, [os.stat(p).st_dev, os.stat(p).st_ino, 1_700_000_000_123_000_000])
    assert listed == st


def test_stat_and_exists_of_missing_file(fs, tmp_path):
    assert fs.stat(str(tmp_path / "nope")) is None
    assert fs.exists(str(tmp_path / "nope")) is False


def test_delete_existing_and_missing(fs, tmp_path):
    p = tmp_path / "d.json"
    p.write_bytes(b"x")
    fs.delete(str(p))
    assert not p.exists()
    fs.delete(str(p))  # already gone: fine
    fs.delete(str(tmp_path / "never" / "existed.json"))


def test_remove_empty_dirs_keeps_folders_with_files(fs, tmp_path):
    root = tmp_path / "eo_batches"
    (root / "b1" / "a1" / "part=1").mkdir(parents=True)
    (root / "b1" / "a2" / "empty" / "deeper").mkdir(parents=True)
    (root / "b2").mkdir()
    (root / "b1" / "a1" / "part=1" / "f.parquet").write_bytes(b"p")
    fs.remove_empty_dirs(str(root))
    assert (root / "b1" / "a1" / "part=1" / "f.parquet").exists()
    assert not (root / "b1" / "a2").exists()
    assert not (root / "b2").exists()
    assert fs.list_dirs(str(root)) == ["b1"]
    fs.remove_empty_dirs(str(tmp_path / "missing"))  # no error


def test_list_dirs_and_makedirs(fs, tmp_path):
    fs.makedirs(str(tmp_path / "z" / "y"))
    fs.makedirs(str(tmp_path / "a"))
    fs.makedirs(str(tmp_path / "a"))  # idempotent
    (tmp_path / "file").write_bytes(b"")
    assert fs.list_dirs(str(tmp_path)) == ["a", "z"]
    assert fs.list_dirs(str(tmp_path / "missing")) == []


def test_open_read_and_arrow_path(fs, tmp_path):
    p = tmp_path / "r.bin"
    p.write_bytes(b"abc")
    with fs.open_read(str(p)) as f:
        assert f.read() == b"abc"
    assert fs.arrow_path("file://" + str(p)) == str(p)


def test_join_and_relpath():
    assert join("/lake/t/", "_eo_ledger", "/plans/", "x.json") == "/lake/t/_eo_ledger/plans/x.json"
    assert join("s3a://bucket/t", "", "a") == "s3a://bucket/t/a"
    assert join("/", "a") == "/a"
    assert relpath("/lake/t/eo_batches/b1/f.parquet", "/lake/t/") == "eo_batches/b1/f.parquet"
    assert relpath("/lake/t/x", "/lake/t") == "x"
    with pytest.raises(ValueError):
        relpath("/lake/tx/y", "/lake/t")


def test_storage_for():
    assert isinstance(storage_for("/tmp/x"), LocalStorage)
    assert isinstance(storage_for("file:///tmp/x"), LocalStorage)
    assert isinstance(storage_for("s3a://bucket/x"), S3Storage)
    assert isinstance(storage_for("s3://bucket/x"), S3Storage)


# -- list_dirs with a start-after key ------------------------------------------------------------


def test_list_dirs_start_after(tmp_path):
    for name in ("b0000000001", "b0000000002", "b0000000010", "x"):
        (tmp_path / name).mkdir()
    (tmp_path / "b0000000003").write_text("a file")
    fs = LocalStorage()
    assert fs.list_dirs(str(tmp_path), start_after="b0000000001") == ["b0000000002", "b0000000010", "x"]
    assert fs.list_dirs(str(tmp_path), start_after="b0000000010") == ["x"]
    assert fs.list_dirs(str(tmp_path)) == ["b0000000001", "b0000000002", "b0000000010", "x"]


# -- symbolic links are never followed, and are reported (the landing zone's planner: sources/test_files.py)


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


# -- durability: LocalStorage writes survive a power loss once they return ---------------------------
# The data is fsynced before its name appears (link / replace), the folder holding the new name is
# fsynced after it, and so is the parent of every folder the write created. Recorded by wrapping
# os.fsync, os.link and os.replace, each fsynced descriptor resolved to its path through /proc/self/fd.
needs_proc_fd = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")


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


@needs_proc_fd
def test_put_if_absent_in_new_nested_folders_fsyncs_file_then_folder_and_new_folders_parents(events, tmp_path):
    fs = LocalStorage()
    target = str(tmp_path / "ledger" / "prepared" / "b" / "0000000001.json")
    new_dirs = [str(tmp_path / "ledger"), str(tmp_path / "ledger" / "prepared"),
                str(tmp_path / "ledger" / "prepared" / "b")]
    assert fs.put_if_absent(target, b"prepared") is True
    _check_durable(events, "link", tmp_path, target, new_dirs)
    assert fs.read_bytes(target) == b"prepared"
    assert os.listdir(os.path.dirname(target)) == ["0000000001.json"]  # the temp name is gone


@needs_proc_fd
def test_write_atomic_in_new_nested_folders_fsyncs_file_then_folder_and_new_folders_parents(events, tmp_path):
    fs = LocalStorage()
    target = str(tmp_path / "archive" / "2026" / "plans" / "0000000001.json")
    new_dirs = [str(tmp_path / "archive"), str(tmp_path / "archive" / "2026"),
                str(tmp_path / "archive" / "2026" / "plans")]
    fs.write_atomic(target, b"plan")
    _check_durable(events, "replace", tmp_path, target, new_dirs)
    assert fs.read_bytes(target) == b"plan"


@needs_proc_fd
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


@needs_proc_fd
def test_put_if_absent_that_loses_still_makes_the_winners_name_durable(events, tmp_path):
    """The loser goes on to act on the winner's record: that name must survive a power loss too."""
    fs = LocalStorage()
    target = str(tmp_path / "0000000001.json")
    assert fs.put_if_absent(target, b"first") is True
    events.clear()
    assert fs.put_if_absent(target, b"second") is False
    assert events[-1] == ("fsync", str(tmp_path)), events
    assert fs.read_bytes(target) == b"first" and os.listdir(tmp_path) == ["0000000001.json"]


# -- S3Storage (no I/O: its client is replaced) -------------------------------------------------


def _client_error(code: str, status: int):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "PutObject")


def test_put_if_absent_retries_a_conditional_conflict_then_loses(s3env, monkeypatch):
    """409 ConditionalRequestConflict (another conditional write in flight) is decided again;
    412 PreconditionFailed means the key exists: this writer lost."""
    calls = []

    class Fake:
        def put_object(self, **kw):
            calls.append(kw)
            assert kw["IfNoneMatch"] == "*"
            raise (_client_error("ConditionalRequestConflict", 409) if len(calls) < 3
                   else _client_error("PreconditionFailed", 412))

    monkeypatch.setattr(s3conf, "boto3_client", lambda s=None: Fake())
    assert S3Storage().put_if_absent("s3a://bkt/plans/1.json", b"x") is False
    assert len(calls) == 3

    class Denied:
        def put_object(self, **kw):
            raise _client_error("AccessDenied", 403)

    monkeypatch.setattr(s3conf, "boto3_client", lambda s=None: Denied())
    from eobatch.storage.fs import S3StorageError

    with pytest.raises(S3StorageError, match="AccessDenied") as e:
        S3Storage().put_if_absent("s3a://bkt/plans/1.json", b"x")
    assert ENV["AWS_SECRET_ACCESS_KEY"] not in str(e.value)


def test_list_files_after_a_path_skips_what_sorts_before_it_without_reading_those_folders(tmp_path, monkeypatch):
    """Issue 44: a landing zone whose names grow in order is listed from a position on: the files
    whose path sorts after it (S3's key order), and no folder that sorts wholly before it is read."""
    from eobatch.storage.fs import sorts_after

    fs = LocalStorage()
    for rel in ("dt=2026-01-01/hour=00/a.jsonl", "dt=2026-01-01/hour=01/a.jsonl", "dt=2026-01-01/hour=01/b.jsonl",
                "dt=2026-01-02/hour=00/a.jsonl", "dt=2026-01-0x/z.jsonl", "dt=2026-01-01-late/c.jsonl", "top.jsonl"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}\n")
    read: list[str] = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda d: read.append(str(d)) or real(d))
    after = str(tmp_path / "dt=2026-01-01/hour=01/a.jsonl")
    got = sorted(relpath(f.path, str(tmp_path)) for f in fs.list_files(str(tmp_path), after=after))
    assert got == ["dt=2026-01-01/hour=01/b.jsonl", "dt=2026-01-02/hour=00/a.jsonl", "dt=2026-01-0x/z.jsonl",
                   "top.jsonl"]  # "-late" sorts before "/": a late name, found by a full listing only
    assert str(tmp_path / "dt=2026-01-01/hour=00") not in read and str(tmp_path / "dt=2026-01-01-late") not in read
    assert sorted(relpath(f.path, str(tmp_path)) for f in fs.list_files(str(tmp_path))) == sorted(
        [*got, "dt=2026-01-01/hour=00/a.jsonl", "dt=2026-01-01/hour=01/a.jsonl", "dt=2026-01-01-late/c.jsonl"])
    # the order is S3's: every listed path sorts after the position, every other one before it
    assert sorts_after("/l/a/x", "/l/a-b/y") and sorts_after("/l/a", "/l/a-b/y", folder=True)
    assert not sorts_after("/l/a-a", "/l/a-b/y", folder=True) and sorts_after("/l/a-b", "/l/a-b/y", folder=True)
