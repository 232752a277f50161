"""kind: delta end to end: a pipeline reads another pipeline's sink table exactly once, through
real spark-submit stage jobs, while the upstream publishes, compacts, vacuums and rewinds."""

from __future__ import annotations

import collections
import json
import textwrap

import pytest

from eobatch.core.maintenance import maintain
from support.checks import read_rows
from support.harness import Pipeline, orders, run_batch, write_pipeline

pytestmark = pytest.mark.integration


def _downstream(root, upstream: Pipeline, name: str = "silver", extra_source: str = "") -> Pipeline:
    sink, quarantine = root / "lake" / name, root / "lake" / f"{name}_bad"
    path = root / "pipelines" / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        source:
          kind: delta
          table: {upstream.sink}
          max_records_per_batch: 5
        """) + textwrap.indent(extra_source, "  ") + textwrap.dedent(f"""\
        schema: "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"
        sink:
          table: {sink}
        quarantine:
          table: {quarantine}
        retries:
          stage: 0
          commit: 2
          delay_seconds: 1
        """))
    return Pipeline(root, name, path, root / "unused-landing", sink, quarantine)


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
    down.protocol().rewind(3)
    up.land("c.jsonl", orders("c", 2))
    assert _drain(up) == [4, 5]  # the upstream reads b again after its rewind, then c
    assert _drain(down) == [4, 5]  # 4: the rewind's batch, at batch 3's start; 5: upstream batches 4 and 5
    assert _counts(down.sink) == _counts(up.sink) and sum(_counts(down.sink).values()) == 11
    assert json.loads(json.dumps(down.protocol().ledger.plan(5).range["upstream"])) == {"bronze": [4, 5]}
