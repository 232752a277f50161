"""The statistics promise, checked on a table as readers see it: every bound that a live file's
Delta stats (the raw ``_delta_log`` text) or its Parquet footer (each row group) states holds
for every row it covers, NaN included; and filtered reads through delta-rs (``QueryBuilder``,
DataFusion) find every matching row.

The tables of these checks hold ``order_id``, ``n DECIMAL(20,0)`` and ``x DOUBLE``; ``BIG`` is
2**53 + 1 (its nearest double is 2**53) and some ``x`` are NaN, which Spark, DuckDB and
delta-rs order above +inf (``x > 5`` matches them)."""

from __future__ import annotations

import decimal
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from support.checks import delta_log_commits

D = decimal.Decimal
BIG = 9007199254740993
SCHEMA = "order_id STRING NOT NULL, n DECIMAL(20,0), x DOUBLE"
WHERES = (f"n = {BIG}", "x > 5")


def expected(rows: list[dict], where: str) -> list[str]:
    """The order_ids a correct reader returns for one of ``WHERES`` over ``rows``."""
    if where == WHERES[0]:
        return sorted(r["order_id"] for r in rows if r["n"] is not None and D(r["n"]) == BIG)
    assert where == WHERES[1]
    return sorted(r["order_id"] for r in rows if r["x"] is not None and (math.isnan(r["x"]) or r["x"] > 5))


def delta_rs_ids(table: Path, where: str) -> list[str]:
    from deltalake import DeltaTable, QueryBuilder

    t = QueryBuilder().register("t", DeltaTable(str(table))).execute(f"SELECT order_id FROM t WHERE {where}")
    return sorted(pa.table(t.read_all()).column("order_id").to_pylist())


def live_stats(table: Path) -> dict[str, str]:
    """path -> the stats text of each live file, as the raw log holds it."""
    live: dict[str, str] = {}
    for c in delta_log_commits(table):
        for r in c["removes"]:
            live.pop(r["path"], None)
        for a in c["adds"]:
            live[a["path"]] = a.get("stats") or "{}"
    return live


def _inside(v, lo, hi, typ: pa.DataType) -> bool:
    if pa.types.is_floating(typ):
        return not math.isnan(v) and float(lo) <= v <= float(hi)
    if pa.types.is_decimal(typ):
        return D(lo) <= v <= D(hi)
    return lo <= v <= hi


def broken_bounds(table: Path) -> list[str]:
    """Every bound of a live file (its Delta stats, its footer's row groups) that excludes a row it
    covers; [] when the promise is kept."""
    out = []
    for path, text in live_stats(table).items():
        pf = pq.ParquetFile(Path(table) / path)
        rows = pf.read()
        stats = json.loads(text, parse_float=D, parse_int=D)
        for col, lo in stats.get("minValues", {}).items():
            hi, typ = stats["maxValues"][col], rows.schema.field(col).type
            if not pa.types.is_floating(typ) and not pa.types.is_decimal(typ) and not pa.types.is_string(typ):
                continue
            bad = [v for v in rows.column(col).to_pylist() if v is not None and not _inside(v, lo, hi, typ)]
            if bad:
                out.append(f"{path}: Delta stats {col} in [{lo}, {hi}] exclude {bad[:3]}")
        for rg in range(pf.metadata.num_row_groups):
            part = pf.read_row_group(rg)
            for ci in range(pf.metadata.num_columns):
                cm = pf.metadata.row_group(rg).column(ci)
                st, col = cm.statistics, cm.path_in_schema
                if st is None or not st.has_min_max or col not in part.column_names:
                    continue
                typ = part.schema.field(col).type
                bad = [v for v in part.column(col).to_pylist() if v is not None and not _inside(v, st.min, st.max, typ)]
                if bad:
                    out.append(f"{path}: footer row group {rg} {col} in [{st.min}, {st.max}] excludes {bad[:3]}")
    return out


def check_reads(table: Path, when: str) -> dict[str, list[str]]:
    """The promise on ``table``: its raw stats and footers, and delta-rs's filtered reads against
    a full read (which skips nothing). Returns {filter: order_ids found}."""
    from deltalake import DeltaTable

    bad = broken_bounds(table)
    assert not bad, f"{when}: {bad}"
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    found = {w: delta_rs_ids(table, w) for w in WHERES}
    assert found == {w: expected(rows, w) for w in WHERES}, f"{when}: delta-rs skipped a file holding a match"
    return found


def land_rows(cfg, name: str, rows: list[dict]) -> None:
    """Landing file ``name`` holding ``rows`` (a NaN is written as the bare token ``NaN``)."""
    path = Path(cfg.source.path) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
