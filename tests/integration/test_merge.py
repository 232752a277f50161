"""Merge sinks with the real stage job (local Spark) and delta-rs MERGE commits, read back by
delta-spark: the latest record of each key across batches (duplicates, ties, out-of-order updates,
deletes, older records after a delete), a row whose partition value changes, a retried commit."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from eobatch import cli
from support.checks import read_rows
from support.harness import run_batch, spark_read, write_pipeline

pytestmark = pytest.mark.integration

SCHEMA = "order_id STRING NOT NULL, seq BIGINT NOT NULL, status STRING, op STRING, amount DOUBLE"
MERGE = {"keys": ["order_id"], "sequence_by": "seq", "delete_when": "op = 'd'"}


def rec(key: str, seq: int, status: str | None, op: str = "u") -> dict:
    return {"order_id": key, "seq": seq, "status": status, "op": op, "amount": float(seq)}


def spark_json(r: dict) -> str:
    """A staged row as Spark's to_json writes it (the stage's tie-break between equal sequences)."""
    return json.dumps({c: r.get(c) for c in ("order_id", "seq", "status", "op", "amount")}, separators=(",", ":"))


def latest(batches: list[list[dict]]) -> dict:
    """The model: per batch, the latest record of each key (highest seq, then the highest row as
    JSON); it replaces the key's row only when its seq is higher; absent when it deletes."""
    table: dict = {}
    for records in batches:
        best: dict = {}
        for r in records:
            if "seq" not in r:
                continue  # quarantined
            k = r["order_id"]
            if k not in best or (r["seq"], spark_json(r)) > (best[k]["seq"], spark_json(best[k])):
                best[k] = r
        for k, r in best.items():
            if k not in table or r["seq"] > table[k]["seq"]:
                table[k] = r
    return {k: (r["seq"], r["status"]) for k, r in table.items() if r["op"] != "d"}


def published(rows: list[dict]) -> dict:
    keys = [r["order_id"] for r in rows]
    assert len(keys) == len(set(keys)), f"a key is published twice: {sorted(keys)}"
    return {r["order_id"]: (r["seq"], r["status"]) for r in rows}


def test_a_partitioned_merge_sink_publishes_the_latest_record_of_each_key_to_delta_rs_and_delta_spark(tmp_path):
    p = write_pipeline(tmp_path, schema=SCHEMA, partition_by=["status"], merge=MERGE)
    batches = [
        [rec("o1", 1, "new"), rec("o1", 3, "paid"), rec("o1", 2, "late in the batch"),
         rec("o2", 1, "new"), rec("o2", 1, "new-dup"),  # one version twice: the highest row as JSON wins
         rec("o3", 1, "new"), rec("o3", 2, None, op="d"),
         rec("o4", 5, "shipped"), {"order_id": "o9", "status": "no sequence"}],
        [rec("o1", 2, "older than the table's"), rec("o3", 1, "older than its delete"),
         rec("o4", 6, None, op="d"), rec("o5", 1, "new"), rec("o2", 4, "paid"),  # o2 moves to another partition
         rec("o6", 2, None, op="d"), rec("o6", 1, "created, deleted in the same batch")],
    ]
    for i, records in enumerate(batches):
        p.land(f"b{i}.jsonl", records)
        assert run_batch(p) == i + 1
        assert published(read_rows(p.sink)) == latest(batches[:i + 1]), f"after batch {i + 1}"
    assert published(read_rows(p.sink))["o2"] == (4, "paid")
    assert "o4" not in latest(batches) and "o6" not in latest(batches)

    # the record without its sequence was quarantined, not merged
    assert [json.loads(r["raw"])["order_id"] for r in read_rows(p.quarantine)] == ["o9"]
    # each table holds the two batches; the sink's commits are MERGEs carrying the offsets
    proto = p.protocol()
    assert proto.committed_versions() == {"sink": 2, "quarantine": 2, "tombstones": 2}
    merges = [h for h in DeltaTable(str(p.sink)).history() if h.get("eo.batchId")]
    assert [h["operation"] for h in merges] == ["MERGE"] * 2
    assert all(json.loads(h["eo.offsets"]) for h in merges)
    # the staged rows were the MERGE's input: swept once every table held the batch
    assert not list((p.sink / "eo_batches").rglob("*.parquet"))

    # what each batch did to the table, per kind of change (its published count alone hid it): batch 2
    # inserted o5, updated o2, deleted o4, and changed nothing with o1 (older than its row), o3 (older
    # than its delete) and o6 (a delete of a key the table does not hold)
    assert [proto.ledger.committed(b).changes for b in (1, 2)] == [
        {"inserted": 3, "updated": 0, "deleted": 0, "ignored": 1},  # o3's delete of a key not yet there
        {"inserted": 1, "updated": 1, "deleted": 1, "ignored": 3}]
    rows = cli.ledger_rows(proto)
    assert [r["changes"] for r in rows] == [proto.ledger.committed(b).changes for b in (1, 2)]
    table = cli.render_table(rows).splitlines()
    assert "changes to the sink" in table[0] and table[3].rstrip().endswith(
        "1 inserted, 1 updated, 1 deleted, 3 ignored"), table

    # a retried commit finds the txn, checks the fingerprint and changes nothing
    before = {t: DeltaTable(proto.layout.table(t)).version() for t in proto.names}
    proto.commit(2)
    assert {t: DeltaTable(proto.layout.table(t)).version() for t in proto.names} == before

    seen = spark_read(p.sink)[str(p.sink)]
    assert published(seen["rows"]) == latest(batches)
    assert seen["partitionColumns"] == ["status"]


TOTALS = {"keys": ["customer"], "accumulate": {"events": "sum", "total": "sum", "smallest": "min", "largest": "max",
                                                 "last_seen": "max"}}
TOTALS_OPTIONS = {"key": "customer", "value": "amount", "time": "ts"}
TOTALS_SCHEMA = "order_id STRING NOT NULL, customer STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"


def check_totals(sink, records: list[dict]) -> None:
    """The sink holds, per customer, the running totals recomputed here from ``records``."""
    want: dict = {}
    for r in records:
        w = want.setdefault(r["customer"], {"events": 0, "amounts": [], "ts": []})
        w["events"] += 1
        if r.get("amount") is not None:
            w["amounts"].append(r["amount"])
        w["ts"].append(r["ts"])
    got = {r["customer"]: r for r in read_rows(sink)}
    assert sorted(got) == sorted(want)
    for c, w in want.items():
        row = got[c]
        assert (row["events"], row["smallest"], row["largest"]) == (w["events"], min(w["amounts"]), max(w["amounts"]))
        assert row["total"] == pytest.approx(sum(w["amounts"]))
        assert row["last_seen"].isoformat().replace("+00:00", "Z") == max(w["ts"])


def test_interval_running_totals_republish_a_late_interval_without_folding_it_twice(tmp_path):
    """The running_totals transform's per-key partials with the real stage job, in interval mode
    (continuous mode's fold is the same Spark code without slices; its commit is unit-tested and
    `make chaos SINK=totals` runs it on Spark): the job folds each interval's records per key
    and slice; a late file republishes hour 0 in the batch of hour 1 (two slices in one batch):
    the partials of hour 0 are replaced, the sink recomputed from them, so hour 0's first file
    is counted once, and a retried commit changes nothing."""
    from support.harness import orders

    p = write_pipeline(tmp_path, name="hourly", transform="running_totals", options=TOTALS_OPTIONS,
                       schema=TOTALS_SCHEMA, merge=TOTALS, mode="interval", schedule="@hourly",
                       interval_prefix="dt={ds}/hour={hh}")
    h0, h1 = ("2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00"), ("2026-01-01T01:00:00+00:00",
                                                                           "2026-01-01T02:00:00+00:00")
    a, late, b = orders("a", 30), orders("l", 12, start=3), orders("b", 20, start=5)
    p.land("dt=2026-01-01/hour=00/a.jsonl", a)
    assert run_batch(p, interval=h0, run_id="r0") == 1
    check_totals(p.sink, a)
    p.land("dt=2026-01-01/hour=00/late.jsonl", late)
    p.land("dt=2026-01-01/hour=01/b.jsonl", b)
    assert run_batch(p, interval=h1, run_id="r1") == 2
    check_totals(p.sink, a + late + b)
    p.protocol().commit(2)  # a retried commit changes nothing
    check_totals(p.sink, a + late + b)
    partials = read_rows(str(p.sink) + "/_eo_partials")
    assert sorted({r["_eo_slice"] for r in partials}) == ["iv=20260101T000000Z", "iv=20260101T010000Z"]
    assert len(partials) == len({(r["_eo_slice"], r["customer"]) for r in partials})  # a key once per slice
