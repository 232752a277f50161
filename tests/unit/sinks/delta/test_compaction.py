"""eobatch.sinks.delta.compaction on real delta-rs tables (the pyarrow stager, no Spark): interval-mode tables
compacted one slice at a time, re-runs and late files after it still exactly once; a compaction
racing a batch commit in either order; a pass that died between its record and its commit; a
long history (`make history-check BATCHES=<n>`) with late files, re-runs and passes."""

from __future__ import annotations

import collections
import datetime as dt
import os
from pathlib import Path

from eobatch.protocol import Protocol
from eobatch.protocol.maintenance import last_report, maintain, summary_line
from support.checks import delta_log_commits, live_files, txn_version
from support.protocol_runs import T0, H, land, published, run
from support.pyarrow_stager import stage

HISTORY = int(os.environ.get("EOBATCH_HISTORY_BATCHES", "40"))
EVERY = max(HISTORY // 4, 10)


def hours_published(by_prefix, proto, n: int = 3) -> list[str]:
    """Hours 0..n-1, three records each, run once (two staged files per hour: two Spark partitions)."""
    from support.protocol_runs import land, run

    ids = []
    for i in range(n):
        land(by_prefix, f"dt=2026-01-01/hour={i:02d}/a.jsonl", [f"h{i}-a", f"h{i}-b", f"h{i}-c"])
        run(proto, i)
        ids += [f"h{i}-a", f"h{i}-b", f"h{i}-c"]
    return ids


def test_interval_mode_is_compacted_slice_by_slice_and_a_rerun_still_replaces_exactly(by_prefix):
    from support.protocol_runs import land, published, run

    proto = Protocol(by_prefix)
    assert maintain(proto)["tables"]["sink"] == {"table": by_prefix.sink_table, "exists": False}  # no table yet
    ids = hours_published(by_prefix, proto)
    sink = Path(by_prefix.sink_table)
    assert len(live_files(sink)) == 6
    report = maintain(proto, vacuum_retention_hours=0)
    e = report["tables"]["sink"]
    assert e["compacted"] == {"slices": 3, "files_removed": 6, "files_added": 3} and e["files_after"] == 3
    assert all(p.startswith("eo_compacted/") for p in live_files(sink))
    assert published(proto) == collections.Counter(ids) and txn_version(sink, "orders") == 3
    swaps = [c for c in delta_log_commits(sink) if c["commitInfo"].get("eo.compacted")]
    assert len(swaps) == 3 and all([(t["appId"], t["version"]) for t in c["restated_txns"]] == [("orders", 3)]
                                   and not any(a["dataChange"] for a in c["adds"] + c["removes"]) for c in swaps)
    # a late file: hour 1 is published again, replacing its compacted file, nothing twice
    land(by_prefix, "dt=2026-01-01/hour=01/late.jsonl", ["h1-late"])
    run(proto, 1, run_id="h1-again")
    ids.append("h1-late")
    assert published(proto) == collections.Counter(ids)
    # compacted again (the new slice of hour 1), then hour 1 and hour 0 run again: still exact
    assert maintain(proto, vacuum_retention_hours=0)["tables"]["sink"]["compacted"]["slices"] == 1
    run(proto, 1, run_id="h1-third")
    run(proto, 0, run_id="h0-again")
    assert published(proto) == collections.Counter(ids)
    assert summary_line(last_report(proto)).startswith("last maintenance")


def test_a_compaction_racing_an_interval_commit_leaves_the_slice_exact_either_way(by_prefix, monkeypatch):
    from eobatch.sinks import CommitConflict
    from eobatch.sinks.delta import DeltaParticipant, compaction
    from support.protocol_runs import iv, land, published, run

    proto = Protocol(by_prefix)
    ids = hours_published(by_prefix, proto, n=2)
    # 1. the compaction lands between the re-run commit's snapshot and its Delta commit: the
    # commit fails (both restate the pipeline's txn), its retry removes the compacted files
    land(by_prefix, "dt=2026-01-01/hour=00/late.jsonl", ["h0-late"])
    ids.append("h0-late")
    proto.recover(run_id="race")
    plan, _ = proto.plan(interval=iv(0), run_id="race")
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    begin = DeltaParticipant._begin

    def begin_then_compact(self, *a, **kw):
        dt = begin(self, *a, **kw)
        if self.name == "sink":
            monkeypatch.setattr(DeltaParticipant, "_begin", begin)
            assert maintain(Protocol(by_prefix))["tables"]["sink"]["compacted"]["slices"] == 2
        return dt
    monkeypatch.setattr(DeltaParticipant, "_begin", begin_then_compact)
    try:
        proto.commit(plan.batch_id)
        raise AssertionError("the commit built before the compaction landed")
    except CommitConflict:
        pass
    proto.commit(plan.batch_id)  # the task's retry
    assert published(proto) == collections.Counter(ids)
    # 2. a compaction built before a re-run commit landed loses, and undoes what it wrote;
    # 3. one that died between its record and its commit changes nothing, and is swept later
    def written() -> set:
        return set(Path(by_prefix.sink_table, "eo_compacted").rglob("*.parquet"))
    stale = proto.participants["sink"]._table()
    run(proto, 1, run_id="h1-again")
    before = written()
    assert compaction.compact_slices(proto, "sink", stale, 1 << 20)["slices"] == 0
    assert written() == before
    stale = proto.participants["sink"]._table()
    land(by_prefix, "dt=2026-01-01/hour=02/a.jsonl", ["h2-a", "h2-b", "h2-c"])
    run(proto, 2)
    ids += ["h2-a", "h2-b", "h2-c"]
    def records() -> set:
        return set(Path(proto.layout.ledger, "compactions").rglob("*.json"))
    kept, files = records(), written()
    monkeypatch.setattr(compaction, "_forget", lambda *a: None)  # as if the pass died before its commit
    compaction.compact_slices(proto, "sink", stale, 1 << 20)
    monkeypatch.undo()
    assert len(records() - kept) == 1 and len(written() - files) == 1  # its record and its file, dead
    run(proto, 0, run_id="h0-third")
    assert published(proto) == collections.Counter(ids)
    unrecorded = Path(by_prefix.sink_table, "eo_compacted/b0000000001/iv=20260101T000000Z/20260101T000000Z-0a/p.parquet")
    unrecorded.parent.mkdir(parents=True)
    unrecorded.write_bytes(b"a pass that died before its record")
    assert compaction.sweep_dead(proto, "sink", proto.participants["sink"]._table(), older_than_s=0) == 2
    assert records() == kept and written() == files  # what landed stays (history: VACUUM's business)
    assert not unrecorded.exists()
    assert published(proto) == collections.Counter(ids)


def test_a_long_interval_history_with_late_files_and_re_runs_compacted_slice_by_slice(by_prefix):
    proto = Protocol(by_prefix)
    sink = Path(by_prefix.sink_table)
    want: collections.Counter = collections.Counter()

    def folder(i: int) -> str:
        t = dt.datetime.fromtimestamp(T0 + i * H, dt.timezone.utc)
        return f"dt={t:%Y-%m-%d}/hour={t:%H}"

    for i in range(HISTORY):
        ids = [f"h{i}-{k}" for k in range(3)]
        land(by_prefix, f"{folder(i)}/a.jsonl", ids)
        want.update(ids)
        if i % 7 == 6:  # a late file in an interval three hours back: republished by this run
            late = [f"h{i - 3}-late{i}"]
            land(by_prefix, f"{folder(i - 3)}/late{i}.jsonl", late)
            want.update(late)
        run(proto, i)
        if i % 11 == 10:  # an interval five hours back run again (a backfill): nothing changes
            run(proto, i - 5, run_id=f"again-{i}")
        if (i + 1) % EVERY == 0:
            report = maintain(proto, vacuum_retention_hours=0)
            assert report["tables"]["sink"]["compacted"]["slices"] > 0
            assert published(proto) == want, f"after the pass at hour {i}"
    assert published(proto) == want
    # every interval of the history run once more after the last pass: still exactly once
    for i in range(0, HISTORY, max(HISTORY // 10, 1)):
        run(proto, i, run_id=f"final-{i}")
    assert published(proto) == want
    assert txn_version(sink, "orders") == proto.ledger.latest_batch_id()


def test_another_tools_optimize_inside_a_re_run_commits_window_is_reported_loudly(by_prefix, monkeypatch, caplog):
    """The one race the product cannot decide: another tool's OPTIMIZE (dataChange=false removes,
    no txn) that lands between a re-run commit's snapshot and its Delta commit. delta-rs lets the
    commit remove the already-removed files, so the interval's old rows live on in OPTIMIZE's
    file. The commit says so at ERROR level (docs/site/operations.md, Maintenance: never compact interval tables
    with another tool); this test pins the behaviour so that a delta-rs that refuses the commit
    shows up here."""
    import logging

    from deltalake import DeltaTable

    from eobatch.sinks.delta import DeltaParticipant
    from support.protocol_runs import iv

    proto = Protocol(by_prefix)
    ids = hours_published(by_prefix, proto, n=2)
    land(by_prefix, "dt=2026-01-01/hour=00/late.jsonl", ["h0-late"])
    proto.recover(run_id="race")
    plan, _ = proto.plan(interval=iv(0), run_id="race")
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    begin = DeltaParticipant._begin

    def begin_then_optimize(self, *a, **kw):
        dt_ = begin(self, *a, **kw)
        if self.name == "sink":
            monkeypatch.setattr(DeltaParticipant, "_begin", begin)
            DeltaTable(by_prefix.sink_table).optimize.compact()
        return dt_
    monkeypatch.setattr(DeltaParticipant, "_begin", begin_then_optimize)
    with caplog.at_level(logging.ERROR, logger="eobatch.sinks.delta.participant"):
        proto.commit(plan.batch_id)
    assert any("may now be published twice" in r.getMessage() for r in caplog.records), caplog.text
    assert published(proto) - collections.Counter(ids + ["h0-late"]) == collections.Counter(
        ["h0-a", "h0-b", "h0-c"])  # what the message warns of: hour 0's old rows, twice


def test_a_slice_compaction_keeps_the_statistics_promise_for_a_decimal_beyond_2_53_and_nan(make_cfg):
    """Issue 27 (4): the slice compaction wrote its file with pyarrow's default footer statistics,
    whose float min/max ignore NaN, and delta-rs skipped the row group for `x > 5`. It writes by
    the stage job's rules now: the same rows are found before and after."""
    from support.stats_promise import BIG, SCHEMA, check_reads, land_rows

    nan = float("nan")
    cfg = make_cfg(schema=SCHEMA, mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "max_records_per_batch": 100,
        "interval_prefix": "dt={ds}/hour={hh}", "settle_seconds": 0})
    proto = Protocol(cfg)
    sink = Path(cfg.sink_table)
    hours = [[("o0", BIG, 1.0), ("o1", 1, nan)], [("o2", 2, 2.0), ("o3", BIG, nan)]]
    for h, rows in enumerate(hours):
        land_rows(cfg, f"dt=2026-01-01/hour={h:02d}/a.jsonl", [{"order_id": k, "n": n, "x": x} for k, n, x in rows])
        run(proto, h)
    want = {f"n = {BIG}": ["o0", "o3"], "x > 5": ["o1", "o3"]}
    assert check_reads(sink, "before maintenance") == want
    assert maintain(proto, vacuum_retention_hours=0)["tables"]["sink"]["compacted"]["slices"] == 2
    assert all(p.startswith("eo_compacted/") for p in live_files(sink))
    assert check_reads(sink, "after maintenance") == want
