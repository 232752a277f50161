"""kind: delta end to end: a pipeline reads another pipeline's sink table exactly once, through
real spark-submit stage jobs, while the upstream publishes, compacts, vacuums and rewinds."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap

import pytest

from eobatch.protocol.maintenance import maintain
from support.checks import read_rows
from support.harness import Pipeline, base_env, orders, run_batch, write_delta_pipeline, write_pipeline

pytestmark = pytest.mark.integration


def _downstream(root, upstream: Pipeline, name: str = "silver", extra_source: str = "",
                schema: str | None = None, rest: str = "", sink_extra: str = "") -> Pipeline:
    return write_delta_pipeline(root, name, upstream.sink, "max_records_per_batch: 5\n" + extra_source, schema,
                                rest, sink_extra)


def _drain(p: Pipeline) -> list[int]:
    out = []
    while (b := run_batch(p)) is not None:
        out.append(b)
    return out


def _counts(table) -> collections.Counter:
    return collections.Counter((r["order_id"], r["customer"], r["amount"], str(r["ts"])) for r in read_rows(table))


def test_a_pipeline_reads_another_pipelines_table_exactly_once_through_compaction_vacuum_and_rewind(tmp_path):
    up = write_pipeline(tmp_path, "bronze", partition_by=["customer"], max_records=4)
    down = _downstream(tmp_path, up)
    up.land("a1.jsonl", orders("a", 4))
    up.land("a2.jsonl", orders("a", 2, start=4))
    assert _drain(up) == [1, 2]  # two upstream batches, one Delta version each
    assert _drain(down) == [1, 2]  # 6 records in batches of at most 5, at version boundaries
    assert _counts(down.sink) == _counts(up.sink) and sum(_counts(down.sink).values()) == 6
    plans = [down.protocol().ledger.plan(b) for b in (1, 2)]
    assert [p.range["upstream"] for p in plans] == [{"bronze": [1]}, {"bronze": [2]}]  # lineage
    assert plans[0].rows_in == 4 and all(f["partition_values"]["customer"] for f in plans[0].range["files"])

    # upstream compaction and VACUUM: nothing is read again, nothing is lost
    maintain(up.protocol(), vacuum_retention_hours=0)
    up.land("b.jsonl", orders("b", 3))
    assert _drain(up) == [3]
    assert _drain(down) == [3]
    assert _counts(down.sink) == _counts(up.sink) and sum(_counts(down.sink).values()) == 9

    # a rewind upstream undoes a batch downstream has published: refused, naming the batch to rewind to
    up.protocol().rewind(3)
    with pytest.raises(Exception, match=r"RESTORE\) restored the table to version \d+: it undid versions .* "
                                        r"Rewind silver to batch 3"):
        run_batch(down)
    # the operator's path: rewind the downstream to where it read the undone upstream version
    undone = down.protocol().ledger.plan(3).range["files"][0]["version"]
    r = subprocess.run([sys.executable, "-m", "eobatch.cli", "rewind", "silver", "--upstream-version", str(undone)],
                       env=base_env({"PIPELINES_DIR": str(down.yaml_path.parent)}), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and f"upstream version {undone}: batch 3 read upstream versions" in r.stdout, \
        r.stdout + r.stderr
    up.land("c.jsonl", orders("c", 2))
    assert _drain(up) == [4, 5]  # the upstream reads b again after its rewind, then c
    assert _drain(down) == [4, 5]  # 4: the rewind's batch, at batch 3's start; 5: upstream batches 4 and 5
    assert _counts(down.sink) == _counts(up.sink) and sum(_counts(down.sink).values()) == 11
    assert json.loads(json.dumps(down.protocol().ledger.plan(5).range["upstream"])) == {"bronze": [4, 5]}


def test_three_hops_bronze_silver_by_key_gold_totals_from_silvers_change_feed(tmp_path):
    """bronze (landing files, append) -> silver (its records upserted by order_id, deletes by op,
    writing the Change Data Feed) -> gold (running totals per customer over silver's changes):
    gold equals the totals of silver's current rows, silver the latest record per key."""
    schema = "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP NOT NULL, op STRING"
    bronze = write_pipeline(tmp_path, "bronze", schema=schema)
    silver = _downstream(tmp_path, bronze, "silver", schema=schema, sink_extra=textwrap.dedent("""\
        mode: merge
        merge: {keys: [order_id], sequence_by: ts, delete_when: "op = 'd'", change_data_feed: true}
        """))
    gold = _downstream(tmp_path, silver, "gold", extra_source="change_feed: true\n", schema=schema,
                       rest="transform: {name: change_totals, options: {key: customer, value: amount}}\n",
                       sink_extra="mode: merge\nmerge: {keys: [customer], accumulate: {rows: sum, total: sum}}\n")

    def rec(i, customer, amount, minute, op="u"):
        return {"order_id": f"o{i}", "customer": customer, "amount": amount, "ts": f"2026-01-01T00:{minute:02d}:00Z",
                "op": op}

    bronze.land("1.jsonl", [rec(1, "ann", 10.0, 5), rec(2, "ann", 5.0, 0), rec(3, "bob", 7.0, 0), rec(4, "cy", 1.0, 0)])
    for p in (bronze, silver, gold):
        assert _drain(p) == [1]
    # silver's second MERGE updates o2, deletes o3 and inserts o5: its change data has each
    bronze.land("2.jsonl", [rec(2, "ann", 50.0, 1), rec(3, "bob", 7.0, 2, op="d"), rec(5, "bob", 2.0, 1),
                            rec(1, "ann", 99.0, 3)])  # an older version of o1 arriving late: not applied
    for p in (bronze, silver, gold):
        assert _drain(p) == [2]
    latest = {r["order_id"]: r for r in read_rows(silver.sink)}
    assert {k: (r["customer"], r["amount"]) for k, r in latest.items()} == {
        "o1": ("ann", 10.0), "o2": ("ann", 50.0), "o4": ("cy", 1.0), "o5": ("bob", 2.0)}
    want = collections.defaultdict(lambda: [0, 0.0])
    for r in latest.values():
        want[r["customer"]][0] += 1
        want[r["customer"]][1] += r["amount"]
    got = {r["customer"]: [r["rows"], r["total"]] for r in read_rows(gold.sink) if r["rows"]}
    assert got == {k: v for k, v in want.items()}
    changes = [f for f in gold.protocol().ledger.plan(2).range["files"] if f.get("change_data")]
    assert sum(f["records"] for f in changes) == 4  # o2's pre- and post-image, o3's delete, o5's insert


def test_a_merge_sink_over_the_change_feed_equals_its_upstream_through_partition_deletes_truncates_and_overwrites(
        tmp_path):
    """Issue 41: an upstream with the Change Data Feed on deletes whole partitions, is truncated
    (DELETE without a condition) and overwritten; none of these writes change data (delta-rs, like
    Spark, removes files only). The downstream reads those versions as the Delta protocol defines
    them (removed files' rows as deletes, added files' rows as inserts) and its merge sink, an
    upsert by key over ``change_rows``, holds exactly the upstream's rows after every round."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    up = str(tmp_path / "lake" / "upstream")
    schema = pa.schema([("order_id", pa.string()), ("customer", pa.string()), ("amount", pa.float64()),
                        ("ts", pa.timestamp("us", tz="UTC"))])

    def write(rows, mode="append"):
        write_deltalake(up, pa.Table.from_pylist([{**r, "ts": _ts(r["ts"])} for r in rows], schema), mode=mode,
                        partition_by=["customer"], configuration={"delta.enableChangeDataFeed": "true"})

    def rows_of(table, cols=("order_id", "customer", "amount", "ts")):
        return sorted(tuple(str(r[c]) for c in cols) for r in read_rows(table))

    def cdc_free(version):  # the version wrote no change data: the path under test
        log = (tmp_path / "lake" / "upstream" / "_delta_log" / f"{version:020d}.json").read_text()
        return '"cdc"' not in log and '"remove"' in log

    down = write_delta_pipeline(tmp_path, "mirror", up, "change_feed: true\nmax_records_per_batch: 1000\n",
                                rest="transform: change_rows\n", sink_extra=textwrap.dedent("""\
                                    mode: merge
                                    merge: {keys: [order_id], sequence_by: change_seq, delete_when: "change_type = 'delete'"}
                                    """))
    write(orders("a", 9))                                                    # v0: c0..c6
    DeltaTable(up).update({"amount": "100.0"}, predicate="order_id = 'a-00001'")  # v1: change data (cdc)
    assert _drain(down) == [1]
    assert rows_of(down.sink) == rows_of(up) and len(rows_of(up)) == 9

    DeltaTable(up).delete("customer = 'c1'")                                 # v2: whole partitions, files removed
    write([{**orders("a", 2, start=1)[0], "amount": 7.0}])                   # v3: a-00001 inserted again
    assert cdc_free(2)
    assert _drain(down) == [2]
    assert rows_of(down.sink) == rows_of(up) and len(rows_of(up)) == 8
    plan = down.protocol().ledger.plan(2)
    assert [(f["version"], bool(f.get("removed"))) for f in plan.range["files"]] == [(2, True), (3, False)]

    write(orders("a", 3, start=6) + orders("b", 2), mode="overwrite")        # v4: a-00006..08 again, b new
    assert cdc_free(4)
    assert _drain(down) == [3]
    assert rows_of(down.sink) == rows_of(up) and len(rows_of(up)) == 5

    DeltaTable(up).delete()                                                  # v5: truncate
    assert cdc_free(5)
    assert _drain(down) == [4]
    assert rows_of(down.sink) == rows_of(up) == []
    write(orders("c", 2))                                                    # v6
    assert _drain(down) == [5]
    assert rows_of(down.sink) == rows_of(up) and len(rows_of(up)) == 2
    # a retry reads exactly the planned rows: each batch's plan pins the files it reads, deletes marked
    for b in range(1, 6):
        p = down.protocol().ledger.plan(b)
        assert p.range["change_feed"] and all("size" in f and "timestamp_ms" in f for f in p.range["files"])


def _ts(text: str):
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
