"""Data-quality expectations in the real stage job (local Spark): each action on real records,
the counts in the stage summary and the ledger reconciling at verify, and a ``fail`` that aborts
the batch before anything is published, naming the expectation and the record."""

from __future__ import annotations

import json

import pytest

from eobatch.cli import ledger_rows
from eobatch.job import launch
from support.checks import read_rows
from support.harness import orders, run_batch, stage, write_pipeline

pytestmark = pytest.mark.integration

RULES = """\
expectations:
  - {name: positive_amount, expr: "amount >= 0", action: quarantine}
  - {name: known_customer, expr: "customer IS NOT NULL", action: drop}
  - {name: no_test_orders, expr: "order_id NOT LIKE 'test-%'", action: drop}
"""


def test_quarantine_and_drop_expectations_reconcile_and_are_counted(tmp_path):
    p = write_pipeline(tmp_path, extra=RULES)
    good = orders("g", 10)
    negative = [dict(r, amount=-1.0) for r in orders("neg", 2)]
    anonymous = [dict(r, customer=None) for r in orders("anon", 2)]
    both = [dict(orders("both", 1)[0], amount=-5.0, customer=None)]  # quarantine wins over drop
    no_amount = [{k: v for k, v in orders("na", 1)[0].items() if k != "amount"}]  # null fails, never passes
    lines = [json.dumps(r) for r in good + negative + anonymous + both + no_amount] + ['{"order_id": "x", "amount":']
    (p.landing / "a.jsonl").write_text("\n".join(lines) + "\n")

    assert run_batch(p) == 1
    assert sorted(r["order_id"] for r in read_rows(p.sink)) == sorted(r["order_id"] for r in good)
    reasons = sorted((json.loads(r["raw"])["order_id"] if r["raw"].endswith("}") else "bad", r["reason"])
                     for r in read_rows(p.quarantine))
    assert reasons == sorted([("neg-00000", "expectation positive_amount failed"),
                              ("neg-00001", "expectation positive_amount failed"),
                              ("both-00000", "expectation positive_amount failed"),
                              ("na-00000", "expectation positive_amount failed"),
                              ("bad", "malformed JSON: not a JSON object")])
    prepared = p.protocol().ledger.prepared(1)
    assert (prepared.rows_in, prepared.rows_valid, prepared.rows_quarantined, prepared.rows_dropped) == (17, 10, 5, 2)
    assert prepared.rows_in == prepared.rows_valid + prepared.rows_quarantined + prepared.rows_dropped
    assert prepared.expectations == {"positive_amount": 4, "known_customer": 3, "no_test_orders": 0}
    (row,) = ledger_rows(p.protocol())
    assert (row["rows_dropped"], row["expectations"]) == (2, prepared.expectations)


def test_a_fail_expectation_aborts_the_batch_naming_it_and_the_record(tmp_path):
    p = write_pipeline(tmp_path, extra="""\
expectations:
  - {name: positive_amount, expr: "amount >= 0", action: quarantine}
  - {name: no_test_orders, expr: "order_id NOT LIKE 'test-%'", action: fail}
""")
    p.land("a.jsonl", orders("g", 5) + orders("test", 1) + [dict(orders("neg", 1)[0], amount=-2.0)])
    proto = p.protocol()
    plan, _ = proto.plan()
    attempt = launch.new_attempt_id(1)
    r = stage(p, plan.batch_id, attempt)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert ("expectation no_test_orders (action fail) failed for 1 record(s) of batch 1; nothing is published. "
            f"First: expectation no_test_orders failed (action fail), at {p.landing / 'a.jsonl'} position 6: "
            '{"order_id": "test-00000"') in out, out[-3000:]
    assert proto.ledger.stage_summary(1, attempt) is None  # nothing to verify: it can never be PREPARED
    proto.abort(1, attempt, "stage failed")
    assert not p.sink.exists() or not any(p.sink.rglob("*.parquet"))
    assert not p.quarantine.exists() or not any(p.quarantine.rglob("*.parquet"))


def test_an_expectation_spark_cannot_evaluate_fails_the_stage_naming_it(tmp_path):
    p = write_pipeline(tmp_path, extra="""\
expectations:
  - {name: sane_amount, expr: "amount >= 0 AND coupon_code <> ''", action: quarantine}
""")
    p.land("a.jsonl", orders("g", 2))
    proto = p.protocol()
    plan, _ = proto.plan()
    r = stage(p, plan.batch_id, launch.new_attempt_id(1))
    assert r.returncode != 0
    assert "sane_amount (\"amount >= 0 AND coupon_code <> ''\") cannot be evaluated" in r.stdout + r.stderr


def test_a_random_expectation_is_applied_once_and_its_counts_reconcile(tmp_path):
    """An expectation that may answer otherwise when asked twice (``rand()``): the job caches its
    one read and never classifies a record a second time, even with more records to quarantine
    than its read holds (a cap set low here: the second read that classifies every record again
    could quarantine others), so its quarantine, its counts and the sink agree at verify."""
    p = write_pipeline(tmp_path, extra="""\
expectations:
  - {name: coin, expr: "amount >= 0 AND rand() < 0.5", action: quarantine}
spark:
  conf: {spark.eobatch.quarantineChars: 100}
""")
    p.land("a.jsonl", orders("g", 200))
    proto = p.protocol()
    plan, _ = proto.plan()
    attempt = launch.new_attempt_id(1)
    r = stage(p, plan.batch_id, attempt)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "cached on local disk with the rest of the read (expectation coin is not deterministic)" in out
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    published, quarantined = read_rows(p.sink), read_rows(p.quarantine)
    assert 0 < len(quarantined) < 200 and len(published) + len(quarantined) == 200
    assert {r["reason"] for r in quarantined} == {"expectation coin failed"}
    assert not {r["order_id"] for r in published} & {json.loads(r["raw"])["order_id"] for r in quarantined}
    lines = (p.landing / "a.jsonl").read_text().splitlines()
    assert all(lines[r["position"] - 1] == r["raw"] for r in quarantined)
    prepared = proto.ledger.prepared(1)
    assert (prepared.rows_valid, prepared.rows_quarantined) == (len(published), len(quarantined))
