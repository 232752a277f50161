"""A quarantine replay meets a rewind, on real Spark and Delta (``make replay`` and ``make rewind``
as the CLI runs them), read back with delta-rs: each event is published once, whatever the rewind
undoes, and a record quarantined again by the batch read again can be replayed once."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest

from support.checks import read_rows
from support.harness import base_env, orders, run_batch, write_pipeline

pytestmark = pytest.mark.integration

RULE = """\
expectations:
  - {name: positive_amount, expr: "amount >= 0", action: quarantine}
"""
FIXED = """\
expectations:
  - {name: positive_amount, expr: "amount >= 0 OR order_id LIKE 'refund-%'", action: quarantine}
"""


def cli(p, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eobatch.cli", *args],
                          env=base_env({"PIPELINES_DIR": str(p.yaml_path.parent)}),
                          capture_output=True, text=True, timeout=300)


def ids(table) -> collections.Counter:
    return collections.Counter(r["order_id"] for r in read_rows(table))


def test_a_rewind_to_before_a_replayed_records_batch_publishes_it_once_and_voids_the_replay(tmp_path):
    """Was: batch 1 quarantined the refund and replay 1 wrote it back; the rule was fixed and the
    pipeline rewound to batch 1: batch 2 read a.jsonl (the refund passes now) AND the replay
    file, and published the refund twice (the same when a batch had published the replay file
    before the rewind: ``tests/unit/protocol/test_replay.py``). Two Spark stages."""
    p = write_pipeline(tmp_path, extra=RULE)
    good, refund = orders("g", 3), dict(orders("refund", 1)[0], amount=-4.0)
    p.land("a.jsonl", good + [refund])
    assert run_batch(p) == 1
    assert [json.loads(r["raw"])["order_id"] for r in read_rows(p.quarantine)] == ["refund-00000"]

    write_pipeline(tmp_path, extra=FIXED)  # the rule is fixed: refunds may be negative
    r = cli(p, "replay", p.name, "1")
    assert r.returncode == 0 and "replayed 1 quarantined record(s) of batch 1" in r.stdout, r.stderr
    (replayed,) = (p.landing / "replay").glob("*.jsonl")

    r = cli(p, "rewind", p.name, "1")  # back to before the batch that quarantined it
    assert r.returncode == 0, r.stderr
    assert run_batch(p) == 2  # a.jsonl again, under the fixed rule: the refund passes
    assert run_batch(p) is None
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in good + [refund])  # once, not twice
    assert read_rows(p.quarantine) == []
    plan2 = p.protocol().ledger.plan(2)  # reserved by the rewind, without the replay file
    assert [f["path"] for f in plan2.range["files"]] == [str(p.landing / "a.jsonl")]
    (void,) = [n for n in plan2.notes if "is void" in n]
    assert void.startswith(f"skipped {replayed}: replay 1 is void: batch 1"), plan2.notes
    assert replayed.exists()  # left where it is, never read

    # its origin is gone from the table's history: nothing is left to replay of batch 1
    r = cli(p, "replay", p.name, "1")
    assert r.returncode == 2 and "batch 1 was rewound" in r.stderr, r.stdout + r.stderr
    assert run_batch(p) is None
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in good + [refund])
