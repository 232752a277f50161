"""eobatch.maintenance on real delta-rs tables (the pyarrow stager, no Spark): many small batches
compacted and vacuumed with the rows unchanged and later batches still exactly once; a PREPARED
batch's staged files survive a VACUUM of retention 0 and its commit still lands; interval mode
is compacted slice by slice and its re-runs stay exact, also when a compaction races a commit;
the report reaches the ledger, `make ledger` and the maintenance DAG."""

from __future__ import annotations

import collections
from pathlib import Path

from eobatch.maintenance import last_report, maintain, summary_line
from eobatch.protocol import Protocol
from support.checks import delta_log_commits, live_files, read_rows, txn_version
from support.protocol_runs import land_and_run, land_ids, published_ids
from support.pyarrow_stager import stage


def test_many_small_batches_compacted_and_vacuumed_rows_unchanged_later_batches_exactly_once(make_cfg):
    proto = Protocol(make_cfg())
    for b in range(12):
        land_and_run(proto, range(b * 5, b * 5 + 5), f"f{b:02d}.jsonl")
    sink = Path(proto.cfg.sink_table)
    before = collections.Counter(r["order_id"] for r in read_rows(sink))
    files_before = len(live_files(sink))
    assert files_before >= 12

    report = maintain(proto, vacuum_retention_hours=0)
    e = report["tables"]["sink"]
    assert (e["files_before"], e["files_after"]) == (files_before, 1)
    assert e["compacted"]["files_removed"] == files_before and e["files_vacuumed"] == files_before
    assert collections.Counter(r["order_id"] for r in read_rows(sink)) == before  # the row multiset
    assert txn_version(sink, "orders") == 12  # the pipeline's txn is untouched
    assert all(not Path(sink, p).exists() for p in {a["path"] for c in delta_log_commits(sink) for a in c["adds"]}
               - live_files(sink))  # removed files are gone from storage, live ones are there
    assert all(Path(sink, p).exists() for p in live_files(sink))
    assert (sink / "_delta_log" / f"{e['version_after']:020d}.checkpoint.parquet").exists()

    land_and_run(proto, range(100, 103), "later.jsonl")  # a later batch: exactly once on the compacted table
    assert published_ids(proto) == sorted([f"o{i}" for i in range(60)] + ["o100", "o101", "o102"])
    assert txn_version(sink, "orders") == 13
    assert last_report(proto) == report and f"sink {files_before} -> 1 files" in summary_line(report)


def test_a_prepared_batch_survives_vacuum_and_a_compaction_before_its_commit(make_cfg):
    """Maintenance between verify and commit (the batch's retry window): lite VACUUM never
    deletes files no commit added, so the PREPARED batch still commits, once."""
    proto = Protocol(make_cfg())
    for b in range(3):
        land_and_run(proto, range(b * 2, b * 2 + 2), f"f{b}.jsonl")
    land_ids(proto.cfg, "pending.jsonl", range(50, 54))
    plan, _ = proto.plan()
    assert plan is not None
    attempt = stage(proto, plan.batch_id)
    prepared = proto.verify(plan.batch_id, attempt)
    staged = [Path(proto.cfg.sink_table, a["path"]) for a in prepared.adds["sink"]]
    assert staged and all(p.exists() for p in staged)

    maintain(proto, vacuum_retention_hours=0)
    assert all(p.exists() for p in staged)  # never in the log: never vacuumed
    proto.commit(plan.batch_id)
    assert published_ids(proto) == sorted([f"o{i}" for i in range(6)] + [f"o{i}" for i in range(50, 54)])
    proto.commit(plan.batch_id)  # a retried commit changes nothing
    assert txn_version(Path(proto.cfg.sink_table), "orders") == 4
    assert len(read_rows(Path(proto.cfg.sink_table))) == 10


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
    from eobatch import compaction
    from eobatch.delta_sink import CommitConflict, DeltaParticipant
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
    assert compaction.sweep_dead(proto, "sink", proto.participants["sink"]._table(), older_than_s=0) == 1
    assert records() == kept and written() == files  # what landed stays (history: VACUUM's business)
    assert published(proto) == collections.Counter(ids)


def test_each_pipeline_gets_a_maintenance_dag(make_cfg):
    from eobatch.dag_factory import build_all

    cfg = make_cfg(maintenance={"schedule": "@weekly", "vacuum_retention_hours": 72})
    dags, errors = build_all(str(Path(cfg.file).parent))
    assert errors == {} and sorted(dags) == ["orders", "orders_maintenance"]
    dag = dags["orders_maintenance"]
    assert [t.task_id for t in dag.tasks] == ["maintain"] and "72 h" in dag.doc_md
    assert dag.get_task("maintain").pool == "default_pool" and dags["orders"].get_task("commit").pool == "default_pool"


def test_a_pool_named_by_the_pipeline_is_taken_by_its_commit_and_maintenance_tasks(make_cfg, capsys, monkeypatch):
    import pytest

    from eobatch import cli
    from eobatch.config import ConfigError
    from eobatch.dag_factory import build_all

    cfg = make_cfg(maintenance={"pool": "eobatch_orders"})
    dags, errors = build_all(str(Path(cfg.file).parent))
    assert errors == {}
    assert dags["orders"].get_task("commit").pool == dags["orders_maintenance"].get_task("maintain").pool == \
        "eobatch_orders"
    assert {t.task_id for t in dags["orders"].tasks if t.pool == "eobatch_orders"} == {"commit"}
    monkeypatch.setenv("PIPELINES_DIR", str(Path(cfg.file).parent))
    assert cli.main(["pools"]) == 0
    assert capsys.readouterr().out == "eobatch_orders orders\n"  # what `make pools` creates, one slot each
    for bad in ("", "a pool", 7, "x" * 257):
        with pytest.raises(ConfigError, match="maintenance.pool"):
            make_cfg(maintenance={"pool": bad})
