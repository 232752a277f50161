"""eobatch.storage.LocalStorage: the storage primitives the protocol relies on."""

from __future__ import annotations

import os
import threading

import pytest

from eobatch.storage import FileInfo, LocalStorage, S3Storage, join, relpath, storage_for


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
    assert st == FileInfo(str(p), 3, 1_700_000_000_123)
    assert (listed.size, listed.mtime_ms) == (st.size, st.mtime_ms)


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
