"""`make bench`'s merge row: one batch into a merge sink against the same batch appended.

Two pipelines on the same generated records, each through the product's own steps (the stage
job's spark-submit, verify, commit; as ``support.harness.run_batch`` calls them):

* batch 1 lands ``records`` orders with keys 0..n-1 (it creates the tables);
* batch 2, the one measured, lands ``records`` changes: half of them update keys of batch 1 (a
  tenth of those with an older version, which the merge must ignore), half are new keys, 1 % of
  them delete their key.

The append pipeline publishes every record of batch 2; the merge pipeline upserts them into a
table of n keys (delta-rs MERGE: it rewrites the files holding matched keys). Reported:
``merge_seconds`` and ``append_seconds`` (stage + verify + commit of batch 2), their ratio
``merge_over_append``, and each step's seconds (``merge_steps``, ``append_steps``).
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

from eobatch.job import launch
from support.harness import Pipeline, base_env, write_pipeline

SCHEMA = "order_id STRING NOT NULL, seq BIGINT NOT NULL, status STRING, amount DOUBLE, op STRING"
MERGE = {"keys": ["order_id"], "sequence_by": "seq", "delete_when": "op = 'd'"}


def _land(p: Pipeline, name: str, lines: list[str]) -> None:
    path = p.landing / name
    tmp = p.landing / f".{name}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def _batches(n: int, seed: int = 7) -> tuple[list[str], list[str]]:
    rnd = random.Random(seed)
    first = [json.dumps({"order_id": f"k{i:09d}", "seq": 1000, "status": "new", "amount": float(i % 997), "op": "u"})
             for i in range(n)]
    second = []
    for j in range(n):
        key = rnd.randrange(n) if j % 2 == 0 else n + j  # half updates (of random keys), half new keys
        seq = 500 if j % 20 == 0 else 2000 + j  # a tenth of the updates are older than the table's row
        op = "d" if j % 100 == 1 else "u"
        second.append(json.dumps({"order_id": f"k{key:09d}", "seq": seq, "status": "paid", "amount": float(j % 991),
                                  "op": op}))
    return first, second


def one_batch(p: Pipeline, master: str) -> dict:
    """Plan, stage, verify and commit one batch; seconds of each step (``plan`` included)."""
    proto = p.protocol()
    proto.recover()
    steps: dict = {}
    t = time.time()
    plan, _ = proto.plan()
    steps["plan"] = round(time.time() - t, 2)
    assert plan is not None, "nothing to plan"
    attempt = launch.new_attempt_id(1)
    t = time.time()
    r = subprocess.run(launch.spark_submit_argv(p.cfg, plan.batch_id, attempt, master=master), env=base_env(),
                       capture_output=True, text=True, timeout=3600)
    steps["stage"] = round(time.time() - t, 2)
    if r.returncode != 0:
        raise RuntimeError(f"stage of {p.name} batch {plan.batch_id} failed: {r.stderr[-2000:]}")
    t = time.time()
    proto.verify(plan.batch_id, attempt)
    steps["verify"] = round(time.time() - t, 2)
    t = time.time()
    proto.commit(plan.batch_id)
    steps["commit"] = round(time.time() - t, 2)
    return steps


def measure(records: int, master: str, work: Path) -> dict:
    first, second = _batches(records)
    out: dict = {"merge_records": records}
    for sink in ("append", "merge"):
        p = write_pipeline(work / sink, name=f"bench_{sink}", schema=SCHEMA, max_records=records + 1,
                           merge=MERGE if sink == "merge" else None)
        _land(p, "b1.jsonl", first)
        one_batch(p, master)
        _land(p, "b2.jsonl", second)
        steps = one_batch(p, master)
        out[f"{sink}_steps"] = steps
        out[f"{sink}_seconds"] = round(sum(v for k, v in steps.items() if k != "plan"), 2)  # stage + verify + commit
    out["merge_over_append"] = round(out["merge_seconds"] / out["append_seconds"], 2)
    out["merge_commit_over_append_commit"] = round(out["merge_steps"]["commit"] / max(out["append_steps"]["commit"],
                                                                                       0.01), 1)
    return out
