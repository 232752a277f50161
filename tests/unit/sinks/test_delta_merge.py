"""Merge sinks (``sink.mode: merge``) through the real protocol: real local storage, real delta-rs
MERGE commits; the stage step is the pyarrow stager (which stages the latest record of each key
as the Spark job does: ``tests/integration/test_merge.py`` runs the job itself).

Every test compares the sink table with the same model: of all the records of a key ever read, the
one with the highest sequence, absent when that one deletes its key."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from eobatch.core import faults
from eobatch.protocol import Protocol, ProtocolError
from eobatch.sinks.delta_merge.job import DELETE_COL
from support.protocol_runs import iv, run_next
from support.pyarrow_stager import stage

SCHEMA = "order_id STRING NOT NULL, seq BIGINT NOT NULL, status STRING, op STRING"
MERGE = {"keys": ["order_id"], "sequence_by": "seq", "delete_when": "op = 'd'"}


@pytest.fixture
def merge_proto(make_cfg, tmp_path):
    def _make(merge=None, partition_by=()):
        cfg = make_cfg(schema=SCHEMA, sink={"table": str(tmp_path / "lake" / "orders"), "mode": "merge",
                                            "merge": dict(merge or MERGE), "partition_by": list(partition_by)})
        return Protocol(cfg)
    return _make


def land(proto: Protocol, name: str, records: list[tuple]) -> None:
    """Records (order_id, seq, status) as a landing file; status "DELETE" is a delete (op = 'd')."""
    lines = [json.dumps({"order_id": k, "seq": s, "status": None if st == "DELETE" else st,
                         "op": "d" if st == "DELETE" else "u"}) for k, s, st in records]
    (Path(str(proto.cfg.source.path)) / name).write_text("".join(x + "\n" for x in lines))


def model(batches: list[list[tuple]]) -> dict:
    """order_id -> (seq, status) the table must hold after ``batches``: per key the record with the
    highest sequence over every batch (the tests use one sequence per record of a key)."""
    latest: dict = {}
    for records in batches:
        for k, s, st in records:
            if k not in latest or s > latest[k][0]:
                latest[k] = (s, st)
    return {k: v for k, v in latest.items() if v[1] != "DELETE"}


def table(proto: Protocol) -> dict:
    rows = DeltaTable(proto.cfg.sink_table).to_pyarrow_table().to_pylist()
    keys = [r["order_id"] for r in rows]
    assert len(keys) == len(set(keys)), f"a key is published twice: {sorted(keys)}"
    return {r["order_id"]: (r["seq"], r["status"]) for r in rows}


def run_batches(proto: Protocol, batches: list[list[tuple]]) -> None:
    for i, records in enumerate(batches):
        land(proto, f"b{i:03d}.jsonl", records)
        assert run_next(proto) is not None
        assert table(proto) == model(batches[:i + 1]), f"after batch {i + 1}"


def commit_dies_at(proto: Protocol, batch_id: int, point: str, monkeypatch) -> None:
    """A commit of ``batch_id`` that dies at crash point ``point`` (nothing after it runs)."""
    def crash(name):
        if name == point:
            raise SystemExit(f"crash at {point}")
    monkeypatch.setattr(faults, "crash_point", crash)
    with pytest.raises(SystemExit):
        proto.commit(batch_id)
    monkeypatch.undo()


def test_the_table_holds_the_latest_record_of_each_key_across_batches_out_of_order_and_deleted(merge_proto):
    proto = merge_proto()
    run_batches(proto, [
        [("o1", 1, "new"), ("o2", 1, "new"), ("o1", 3, "paid"), ("o1", 2, "late in the batch")],
        [("o1", 2, "older than the table's"), ("o2", 5, "shipped"), ("o3", 1, "new")],
        [("o2", 4, "older"), ("o3", 2, "DELETE")],
        # o3 was deleted at 2: an older record of it arriving now must not bring it back, nor must a
        # delete older than o1's row remove it
        [("o3", 1, "new, again"), ("o1", 1, "DELETE")],
        [("o3", 7, "re-created after its delete")],
    ])
    assert table(proto) == {"o1": (3, "paid"), "o2": (5, "shipped"), "o3": (7, "re-created after its delete")}
    dt = DeltaTable(proto.cfg.sink_table)
    assert dt.transaction_version("orders") == 5
    assert DELETE_COL not in dt.schema().to_arrow().names
    tomb = DeltaTable(proto.layout.table("tombstones"))
    assert tomb.transaction_version("orders") == 5
    # o3's tombstone went with its newer record; the stale delete of o1 is kept (it still hides
    # any record of o1 older than it)
    assert {r["order_id"]: r["seq"] for r in tomb.to_pyarrow_table().to_pylist()} == {"o1": 1}


def test_with_the_change_data_feed_the_sinks_merges_write_their_changes_and_its_rows_are_the_same(merge_proto):
    """sink.merge.change_data_feed: the sink table is created with delta.enableChangeDataFeed and
    each MERGE writes its changes (update pre- and post-images, deletes, inserts) as change data
    files, which a downstream ``kind: delta`` reads; the rows are those of a sink without it."""
    batches = [[("o1", 1, "new"), ("o2", 1, "new")], [("o1", 2, "paid"), ("o2", 2, "DELETE"), ("o3", 1, "new")]]
    proto = merge_proto({**MERGE, "change_data_feed": True})
    run_batches(proto, batches)
    assert table(proto) == model(batches)
    dt = DeltaTable(proto.cfg.sink_table)
    assert dt.metadata().configuration.get("delta.enableChangeDataFeed") == "true"
    changes = pa.table(dt.load_cdf(starting_version=dt.version()).read_all()).to_pylist()
    assert sorted((r["order_id"], r["_change_type"]) for r in changes) == [
        ("o1", "update_postimage"), ("o1", "update_preimage"), ("o2", "delete"), ("o3", "insert")]
    assert DeltaTable(proto.layout.table("tombstones")).metadata().configuration.get(
        "delta.enableChangeDataFeed") is None  # the sink's own tables are no downstream's source


def test_a_batch_whose_records_change_nothing_is_still_committed_once(merge_proto):
    proto = merge_proto()
    run_batches(proto, [[("o1", 5, "paid")], [("o1", 4, "older"), ("o2", 1, "DELETE")]])
    # batch 2 changed no row of the sink: its MERGE wrote nothing, the txn was still committed
    assert DeltaTable(proto.cfg.sink_table).transaction_version("orders") == 2
    land(proto, "b9.jsonl", [("o1", 6, "shipped")])
    assert run_next(proto) == 3
    assert table(proto) == {"o1": (6, "shipped")}


def test_a_retried_commit_changes_nothing_and_the_consumed_staged_rows_are_swept(merge_proto):
    proto = merge_proto()
    run_batches(proto, [[("o1", 1, "new"), ("o2", 1, "new")], [("o1", 2, "paid")]])
    versions = {p: DeltaTable(proto.layout.table(p)).version() for p in proto.names}
    again = proto.commit(2)
    assert again.batch_id == 2
    assert {p: DeltaTable(proto.layout.table(p)).version() for p in proto.names} == versions
    assert table(proto) == {"o1": (2, "paid"), "o2": (1, "new")}
    # the staged rows were the MERGE's input, not table files: gone once every table holds the batch
    staged = list((Path(proto.cfg.sink_table) / "eo_batches").rglob("*.parquet"))
    assert staged == []


def test_a_crash_between_the_sink_and_the_tombstones_is_finished_by_recover(merge_proto, monkeypatch):
    proto = merge_proto()
    run_batches(proto, [[("o1", 1, "new"), ("o2", 1, "new")]])
    land(proto, "b2.jsonl", [("o2", 3, "DELETE"), ("o1", 2, "paid")])
    plan, _ = proto.plan()
    attempt = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, attempt)

    commit_dies_at(proto, plan.batch_id, "commit.after_first_participant", monkeypatch)
    assert proto.committed_versions() == {"sink": 2, "quarantine": 1, "tombstones": 1}
    # the staged rows are still needed by the tombstones' commit: a sweep keeps them
    proto.sweep(recent=None)
    assert list((Path(proto.cfg.sink_table) / "eo_batches").rglob("*.parquet"))
    rec = proto.recover()
    assert any("PREPARED" in a for a in rec.actions), rec.actions
    assert proto.committed_versions() == {"sink": 2, "quarantine": 2, "tombstones": 2}
    assert table(proto) == {"o1": (2, "paid")}
    # an older o2 arriving later stays deleted: the tombstone of batch 2 is there
    land(proto, "b3.jsonl", [("o2", 2, "late")])
    run_next(proto)
    assert table(proto) == {"o1": (2, "paid")}


def test_verify_refuses_staged_rows_with_a_key_twice(merge_proto):
    from eobatch.protocol.verify import VerifyFailed
    from support import pyarrow_stager

    proto = merge_proto()
    land(proto, "b1.jsonl", [("o1", 1, "new"), ("o1", 2, "paid")])
    plan, _ = proto.plan()
    keep_all = pyarrow_stager.latest_per_key
    try:  # a stage job that forgot to keep one record per key
        pyarrow_stager.latest_per_key = lambda merge, good: [(sl, {**r, DELETE_COL: False}) for sl, r in good]
        attempt = stage(proto, plan.batch_id, partitions=1)
    finally:
        pyarrow_stager.latest_per_key = keep_all
    with pytest.raises(VerifyFailed, match="more row"):
        proto.verify(plan.batch_id, attempt)


def test_a_rewind_restores_the_sink_and_its_tombstones_and_reads_again(merge_proto):
    proto = merge_proto()
    batches = [[("o1", 1, "new"), ("o2", 1, "new")], [("o2", 2, "DELETE")], [("o1", 3, "paid")]]
    run_batches(proto, batches)
    proto.rewind(2)
    proto.recover()
    plan, _ = proto.plan()
    assert plan is not None and plan.batch_id == 4
    attempt = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    while run_next(proto) is not None:
        pass
    assert table(proto) == model(batches)


records = hst.lists(hst.tuples(hst.sampled_from(["o1", "o2", "o3", "o4"]), hst.integers(1, 12),
                               hst.sampled_from(["new", "paid", "DELETE"])), max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=hst.lists(records, min_size=1, max_size=4))
def test_any_records_in_any_batches_publish_the_latest_record_of_each_key(merge_proto, batches, tmp_path_factory):
    # one sequence per record of a key (a producer's version): duplicates of a key's version dropped
    seen: set = set()
    batches = [[r for r in b if (r[0], r[1]) not in seen and not seen.add((r[0], r[1]))] for b in batches]
    batches = [b for b in batches if b]
    proto = merge_proto()
    for d in (Path(proto.cfg.sink_table).parent, Path(str(proto.cfg.source.path))):  # a fresh pipeline per example
        import shutil
        shutil.rmtree(d, ignore_errors=True)
    Path(str(proto.cfg.source.path)).mkdir(parents=True)
    proto = Protocol(proto.cfg)
    run_batches(proto, batches)


# -- accumulate: running aggregates ----------------------------------------------------------
TOTALS_SCHEMA = "customer STRING NOT NULL, amount BIGINT, low BIGINT, ts TIMESTAMP"
TOTALS = {"keys": ["customer"], "accumulate": {"amount": "sum", "low": "min", "ts": "max"}}


def land_sales(proto: Protocol, name: str, sales: list[tuple]) -> None:
    """Sales (customer, amount, hour): amount also as ``low``; amount None: a record without it."""
    lines = [json.dumps({"customer": c, "amount": a, "low": a, "ts": f"2026-01-01T{h:02d}:00:00Z"}) for c, a, h in sales]
    (Path(str(proto.cfg.source.path)) / name).write_text("".join(x + "\n" for x in lines))


def totals_model(batches: list[list[tuple]]) -> dict:
    """customer -> (sum, min, latest hour) of every sale ever read (nulls ignored, as Spark's)."""
    out: dict = {}
    for sales in batches:
        for c, a, h in sales:
            s, lo, hh = out.get(c, (None, None, None))
            if a is not None:
                s, lo = (a if s is None else s + a), (a if lo is None else min(lo, a))
            out[c] = (s, lo, h if hh is None else max(hh, h))
    return out


def totals(proto: Protocol) -> dict:
    rows = DeltaTable(proto.cfg.sink_table).to_pyarrow_table().to_pylist()
    assert len({r["customer"] for r in rows}) == len(rows), f"a key is published twice: {rows}"
    return {r["customer"]: (r["amount"], r["low"], r["ts"].hour) for r in rows}


@pytest.fixture
def totals_proto(make_cfg, tmp_path):
    def _make():
        cfg = make_cfg(schema=TOTALS_SCHEMA, sink={"table": str(tmp_path / "lake" / "orders"), "mode": "merge",
                                                   "merge": TOTALS})
        return Protocol(cfg)
    return _make


def test_running_totals_fold_every_batch_once_even_when_a_commit_is_retried(totals_proto, monkeypatch):
    proto = totals_proto()
    assert proto.names == ("sink", "quarantine")  # no deletes: no tombstones
    batches = [[("ada", 5, 1), ("bob", 2, 1), ("ada", 3, 2)], [("ada", 1, 3), ("cy", None, 4)], [("bob", 10, 0)]]
    for i, sales in enumerate(batches):
        land_sales(proto, f"s{i}.jsonl", sales)
        plan, _ = proto.plan()
        attempt = stage(proto, plan.batch_id)
        proto.verify(plan.batch_id, attempt)
        if i == 1:  # the commit dies after the Delta commit, before the ledger: run again, recover, commit again
            commit_dies_at(proto, plan.batch_id, "commit.after_delta_commit", monkeypatch)
            proto.recover()
        proto.commit(plan.batch_id)
        proto.commit(plan.batch_id)  # a retried commit: a checked no-op
        assert totals(proto) == totals_model(batches[:i + 1]), f"after batch {i + 1}"
    assert totals(proto) == {"ada": (9, 1, 3), "bob": (12, 2, 1), "cy": (None, None, 4)}


sales = hst.lists(hst.tuples(hst.sampled_from(["ada", "bob", "cy"]), hst.one_of(hst.none(), hst.integers(-50, 50)),
                             hst.integers(0, 23)), min_size=1, max_size=8)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=hst.lists(sales, min_size=1, max_size=4))
def test_running_totals_equal_a_recomputation_from_the_whole_input(totals_proto, batches):
    import shutil

    proto = totals_proto()
    for d in (Path(proto.cfg.sink_table).parent, Path(str(proto.cfg.source.path))):  # a fresh pipeline per example
        shutil.rmtree(d, ignore_errors=True)
    Path(str(proto.cfg.source.path)).mkdir(parents=True)
    proto = Protocol(proto.cfg)
    for i, b in enumerate(batches):
        land_sales(proto, f"s{i}.jsonl", b)
        assert run_next(proto) is not None
    assert totals(proto) == totals_model(batches)


# -- interval mode: a re-run re-applies the interval's records ----------------------------------------
def test_an_interval_upsert_republished_with_a_late_file_or_run_again_applies_each_version_once(make_cfg, tmp_path):
    from support.protocol_runs import run as run_hour

    landing = Path(str(make_cfg().source.path))
    cfg = make_cfg(mode="interval", schedule="@hourly", schema=SCHEMA,
                   source={"kind": "files", "path": str(landing), "interval_prefix": "dt={ds}/hour={hh}",
                           "settle_seconds": 0},
                   sink={"table": str(tmp_path / "lake" / "orders"), "mode": "merge", "merge": MERGE})
    proto = Protocol(cfg)

    def land_hour(h: int, name: str, records: list[tuple]) -> None:
        (landing / f"dt=2026-01-01/hour={h:02d}").mkdir(parents=True, exist_ok=True)
        land(proto, f"dt=2026-01-01/hour={h:02d}/{name}", records)

    hour0 = [("o1", 1, "new"), ("o2", 1, "new")]
    land_hour(0, "a.jsonl", hour0)
    run_hour(proto, 0)
    hour1 = [("o1", 5, "paid"), ("o2", 4, "DELETE")]
    land_hour(1, "a.jsonl", hour1)
    run_hour(proto, 1)
    assert table(proto) == {"o1": (5, "paid")}
    # a late file of hour 0: the next run republishes hour 0 whole (its records again, and the late
    # one); re-applied versions change nothing, the late one is older than o1's row and than o2's delete
    late = [("o1", 2, "late"), ("o2", 2, "late"), ("o3", 1, "new in the late file")]
    land_hour(0, "late.jsonl", late)
    land_hour(2, "a.jsonl", [("o4", 1, "new")])
    run_hour(proto, 2)
    assert table(proto) == model([hour0, hour1, late, [("o4", 1, "new")]])
    # hour 1 run again (a backfill with reprocessing): nothing changes
    before = table(proto)
    run_hour(proto, 1, run_id="rerun-h1")
    assert table(proto) == before
    assert proto.committed_versions()["sink"] == proto.committed_versions()["tombstones"] == 4


# -- interval mode, running aggregates: the sink is the fold of every interval's partials ----------------
@pytest.fixture
def interval_totals(make_cfg, tmp_path):
    """(protocol, land(hour, name, sales), drop(hour, name)) of an hourly running-totals pipeline."""
    landing = Path(str(make_cfg().source.path))
    cfg = make_cfg(mode="interval", schedule="@hourly", schema=TOTALS_SCHEMA,
                   source={"kind": "files", "path": str(landing), "interval_prefix": "dt={ds}/hour={hh}",
                           "settle_seconds": 0},
                   sink={"table": str(tmp_path / "lake" / "orders"), "mode": "merge", "merge": TOTALS})
    proto = Protocol(cfg)
    assert proto.names == ("partials", "sink", "quarantine")

    def folder(h: int) -> Path:
        return landing / f"dt=2026-01-01/hour={h:02d}"

    def land_hour(h: int, name: str, sales: list[tuple]) -> None:
        folder(h).mkdir(parents=True, exist_ok=True)
        land_sales(proto, f"dt=2026-01-01/hour={h:02d}/{name}", sales)

    return proto, land_hour, lambda h, name: (folder(h) / name).unlink()


def test_interval_running_totals_re_run_an_interval_by_replacing_its_partials_never_folding_twice(
        interval_totals, monkeypatch):
    from support.protocol_runs import run as run_hour

    proto, land_hour, drop = interval_totals
    files = {(0, "a"): [("ada", 5, 0), ("bob", 2, 0)], (0, "b"): [("ada", 3, 0)],
             (1, "a"): [("ada", 1, 1), ("cy", None, 1)]}
    for (h, name), sales in files.items():
        land_hour(h, f"{name}.jsonl", sales)
    run_hour(proto, 0)
    run_hour(proto, 1)
    assert totals(proto) == totals_model(list(files.values()))
    # a late file of hour 0 and a new hour: the run of hour 2 republishes hour 0 whole
    files[(0, "late")] = [("dan", 7, 0), ("ada", -4, 0)]
    files[(2, "a")] = [("bob", 4, 2)]
    land_hour(0, "late.jsonl", files[(0, "late")])
    land_hour(2, "a.jsonl", files[(2, "a")])
    run_hour(proto, 2)
    assert totals(proto) == totals_model(list(files.values()))
    # a maintenance pass compacts the partials and the sink (their batches are rows, slices a
    # column) and the quarantine (slice by slice: its slices are files); the next re-runs stay exact
    from eobatch.protocol.maintenance import maintain

    report = maintain(proto, vacuum_retention_hours=0)
    assert [p for p, e in report["tables"].items() if "compacted" in e] == ["partials", "sink", "quarantine"]
    # hour 0 run again after two of its files were taken out of the landing zone (a backfill):
    # dan had sales in them only (deleted), bob keeps his hour-2 sale, ada loses 5, -4 and her min
    for name in ("a", "late"):
        drop(0, f"{name}.jsonl")
        del files[(0, name)]
    run_hour(proto, 0, run_id="rerun-h0")
    assert totals(proto) == totals_model(list(files.values())) == {
        "ada": (4, 1, 1), "bob": (4, 4, 2), "cy": (None, None, 1)}
    # hour 1 run again and its commit dies between the partials and the sink: recover finishes it
    before = totals(proto)
    proto.recover(run_id="rerun-h1")
    plan, _ = proto.plan(interval=iv(1), run_id="rerun-h1")
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    commit_dies_at(proto, plan.batch_id, "commit.after_first_participant", monkeypatch)
    held = proto.committed_versions()
    assert held["partials"] == plan.batch_id > held["sink"]
    proto.recover(run_id="rerun-h1")
    proto.commit(plan.batch_id)  # a retried commit: a checked no-op
    assert totals(proto) == before
    assert set(proto.committed_versions().values()) == {plan.batch_id}
    # the partials: one row per key and slice, the keys hour 0 no longer holds flagged
    rows = DeltaTable(proto.layout.table("partials")).to_pyarrow_table().to_pylist()
    live = sorted((r["_eo_slice"][-7:-5], r["customer"]) for r in rows if not r["_eo_gone"])
    assert live == [("00", "ada"), ("01", "ada"), ("01", "cy"), ("02", "bob")]
    assert sorted(r["customer"] for r in rows if r["_eo_gone"]) == ["bob", "dan"]


def partials_fold(proto: Protocol) -> dict:
    """What the sink must hold, computed here from the partials table: per key the fold of its
    rows not flagged gone (the keys with none left absent)."""
    out: dict = {}
    for r in DeltaTable(proto.layout.table("partials")).to_pyarrow_table().to_pylist():
        if r["_eo_gone"]:
            continue
        s, lo, ts = out.get(r["customer"], (None, None, None))
        a, b, t = r["amount"], r["low"], r["ts"]
        out[r["customer"]] = (s if a is None else a if s is None else s + a, lo if b is None else b if lo is None
                              else min(lo, b), ts if t is None else t if ts is None else max(ts, t))
    return {k: (s, lo, None if ts is None else ts.hour) for k, (s, lo, ts) in out.items()}


hours = hst.integers(0, 1)  # two hours: a re-run, a late file and a removal meet often
steps = hst.lists(hst.one_of(
    hst.tuples(hst.just("land"), hours, sales),
    hst.tuples(hst.just("drop"), hours, hst.integers(0, 3)),
    hst.tuples(hst.just("run"), hours, hst.none())), min_size=3, max_size=10)


@settings(max_examples=int(os.environ.get("EOBATCH_IV_TOTALS_EXAMPLES", "12")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps)
def test_interval_running_totals_after_any_landings_removals_and_re_runs_equal_a_recomputation(
        make_cfg, tmp_path_factory, script):
    """Any files landed in and taken out of three hours, hours run in any order and again: the
    sink is always the fold of the partials, and once every hour has run after its last change,
    the fold of every record of the landing zone."""
    from support.protocol_runs import run as run_hour

    tmp = tmp_path_factory.mktemp("iv")
    landing = tmp / "landing"
    landing.mkdir()
    cfg = make_cfg(mode="interval", schedule="@hourly", schema=TOTALS_SCHEMA,
                   source={"kind": "files", "path": str(landing), "interval_prefix": "dt={ds}/hour={hh}",
                           "settle_seconds": 0},
                   sink={"table": str(tmp / "lake" / "orders"), "mode": "merge", "merge": TOTALS},
                   quarantine={"table": str(tmp / "lake" / "orders_quarantine")})
    proto = Protocol(cfg)
    present: dict[tuple[int, int], list[tuple]] = {}
    runs = 0

    def run(h: int) -> None:
        nonlocal runs
        runs += 1
        run_hour(proto, h, run_id=f"r{runs}")
        if DeltaTable.is_deltatable(proto.cfg.sink_table):
            assert totals(proto) == partials_fold(proto), f"after run {runs} (hour {h})"

    for n, (op, h, arg) in enumerate(script):
        folder = landing / f"dt=2026-01-01/hour={h:02d}"
        if op == "land":
            folder.mkdir(parents=True, exist_ok=True)
            present[(h, n)] = [(c, a, h) for c, a, _ in arg]
            land_sales(proto, f"dt=2026-01-01/hour={h:02d}/f{n}.jsonl", present[(h, n)])
        elif op == "drop":
            mine = sorted(k for k in present if k[0] == h)
            if mine:
                k = mine[arg % len(mine)]
                (folder / f"f{k[1]}.jsonl").unlink()
                del present[k]
        else:
            run(h)
    for h in range(2):  # every hour once more: each publishes the files it holds now (one at least: a
        folder = landing / f"dt=2026-01-01/hour={h:02d}"  # run of an emptied interval plans nothing, docs/site/concepts.md)
        folder.mkdir(parents=True, exist_ok=True)
        present[(h, -1)] = [("zed", h, h)]
        land_sales(proto, f"dt=2026-01-01/hour={h:02d}/last.jsonl", present[(h, -1)])
        run(h)
    published = totals(proto) if DeltaTable.is_deltatable(proto.cfg.sink_table) else {}
    assert published == totals_model(list(present.values()))


def test_the_kind_of_sink_cannot_change_under_an_existing_table(make_cfg, merge_proto, tmp_path):
    append = make_cfg(schema=SCHEMA, sink={"table": str(tmp_path / "lake" / "orders")})
    land(Protocol(append), "a.jsonl", [("o1", 1, "new")])
    assert run_next(Protocol(append)) == 1
    proto = merge_proto()  # the same tables, now as an upsert
    land(proto, "b.jsonl", [("o1", 2, "paid")])
    for verb in (proto.recover, proto.plan):
        with pytest.raises(ProtocolError, match="cannot change under an existing table"):
            verb()
    assert table(Protocol(append)) == {"o1": (1, "new")}
    assert run_next(Protocol(append)) == 2  # put back: it goes on


def test_committers_racing_for_one_prepared_merge_batch_apply_it_once(merge_proto):
    """The commit task and a later run's recover commit the same PREPARED batch at once (each its
    own Protocol, as separate processes have): one MERGE per table carries it, the other committer
    sees the txn and checks the fingerprint; the table is as if committed once."""
    import threading

    import deltalake.exceptions  # noqa: F401 - imported before the threads (real committers are processes)
    import deltalake.transaction  # noqa: F401

    from support.checks import delta_log_commits

    proto = merge_proto()
    run_batches(proto, [[("o1", 1, "new"), ("o2", 1, "new")]])
    land(proto, "b2.jsonl", [("o1", 2, "paid"), ("o2", 3, "DELETE"), ("o3", 1, "new")])
    plan, _ = proto.plan()
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    start = threading.Barrier(3)
    outcomes: list = []

    def commit():
        p = Protocol(proto.cfg)
        start.wait()
        try:
            outcomes.append(p.commit(plan.batch_id).batch_id)
        except Exception as e:  # noqa: BLE001 - what the race is about
            outcomes.append(e)

    threads = [threading.Thread(target=commit) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # a loser may be told to retry (the task's retry then finds the batch committed); none applied it twice
    assert all(o == 2 or type(o).__name__ in ("CommitConflict", "LedgerMismatch") for o in outcomes), outcomes
    proto.recover()
    assert table(proto) == {"o1": (2, "paid"), "o3": (1, "new")}
    for t in ("sink", "tombstones"):
        commits = delta_log_commits(proto.layout.table(t))
        assert sum(1 for c in commits for x in c["txns"] if x["version"] == 2) == 1, (t, commits)


def test_a_merge_that_loses_to_a_compaction_is_built_again_on_the_new_snapshot(merge_proto, monkeypatch):
    """A compaction (or any writer) commits between the snapshot a MERGE read and its commit:
    delta-rs refuses the MERGE (it read files the compaction removed), and the commit builds it
    again on the new snapshot; no row twice, none lost, the batch once."""
    from eobatch.sinks.delta.compaction import compact_table
    from eobatch.sinks.delta_merge import participants as merge_sink

    proto = merge_proto()
    run_batches(proto, [[("o1", 1, "new")], [("o2", 1, "new")], [("o3", 1, "new")]])
    land(proto, "b4.jsonl", [("o1", 2, "paid"), ("o3", 2, "DELETE"), ("o4", 1, "new")])
    plan, _ = proto.plan()
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    begin, raced = merge_sink.MergeParticipant._begin, []

    def begin_then_compact(self, *a, **kw):
        dt = begin(self, *a, **kw)
        if not raced:  # the first snapshot goes stale: maintenance compacts the table now
            raced.append(compact_table(proto, "sink", DeltaTable(self.uri), 1 << 30)["files_removed"])
        return dt
    monkeypatch.setattr(merge_sink.MergeParticipant, "_begin", begin_then_compact)
    monkeypatch.setattr(merge_sink.time, "sleep", lambda s: None)
    proto.commit(plan.batch_id)
    assert raced and raced[0] > 1, raced
    assert table(proto) == {"o1": (2, "paid"), "o2": (1, "new"), "o4": (1, "new")}
    ops = [h["operation"] for h in DeltaTable(proto.cfg.sink_table).history() if h.get("eo.batchId") == "4"]
    assert ops == ["MERGE"]


def test_merges_and_their_maintenance_keep_the_statistics_promise_for_a_decimal_beyond_2_53_and_nan(make_cfg,
                                                                                                     tmp_path):
    """Issue 27 (4): the files a MERGE rewrites carried delta-rs's stats (the decimal max rounded
    through a double, float bounds that ignore NaN), so `n = 9007199254740993` and `x > 5` lost
    rows after a merge. Those files keep no float or decimal bounds now; maintenance rewrites them
    with exact ones. The same rows are found after every merge and after maintenance."""
    from eobatch.protocol.maintenance import maintain
    from support.stats_promise import BIG, check_reads, land_rows

    nan = float("nan")
    cfg = make_cfg(schema="order_id STRING NOT NULL, seq BIGINT NOT NULL, n DECIMAL(20,0), x DOUBLE, op STRING",
                   sink={"table": str(tmp_path / "lake" / "orders"), "mode": "merge", "merge": dict(MERGE)})
    proto = Protocol(cfg)
    sink = Path(cfg.sink_table)
    batches = [[("o1", 1, BIG, 1.0), ("o2", 1, 1, nan), ("o3", 1, 2, 2.0)],
               [("o1", 2, BIG, nan), ("o4", 1, BIG, 3.0)],   # rewrites o1's file
               [("o2", 2, 5, 4.0), ("o5", 1, 6, nan)]]
    want = [{f"n = {BIG}": ["o1"], "x > 5": ["o2"]},
            {f"n = {BIG}": ["o1", "o4"], "x > 5": ["o1", "o2"]},
            {f"n = {BIG}": ["o1", "o4"], "x > 5": ["o1", "o5"]}]
    for i, rows in enumerate(batches):
        land_rows(cfg, f"b{i}.jsonl", [{"order_id": k, "seq": s, "n": n, "x": x, "op": "u"} for k, s, n, x in rows])
        assert run_next(proto) == i + 1
        assert check_reads(sink, f"after merge {i + 1}") == want[i]
    # the raw log: the MERGE's files carry no decimal or float bound at all
    assert all('"n"' not in a["stats"] and '"x"' not in a["stats"] for a in json_adds(sink))
    maintain(proto, vacuum_retention_hours=0)
    assert check_reads(sink, "after maintenance") == want[-1]


def json_adds(table: Path) -> list[dict]:
    """The AddFile actions of the table's live files, from the raw log."""
    from support.checks import delta_log_commits, live_files

    live = live_files(table)
    return [a for c in delta_log_commits(table) for a in c["adds"] if a["path"] in live]
