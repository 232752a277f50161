"""eobatch.sources.files: record counting and the choice of the next range of landing files."""

from __future__ import annotations

import io
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eobatch import lines
from eobatch.sources import source_for
from eobatch.sources.files import FilesSource, count_records
from eobatch.storage import LocalStorage

CHUNK = 1 << 22  # count_records reads 4 MiB at a time
T0 = 1_700_000_000  # seconds


def _reference_count(data: bytes) -> int:
    """What the Spark job keeps: lines split on \\n, minus whitespace-only ones."""
    return sum(1 for line in data.split(b"\n") if line.strip(b" \t\r\x0b\x0c"))


def _count(tmp_path, data: bytes) -> int:
    p = tmp_path / "f.jsonl"
    p.write_bytes(data)
    return count_records(LocalStorage(), str(p))


@pytest.mark.parametrize("data,expected", [
    (b"", 0),
    (b"\n", 0),
    (b"{}", 1),
    (b"{}\n", 1),
    (b'{"a":1}\n{"a":2}\n{"a":3}', 3),
    (b'{"a":1}\n{"a":2}\n{"a":3}\n', 3),
    (b'{"a":1}\r\n{"a":2}\r\n', 2),
    (b'{"a":1}\r\n{"a":2}', 2),
    (b"\r\n\r\n{}\r\n\r\n", 1),
    (b"{}\n\n\n{}\n", 2),
    (b"{}\n   \n\t\n \x0b\x0c\r\n{}", 2),
    (b"   \n\t", 0),
    (b"not json at all\n  {}  \n", 2),  # invalid lines are records too (they go to quarantine)
])
def test_count_records_small(tmp_path, data, expected):
    assert _count(tmp_path, data) == expected
    assert _reference_count(data) == expected


@pytest.mark.parametrize("case", ["crlf-split", "blank-across", "record-across", "newline-at-boundary",
                                  "many-lines"])
def test_count_records_across_chunk_boundary(tmp_path, case):
    if case == "crlf-split":  # \r is the last byte of chunk 1, \n the first of chunk 2
        data = b"x" * (CHUNK - 1) + b"\r\n" + b'{"b":2}\r\n'
    elif case == "blank-across":  # a whitespace-only line spans the boundary
        data = b'{"a":1}\n' + b" " * CHUNK + b"\n" + b'{"b":2}'
    elif case == "record-across":  # one record spans the boundary, no trailing newline
        data = b'{"a":1}\n' + b"y" * (CHUNK + 10)
    elif case == "newline-at-boundary":
        data = b"z" * (CHUNK - 1) + b"\n" + b"\n" + b"w\n"
    else:
        line = b'{"id":"0123456789","amount":12.5}\n'  # 35 bytes: 4 MiB is not a multiple
        data = line * ((CHUNK * 2) // len(line) + 17) + b"   \r\n"
    assert len(data) > CHUNK
    assert _count(tmp_path, data) == _reference_count(data)
    expected = {"crlf-split": 2, "blank-across": 2, "record-across": 2, "newline-at-boundary": 2}
    if case in expected:
        assert _reference_count(data) == expected[case]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([b"\n", b"\r", b" ", b"\t", b"\x0b", b"\x0c", b"x", b"{}", b"\xe2\x80\xa8", b"\x85"]),
                max_size=60), st.integers(1, 9))
def test_count_records_agrees_with_the_line_definition_at_any_chunk_size(parts, chunk_size):
    """The planner's count (in C, chunk by chunk) is eobatch.lines' own split, whatever the chunking."""
    data = b"".join(parts)
    assert lines.count_records(io.BytesIO(data), chunk_size) == sum(1 for _ in lines.split_records(data))


# -- next_range ------------------------------------------------------------------------


def _land(root: Path, rel: str, records: int, mtime_s: int, blank_lines: int = 0) -> str:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(f'{{"order_id":"{rel}-{i}"}}\n' for i in range(records)) + "\n" * blank_lines
    p.write_text(body)
    os.utime(p, ns=(mtime_s * 10**9, mtime_s * 10**9))
    return str(p)


def _plan(rng, notes=()):
    """A previous batch plan as next_range sees it."""
    return SimpleNamespace(range=rng or {"files": []}, notes=list(notes))


def _paths(rng):
    return [f["path"] for f in rng["files"]]


@pytest.fixture
def src(make_cfg):
    cfg = make_cfg()
    s = source_for(cfg)
    assert isinstance(s, FilesSource)
    return s


@pytest.fixture
def landing(src):
    return Path(src.root)


def test_empty_folder_has_nothing(src, landing):
    assert list(landing.iterdir()) == []
    assert src.next_range([], 100) == (None, 0, [])


def test_missing_folder_has_nothing(make_cfg, tmp_path):
    cfg = make_cfg()
    os.rmdir(cfg.source.path)
    assert FilesSource(cfg).next_range([], 100) == (None, 0, [])


def test_oldest_mtime_first_and_whole_files_up_to_the_limit(src, landing):
    c = _land(landing, "c.jsonl", 3, T0 + 1)
    a = _land(landing, "a.jsonl", 4, T0 + 3)
    b = _land(landing, "b.jsonl", 2, T0 + 2)
    d = _land(landing, "d.jsonl", 1, T0 + 4)

    rng, n, notes = src.next_range([], 10)
    assert _paths(rng) == [c, b, a, d]
    assert n == 10 and notes == []
    assert rng["files"][0] == {"path": c, "size": os.path.getsize(c), "mtime_ms": (T0 + 1) * 1000, "records": 3}

    rng, n, _ = src.next_range([], 9)  # d would make 10: stop before it
    assert _paths(rng) == [c, b, a] and n == 9

    rng, n, _ = src.next_range([], 6)  # a (4) does not fit after c+b (5); whole files only
    assert _paths(rng) == [c, b] and n == 5

    rng, n, _ = src.next_range([], 5)
    assert _paths(rng) == [c, b] and n == 5


def test_same_mtime_ordered_by_path(src, landing):
    b = _land(landing, "b.jsonl", 1, T0)
    a = _land(landing, "a.jsonl", 1, T0)
    rng, n, _ = src.next_range([], 100)
    assert _paths(rng) == [a, b] and n == 2


def test_at_least_one_file_even_when_larger_than_the_limit(src, landing):
    big = _land(landing, "big.jsonl", 50, T0)
    _land(landing, "small.jsonl", 1, T0 + 1)
    rng, n, notes = src.next_range([], 10)
    assert _paths(rng) == [big]
    assert n == 50 and notes == []


def test_record_counts_skip_blank_lines(src, landing):
    p = _land(landing, "x.jsonl", 3, T0, blank_lines=4)
    rng, n, _ = src.next_range([], 100)
    assert rng["files"] == [{"path": p, "size": os.path.getsize(p), "mtime_ms": T0 * 1000, "records": 3}]
    assert n == 3


def test_only_visible_jsonl_files_including_sub_folders(src, landing):
    keep = [
        _land(landing, "top.jsonl", 1, T0),
        _land(landing, "2024/01/deep.jsonl", 1, T0 + 1),
        _land(landing, "sub/x_y.jsonl", 1, T0 + 2),  # '_' inside a name is fine
    ]
    for rel in ["notes.json", "data.csv", "x.jsonl.gz", "x.jsonl.tmp", "README",
                ".hidden.jsonl", "_temporary.jsonl", "sub/.in-progress.jsonl",
                "_spark_metadata/0.jsonl", ".staging/a.jsonl", "ok/_tmp/b.jsonl", "ok/.x/c.jsonl"]:
        _land(landing, rel, 1, T0 - 100)  # older than all: would come first if taken
    rng, n, _ = src.next_range([], 100)
    assert _paths(rng) == keep
    assert n == 3


def test_previously_planned_files_are_excluded(src, landing):
    a = _land(landing, "a.jsonl", 2, T0)
    b = _land(landing, "b.jsonl", 2, T0 + 1)
    c = _land(landing, "c.jsonl", 2, T0 + 2)
    rng1, n1, _ = src.next_range([], 4)
    assert _paths(rng1) == [a, b] and n1 == 4
    rng2, n2, notes = src.next_range([_plan(rng1)], 4)
    assert _paths(rng2) == [c] and n2 == 2 and notes == []
    assert src.next_range([_plan(rng1), _plan(rng2)], 4) == (None, 0, [])


def test_late_file_with_older_mtime_is_still_picked_up(src, landing):
    a = _land(landing, "a.jsonl", 1, T0 + 10)
    b = _land(landing, "b.jsonl", 1, T0 + 20)
    rng1, _, _ = src.next_range([], 100)
    assert _paths(rng1) == [a, b]
    late = _land(landing, "late.jsonl", 5, T0)  # lands now, but its mtime is older than a and b
    rng2, n2, notes = src.next_range([_plan(rng1)], 100)
    assert _paths(rng2) == [late] and n2 == 5 and notes == []


def test_changed_consumed_file_is_reported_not_replanned(src, landing):
    a = _land(landing, "a.jsonl", 2, T0)
    rng1, _, _ = src.next_range([], 100)
    assert _paths(rng1) == [a]
    # a producer appends to a file that was already consumed
    _land(landing, "a.jsonl", 5, T0 + 60)
    new = _land(landing, "new.jsonl", 1, T0 + 61)
    rng2, n2, notes = src.next_range([_plan(rng1)], 100)
    assert _paths(rng2) == [new] and n2 == 1
    assert len(notes) == 1
    assert notes[0].startswith(f"changed {a} ")
    assert "not published again" in notes[0]

    # once recorded in a plan's notes, it is not reported again
    rng3, n3, notes3 = src.next_range([_plan(rng1), _plan(rng2, notes)], 100)
    assert (rng3, n3, notes3) == (None, 0, [])


def test_changed_mtime_only_is_reported(src, landing):
    a = _land(landing, "a.jsonl", 2, T0)
    rng1, _, _ = src.next_range([], 100)
    os.utime(a, ns=((T0 + 5) * 10**9, (T0 + 5) * 10**9))  # touched, same size
    rng, n, notes = src.next_range([_plan(rng1)], 100)
    assert rng is None and n == 0
    assert len(notes) == 1 and notes[0].startswith(f"changed {a} ")


def test_changed_note_with_space_in_path_is_reported_once(src, landing):
    a = _land(landing, "my orders.jsonl", 2, T0)
    rng1, _, _ = src.next_range([], 100)
    _land(landing, "my orders.jsonl", 3, T0 + 60)
    rng2, _, notes = src.next_range([_plan(rng1)], 100)
    assert rng2 is None and len(notes) == 1 and notes[0].startswith(f"changed {a} ")
    _, _, notes3 = src.next_range([_plan(rng1), _plan(None, notes)], 100)
    assert notes3 == []


def test_check_unchanged(src, landing):
    a = _land(landing, "a.jsonl", 2, T0)
    b = _land(landing, "b.jsonl", 2, T0 + 1)
    rng, _, _ = src.next_range([], 100)
    assert src.check_unchanged(rng) == []
    os.remove(a)
    _land(landing, "b.jsonl", 3, T0 + 1)
    problems = src.check_unchanged(rng)
    assert len(problems) == 2
    assert problems[0].startswith(f"{a}: missing")
    assert problems[1].startswith(f"{b}: changed since planned")


# -- interval_range ----------------------------------------------------------------------


def test_interval_by_modification_time_takes_every_file_of_the_interval(make_cfg):
    cfg = make_cfg(mode="interval", schedule="@hourly")
    s = FilesSource(cfg)
    root = Path(s.root)
    h = 3600
    t = 1_767_225_600  # 2026-01-01T00:00:00Z
    before = _land(root, "before.jsonl", 1, t - 1)
    first = _land(root, "x/first.jsonl", 2, t)
    last = _land(root, "last.jsonl", 3, t + h - 1)
    _land(root, "after.jsonl", 1, t + h)
    _land(root, "_hidden.jsonl", 5, t + 10)
    rng, n, notes = s.interval_range(t * 1000, (t + h) * 1000, 100)
    assert sorted(_paths(rng)) == sorted([first, last]) and n == 5 and notes == []
    # consumed or not: the same interval gives the same files again
    assert s.interval_range(t * 1000, (t + h) * 1000, 100)[0] == rng
    assert _paths(s.interval_range((t - h) * 1000, t * 1000, 100)[0]) == [before]
    assert s.interval_range((t + 5 * h) * 1000, (t + 6 * h) * 1000, 100) == (None, 0, [])


def test_interval_by_prefix_and_the_record_limit(make_cfg):
    from eobatch.sources.kafka import IntervalTooLarge

    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "interval_prefix": "dt={ds}/hour={hh}"})
    s = FilesSource(cfg)
    root = Path(s.root)
    t = 1_767_247_200  # 2026-01-01T06:00:00Z
    a = _land(root, "dt=2026-01-01/hour=06/a.jsonl", 2, 1)  # mtime does not matter with a prefix
    b = _land(root, "dt=2026-01-01/hour=06/sub/b.jsonl", 3, 2)
    _land(root, "dt=2026-01-01/hour=07/c.jsonl", 1, 3)
    _land(root, "dt=2026-01-01/hour=060/d.jsonl", 1, 3)  # a longer name is not the same folder
    rng, n, _ = s.interval_range(t * 1000, (t + 3600) * 1000, 100)
    assert sorted(_paths(rng)) == sorted([a, b]) and n == 5
    with pytest.raises(IntervalTooLarge, match="holds 5 records in 2 files"):
        s.interval_range(t * 1000, (t + 3600) * 1000, 4)


ODD_TERMINATORS = {  # record content for the planner and the job alike: counted, never dropped
    "NEL": "\u0085".encode(), "LS": "\u2028".encode(), "PS": "\u2029".encode(),
    "lone-CR-inside": b"{}\r{}", "NEL-after-record": '{"a":1}\u0085'.encode(),
    "CR-then-NEL": "\r\u0085".encode(),
}


@pytest.mark.parametrize("name", sorted(ODD_TERMINATORS))
def test_lines_of_only_unicode_line_separators_are_records(tmp_path, name):
    from eobatch import lines

    data = b'{"a":1}\n' + ODD_TERMINATORS[name] + b"\n\r\n" + ODD_TERMINATORS[name]
    assert _count(tmp_path, data) == 3
    assert [n for n, _ in lines.split_records(data)] == [1, 2, 4]
    assert not lines.is_blank(ODD_TERMINATORS[name])


def test_the_spark_expressions_say_what_the_python_definition_says():
    """The job's regular expressions are Java's: anchored with \\z, never $ (which matches before a
    final U+0085, U+2028, U+2029 or lone \\r in Java)."""
    from eobatch import lines

    assert "$" not in lines.SPARK_BLANK_LINE and lines.SPARK_BLANK_LINE.endswith(r"\z")
    assert "$" not in lines.SPARK_TRAILING_CR and lines.SPARK_TRAILING_CR.endswith(r"\z")
    for blank in (b"", b" ", b"\t\r", b"\x0b\x0c \r"):
        assert lines.is_blank(blank)


def test_a_landing_file_larger_than_the_pipelines_own_limit_is_refused_at_plan_time(make_cfg, tmp_path):
    """max_file_bytes is the user's own limit (none by default): refused at plan time, with what to do."""
    from eobatch.protocol import Protocol
    from eobatch.sources.files import FileTooLarge

    cfg = make_cfg(source={"kind": "files", "path": str(tmp_path / "landing"), "max_file_bytes": 1000})
    (tmp_path / "landing" / "small.jsonl").write_text('{"order_id": "s"}\n')
    big = tmp_path / "landing" / "big.jsonl"
    big.write_text('{"order_id": "b"}\n' * 100)
    os.utime(big, (T0, T0))  # the oldest: planned first
    with pytest.raises(FileTooLarge, match=r"big\.jsonl holds 1800 bytes, more than source\.max_file_bytes=1000"):
        Protocol(cfg).plan()
    assert Protocol(cfg).ledger.latest_batch_id() == 0


def test_a_file_of_any_size_is_planned_by_default_and_max_file_bytes_must_be_positive(make_cfg, tmp_path):
    from eobatch.config import ConfigError
    from eobatch.protocol import Protocol

    cfg = make_cfg(source={"kind": "files", "path": str(tmp_path / "landing")})
    assert cfg.source.max_file_bytes is None
    big = tmp_path / "landing" / "big.jsonl"
    big.parent.mkdir(parents=True, exist_ok=True)
    with big.open("wb") as fh:  # a sparse 200 MiB line of NUL bytes (a record) and one more record
        fh.truncate(200 << 20)
    with big.open("r+b") as fh:
        fh.seek(200 << 20)
        fh.write(b'\n{"order_id": "last"}\n')
    plan, _ = Protocol(cfg).plan()
    assert plan is not None and plan.rows_in == 2 and plan.range["files"][0]["size"] > 200 << 20
    with pytest.raises(ConfigError, match="source.max_file_bytes"):
        make_cfg(source={"kind": "files", "path": str(tmp_path / "landing"), "max_file_bytes": 0})
