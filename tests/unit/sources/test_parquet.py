"""kind: parquet: its config, its planning (footer counts, whole files, interval prefix) and its range
check against the stage summary. Real Parquet files written by pyarrow; no Spark here."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eobatch.pipelines.loader import ConfigError
from eobatch.sources import IntervalTooLarge, kind_for, source_for
from eobatch.sources.files import LateFiles
from eobatch.sources.parquet import ParquetConfig, ParquetSource, UnreadableParquet
from support.landing import planned_paths as _paths
from support.records import stage_summary as _summary

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


def _source(tmp_path, **extra) -> dict:
    return {"kind": "parquet", "path": str(tmp_path / "landing"), **extra}


def _land(root: Path, rel: str, rows: int, mtime_s: int, row_group_size: int | None = None) -> str:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"order_id": [f"{rel}-{i}" for i in range(rows)], "amount": [float(i) for i in range(rows)]})
    pq.write_table(table, p, row_group_size=row_group_size)
    os.utime(p, ns=(mtime_s * 10**9, mtime_s * 10**9))
    return str(p)


class _Plan:
    """A previous batch plan as next_range sees it: its range and notes."""

    def __init__(self, rng):
        self.range, self.notes = rng, []


# -- config ----------------------------------------------------------------------------------


def test_config_keys_and_defaults(make_cfg, tmp_path):
    cfg = make_cfg(source=_source(tmp_path, max_records_per_batch=50))
    assert isinstance(cfg.source, ParquetConfig)
    assert (cfg.source.kind, cfg.source.path, cfg.source.max_records_per_batch) == (
        "parquet", str(tmp_path / "landing"), 50)
    assert (cfg.source.interval_prefix, cfg.source.late_files, cfg.source.late_lookback_intervals) == (
        None, "republish", 24)
    assert cfg.source.describe() == str(tmp_path / "landing")
    files = make_cfg(source={**_source(tmp_path, max_records_per_batch=50), "kind": "files"})
    assert cfg.fingerprint() != files.fingerprint()  # same keys, another kind: another pipeline


@pytest.mark.parametrize("extra,key,text", [
    ({"max_file_bytes": 10}, "source.max_file_bytes", "unknown key"),
    ({"topic": "t"}, "source.topic", "unknown key"),
    ({"max_records_per_batch": 0}, "source.max_records_per_batch", "positive integer"),
    ({"path": "landing/rel"}, "source.path", "absolute path"),
    ({"late_files": "fail"}, "source.late_files", "only used in interval mode"),
    ({"interval_prefix": "dt={ds}"}, "source.interval_prefix", "only used in interval mode"),
])
def test_config_errors_name_file_and_key(make_cfg, tmp_path, extra, key, text):
    with pytest.raises(ConfigError) as ei:
        make_cfg(source=_source(tmp_path, **extra))
    assert ei.value.key == key and text in str(ei.value) and str(ei.value).startswith("pipeline.yaml: ")


def test_interval_mode_by_prefix_is_checked_against_the_schedule(make_cfg, tmp_path):
    cfg = make_cfg(mode="interval", schedule="@hourly",
                   source=_source(tmp_path, interval_prefix="dt={ds}/hour={hh}", late_files="fail"))
    assert (cfg.source.interval_prefix, cfg.source.late_files) == ("dt={ds}/hour={hh}", "fail")
    with pytest.raises(ConfigError, match="source.interval_prefix: .*one folder per UTC day"):
        make_cfg(mode="interval", schedule="@hourly", source=_source(tmp_path, interval_prefix="dt={ds}"))


# -- planning --------------------------------------------------------------------------------


@pytest.fixture
def src(make_cfg, tmp_path):
    s = source_for(make_cfg(source=_source(tmp_path)))
    assert isinstance(s, ParquetSource)
    return s


def test_whole_parquet_files_oldest_first_counted_from_their_footers(src):
    root = Path(src.root)
    c = _land(root, "c.parquet", 3, T0 + 1, row_group_size=2)  # two row groups: the footer adds them up
    a = _land(root, "sub/a.parquet", 4, T0 + 3)
    b = _land(root, "b.parquet", 2, T0 + 2)
    (root / "notes.jsonl").write_text('{"order_id": "x"}\n')  # another kind's files are not read: said so
    _land(root, "_tmp/d.parquet", 5, T0)  # hidden: being written
    _land(root, ".e.parquet", 5, T0)

    rng, n, notes = src.next_range([], 100)
    assert _paths(rng) == [c, b, a] and n == 9
    (note,) = notes
    assert note.startswith("not taken: 1 landing file(s)") and "source.include [*.parquet]" in note
    assert str(root / "notes.jsonl") in note and "d.parquet" not in note and ".e.parquet" not in note
    st = os.stat(c)
    assert rng["files"][0] == {"path": c, "size": st.st_size, "mtime_ms": (T0 + 1) * 1000, "records": 3,
                               "identity": [st.st_dev, st.st_ino, (T0 + 1) * 10**9]}  # of the file its footer was read from

    rng, n, _ = src.next_range([], 6)  # a (4) does not fit after c+b (5): whole files only
    assert _paths(rng) == [c, b] and n == 5
    rng, n, _ = src.next_range([], 1)  # at least one file, whatever its size
    assert _paths(rng) == [c] and n == 3
    rng2, n, _ = src.next_range([_Plan(rng)], 100)  # what was planned is not planned again
    assert _paths(rng2) == [b, a] and n == 6
    assert src.next_range([_Plan({"files": rng["files"] + rng2["files"]})], 100) == (None, 0, [note])  # still there


def test_an_empty_parquet_file_is_planned_with_zero_records(src):
    empty = _land(Path(src.root), "empty.parquet", 0, T0)
    rng, n, _ = src.next_range([], 100)
    assert _paths(rng) == [empty] and n == 0 and rng["files"][0]["records"] == 0


def test_a_file_that_is_not_parquet_is_refused_at_plan_time_naming_it(src):
    bad = Path(src.root) / "half-written.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(UnreadableParquet, match=f"{bad}: not a readable Parquet file") as ei:
        src.next_range([], 100)
    assert ei.value.kind == "terminal"


def test_interval_by_prefix_late_files_and_the_record_limit(make_cfg, tmp_path):
    cfg = make_cfg(mode="interval", schedule="@hourly",
                   source=_source(tmp_path, interval_prefix="dt={ds}/hour={hh}", late_files="fail"))
    s = source_for(cfg)
    root = Path(s.root)
    t = T0 + 6 * 3600
    a = _land(root, "dt=2026-01-01/hour=06/a.parquet", 2, 1)
    b = _land(root, "dt=2026-01-01/hour=06/sub/b.parquet", 3, 2)
    _land(root, "dt=2026-01-01/hour=07/c.parquet", 1, 3)
    rng, n, _ = s.interval_range(t * 1000, (t + 3600) * 1000, 100)
    assert sorted(_paths(rng)) == sorted([a, b]) and n == 5
    assert {f["slice"] for f in rng["files"]} == {"iv=20260101T060000Z"}
    with pytest.raises(IntervalTooLarge, match="holds 5 records in 2 files"):
        s.interval_range(t * 1000, (t + 3600) * 1000, 4)
    # hour 06 was published with a only: b is late, and late_files: fail says so
    with pytest.raises(LateFiles, match="late files in the already planned interval"):
        s.interval_range((t + 3600) * 1000, (t + 7200) * 1000, 100, lookback=[(t * 1000, (t + 3600) * 1000)],
                         published={"iv=20260101T060000Z": {(a, os.path.getsize(a), 1000)}})


# -- the range against the stage summary -----------------------------------------------------


def test_rows_read_per_file_are_checked_against_the_footer_counts():
    rng = kind_for("parquet").range({"files": [
        {"path": "/in/a.parquet", "size": 1, "mtime_ms": 1, "records": 3},
        {"path": "/in/empty.parquet", "size": 1, "mtime_ms": 1, "records": 0}]})
    assert rng.check_stage(_summary(3, {"/in/a.parquet": [3, 0, 2]})) == []
    assert rng.check_stage(_summary(3, {"/in/a.parquet": [3, 1, 3]})) == [
        "/in/a.parquet: read 3 rows (row indexes 1..3), its footer holds 3 when planned"]
    assert rng.check_stage(_summary(5, {"/in/a.parquet": [2, 0, 1], "/in/b.parquet": [3, 0, 2]})) == [
        "/in/a.parquet: read 2 rows (row indexes 0..1), its footer holds 3 when planned",
        "read /in/b.parquet, which is not in the plan"]


def test_the_identity_of_each_file_read_is_checked_against_the_plan():
    """The job's positions carry, under "files", the identity of each file it read (no path is
    "files"); a skipped file is never read, and a plan from before identities is not checked."""
    planned = [{"path": "/in/a.parquet", "size": 9, "mtime_ms": 1, "records": 3, "identity": [1, 2, 10**6]},
               {"path": "/in/x.parquet", "size": 5, "mtime_ms": 1, "records": 0, "skipped": "forged",
                "identity": [1, 3, 10**6]}]
    rng = kind_for("parquet").range({"files": planned})
    rows = {"/in/a.parquet": [3, 0, 2]}
    assert rng.check_stage(_summary(3, {**rows, "files": {"/in/a.parquet": [9, 1, 2, 10**6]}})) == []
    assert rng.check_stage(_summary(3, {**rows, "files": {"/in/a.parquet": [9, 1, 7, 10**6]}})) == [
        "/in/a.parquet: the stage job read another file, or a changed one, than the one planned (size, device, "
        "inode, mtime_ns [9, 1, 2, 1000000] planned, [9, 1, 7, 1000000] read)"]
    old = kind_for("parquet").range({"files": [{k: v for k, v in f.items() if k != "identity"} for f in planned]})
    assert old.check_stage(_summary(3, {**rows, "files": {"/in/a.parquet": [9, 1, 7, 10**6]}})) == []
    assert old.check_stage(_summary(3, rows)) == []  # a job from before identities


def test_a_footer_whose_row_counts_cannot_be_true_is_skipped_with_a_note_and_the_others_planned(src):
    """Real files written by pyarrow, then their footers forged: a negative count, a count that is not
    its row groups' sum, row groups claiming more rows than their columns hold. Each is planned as
    consumed with no records (the job never reads it) and named in the plan's notes; a negative count
    never lets more records into a batch than the limit."""
    from support.parquet_forge import forge_rows

    root = Path(src.root)

    def forged(rel: str, mtime_s: int, num_rows: int, groups: list[int] | None = None) -> str:
        path = _land(root, rel, 4, mtime_s, row_group_size=2)
        forge_rows(Path(path), num_rows, groups)
        os.utime(path, ns=(mtime_s * 10**9, mtime_s * 10**9))
        return path

    neg = forged("a-neg.parquet", T0 + 1, -5)
    huge = forged("b-huge.parquet", T0 + 2, 10**12)
    groups = forged("c-groups.parquet", T0 + 3, 1000, [500, 500])
    good = _land(root, "d-good.parquet", 3, T0 + 4)
    more = _land(root, "e-more.parquet", 3, T0 + 5)

    rng, n, notes = src.next_range([], 5)
    assert _paths(rng) == [neg, huge, groups, good] and n == 3  # e does not fit: the skipped ones count 0
    assert [f.get("skipped", "")[:40] for f in rng["files"]] == [
        "its footer holds a negative row count (-", "its footer says 1000000000000 rows but i",
        "its row group 0 says 500 rows but its co", ""]
    assert [f["records"] for f in rng["files"]] == [0, 0, 0, 3]
    assert len(notes) == 3 and all(x.startswith("skipped ") and "not published" in x for x in notes)
    assert notes[0].startswith(f"skipped {neg} (")
    assert kind_for("parquet").range(rng).to_json() == rng  # the ledger keeps the reason
    assert kind_for("parquet").range(rng).check_stage(_summary(3, {good: [3, 0, 2]})) == []
    rng2, n, notes = src.next_range([_Plan(rng)], 5)  # consumed: never planned again
    assert _paths(rng2) == [more] and n == 3 and notes == []
