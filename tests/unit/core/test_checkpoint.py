"""Ledger checkpoints (``eobatch.core.checkpoint``): planning from the newest checkpoint and the plans
after it gives the answers the whole history gives, and costs the same at batch 2,000 as at 10.

Real files on local disk (``LocalStorage``). The ledgers are written record by record as the
protocol writes them (``support.ledger_book.Book``): plans, PREPARED, COMMITTED, ABANDONED,
rewinds (reservation plan, then the record), resets (an undecided batch's records removed), with
the batch every table holds (``held``) kept beside them. The reference answers come from
``protocol.state``'s functions over every record (``Ledger.plans()``, ``rewinds()``), with the
files planner's consumed-file rules written out here, as they were before checkpoints.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from eobatch.core import checkpoint as ckpt
from eobatch.core.formats import BatchPlan, Layout, PreparedBatch, RewindRecord, StagedFile, fingerprint_of, slice_name
from eobatch.protocol import state as st
from support.counting import Counting
from support.ledger_book import STARTS, T0, Book, H
from support.ledger_book import commit_batches as _committed
from support.ledger_book import iso_of as _iso
from support.protocol_runs import land_ids as _land
from support.protocol_runs import published_ids as _published
from support.protocol_runs import run_next as _batch

PATHS = [f"/landing/{d}/f{i}.jsonl" for d in ("a", "b") for i in range(6)]
LINKS = [f"ignored symbolic link /landing/l{i} in the landing zone: ..." for i in range(3)]


# -- the reference: every record, as before checkpoints ------------------------------------------
def _marker(k: BatchPlan) -> BatchPlan | None:
    """A start marker, like Kafka's (an empty range at k's start)."""
    return st.start_marker(k, {"files": [], "start_of": k.batch_id})


def _reference(book: Book, pending: RewindRecord | None, marker) -> dict:
    ledger = book.ledger
    plans = ledger.plans()
    rewinds = ledger.rewinds() + ([pending] if pending else [])
    read = st.read_so_far(plans, rewinds, lambda b: ledger.abandoned(b) is not None, marker)
    consumed: dict[str, dict] = {}
    reported: set[str] = set()
    for p in read:  # the files planner before checkpoints
        for f in p.range.get("files", []):
            consumed[f["path"]] = f
        reported.update(n[len("changed "):].split(" after it was consumed", 1)[0]
                        for n in p.notes if n.startswith("changed "))
        reported.update(n for n in p.notes if n.startswith("ignored symbolic link "))
    gone = {b for r in rewinds for b in range(r.to_batch, r.after_batch + 1)}
    live = [p for p in plans if p.batch_id not in gone and ledger.abandoned(p.batch_id) is None]
    return {"last": (read[-1].batch_id, read[-1].range) if read else None,
            "consumed": {k: (v["size"], v["mtime_ms"]) for k, v in consumed.items()}, "reported": reported,
            "first": min((ckpt.ms(p.interval["start"]) for p in plans if p.interval), default=None),
            "published": st.published_slices(live, book.held),
            "before": {s: getattr(st.last_interval_before(live, _iso(s)), "batch_id", None) for s in STARTS + [T0 + 9 * H]},
            "live": live, "latest": max(ledger.batch_ids(), default=0)}


def _answers(book: Book, hist: ckpt.History, marker, ref: dict) -> dict:
    read = hist.read_so_far(marker, lambda: [])
    names = {slice_name(s) for s in STARTS}
    return {"last": (read.last.batch_id, read.last.range) if read.last is not None else None,
            "consumed": {p: (c["size"], c["mtime_ms"]) for p in _every_path(book) if (c := read.consumed(p)) is not None},
            "reported": {p for p in PATHS if read.reported(p)} | {n for n in LINKS if read.link_noted(n)},
            "first": hist.first_interval_start_ms(),
            "published": hist.published(names, book.held),
            "before": {s: getattr(hist.last_interval_before(_iso(s)), "batch_id", None) for s in STARTS + [T0 + 9 * H]},
            "live": ref["live"], "latest": hist.latest}


def _every_path(book: Book) -> list[str]:
    return sorted(set(PATHS) | {f["path"] for p in book.ledger.plans() for f in p.range.get("files", [])})


def _replaces(book: Book, hist: ckpt.History, ref: dict) -> None:
    """What a new interval batch of every slice would replace: same from both."""
    for lo in STARTS:
        new = BatchPlan(pipeline="orders", batch_id=book.latest + 1, source_kind="files",
                        range={"files": [{"path": "/x", "size": 1, "mtime_ms": 1, "slice": slice_name(lo)},
                                         {"path": "/y", "size": 1, "mtime_ms": 1, "slice": slice_name(STARTS[0])}]},
                        rows_in=1, config_fingerprint="f", planned_at="t",
                        interval={"start": _iso(lo), "end": _iso(lo + H)})
        committed = [(p, book.ledger.prepared(p.batch_id)) for p in ref["live"]
                     if p.batch_id <= book.held and set(new.slices()) & set(p.slices())]
        want = st.replaced_files(new, [(p, prep) for p, prep in committed if prep is not None])
        assert st.replaced_files(new, hist.replace_sources(new, book.held)) == want


def check(book: Book, pending: RewindRecord | None = None) -> None:
    """Every answer planning needs, from the checkpoint (if any) and from every record, agree."""
    names = {slice_name(s) for s in STARTS}
    for marker in (_marker, lambda _k: None):
        ref = _reference(book, pending, marker)
        ref["published"] = {k: v for k, v in ref["published"].items() if k in names}
        for use in (True, False):
            hist = book.ledger.history(pending_rewind=pending, use_checkpoints=use).bound(book.held)
            got = _answers(book, hist, marker, ref)
            assert got == ref, f"checkpoints={use}, checkpoint of batch {hist.checkpoint_id}"
            _replaces(book, hist, ref)


def _files(rnd: random.Random, b: int) -> list[dict]:
    return [{"path": p, "size": rnd.choice([b, 7]), "mtime_ms": rnd.choice([b, 3]), "records": 1}
            for p in rnd.sample(PATHS, rnd.randint(0, 2))]


def _notes(rnd: random.Random) -> list[str]:
    notes = []
    if rnd.random() < 0.2:
        notes.append(f"changed {rnd.choice(PATHS)} after it was consumed in an earlier batch (...)")
    if rnd.random() < 0.1:
        notes.append(rnd.choice(LINKS))
    return notes


def run_ops(book: Book, ops: list[tuple[str, int]], check_every: int = 4) -> None:
    rnd = random.Random(0)
    for i, (op, n) in enumerate(ops):
        rnd.seed(n)
        if op == "plan" and book.pending is None:
            interval = rnd.choice([None, None, rnd.choice(STARTS)])
            extra = [s for s in STARTS if interval and s < interval and rnd.random() < 0.2]
            book.plan(_files(rnd, book.latest + 1), _notes(rnd), interval, extra)
        elif op == "commit" and book.pending is not None:
            book.commit()
        elif op == "abandon" and book.pending is not None and not book.ledger.require_plan(book.pending).rewind:
            book.abandon()
        elif op == "reset" and book.pending is not None and not book.ledger.require_plan(book.pending).rewind:
            book.reset()
        elif op == "rewind" and book.pending is None and book.latest and book.held == book.latest:
            book.rewind(max(1, book.latest - n % 7))
        elif op == "checkpoint":
            book.checkpoint()
        if i % check_every == check_every - 1:
            check(book)
    check(book)
    if book.pending is None and book.latest and book.held == book.latest:  # a rewind being planned now
        check(book, RewindRecord(pipeline="orders", after_batch=book.latest, to_batch=max(1, book.latest - 3),
                                 restore_versions={}, requested_at="t"))


OPS = hst.lists(hst.tuples(hst.sampled_from(["plan", "plan", "commit", "commit", "commit", "abandon", "reset",
                                              "rewind", "checkpoint", "checkpoint"]),
                           hst.integers(0, 10_000)), min_size=5, max_size=70)


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_a_checkpoint_gives_the_answers_of_the_whole_history_on_random_ledgers(small, ops):
    with tempfile.TemporaryDirectory(prefix="eo-ckpt-") as d:
        run_ops(Book(Path(d)), ops)


# -- the protocol's mutable facts across a checkpoint ---------------------------------------------
def test_a_rewind_to_before_the_checkpoint_makes_it_stale_and_an_older_one_or_the_records_answer(small, tmp_path):
    book = Book(tmp_path)
    _committed(book, 5)
    assert book.checkpoint().batch_id == 5
    _committed(book, 3)
    assert book.checkpoint().batch_id == 8
    check(book)
    book.rewind(7)  # batches 7..8 REWOUND: the checkpoint of 8 no longer says what 1..8 mean
    assert book.ledger.history().checkpoint_id == 5  # the older one still holds (7 > 5)
    check(book)
    book.commit()  # the replay batch 9
    book.rewind(3)  # reaches into both checkpoints
    assert book.ledger.history().checkpoint_id == 0
    check(book)
    book.commit()  # batch 10 reads again from batch 3's start
    ck = book.checkpoint()  # made from every record; a new name: it applied 2 rewinds
    assert (ck.batch_id, len(ck.rewinds)) == (10, 2)
    assert os.path.basename(book.layout.checkpoint(10, 2)) in os.listdir(book.layout.checkpoints_dir())
    assert book.ledger.history().checkpoint_id == 10
    check(book)
    read = book.ledger.history().read_so_far(_marker, lambda: [])
    assert read.consumed("/landing/c/00003.jsonl") is None  # batch 3 was rewound: read again
    assert read.consumed("/landing/c/00002.jsonl") is not None


def test_a_rewind_being_planned_is_counted_as_if_recorded(small, tmp_path):
    book = Book(tmp_path)
    _committed(book, 6)
    book.checkpoint()
    pending = RewindRecord(pipeline="orders", after_batch=6, to_batch=4, restore_versions={}, requested_at="t")
    hist = book.ledger.history(pending_rewind=pending)
    assert hist.checkpoint_id == 0  # the checkpoint of 6 does not know this rewind into 4..6
    assert hist.read_so_far(_marker, lambda: []).last.range == {"files": [], "start_of": 4}
    check(book, pending)


def test_abandoned_interval_batches_across_a_checkpoint(small, tmp_path):
    book = Book(tmp_path)
    _committed(book, 3, interval=True)
    book.plan([{"path": PATHS[0], "size": 1, "mtime_ms": 1, "records": 1}], interval_start=STARTS[0])
    book.abandon()  # batch 4 (the interval of STARTS[0], again) was given up
    book.plan([{"path": PATHS[1], "size": 1, "mtime_ms": 1, "records": 1}], interval_start=STARTS[5])
    book.abandon()  # batch 5 too
    assert book.checkpoint().batch_id == 3  # the tables hold 3: batches 4, 5 may still be reset
    _committed(book, 2, interval=True)  # 6, 7
    ck = book.checkpoint()
    assert ck.batch_id == 7 and ck.abandoned == [[4, 5]]
    hist = book.ledger.history()
    assert hist.checkpoint_id == 7 and hist.is_abandoned(4) and not hist.is_abandoned(6)
    assert PATHS[0] not in {f[0] for f in hist.published({slice_name(STARTS[0])}, book.held)[slice_name(STARTS[0])]}
    check(book)
    book.plan([], interval_start=STARTS[0])
    book.abandon()
    check(book)


def test_a_reset_after_a_checkpoint_keeps_it_and_plans_the_batch_again(small, tmp_path):
    book = Book(tmp_path)
    _committed(book, 4)
    book.checkpoint()
    book.plan([{"path": PATHS[0], "size": 1, "mtime_ms": 1, "records": 1}])
    book.reset()  # batch 5 forgotten: no checkpoint ever covers an undecided batch
    assert book.ledger.history().checkpoint_id == 4 and book.ledger.history().latest == 4
    assert book.ledger.history().read_so_far(_marker, lambda: []).consumed(PATHS[0]) is None
    book.plan([{"path": PATHS[1], "size": 1, "mtime_ms": 1, "records": 1}])
    book.commit()
    check(book)


def test_a_checkpoint_whose_plan_was_reset_away_is_ignored(small, tmp_path):
    """A table recreated below the checkpoint (then reset-batch forgets the batches): if the
    checkpoint survived (reset removes it first; a crash, a copied ledger), plan K is not the
    one it summarised, so it is not used."""
    book = Book(tmp_path)
    _committed(book, 4)
    book.checkpoint()
    for b in range(4, 0, -1):
        book.ledger.fs.delete(book.layout.plan(b))
        book.ledger.fs.delete(book.layout.prepared(b))
    book.latest = book.held = 0
    for b in range(1, 5):  # planned again, other ranges (same ids)
        book.plan([{"path": f"/landing/again/{b}.jsonl", "size": b, "mtime_ms": b, "records": 1}])
        book.commit()
    assert book.ledger.history().checkpoint_id == 0
    check(book)


# -- concurrency and damage ----------------------------------------------------------------------
def _write_in_process(root: str, held: int, start, out) -> None:
    ckpt.INTERVAL, ckpt.CHUNK = 2, 2
    book = Book(Path(root))
    book.held = held
    hist = book.ledger.history()
    made = hist.next_checkpoint(held)
    start.wait(10)
    book.ledger.write_checkpoint(hist, held)
    out.put(made[0].to_json() if made else b"")


def test_two_processes_write_the_same_checkpoint_one_file_the_same_bytes(small, tmp_path):
    book = Book(tmp_path)
    _committed(book, 9, interval=True)
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_write_in_process, args=(str(tmp_path), 9, start, out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    a, b = out.get(timeout=5), out.get(timeout=5)
    assert a == b != b""  # built from the same records: the same checkpoint, whoever wins
    found = book.ledger.checkpoint_files()
    assert [(k, n) for k, n, _p in found] == [(9, 0)]
    assert Path(found[0][2]).read_bytes() == a
    check(book)


def test_a_damaged_or_missing_checkpoint_falls_back_to_an_older_one_or_the_records(small, tmp_path, caplog):
    book = Book(tmp_path)
    _committed(book, 4, interval=True)
    book.checkpoint()
    _committed(book, 3, interval=True)
    newest = book.checkpoint()
    path = book.layout.checkpoint(newest.batch_id, 0)
    Path(path).write_bytes(b"{not json")
    assert book.ledger.history().checkpoint_id == 4
    assert "skipped" in caplog.text
    check(book)
    Path(path).write_bytes(json.dumps({**json.loads(newest.to_json()), "rewinds": [["x", 1]]}).encode())
    assert book.ledger.history().checkpoint_id == 4  # well-formed JSON, malformed checkpoint: removed too
    assert not os.path.exists(path)
    Path(path).write_bytes(json.dumps({"format": 99}).encode())  # a newer product's: skipped, left alone
    assert book.ledger.history().checkpoint_id == 4 and os.path.exists(path)
    os.remove(path)
    os.remove(book.layout.checkpoint(4, 0))
    assert book.ledger.history().checkpoint_id == 0
    check(book)


def test_a_damaged_or_missing_index_chunk_falls_back_to_the_records(small, tmp_path, caplog):
    book = Book(tmp_path)
    _committed(book, 6, interval=True)
    ck = book.checkpoint()
    assert len(ck.index) > 2
    chunks = [book.layout.checkpoint_chunk(r[3]) for r in ck.index]
    Path(chunks[0]).write_bytes(Path(chunks[0]).read_bytes()[:-3])  # torn
    os.remove(chunks[-1])
    hist = book.ledger.history()
    assert hist.checkpoint_id == 6
    _answers(book, hist, _marker, _reference(book, None, _marker))  # every answer still the whole history's
    assert "unusable" in caplog.text
    assert hist.checkpoint_id == 0  # it went on from every record
    assert book.ledger.checkpoint_files() == []  # and removed the damaged checkpoint: derived data
    assert book.checkpoint().batch_id == 6  # the next plan makes it again, whole
    check(book)


def test_retention_keeps_the_newest_and_a_few_far_back_and_drops_unnamed_chunks(small, tmp_path):
    # the 3 newest; of 100s the newest of 2400..2499 and 2300..2399; of 1000s of 1000..1999 and 0..999
    assert ckpt.retained([(k, 0) for k in range(10, 2501, 10)]) == {
        (2500, 0), (2490, 0), (2480, 0), (2390, 0), (1990, 0), (990, 0)}
    book = Book(tmp_path)
    for _ in range(8):
        _committed(book, 2)
        book.checkpoint()
    kept = [k for k, _n, _p in book.ledger.checkpoint_files()]
    assert kept == [16, 14, 12]
    named = {r[3] for _k, _n, p in book.ledger.checkpoint_files() for r in book.ledger.load_checkpoint(p).index}
    on_disk = {f[:-5] for f in os.listdir(book.layout.checkpoint_index_dir())}
    assert on_disk == named
    check(book)


# -- the protocol with checkpoints: real batches, real Delta tables ---------------------------------
def test_runs_write_checkpoints_and_a_rewind_and_a_reset_across_them_publish_each_record_once(
        make_cfg, tmp_path, monkeypatch):
    from eobatch.protocol import Protocol
    from support.pyarrow_stager import stage

    monkeypatch.setattr(ckpt, "INTERVAL", 3)
    cfg = make_cfg(source={"kind": "files", "path": str(tmp_path / "landing"), "max_records_per_batch": 2})
    proto = Protocol(cfg)
    for i in range(8):
        _land(cfg, f"f{i}.jsonl", range(10 * i, 10 * i + 2))
        assert _batch(proto) == i + 1
    assert [k for k, _n, _p in proto.ledger.checkpoint_files()] == [6, 3]  # written by the plans of 4 and 7
    assert proto.ledger.history().checkpoint_id == 6
    proto.rewind(5, run_id="ui")  # batches 5..8 REWOUND: the checkpoint of 6 is stale; 9 reads from 5's start
    assert proto.ledger.history().checkpoint_id == 3
    while _batch(proto) is not None:
        pass
    assert _published(proto) == sorted(f"o{i}" for i in range(80) if i % 10 < 2)
    assert [proto.state(b) for b in range(4, 10)] == ["COMMITTED"] + ["REWOUND"] * 4 + ["COMMITTED"]
    _land(cfg, "late.jsonl", range(100, 102))
    proto.recover()
    plan, _ = proto.plan()
    stage(proto, plan.batch_id)
    assert proto.reset(plan.batch_id) == [plan.batch_id]  # forgotten; the checkpoints stay
    while _batch(proto) is not None:
        pass
    assert _published(proto) == sorted([f"o{i}" for i in range(80) if i % 10 < 2] + ["o100", "o101"])
    newest = proto.ledger.history()
    assert newest.checkpoint_id >= 9 and len(newest.base.rewinds) == 1


# -- what a plan reads: the same at batch 10 as at batch 2,000 ---------------------------------------
def _put(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Path(path).write_bytes(data)


def add_committed(p, first: int, last: int, prune_landing: bool = True) -> None:
    """Batches ``first..last`` of one landing file each, committed: their records written directly
    (as the protocol would have), both tables holding ``last``'s txn; and one new landing file."""
    from eobatch.core.formats import CommittedBatch
    from eobatch.sinks.delta import DeltaParticipant
    from support.pyarrow_stager import QUARANTINE_ARROW, sink_schema

    cfg = p.cfg  # (loads the YAML)
    lay, fingerprint = Layout(cfg.sink_table, cfg.quarantine_table), cfg.fingerprint()
    for b in range(first, last + 2):
        f = p.landing / f"f{b:09d}.jsonl"
        f.write_bytes(b'{"order_id":"x"}\n')
        if b > last:
            break
        info = f.stat()
        _put(lay.plan(b), BatchPlan(pipeline="orders", batch_id=b, source_kind="files", rows_in=1,
                                    config_fingerprint=fingerprint, planned_at="t",
                                    range={"files": [{"path": str(f), "size": info.st_size,
                                                      "mtime_ms": int(info.st_mtime * 1000), "records": 1}]}).to_json())
        adds = {"sink": [StagedFile(f"eo_batches/b{b:010d}/a/p.parquet", 1, {}, 0, "{}")], "quarantine": []}
        _put(lay.prepared(b), PreparedBatch(
            pipeline="orders", batch_id=b, attempt="a", adds=adds, arrow_schema={}, partition_by={},
            fingerprint=fingerprint_of(adds), rows_in=1, rows_valid=1, rows_quarantined=0, rows_published=1,
            bytes=1, files=1, prepared_at="t", verify_seconds=0.0, stage_seconds=0.0).to_json())
        _put(lay.committed(b), CommittedBatch(pipeline="orders", batch_id=b, fingerprint=fingerprint_of(adds),
                                              delta_versions={"sink": 1, "quarantine": 1}, committed_at="t",
                                              commit_seconds=0.0).to_json())
        if prune_landing:
            f.unlink()
    for part, table, schema in (("sink", lay.sink_table, sink_schema(cfg)),
                                ("quarantine", lay.quarantine_table, QUARANTINE_ARROW)):
        DeltaParticipant(part, table).commit(cfg.app_id, last, [], schema, [], {}, expected_prev=first - 1)


def synthetic_ledger(root: Path, batches: int, prune_landing: bool = True):
    """A pipeline whose ledger holds ``batches`` committed batches (``add_committed``); consumed
    landing files are removed (a landing zone with a retention) unless ``prune_landing`` is False."""
    from support.harness import write_pipeline

    p = write_pipeline(root, name="orders", max_records=1000)
    add_committed(p, 1, batches, prune_landing)
    return p


def plan_reads(p, drop_plan: bool = True) -> tuple[dict, float, int]:
    """(calls by name, seconds, checkpoint batch) of one ``Protocol.plan()`` of the pipeline."""
    import time

    from eobatch.protocol import Protocol

    proto = Protocol(p.cfg)
    fs = proto.ledger.fs = Counting(proto.ledger.fs)
    t = time.perf_counter()
    plan, new = proto.plan()
    seconds = time.perf_counter() - t
    assert plan is not None and new
    calls = dict(fs.calls)
    k = proto.ledger.history().checkpoint_id
    if drop_plan:
        os.remove(proto.layout.plan(plan.batch_id))
    return calls, seconds, k


def _reads(calls: dict) -> int:
    return sum(v for c, v in calls.items() if c in Counting.READS)


def test_a_plan_at_batch_2000_reads_what_a_plan_at_batch_10_reads(tmp_path):
    early = synthetic_ledger(tmp_path / "early", 10)
    late = synthetic_ledger(tmp_path / "late", 2000)
    first_early, _s, k = plan_reads(early)  # no checkpoint yet: all 10 plans; then the checkpoint of 1..10
    assert k == 10
    first_late, _s, k = plan_reads(late)  # a ledger from before checkpoints: every record, once
    assert k == 2000 and first_late.get("read_bytes", 0) > 2 * 2000
    again_early, _s, _k = plan_reads(early)
    again_late, _s, _k = plan_reads(late)
    assert again_late == again_early, (again_early, again_late)  # right after a checkpoint: the very same calls
    assert again_late.get("list_files", 0) == 2, again_late  # checkpoints/ and rewinds/ (never plans/)
    add_committed(late, 2001, 2009)  # the most plans a checkpoint can be behind by (INTERVAL - 1)
    worst_late, _s, k = plan_reads(late)
    assert k == 2000
    assert _reads(worst_late) <= _reads(first_early) + 2, (first_early, worst_late)
    assert worst_late.get("list_files", 0) == 2


if __name__ == "__main__":
    # PYTHONPATH=plugins:tests .venv/bin/python tests/unit/core/test_checkpoint.py 10 2000 100000 [--keep-landing]
    # plan() seconds and storage calls on synthetic ledgers of N committed batches (one landing file
    # each; consumed landing files removed unless --keep-landing), sizes interleaved, 15 runs each:
    # right after a checkpoint, and with INTERVAL - 1 plans after it (the most there can be).
    import statistics
    import sys
    import time

    sizes = [int(a) for a in sys.argv[1:] if not a.startswith("--")] or [10, 2000]
    keep = "--keep-landing" in sys.argv
    with tempfile.TemporaryDirectory(prefix="eo-ckpt-measure-") as d:
        ps, first = {}, {}
        for n in sizes:
            t0 = time.perf_counter()
            ps[n] = synthetic_ledger(Path(d) / str(n), n, prune_landing=not keep)
            first[n] = plan_reads(ps[n])
            print(f"N={n}: ledger built in {time.perf_counter() - t0:.1f}s; first plan (no checkpoint yet): "
                  f"{first[n][1]:.3f}s, {first[n][0]}", flush=True)

        def rounds(label: str) -> dict:
            runs: dict[int, list] = {n: [] for n in sizes}
            for _ in range(15):
                for n in sizes:
                    runs[n].append(plan_reads(ps[n]))
            out = {n: statistics.median(r[1] for r in runs[n]) for n in sizes}
            for n in sizes:
                print(f"N={n} {label}: median {out[n]:.4f}s over 15, calls {runs[n][-1][0]}, checkpoint of batch "
                      f"{runs[n][-1][2]}, ratio to N={sizes[0]}: {out[n] / out[sizes[0]]:.2f}", flush=True)
            return out

        rounds("right after a checkpoint")
        for n in sizes:
            add_committed(ps[n], n + 1, n + ckpt.INTERVAL - 1, prune_landing=not keep)
        rounds(f"{ckpt.INTERVAL - 1} plans after the checkpoint")
