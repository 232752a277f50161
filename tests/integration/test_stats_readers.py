"""Delta AddFile stats (table_files.footer_stats) as readers use them: no file may be skipped that holds
a matching row. No Spark: pyarrow writes the files, DeltaParticipant commits them the way the
product does (metadata-only delta-rs transaction), then delta-rs and DuckDB query with filters.

What the readers do here (found by experiment, asserted below so a change shows up):
* delta-rs (``QueryBuilder``, DataFusion) skips files by the Delta stats, and orders floats by
  IEEE total order: NaN above +inf (``x > 20`` and ``x = 'NaN'`` match it), a sign-bit NaN
  (``-float('nan')``) below -inf (``x < 0`` matches it), -0.0 below +0.0.
* ``DeltaTable.to_pyarrow_dataset()`` turns each file's stats into a fragment guarantee
  (``d >= min and d <= max``), so a pyarrow filter and DuckDB over that dataset skip by them too;
  DuckDB pushes decimal filters into the Arrow scan but keeps float filters to itself (NaN).
"""

from __future__ import annotations

import decimal
import json
import struct
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder

from eobatch.core.table_files import footer_stats
from eobatch.sinks import StagedFile
from eobatch.sinks.delta import DeltaParticipant

D = decimal.Decimal
BIG = D(9007199254740993)  # 2**53 + 1: the nearest double is 2**53
DEC = pa.decimal128(20, 0)
NEG_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]  # -float("nan")


def float_rounded(stats: str, columns=("d",)) -> str:
    """The stats the old verify wrote: the bounds of decimal ``columns`` rounded through float."""
    s = json.loads(stats, parse_float=D)
    for k in ("minValues", "maxValues"):
        s[k] = {c: float(v) if c in columns else v for c, v in s[k].items()}
    return json.dumps(s, separators=(",", ":"))


def delta_table(root: Path, table: pa.Table, stats_of, parquet_stats: bool = True,
                write_statistics=True) -> DeltaTable:
    """One Parquet file committed like DeltaParticipant.commit does; ``stats_of(meta)`` gives its
    AddFile stats from the footer of the file as the stage writer writes it (with statistics).

    ``parquet_stats=False`` commits a copy of the same rows written without footer statistics:
    then only the Delta stats can make a reader skip the file (delta-rs also prunes row groups
    by the footer's own NaN-blind statistics, see test_footer_statistics_themselves_hide_nan).
    """
    rel = "eo_batches/b0000000001/a1/part-00000.parquet"
    full = root / rel
    full.parent.mkdir(parents=True)
    pq.write_table(table, full, write_statistics=write_statistics)
    stats = stats_of(pq.ParquetFile(full).metadata)
    if not parquet_stats:
        pq.write_table(table, full, write_statistics=False)
    p = DeltaParticipant("sink", str(root), storage_options={})
    p.commit("app", 1, [StagedFile(rel, full.stat().st_size, {}, 1, stats)], table.schema, [], {"eo.batchId": "1"})
    dt = DeltaTable(str(root))
    assert pa.table(dt.get_add_actions(flatten=True)).column("num_records").to_pylist() == [table.num_rows]
    return dt


def logged_stats(root: Path) -> dict:
    """The stats of the one file added to the table, as the Delta log holds them."""
    (log,) = [p for p in (root / "_delta_log").glob("*.json") if p.stem != "00000000000000000000"]
    (add,) = [json.loads(line)["add"] for line in log.read_text().splitlines() if '"add"' in line]
    return json.loads(add["stats"], parse_float=D)


def delta_rs(dt: DeltaTable, where: str) -> list:
    t = pa.table(QueryBuilder().register("t", dt).execute(f"SELECT * FROM t WHERE {where}").read_all())
    return t.to_pylist()


def duck(dt: DeltaTable, where: str) -> list:
    con = duckdb.connect()
    con.register("t", dt.to_pyarrow_dataset())
    return con.execute(f"SELECT * FROM t WHERE {where}").fetchall()


# -- decimals ---------------------------------------------------------------------------------


@pytest.fixture
def decimal_rows():
    schema = pa.schema([("d", DEC), ("k", pa.int64())])
    return pa.table({"d": pa.array([D(1), BIG], DEC), "k": [1, 2]}, schema=schema)


def test_float_rounded_decimal_stats_lose_the_row(tmp_path, decimal_rows):
    dt = delta_table(tmp_path, decimal_rows, lambda m: float_rounded(footer_stats(m, decimal_rows.schema)))
    max_d = pa.table(dt.get_add_actions(flatten=True)).column("max.d").to_pylist()
    assert max_d == [D(9007199254740992)]
    # every reader skips the file: the row is lost (the defect this guards against)
    assert delta_rs(dt, "d = 9007199254740993") == []
    assert duck(dt, "d = 9007199254740993") == []
    assert dt.to_pyarrow_dataset().to_table(filter=ds.field("d") == pa.scalar(BIG, DEC)).num_rows == 0
    # and the readers do use the stats to skip: the rows below the rounded max are still found
    assert delta_rs(dt, "d = 1") == [{"d": D(1), "k": 1}]


def test_exact_decimal_stats_keep_the_row(tmp_path, decimal_rows):
    dt = delta_table(tmp_path, decimal_rows, lambda m: footer_stats(m, decimal_rows.schema))
    assert pa.table(dt.get_add_actions(flatten=True)).column("max.d").to_pylist() == [BIG]
    assert delta_rs(dt, "d = 9007199254740993") == [{"d": BIG, "k": 2}]
    assert delta_rs(dt, "d > 9007199254740992") == [{"d": BIG, "k": 2}]
    assert duck(dt, "d = 9007199254740993") == [(BIG, 2)]
    assert dt.to_pyarrow_dataset().to_table(filter=ds.field("d") == pa.scalar(BIG, DEC)).num_rows == 1
    # exact stats still let readers skip: nothing above the max, nothing below the min
    assert delta_rs(dt, "d > 9007199254740993") == [] and duck(dt, "d < 1") == []


def test_decimal_38_18_and_negative_bounds_are_exact_for_readers(tmp_path):
    t38 = pa.decimal128(38, 18)
    lo, hi = D("-12345678901234567890.123456789012345679"), D("-0.000000000000000001")
    table = pa.table({"d": pa.array([lo, hi, D("-1")], t38)})
    dt = delta_table(tmp_path, table, lambda m: footer_stats(m, table.schema))
    for v in (lo, hi):
        assert delta_rs(dt, f"d = CAST('{v:f}' AS DECIMAL(38,18))") == [{"d": v}]
        assert duck(dt, f"d = '{v:f}'::DECIMAL(38,18)") == [(v,)]
    assert logged_stats(tmp_path)["maxValues"] == {"d": hi}
    assert delta_rs(dt, "d >= 0") == []  # skipped by max -1e-18


# -- floats -------------------------------------------------------------------------------------


def nan_blind(schema):
    """Stats as if the writer had vouched for every float column (what the old verify wrote)."""
    return lambda m: footer_stats(m, schema, nan_free=[f.name for f in schema])


@pytest.mark.parametrize("row,where", [
    (float("nan"), "x > 20"),
    (float("nan"), "x = CAST('NaN' AS DOUBLE)"),
    (NEG_NAN, "x < 0"),
])
def test_nan_row_lost_by_nan_blind_stats_found_without(tmp_path, row, where):
    table = pa.table({"x": pa.array([1.0, row, 10.0])})
    old = delta_table(tmp_path / "old", table, nan_blind(table.schema), parquet_stats=False)
    assert logged_stats(tmp_path / "old")["maxValues"] == {"x": 10}
    assert delta_rs(old, where) == []  # the file was skipped by its stats
    # the stage writer never vouches for a column that holds NaN: no bounds, the row is found
    new = delta_table(tmp_path / "new", table, lambda m: footer_stats(m, table.schema, nan_free=[]),
                      parquet_stats=False)
    got = delta_rs(new, where)
    assert len(got) == 1 and got[0]["x"] != got[0]["x"]  # the NaN row
    # DuckDB does not push float filters into the Arrow scan: NaN > 20 is found either way
    if where == "x > 20":
        assert len(duck(old, where)) == len(duck(new, where)) == 1


def test_nan_free_float_stats_prune_and_zero_goes_outward(tmp_path):
    table = pa.table({"x": pa.array([-0.0, 2.5, 7.0])})
    dt = delta_table(tmp_path / "a", table, lambda m: footer_stats(m, table.schema, nan_free=["x"]),
                     parquet_stats=False)
    stats = logged_stats(tmp_path / "a")
    assert str(stats["minValues"]["x"]) == "-0.0" and stats["maxValues"] == {"x": 7}
    assert delta_rs(dt, "x = -0.0") == [{"x": 0.0}]
    assert delta_rs(dt, "x > 7") == [] and delta_rs(dt, "x > 6") == [{"x": 7.0}]
    # a +0.0 min would hide the -0.0 row from delta-rs (it orders -0.0 below +0.0)
    plus = lambda m: footer_stats(m, table.schema, nan_free=["x"]).replace('"x":-0.0', '"x":0.0')  # noqa: E731
    assert delta_rs(delta_table(tmp_path / "b", table, plus, parquet_stats=False), "x = -0.0") == []


def test_footer_statistics_themselves_hide_nan_so_the_writer_keeps_none_for_floats(tmp_path):
    """delta-rs prunes Parquet row groups by the footer's own min/max, which Arrow's writer
    computes ignoring NaN: with them the NaN row is lost for ``x > 20``. The stage writer keeps
    no footer statistics for float columns (``writer_statistics``), and the row is found."""
    from eobatch.core.table_files import writer_statistics

    table = pa.table({"order_id": ["a", "b", "c"], "x": pa.array([1.0, float("nan"), 10.0])})
    lossy = delta_table(tmp_path / "lossy", table, lambda m: footer_stats(m, table.schema, nan_free=[]))
    assert len(delta_rs(lossy, "x > 20")) == 0  # what default footer statistics do
    assert writer_statistics(table.schema) == ["order_id"]
    safe = delta_table(tmp_path / "safe", table, lambda m: footer_stats(m, table.schema, nan_free=[]),
                       write_statistics=writer_statistics(table.schema))
    assert len(delta_rs(safe, "x > 20")) == 1


def test_pyarrow_dataset_filter_uses_the_stats_as_guarantees(tmp_path, decimal_rows):
    # the claim the DuckDB checks rest on: the dataset's fragments carry the Delta stats
    dt = delta_table(tmp_path, decimal_rows, lambda m: footer_stats(m, decimal_rows.schema))
    (frag,) = dt.to_pyarrow_dataset().get_fragments()
    text = str(frag.partition_expression)
    assert "9007199254740993" in text and "d >= 1" in text


def test_a_column_without_bounds_makes_the_pyarrow_dataset_lose_rows_not_delta_rs_sql(tmp_path):
    """delta-rs 1.6's ``to_pyarrow_dataset()`` writes a guarantee ``x >= null and x <= null`` for a
    column the file's stats give no bounds (float columns, strings over 32 characters), which
    excludes every row: pyarrow filters, and DuckDB when it pushes the filter (strings,
    decimals), lose the file. ``QueryBuilder`` does not. docs/site/sinks.md says to filter with it (or
    Spark); this shows when a delta-rs upgrade changes it."""
    long = "q" * 40
    table = pa.table({"x": [1.0, 7.0], "s": ["a", long]})
    dt = delta_table(tmp_path, table, lambda m: footer_stats(m, table.schema, nan_free=[]), parquet_stats=False)
    assert logged_stats(tmp_path)["maxValues"] == {}  # no float bounds, no long string
    assert dt.to_pyarrow_dataset().to_table(filter=ds.field("x") > 5).num_rows == 0  # lost
    assert duck(dt, f"s = '{long}'") == []  # lost
    assert delta_rs(dt, "x > 5") == [{"x": 7.0, "s": long}] and len(delta_rs(dt, f"s = '{long}'")) == 1


# -- through the real stage job (Spark) ---------------------------------------------------------


@pytest.mark.integration
def test_stage_job_reports_nan_free_columns_and_verify_writes_exact_stats(tmp_path):
    from support.checks import delta_log_commits, read_rows
    from support.harness import run_batch, write_pipeline

    p = write_pipeline(tmp_path, schema="order_id STRING NOT NULL, amount DOUBLE, d DECIMAL(20,0)")
    p.land("a.jsonl", [{"order_id": "a", "amount": 1.5, "d": 9007199254740993},
                       {"order_id": "b", "amount": -0.0, "d": 1}])
    assert run_batch(p) == 1
    # a bare NaN token is malformed JSON (quarantined), but Spark reads the string "NaN" as a double
    p.land("b.jsonl", [{"order_id": "c", "amount": "NaN", "d": 2}, {"order_id": "d", "amount": 3.0, "d": 3}])
    assert run_batch(p) == 2
    assert sum(r["amount"] != r["amount"] for r in read_rows(p.sink)) == 1  # the NaN row is published
    adds = {int(c["commitInfo"]["eo.batchId"]): c["adds"] for c in delta_log_commits(p.sink) if c["txns"]}
    stats = {b: [json.loads(a["stats"], parse_float=D) for a in lst] for b, lst in adds.items()}
    # d's max is exact in the log's very text; the float column gets no bounds at all (the writer keeps
    # no NaN-blind footer statistics for it, see writer_statistics), so no reader skips the NaN row
    assert any('"d":9007199254740993' in a["stats"] for a in adds[1])
    assert max(s["maxValues"]["d"] for s in stats[1]) == BIG
    assert all("amount" not in s["minValues"] and "amount" not in s["maxValues"] for b in (1, 2) for s in stats[b])
    assert all("d" in s["maxValues"] for b in (1, 2) for s in stats[b])
    # manifests carry what the writer saw
    manifests = [json.loads(m.read_text()) for m in p.sink.glob("_eo_ledger/attempts/*/*/manifests/sink/*.json")]
    flags = [f.get("nan_free") for m in manifests for f in m["files"]]
    assert [] in flags and ["amount"] in flags


# -- every writer of table files: maintenance and merges (issue 27, item 4) ---------------------


@pytest.mark.integration
def test_spark_and_delta_rs_find_every_match_before_and_after_maintenance_and_after_merges(tmp_path):
    """delta-rs OPTIMIZE (maintenance) and delta-rs MERGE wrote files whose stats rounded a decimal
    max through a double and ignored NaN: `n = 9007199254740993` and `x > 5` lost rows after
    `make maintain` and after merges. Every table state below is read by delta-rs and by
    delta-spark (one Spark process for all), each filter against a full read. The staging is the
    pyarrow stager (the stage job's own stats are tested above)."""
    import shutil

    from eobatch.protocol.maintenance import maintain
    from support.harness import spark_read, write_pipeline
    from support.protocol_runs import run_next
    from support.stats_promise import BIG, SCHEMA, WHERES, check_reads, expected, land_rows

    nan = float("nan")
    tables: dict[str, Path] = {}
    p = write_pipeline(tmp_path / "append", schema=SCHEMA)
    proto = p.protocol()
    for i, (n, x) in enumerate([(BIG, 1.0), (1, nan), (BIG, 3.0), (3, nan), (4, None)]):
        land_rows(p.cfg, f"f{i}.jsonl", [{"order_id": f"o{i}", "n": n, "x": x}])
        assert run_next(proto) == i + 1
    tables["append, before maintenance"] = Path(shutil.copytree(p.sink, tmp_path / "append_before"))
    maintain(proto, vacuum_retention_hours=0)
    tables["append, after maintenance"] = p.sink
    m = write_pipeline(tmp_path / "merge", schema=SCHEMA.replace("NOT NULL,", "NOT NULL, seq BIGINT NOT NULL,"),
                       merge={"keys": ["order_id"], "sequence_by": "seq"})
    proto = m.protocol()
    for i, rows in enumerate([[("o1", 1, BIG, 1.0), ("o2", 1, 1, nan)], [("o1", 2, BIG, nan), ("o3", 1, BIG, 2.0)]]):
        land_rows(m.cfg, f"b{i}.jsonl", [{"order_id": k, "seq": s, "n": n, "x": x} for k, s, n, x in rows])
        assert run_next(proto) == i + 1
    tables["merge, after merges"] = Path(shutil.copytree(m.sink, tmp_path / "merge_merged"))
    maintain(proto, vacuum_retention_hours=0)
    tables["merge, after maintenance"] = m.sink
    want = {w: expected(DeltaTable(str(tables["merge, after merges"])).to_pyarrow_table().to_pylist(), w)
            for w in WHERES}
    assert want == {f"n = {BIG}": ["o1", "o3"], "x > 5": ["o1", "o2"]}  # the data does hold matches

    for when, table in tables.items():
        check_reads(table, when)  # raw stats, footers, delta-rs
    spark = spark_read(*tables.values(), where=WHERES)
    for when, table in tables.items():
        rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
        found = {w: sorted(r["order_id"] for r in spark[str(table)]["where"][w]) for w in WHERES}
        assert found == {w: expected(rows, w) for w in WHERES}, f"{when}: Spark skipped a file holding a match"
