"""Issue 41 (3, 4): a transform that goes through ``df.rdd`` or runs an action on its input.

The stage job's counts come from an Observation of its one read, filled by the first query that holds
that read: behind ``df.rdd`` no query of it ever ends (the job waited forever), and an action of the
transform (``isEmpty()``, ``first()``, ``count()``) filled it with what that action read, a part of
the range (verify then rejected every attempt). Either way the pipeline stuck for good. The job now
sees both and takes the counts by a read of their own; every record is published or quarantined once."""

from __future__ import annotations

import textwrap

import pytest

from support.checks import assert_exactly_once, read_rows
from support.harness import orders, run_batch, write_pipeline

pytestmark = pytest.mark.integration

TRANSFORMS = {
    # through the RDD API and back: the output is no query over the input
    "via_rdd": "return df.sparkSession.createDataFrame(df.rdd.map(lambda row: row), df.schema)",
    # an action on the input, reading one piece of the range
    "is_empty": "return df.limit(0) if df.isEmpty() else df",
    "first_row": "ctx.options['first'] = df.first()\n    return df",
    # an action that reads the whole input, then a filter over it
    "counted": "return df if df.count() >= 0 else df.limit(0)",
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_transform_with_an_action_or_an_rdd_publishes_each_record_once(tmp_path, name):
    p = write_pipeline(tmp_path, transform=name)
    own = p.yaml_path.parent / "transforms"
    own.mkdir()
    (own / f"{name}.py").write_text(textwrap.dedent("""\
        def transform(df, ctx):
            {body}
        """).format(body=TRANSFORMS[name]))
    for i in range(3):  # several files, so that an action reading one piece reads a part of the range
        p.land(f"part-{i}.jsonl", orders(f"p{i}", 400), bad=[f'{{"order_id": "bad{i}", "amount": "lots"}}'])
    assert run_batch(p) == 1
    assert_exactly_once(p, batches=1)
    assert len(read_rows(p.sink)) == 1200
    assert sorted((r["source"].rsplit("/", 1)[-1], r["position"]) for r in read_rows(p.quarantine)) == [
        (f"part-{i}.jsonl", 401) for i in range(3)]
