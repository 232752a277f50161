"""eobatch.protocol.maintenance on real delta-rs tables (the pyarrow stager, no Spark): many small batches
compacted and vacuumed with the rows unchanged and later batches still exactly once; a PREPARED
batch's staged files survive a VACUUM of retention 0 and its commit still lands; interval mode
is compacted slice by slice (test_compaction.py); a long history; the report reaches the ledger,
`make ledger` and the maintenance DAG; the pool shared with the commit task."""

from __future__ import annotations

import collections
import os
from pathlib import Path

from eobatch.protocol import Protocol
from eobatch.protocol.maintenance import last_report, maintain, summary_line
from support.checks import delta_log_commits, live_files, read_rows, txn_version
from support.protocol_runs import land_and_run, land_ids, published_ids, run_next
from support.pyarrow_stager import stage

# a long history (`make history-check BATCHES=<n>`; a year of hours is 8760): many small batches
# through the real protocol, a maintenance pass every EVERY batches
HISTORY = int(os.environ.get("EOBATCH_HISTORY_BATCHES", "40"))
EVERY = max(HISTORY // 4, 10)


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
    staged = [Path(proto.cfg.sink_table, f.path) for f in prepared.adds["sink"]]
    assert staged and all(p.exists() for p in staged)

    maintain(proto, vacuum_retention_hours=0)
    assert all(p.exists() for p in staged)  # never in the log: never vacuumed
    proto.commit(plan.batch_id)
    assert published_ids(proto) == sorted([f"o{i}" for i in range(6)] + [f"o{i}" for i in range(50, 54)])
    proto.commit(plan.batch_id)  # a retried commit changes nothing
    assert txn_version(Path(proto.cfg.sink_table), "orders") == 4
    assert len(read_rows(Path(proto.cfg.sink_table))) == 10


def test_each_pipeline_gets_a_maintenance_dag(make_cfg):
    from eobatch.airflow.dag_factory import build_all

    cfg = make_cfg(maintenance={"schedule": "@weekly", "vacuum_retention_hours": 72})
    dags, errors = build_all(str(Path(cfg.file).parent))
    assert errors == {} and sorted(dags) == ["orders", "orders_maintenance"]
    dag = dags["orders_maintenance"]
    assert [t.task_id for t in dag.tasks] == ["maintain"] and "72 h" in dag.doc_md
    assert dag.get_task("maintain").pool == "default_pool" and dags["orders"].get_task("commit").pool == "default_pool"


def test_a_pool_named_by_the_pipeline_is_taken_by_its_commit_and_maintenance_tasks(make_cfg, capsys, monkeypatch):
    import pytest

    from eobatch import cli
    from eobatch.airflow.dag_factory import build_all
    from eobatch.pipelines.loader import ConfigError

    cfg = make_cfg(maintenance={"pool": "eobatch_orders"})
    dags, errors = build_all(str(Path(cfg.file).parent))
    assert errors == {}
    assert dags["orders"].get_task("commit").pool == dags["orders_maintenance"].get_task("maintain").pool == \
        "eobatch_orders"
    assert {t.task_id for t in dags["orders"].tasks if t.pool == "eobatch_orders"} == {"commit"}
    monkeypatch.setenv("PIPELINES_DIR", str(Path(cfg.file).parent))
    assert cli.main(["pools"]) == 0
    assert capsys.readouterr().out == "eobatch_orders orders\n"  # what `eobatch pools --create` creates, one slot each
    for bad in ("", "a pool", 7, "x" * 257):
        with pytest.raises(ConfigError, match="maintenance.pool"):
            make_cfg(maintenance={"pool": bad})


def test_a_long_continuous_history_compacted_and_vacuumed_publishes_every_record_once(make_cfg):
    proto = Protocol(make_cfg())
    sink = Path(proto.cfg.sink_table)
    want = []
    for b in range(HISTORY):
        land_and_run(proto, range(b * 3, b * 3 + 3), f"f{b:05d}.jsonl")
        want += [f"o{i}" for i in range(b * 3, b * 3 + 3)]
        if (b + 1) % EVERY == 0:
            files = len(live_files(sink))
            report = maintain(proto, vacuum_retention_hours=0)
            assert report["tables"]["sink"]["files_after"] < files
            assert published_ids(proto) == sorted(want), f"after the pass at batch {b + 1}"
    assert txn_version(sink, "orders") == HISTORY
    land_and_run(proto, range(10**6, 10**6 + 2), "later.jsonl")
    assert published_ids(proto) == sorted(want + ["o1000000", "o1000001"])


def test_maintenance_keeps_the_statistics_promise_for_a_decimal_beyond_2_53_and_nan(make_cfg):
    """Issue 27 (4): delta-rs OPTIMIZE wrote a compacted file whose Delta stats rounded the decimal
    max through a double (9007199254740993 -> ...992) and whose stats and footer min/max ignored
    NaN, so `n = 9007199254740993` and `x > 5` lost their rows after `make maintain`. The
    compaction writes its files by the stage job's rules: the same rows are found before and after."""
    from support.stats_promise import BIG, SCHEMA, check_reads, land_rows

    nan = float("nan")
    proto = Protocol(make_cfg(schema=SCHEMA))
    sink = Path(proto.cfg.sink_table)
    for i, (n, x) in enumerate([(BIG, 1.0), (1, nan), (2, 2.0), (BIG, 3.0), (3, nan), (4, None)]):
        land_rows(proto.cfg, f"f{i}.jsonl", [{"order_id": f"o{i}", "n": n, "x": x}])
        assert run_next(proto) == i + 1
    want = {f"n = {BIG}": ["o0", "o3"], "x > 5": ["o1", "o4"]}
    assert check_reads(sink, "before maintenance") == want
    report = maintain(proto, vacuum_retention_hours=0)
    assert report["tables"]["sink"]["files_after"] == 1
    assert check_reads(sink, "after maintenance") == want
    (add,) = [a for c in delta_log_commits(sink) for a in c["adds"] if a["path"] in live_files(sink)]
    assert f'"n":{BIG}' in add["stats"] and '"x"' not in add["stats"]  # exact max in the raw log; no float bounds


def test_two_compactions_built_on_one_snapshot_land_once(make_cfg):
    """Two maintenance passes at once (a scheduled DAG run and `make maintain`): delta-rs lets a
    commit remove files a concurrent commit removed with dataChange=false, so both would land and
    publish the rows twice; the compaction's txn(<pipeline>.compaction) makes the second fail."""
    from deltalake import DeltaTable

    from eobatch.sinks.delta.compaction import compact_table

    proto = Protocol(make_cfg())
    for b in range(3):
        land_and_run(proto, range(b * 2, b * 2 + 2), f"f{b}.jsonl")
    sink = Path(proto.cfg.sink_table)
    first, second = DeltaTable(str(sink)), DeltaTable(str(sink))
    assert compact_table(proto, "sink", first, 1 << 30)["files_removed"] == 6
    lost = compact_table(proto, "sink", second, 1 << 30)
    assert lost["files_removed"] == 0 and "lost to a concurrent commit" in lost["notes"][0]
    assert published_ids(proto) == sorted(f"o{i}" for i in range(6))
    assert len(live_files(sink)) == 1 and all((sink / p).exists() for p in live_files(sink))
