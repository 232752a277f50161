"""What the tables look like to other engines: delta-spark and delta-rs read them; partitioned
tables; the colour-count transform; the history carries each batch's offsets."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from support.checks import assert_exactly_once, delta_log_commits, read_rows
from support.harness import orders, run_batch, spark_read, write_pipeline

pytestmark = pytest.mark.integration


def test_partitioned_table_opens_in_delta_spark_and_delta_rs(tmp_path):
    p = write_pipeline(tmp_path, partition_by=["customer"])
    p.land("a.jsonl", orders("a", 70), bad=['{"order_id": 1, "amount": [1]}'])
    assert run_batch(p) == 1
    weird = p.land("b c+d%20[1].jsonl", orders("b", 30), bad=["{broken"])  # a name Spark must not mangle
    assert run_batch(p) == 2
    assert_exactly_once(p, batches=2)

    # the raw log: every add of the sink carries its partition value and stats from the footer
    adds = [a for c in delta_log_commits(p.sink) for a in c["adds"]]
    assert {a["partitionValues"]["customer"] for a in adds} == {f"c{i}" for i in range(7)}
    for a in adds:
        stats = json.loads(a["stats"])
        assert stats["numRecords"] > 0 and "order_id" in stats["minValues"] and "customer" not in stats["nullCount"]
        assert f"/customer={a['partitionValues']['customer']}/" in a["path"]

    spark = spark_read(p.sink, p.quarantine)
    sink = spark[str(p.sink)]
    assert sink["partitionColumns"] == ["customer"]
    assert (sink["minReaderVersion"], sink["minWriterVersion"]) == (1, 2)
    assert sorted(r["order_id"] for r in sink["rows"]) == sorted(r["order_id"] for r in p.landed)
    by_id = {r["order_id"]: r for r in sink["rows"]}
    for r in p.landed:
        assert by_id[r["order_id"]]["customer"] == r["customer"]
        assert by_id[r["order_id"]]["amount"] == r["amount"]
    assert [h["operation"] for h in sorted(sink["history"], key=lambda h: h["version"])] == [
        "CREATE TABLE", "WRITE", "WRITE"]
    assert sorted(r["raw"] for r in spark[str(p.quarantine)]["rows"]) == sorted(p.landed_bad)
    assert {r["source"] for r in read_rows(p.quarantine) if r["raw"] == "{broken"} == {str(weird)}

    # one commit per batch, each carrying exactly its batch's files as offsets
    commits = [c for c in delta_log_commits(p.sink) if c["txns"]]
    for c, name in zip(commits, ["a.jsonl", "b c+d%20[1].jsonl"]):
        offsets = json.loads(c["commitInfo"]["eo.offsets"])
        assert [Path(o[0]).name for o in offsets] == [name]


def test_color_counts_per_window_and_batch(tmp_path):
    p = write_pipeline(tmp_path, name="colors", schema="event_id STRING NOT NULL, color STRING NOT NULL, ts TIMESTAMP NOT NULL",
                       transform="color_counts", options={"window": "1 minute"})
    events = []
    for i in range(90):
        events.append({"event_id": f"e{i}", "color": ["red", "green", "blue"][i % 3],
                       "ts": f"2026-01-01T00:{i // 30:02d}:{i % 30:02d}Z"})
    p.land("a.jsonl", events[:60], bad=['{"event_id": "x", "color": "red"}'])  # no ts: quarantined
    assert run_batch(p) == 1
    p.land("b.jsonl", events[60:])
    assert run_batch(p) == 2
    rows = read_rows(p.sink)
    totals = collections.Counter()
    for r in rows:
        totals[(r["window_start"].strftime("%H:%M"), r["color"])] += r["events"]
    want = collections.Counter((f"00:{int(e['ts'][14:16]):02d}", e["color"]) for e in events)
    assert totals == want
    assert {r["batch_id"] for r in rows} == {1, 2}
    bad = read_rows(p.quarantine)
    assert [b["reason"] for b in bad] == ["missing required field 'ts'"]
