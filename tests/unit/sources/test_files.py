"""eobatch.sources.files: the choice of the next range of landing files, interval ranges and the
folders listed for them, file size limits, and symbolic links in a landing zone."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from eobatch.core.formats import slice_name
from eobatch.protocol import Protocol
from eobatch.sources import source_for
from eobatch.sources.files import FilesSource, LandingUnreadable, changed_since_plan
from support.counting import Counting
from support.landing import T0, land_at
from support.landing import links_of as _links
from support.landing import planned_paths as _paths
from support.landing import zone_with_links as _zone_with_links

T0_MS, H_MS = 1_767_225_600_000, 3_600_000  # 2026-01-01T00:00Z and an hour, in milliseconds


# -- next_range ------------------------------------------------------------------------



@contextlib.contextmanager
def planner_warnings():
    """The warnings the files planner logs, from a handler on its own logger: Airflow's logging
    set-up (imported by other tests, in any order) may replace the root handlers caplog listens on,
    and an assertion that nothing was logged would then hold for nothing."""
    logged: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda r: logged.append(r.getMessage())
    planner_log = logging.getLogger("eobatch.sources.files.planner")
    planner_log.addHandler(handler)
    try:
        yield logged
    finally:
        planner_log.removeHandler(handler)

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


# -- a landing folder that cannot be read; names the source does not take ----------------------------
# A missing landing folder used to list as empty: "nothing new", a green run, for ever. It fails the
# plan (terminal), naming the folder, the setting and the file; an empty folder is still "nothing new".


@pytest.mark.parametrize("make_bad", ["missing", "a_file", "dangling_link", "below_a_file"])
def test_a_landing_folder_that_cannot_be_listed_fails_the_plan_naming_it_and_the_setting(make_cfg, tmp_path,
                                                                                          make_bad):
    cfg = make_cfg()
    landing = cfg.source.path
    os.rmdir(landing)
    if make_bad == "a_file":
        Path(landing).write_text('{"order_id": "x"}\n')
    elif make_bad == "dangling_link":
        os.symlink(str(tmp_path / "nowhere"), landing)
    elif make_bad == "below_a_file":
        (tmp_path / "afile").write_text("")
        cfg = make_cfg(source={"kind": "files", "path": str(tmp_path / "afile" / "inner")})
        os.rmdir(landing)
    proto = Protocol(cfg)
    with pytest.raises(LandingUnreadable) as e:
        proto.plan()
    text = str(e.value)
    assert e.value.kind == "terminal" and cfg.source.path in text and f"source.path of {cfg.file}" in text, text
    assert {"missing": "does not exist", "a_file": "is not a folder (a file is there)",
            "dangling_link": "symbolic link to nothing",
            "below_a_file": "cannot be looked at (NotADirectoryError"}[make_bad] in text, text
    assert "create the folder" in text and not proto.ledger.latest_batch_id()  # nothing recorded


def test_an_empty_landing_folder_is_nothing_new_without_a_word(make_cfg):
    proto = Protocol(make_cfg())
    with planner_warnings() as logged:
        assert proto.plan() == (None, False)
    assert proto.last_skipped == [] and logged == []


def _plan_as_nobody(cfg) -> str:
    """What the planner of ``cfg`` says, run in a forked child as user nobody (uid 65534): the
    message of LandingUnreadable, or "planned"."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no exec (the venv's interpreter may not be nobody's to run)
        try:
            os.close(r)
            os.setuid(65534)
            try:
                source_for(cfg).next_range([], 100)
                said = "planned"
            except LandingUnreadable as e:
                said = str(e)
            os.write(w, said.encode())
        except BaseException as e:  # noqa: BLE001 - said to the parent, which fails on it
            os.write(w, f"{type(e).__name__}: {e}".encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        said = f.read().decode()
    os.waitpid(pid, 0)
    return said


def test_a_landing_folder_the_workers_may_not_read_fails_the_plan(make_cfg):
    """Permission denied. Tests run as root here, for whom a chmod changes nothing: the planner runs
    in a child as user nobody, as an Airflow worker without the right would (else: chmod 000)."""
    import shutil
    import tempfile

    top = tempfile.mkdtemp(prefix="eobatch-denied-")  # a folder nobody may enter, not list
    landing = os.path.join(top, "landing")
    try:
        os.chmod(top, 0o711)
        os.mkdir(landing, 0o700)
        land_at(Path(landing) / "a.jsonl", range(2))
        cfg = make_cfg(source={"kind": "files", "path": landing})
        if os.geteuid() == 0:
            said = _plan_as_nobody(cfg)
        else:
            os.chmod(landing, 0)
            with pytest.raises(LandingUnreadable) as e:
                source_for(cfg).next_range([], 100)
            said = str(e.value)
        assert f"the landing folder {landing} (source.path of {cfg.file}) cannot be read (PermissionError" in said, said
        assert "make it readable by the Airflow workers" in said
    finally:
        os.chmod(top, 0o700)
        if os.path.isdir(landing):
            os.chmod(landing, 0o700)
        shutil.rmtree(top)


def test_files_whose_names_are_not_taken_are_named_and_counted_on_every_plan_while_there(make_cfg):
    """``part-0004.json`` beside ``.jsonl`` files used to be skipped without a word: each plan says it
    (log, plan notes, ``last_skipped`` for the gauge and the alert), and the ledger page's backlog."""
    from eobatch.airflow import metrics
    from eobatch.protocol.backlog import backlog
    from eobatch.ui.page import _backlog_html

    cfg = make_cfg()
    landing = Path(cfg.source.path)
    a = land_at(landing / "a.jsonl", range(2))
    stray = land_at(landing / "sub" / "part-0004.json", range(3), T0 + 1)
    land_at(landing / "_tmp" / "part-0005.json", range(1))  # hidden: ignored without a word, as Spark does
    land_at(landing / ".part-0006.json.crc", range(1))
    proto = Protocol(cfg)
    with planner_warnings() as logged:
        plan, _ = proto.plan()
    assert _paths(plan.range) == [a] and plan.rows_in == 2
    (note,) = [n for n in plan.notes if n.startswith("not taken: ")]
    assert f"1 landing file(s) below {landing} are never read" in note and stray in note, note
    assert "source.include [*.jsonl]" in note and "part-0005" not in note and "part-0006" not in note
    assert note in logged
    assert proto.ledger.plan(1).notes == plan.notes  # the ledger's record holds it
    (entry,) = proto.last_skipped
    assert (entry["path"], entry["count"], entry["not_taken"]) == (str(landing), 1, True)
    assert metrics.skipped_metrics("orders", proto.last_skipped) == [
        metrics.Metric("gauge", "eobatch.orders.landing_skipped", 1),
        metrics.Metric("gauge", "eobatch.orders.landing_not_taken", 1),
        metrics.Metric("gauge", "eobatch.orders.landing_unreadable", 0)]
    b = land_at(landing / "b.jsonl", range(1), T0 + 2)
    rng2, _n, notes2 = FilesSource(cfg).next_range([plan], 100)  # the next plan says it again: still there
    assert _paths(rng2) == [b] and [n for n in notes2 if n.startswith("not taken: ")] == [note]
    left = backlog(Protocol(cfg))  # the ledger page's backlog: counted and named
    assert left["not_taken"] == 1 and note in left["notes"], left
    assert "files not taken (names)" in _backlog_html(left) and "part-0004.json" in _backlog_html(left)
    os.remove(stray)
    assert backlog(Protocol(cfg))["not_taken"] == 0


def test_interval_mode_a_missing_interval_folder_is_nothing_a_missing_landing_folder_fails(by_prefix):
    s = source_for(by_prefix)
    landing = Path(by_prefix.source.path)
    assert s.interval_range(T0_MS, T0_MS + H_MS, 100) == (None, 0, [])  # dt=.../hour=00 not there: empty
    land_at(landing / "dt=2026-01-01" / "hour=00" / "a.json", range(1))
    _rng, _n, notes = s.interval_range(T0_MS, T0_MS + H_MS, 100)
    assert [n for n in notes if n.startswith("not taken: 1 landing file(s)") and "a.json" in n]
    shutil.rmtree(landing)
    with pytest.raises(LandingUnreadable, match="does not exist"):
        s.interval_range(T0_MS, T0_MS + H_MS, 100)


def test_many_files_not_taken_are_one_bounded_note(make_cfg):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    for i in range(25):
        land_at(landing / f"x-{i:02d}.csv", range(1))
    proto = Protocol(cfg)
    assert proto.plan() == (None, False)  # nothing it takes: nothing new, and it says why
    (entry,) = proto.last_skipped
    assert entry["count"] == 25 and "x-09.csv and 15 more" in entry["note"] and "x-10.csv" not in entry["note"]


def test_source_include_takes_the_names_it_says_and_reports_the_others(make_cfg):
    cfg = make_cfg()
    landing = cfg.source.path
    cfg = make_cfg(source={"kind": "files", "path": landing, "include": ["*.json", "*.ndjson"]})
    a = land_at(Path(landing) / "part-0004.json", range(2))
    b = land_at(Path(landing) / "c.ndjson", range(1), T0 + 1)
    old = land_at(Path(landing) / "old.jsonl", range(5), T0 + 2)
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    assert _paths(plan.range) == [a, b] and plan.rows_in == 3
    (note,) = [n for n in plan.notes if n.startswith("not taken: ")]
    assert old in note and "source.include [*.json, *.ndjson]" in note
    one = make_cfg(source={"kind": "files", "path": landing, "include": "*.json"})
    assert one.source.include == ("*.json",)


def test_source_include_is_checked_and_its_default_keeps_the_fingerprint(make_cfg):
    from eobatch.errors import ConfigError

    landing = make_cfg().source.path
    cfg = make_cfg(source={"kind": "files", "path": landing})
    same = make_cfg(source={"kind": "files", "path": landing, "include": ["*.jsonl"]})
    assert same.fingerprint() == cfg.fingerprint() and cfg.source.include == ("*.jsonl",)
    other = make_cfg(source={"kind": "files", "path": landing, "include": ["*.json"]})
    assert other.fingerprint() != cfg.fingerprint()
    for bad, said in ((["sub/*.json"], "not of its folder"), ([".*"], "never read"), ([], "non-empty list"),
                      (7, "a glob of file names")):
        with pytest.raises(ConfigError) as e:
            make_cfg(source={"kind": "files", "path": landing, "include": bad})
        assert "source.include" in str(e.value) and said in str(e.value), str(e.value)


def test_oldest_mtime_first_and_whole_files_up_to_the_limit(src, landing):
    c = _land(landing, "c.jsonl", 3, T0 + 1)
    a = _land(landing, "a.jsonl", 4, T0 + 3)
    b = _land(landing, "b.jsonl", 2, T0 + 2)
    d = _land(landing, "d.jsonl", 1, T0 + 4)

    rng, n, notes = src.next_range([], 10)
    assert _paths(rng) == [c, b, a, d]
    assert n == 10 and notes == []
    assert rng["files"][0] == {"path": c, "size": os.path.getsize(c), "mtime_ms": (T0 + 1) * 1000, "records": 3,
                               "identity": [os.stat(c).st_dev, os.stat(c).st_ino, (T0 + 1) * 10**9]}

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
    assert rng["files"] == [{"path": p, "size": os.path.getsize(p), "mtime_ms": T0 * 1000, "records": 3,
                             "identity": [os.stat(p).st_dev, os.stat(p).st_ino, T0 * 10**9]}]
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


def test_interval_mode_with_a_prefix_lists_only_the_folders_of_the_interval_and_its_look_back(make_cfg, tmp_path):
    from eobatch.sources.files import FilesSource

    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(tmp_path / "landing"), "max_records_per_batch": 100,
        "interval_prefix": "dt={ds}/hour={hh}", "settle_seconds": 0, "late_lookback_intervals": 2})
    for h in range(24):  # a day of hourly folders
        d = tmp_path / "landing" / "dt=2026-01-01" / f"hour={h:02d}"
        d.mkdir(parents=True)
        (d / "a.jsonl").write_text('{"order_id": "x"}\n')
    src = FilesSource(cfg)
    fs = src.fs = Counting(src.fs)
    at = T0_MS + 10 * H_MS
    rng, n, _ = src.interval_range(at, at + H_MS, 100, lookback=[(at - H_MS, at), (at - 2 * H_MS, at - H_MS)], published={})
    assert sorted(os.path.relpath(f, tmp_path / "landing") for f in fs.listed) == [
        "dt=2026-01-01/hour=08", "dt=2026-01-01/hour=09", "dt=2026-01-01/hour=10"]
    assert n == 3 and {f["slice"] for f in rng["files"]} == {slice_name(at - 2 * H_MS), slice_name(at - H_MS), slice_name(at)}


# -- max_file_bytes ----------------------------------------------------------------------


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
    from eobatch.pipelines.loader import ConfigError
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


# -- symbolic links in a landing zone: never followed, and reported ---------------------------------
# A link can point anywhere, e.g. at a credentials file: following it would read the secret and
# land it in the quarantine table's ``raw`` column. The listing skips links to files, links to
# folders and dangling links, and tells the caller about them (test_storage.py); the planner
# names them in the batch plan's notes; the stage job's last check (``changed_since_plan``)
# refuses a planned file that was replaced by a link after the plan. A hard link is a regular
# file and is read as one.


def test_the_plan_holds_only_the_regular_file_and_its_notes_name_the_links(make_cfg):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    paths = _zone_with_links(landing.parent, landing)
    with planner_warnings() as logged:
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
        assert any(f"ignored symbolic link {link} " in m for m in logged)


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
    a = land_at(landing / "a.jsonl", range(2))
    os.symlink(landing.parent / "elsewhere.jsonl", landing / "l.jsonl")
    src = FilesSource(cfg)
    rng1, _, notes1 = src.next_range([], 100)
    assert [f["path"] for f in rng1["files"]] == [a]
    assert len(notes1) == 1 and notes1[0].startswith(f"ignored symbolic link {landing / 'l.jsonl'} ")
    land_at(landing / "b.jsonl", range(1), T0 + 1)
    plan1 = SimpleNamespace(range=rng1, notes=notes1)
    rng2, _, notes2 = src.next_range([plan1], 100)
    assert [f["path"] for f in rng2["files"]] == [str(landing / "b.jsonl")]
    assert notes2 == []  # already in the earlier plan's notes


def test_a_hard_link_is_a_regular_landing_file(make_cfg):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    elsewhere = land_at(landing.parent / "produced.jsonl", range(4))
    os.link(elsewhere, landing / "h.jsonl")
    plan, _ = Protocol(cfg).plan()
    assert [f["path"] for f in plan.range["files"]] == [str(landing / "h.jsonl")]
    assert plan.rows_in == 4 and plan.notes == []
    assert changed_since_plan(plan.range) == []


def test_changed_since_plan_refuses_a_planned_file_replaced_by_a_link(make_cfg):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    a = land_at(landing / "a.jsonl", range(2))
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


# -- hostile landing inputs: never a failed plan, never a silent drop ---------------------------------
# A name that is not UTF-8, a folder or a file the planner cannot read, a planned file swapped for a
# link (or a FIFO) between the listing and the count: each is skipped with a note in the plan that
# skipped it (once), listed in ``skipped`` for the metric and the alert, and the rest is planned.


def _skip_notes(notes):
    return [n for n in notes if n.startswith("skipped ")]


def test_a_file_name_that_is_not_utf8_is_skipped_with_a_note_in_one_plan(make_cfg):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    a = land_at(landing / "a.jsonl", range(2))
    bad = os.path.join(os.fsencode(landing), b"bad-\xff.jsonl")
    with open(bad, "wb") as f:
        f.write(b'{"order_id": "x"}\n')
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    assert _paths(plan.range) == [a] and plan.rows_in == 2
    notes = _skip_notes(plan.notes)
    assert len(notes) == 1 and "bad-\\xff.jsonl" in notes[0] and "not UTF-8" in notes[0]
    assert [s["path"] for s in proto.last_skipped] == [os.fsdecode(bad).encode("utf-8", "surrogateescape")
                                                      .decode("utf-8", "backslashreplace")]
    assert proto.last_skipped[0]["retried"] is False
    json.dumps(plan.notes).encode("utf-8")  # the ledger record and the page can hold the note
    proto.ledger.plan(1).notes[0].encode("utf-8")
    land_at(landing / "b.jsonl", range(1), T0 + 1)
    src = FilesSource(cfg)
    _rng, _n, notes2 = src.next_range([plan], 100)
    assert _skip_notes(notes2) == []  # noted once
    assert len(src.skipped) == 1  # but still counted by every plan (the metric)


def test_an_unreadable_sub_folder_is_skipped_then_published_once_when_readable(make_cfg):
    """As root the permission bits stop nobody: the planner runs without the capabilities that
    bypass them (``without_read_override``), so the folder is unreadable for it as for any user."""
    from support.landing import without_read_override

    cfg = make_cfg()
    landing = Path(cfg.source.path)
    a = land_at(landing / "a.jsonl", range(2))
    locked = land_at(landing / "locked" / "l.jsonl", range(10, 13), T0 - 10)
    land_at(landing / "_incoming" / "i.jsonl", range(20, 21))  # ignored anyway
    os.chmod(landing / "locked", 0)
    os.chmod(landing / "_incoming", 0)
    src = FilesSource(cfg)
    try:
        with without_read_override():
            rng1, n1, notes1 = src.next_range([], 100)
    finally:
        os.chmod(landing / "locked", 0o755)
        os.chmod(landing / "_incoming", 0o755)
    assert _paths(rng1) == [a] and n1 == 2
    assert [s["path"] for s in src.skipped] == [str(landing / "locked")]  # the ignored folder: not a skip
    assert src.skipped[0]["retried"] is True
    notes = _skip_notes(notes1)
    assert len(notes) == 1 and str(landing / "locked") in notes[0] and "Permission denied" in notes[0]
    rng2, n2, notes2 = src.next_range([_plan(rng1, notes1)], 100)
    assert _paths(rng2) == [locked] and n2 == 3 and _skip_notes(notes2) == []
    assert src.next_range([_plan(rng1, notes1), _plan(rng2, notes2)], 100) == (None, 0, [])


def test_an_unreadable_landing_file_is_skipped_then_published_when_readable(make_cfg):
    from support.landing import without_read_override

    cfg = make_cfg()
    landing = Path(cfg.source.path)
    a = land_at(landing / "a.jsonl", range(2))
    locked = land_at(landing / "locked.jsonl", range(10, 13), T0 - 10)
    os.chmod(locked, 0)
    src = FilesSource(cfg)
    try:
        with without_read_override():
            rng1, _, notes1 = src.next_range([], 100)
    finally:
        os.chmod(locked, 0o644)
    assert _paths(rng1) == [a]
    assert [s["path"] for s in src.skipped] == [locked] and "Permission denied" in _skip_notes(notes1)[0]
    rng2, n2, _ = src.next_range([_plan(rng1, notes1)], 100)
    assert _paths(rng2) == [locked] and n2 == 3


class _SwapAfterListing(FilesSource):
    """A landing writer's race: each listed file is replaced right after the listing."""

    def __init__(self, cfg, swap):
        super().__init__(cfg)
        self.swap = swap

    def list_landing(self, folders=None, after=None):
        out = super().list_landing(folders, after)
        for f in out:
            self.swap(f.path)
        return out


def _to_dev_zero(p):
    os.remove(p)
    os.symlink("/dev/zero", p)


def _to_fifo(p):
    os.remove(p)
    os.mkfifo(p)


@pytest.mark.parametrize("swap,why", [(_to_dev_zero, "symbolic link"), (_to_fifo, "not a regular file")])
def test_a_file_swapped_after_the_listing_for_a_link_to_dev_zero_or_a_fifo_is_skipped_not_read(make_cfg, swap, why):
    import signal

    cfg = make_cfg()
    land_at(Path(cfg.source.path) / "a.jsonl", range(2))
    src = _SwapAfterListing(cfg, swap)

    def hangs(*_):
        raise AssertionError("no answer within 10 s (a plan that hangs)")

    signal.signal(signal.SIGALRM, hangs)
    signal.alarm(10)
    try:
        rng, n, notes = src.next_range([], 100)
    finally:
        signal.alarm(0)
    assert rng is None and n == 0
    assert len(_skip_notes(notes)) == 1 and why in _skip_notes(notes)[0]


def test_the_plan_records_each_file_identity_and_a_replaced_file_is_refused(make_cfg):
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    a = land_at(landing / "a.jsonl", range(2))
    plan, _ = Protocol(cfg).plan()
    st = os.stat(a)
    assert plan.range["files"][0]["identity"] == [st.st_dev, st.st_ino, st.st_mtime_ns]
    assert changed_since_plan(plan.range) == []
    # another file of the same size and modification time under the same name: another inode
    other = landing.parent / "other.jsonl"
    other.write_text(Path(a).read_text().replace("o0", "x0"))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, a)
    assert len(changed_since_plan(plan.range)) == 1 and "another file" in changed_since_plan(plan.range)[0]


def test_an_s3_object_is_the_planned_one_only_by_its_etag_version_and_last_modified():
    """S3 identities ([ETag, VersionId, LastModified ms]): another ETag or version under the key
    is another object whatever its size and mtime; a plan from before ETags checks size and mtime."""
    from eobatch.sources.files.planner import identity_problem
    from eobatch.storage.fs import FileInfo

    uri = "s3a://b/landing/a.jsonl"
    planned = {"path": uri, "size": 10, "mtime_ms": 5000, "identity": ['"e1"', None, 5000]}
    assert identity_problem(planned, FileInfo(uri, 10, 5000, ['"e1"', None, 5000])) is None
    for other in (['"e2"', None, 5000], ['"e1"', "v2", 5000]):
        why = identity_problem(planned, FileInfo(uri, 10, 5000, other))
        assert why is not None and why.startswith(f"{uri}: another object than the one planned is there now")
    old = {k: v for k, v in planned.items() if k != "identity"}
    assert identity_problem(old, FileInfo(uri, 10, 5000, ['"e2"', None, 5000])) is None
    assert "changed since planned" in identity_problem(old, FileInfo(uri, 11, 5000, ['"e2"', None, 5000]))


def test_the_line_reader_pins_each_planned_s3_object_unless_the_plan_predates_etags():
    from eobatch.sources.files.read import pins

    a = {"path": "s3a://b/l/a b.jsonl", "size": 10, "mtime_ms": 5000, "records": 1, "identity": ['"e1"', None, 5000]}
    b = {"path": "s3a://b/l/b.jsonl", "size": 7, "mtime_ms": 6000, "records": 1, "identity": ['"e2"', "v9", 6000]}
    skipped = {**b, "path": "s3a://b/l/x.parquet", "skipped": "forged"}
    assert [x.split("\1") for x in pins({"files": [a, b, skipped]}).split("\0")] == [
        ["s3a://b/l/a b.jsonl", '"e1"', "", "10", "5000"], ["s3a://b/l/b.jsonl", '"e2"', "v9", "7", "6000"]]
    old = {k: v for k, v in a.items() if k != "identity"}
    assert pins({"files": [old, b]}) is None  # read by name, checked by size and mtime, as before
    assert pins({"files": [{**a, "path": "/landing/a.jsonl", "identity": [1, 2, 3]}]}) is None  # read by descriptor


def test_a_planned_file_under_a_folder_swapped_for_a_link_is_refused(make_cfg, tmp_path):
    """The lstat of the planned path follows a folder link on the way: a sub-folder replaced by a
    link to a folder holding a file of the same name, size and mtime passed the old check."""
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    a = land_at(landing / "sub" / "a.jsonl", range(2))
    plan, _ = Protocol(cfg).plan()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    st = os.stat(a)
    (elsewhere / "a.jsonl").write_text('{"secret": 1}' + " " * (st.st_size - 14) + "\n")
    os.utime(elsewhere / "a.jsonl", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.rename(landing / "sub", landing / ".sub-moved")
    os.symlink(elsewhere, landing / "sub")
    problems = changed_since_plan(plan.range, root=str(landing))
    assert len(problems) == 1 and "symbolic link" in problems[0]


def test_verify_refuses_a_batch_whose_job_read_another_file_than_planned(make_cfg):
    from eobatch.core.formats import StageSummary
    from eobatch.sources.files import FilesRange

    cfg = make_cfg()
    a = land_at(Path(cfg.source.path) / "a.jsonl", range(2))
    rng, _, _ = FilesSource(cfg).next_range([], 100)
    st = os.stat(a)

    def summary(seen):
        return StageSummary(batch_id=1, attempt="a1", rows_in=2, rows_valid=2, rows_quarantined=0,
                            row_preserving=True, partitions={}, manifests={}, arrow_schema={}, partition_by={},
                            stage_seconds=0.0, source_positions=seen)

    r = FilesRange.from_json(rng)
    assert r.check_stage(summary({"files": {a: [st.st_size, st.st_dev, st.st_ino, st.st_mtime_ns]}})) == []
    assert r.check_stage(summary({})) == []  # a job from before identities: not checked
    other = r.check_stage(summary({"files": {a: [st.st_size, st.st_dev, st.st_ino + 1, st.st_mtime_ns]}}))
    assert len(other) == 1 and "read another file" in other[0]
    gone = r.check_stage(summary({"files": {a: "FileNotFoundError: No such file"}}))
    assert len(gone) == 1 and a in gone[0]


# -- max_files_per_batch -----------------------------------------------------------------


def test_empty_files_count_toward_the_batch_bound_of_files(make_cfg):
    """Was: an empty file adds no record, so 20,000 of them were one batch (a 4.1 MB plan record)."""
    cfg = make_cfg(source={"kind": "files", "path": make_cfg().source.path, "max_files_per_batch": 10})
    src = FilesSource(cfg)
    root = Path(src.root)
    for i in range(25):
        _land(root, f"e{i:02d}.jsonl", 0, 100 + i)
    _land(root, "z.jsonl", 3, 200)
    plans, sizes = [], []
    while True:
        rng, n, _notes = src.next_range(plans, 100)
        if rng is None:
            break
        plans.append(_plan(rng))
        sizes.append((len(rng["files"]), n))
    assert sizes == [(10, 0), (10, 0), (6, 3)]


def test_max_files_per_batch_default_cap_and_fingerprint(make_cfg):
    cfg = make_cfg()
    assert cfg.source.max_files_per_batch == 1000
    path = cfg.source.path
    for kind in ("files", "parquet"):
        with pytest.raises(Exception, match=r"source.max_files_per_batch: must be at most 3000"):
            make_cfg(source={"kind": kind, "path": path, "max_files_per_batch": 3001})
        with pytest.raises(Exception, match=r"source.max_files_per_batch: must be a positive integer"):
            make_cfg(source={"kind": kind, "path": path, "max_files_per_batch": 0})
    # a bound of how ranges are planned (each range is in its plan): the fingerprint stays
    set_ = make_cfg(source={"kind": "files", "path": path, "max_records_per_batch": 100, "max_files_per_batch": 7})
    assert set_.source.max_files_per_batch == 7 and set_.fingerprint() == cfg.fingerprint()


def test_an_interval_of_more_files_than_the_bound_is_refused_before_any_is_opened(make_cfg, monkeypatch):
    from eobatch.sources.kafka import IntervalTooLarge

    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "interval_prefix": "dt={ds}/hour={hh}",
        "max_files_per_batch": 3})
    s = FilesSource(cfg)
    t = 1_767_247_200  # 2026-01-01T06:00:00Z
    for i in range(4):
        _land(Path(s.root), f"dt=2026-01-01/hour=06/e{i}.jsonl", 0, 1)
    monkeypatch.setattr(FilesSource, "_entry", lambda *_: pytest.fail("a file was opened"))
    with pytest.raises(IntervalTooLarge, match="holds 4 files, more than max_files_per_batch=3"):
        s.interval_range(t * 1000, (t + 3600) * 1000, 100)


def lexical_pipeline(make_cfg, monkeypatch, max_records: int):
    """A ``discovery: lexical`` pipeline (a full listing every hour), its landing folder, and the
    ``after`` of each listing of that folder (None: a full listing), as the plans make them."""
    from eobatch.storage.fs import LocalStorage

    cfg = make_cfg(source={"kind": "files", "path": str(Path(make_cfg().source.path)),
                           "max_records_per_batch": max_records, "discovery": "lexical", "full_listing_hours": 1})
    landing = Path(cfg.source.path)
    afters: list = []
    real = LocalStorage.list_files

    def recorded(self, prefix, *a, **kw):
        if prefix == str(landing):
            afters.append(kw.get("after"))
        return real(self, prefix, *a, **kw)

    monkeypatch.setattr(LocalStorage, "list_files", recorded)
    return cfg, landing, afters


def test_lexical_discovery_lists_after_the_last_position_and_a_full_listing_finds_the_late_name(make_cfg, monkeypatch):
    """Issue 44: ``source.discovery: lexical`` (names that grow in byte order): a plan lists only the
    paths after the position the last plan recorded (``listed_after``), in path order; a file landed
    under a name before it is found by the full listing, once ``full_listing_hours`` have passed
    since the last one, and published once."""
    from support.pyarrow_stager import stage

    cfg, landing, afters = lexical_pipeline(make_cfg, monkeypatch, max_records=2)
    for h in range(3):
        land_at(landing / f"dt=01/hour=0{h}/a.jsonl", range(2), T0 + 10 - h)  # mtimes in the other order
    proto = Protocol(cfg)
    plans = []
    for _ in range(3):
        plan, _new = proto.plan()
        plans.append(plan)
        proto.verify(plan.batch_id, stage(proto, plan.batch_id))
        proto.commit(plan.batch_id)
    assert [_paths(p.range) for p in plans] == [[str(landing / f"dt=01/hour=0{h}/a.jsonl")] for h in range(3)]
    assert afters == [None, str(landing / "dt=01/hour=00/a.jsonl"), str(landing / "dt=01/hour=01/a.jsonl")]
    assert [p.range["listed_after"] for p in plans] == [str(landing / f"dt=01/hour=0{h}/a.jsonl") for h in range(3)]
    full = plans[0].range["full_listing_ms"]
    assert {p.range["full_listing_ms"] for p in plans} == {full}
    late = land_at(landing / "dt=01/hour=00/late.jsonl", range(1), T0 + 20)  # a name before the position
    assert proto.plan() == (None, False)  # not seen: the listing starts after hour=02
    monkeypatch.setattr(time, "time", lambda: full / 1000 + 3601)  # an hour after the full listing
    plan, _new = proto.plan()
    assert _paths(plan.range) == [late] and plan.range["full_listing_ms"] == full + 3_601_000
    assert any(n.startswith("full listing of the landing folder") for n in plan.notes)
    assert plan.range["listed_after"] == str(landing / "dt=01/hour=02/a.jsonl")  # back where it was
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    proto.commit(plan.batch_id)
    # a replay's folder sorts after the layout's: listed whole at each plan, it never moves the position
    h3 = land_at(landing / "dt=01/hour=03/a.jsonl", range(2), T0 + 30)
    replayed = land_at(landing / "replay" / "r1.jsonl", range(1), T0 + 31)
    got = []
    for _ in range(2):
        plan, _new = proto.plan()
        got.append((_paths(plan.range), plan.range["listed_after"]))
        proto.verify(plan.batch_id, stage(proto, plan.batch_id))
        proto.commit(plan.batch_id)
    assert got == [([h3], h3), ([replayed], h3)]
    h4 = land_at(landing / "dt=01/hour=04/a.jsonl", range(1), T0 + 40)
    plan, _new = proto.plan()
    assert _paths(plan.range) == [h4]


def test_lexical_discovery_of_an_idle_pipeline_lists_the_whole_folder_once_per_due_full_listing(make_cfg, monkeypatch):
    """Issue 44: a plan that planned nothing after a full listing keeps where it got to (the ledger's
    advisory discovery state): the next idle plans list after that position, not the whole folder
    again, until the next full listing is due; any plan since makes the state stale; a damaged one
    is ignored (a full listing again, never a failed plan)."""
    from support.pyarrow_stager import stage

    cfg, landing, afters = lexical_pipeline(make_cfg, monkeypatch, max_records=10)
    a = land_at(landing / "dt=01/a.jsonl", range(2), T0)
    proto = Protocol(cfg)
    plan, _new = proto.plan()
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    proto.commit(plan.batch_id)
    full = plan.range["full_listing_ms"]
    now = full / 1000 + 3601  # the full listing is due
    monkeypatch.setattr(time, "time", lambda: now)
    afters.clear()
    for _ in range(3):
        assert proto.plan() == (None, False)
    assert afters == [None, a, a]  # one full listing, then after the position it kept
    state = json.loads(Path(proto.layout.discovery).read_bytes())["state"]
    assert state == {"listed_after": a, "full_listing_ms": int(now * 1000)}
    # a late name before the position waits for the next full listing, then is planned once
    late = land_at(landing / "dt=00/late.jsonl", range(1), T0 + 5)
    assert proto.plan() == (None, False)
    now += 3601
    plan, _new = proto.plan()
    assert _paths(plan.range) == [late] and plan.range["full_listing_ms"] == int(now * 1000)
    assert plan.range["listed_after"] == a
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    proto.commit(plan.batch_id)
    afters.clear()
    assert proto.plan() == (None, False)
    assert afters == [a]  # the plan's own full listing time holds: the old state is stale, unused
    Path(proto.layout.discovery).write_bytes(b"{not json")  # damaged: ignored, never a failed plan
    now += 3601
    afters.clear()
    assert proto.plan() == (None, False) and proto.plan() == (None, False)
    assert afters == [None, a]
