"""kind: parquet end to end: real spark-submit stages rows of Parquet landing files as JSON records
(bad ones quarantined with their file and row index), two batches published exactly once."""

from __future__ import annotations

import os
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.checks import assert_exactly_once, read_rows
from support.harness import Pipeline, run_batch
from support.records import stage_summary

pytestmark = pytest.mark.integration

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


def _pipeline(root) -> Pipeline:
    name = "pq_orders"
    landing, sink, quarantine = root / "landing" / name, root / "lake" / name, root / "lake" / f"{name}_bad"
    landing.mkdir(parents=True)
    path = root / "pipelines" / f"{name}.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        source:
          kind: parquet
          path: {landing}
          max_records_per_batch: 6
        schema: "order_id STRING NOT NULL, customer STRING, amount DOUBLE"
        sink:
          table: {sink}
        quarantine:
          table: {quarantine}
        retries:
          stage: 0
          commit: 2
          delay_seconds: 1
        """))
    return Pipeline(root, name, path, landing, sink, quarantine)


def _land(p: Pipeline, name: str, table: pa.Table, mtime_s: int, row_group_size: int | None = None) -> str:
    """Write under a hidden name, then rename into place (as producers must)."""
    final = p.landing / name
    tmp = final.parent / f".{final.name}.tmp"
    final.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, tmp, row_group_size=row_group_size)
    os.replace(tmp, final)
    os.utime(final, (mtime_s, mtime_s))
    return str(final)


def test_two_batches_of_parquet_files_are_published_exactly_once(tmp_path):
    p = _pipeline(tmp_path)
    good_a = [{"order_id": f"a-{i}", "customer": f"c{i}", "amount": i + 0.5} for i in range(3)]
    _land(p, "a.parquet", pa.Table.from_pylist(good_a), T0 + 1, row_group_size=2)  # rows in two row groups
    good_b = [{"order_id": f"b-{i}", "customer": "cb", "amount": 2.0} for i in range(2)]
    b = _land(p, "b.parquet", pa.Table.from_pylist(good_b + [{"order_id": None, "customer": "bad1", "amount": 1.5}]),
              T0 + 2)
    p.landed += good_a + good_b
    p.landed_bad.append('{"customer":"bad1","amount":1.5}')  # to_json of the row: nulls left out

    assert run_batch(p) == 1
    plan = p.protocol().ledger.plan(1)
    assert [f["records"] for f in plan.range["files"]] == [3, 3] and plan.rows_in == 6

    # another file, another schema: amount as text and a column the pipeline does not know
    c = _land(p, "sub/c.parquet", pa.table({"order_id": ["c-0", "c-1"], "amount": [None, "12 euros"],
                                             "coupon": ["X", "Y"]}), T0 + 3)
    p.landed.append({"order_id": "c-0"})
    p.landed_bad.append('{"order_id":"c-1","amount":"12 euros","coupon":"Y"}')
    assert run_batch(p) == 2
    assert run_batch(p) is None  # nothing new: no third batch

    assert_exactly_once(p, batches=2)
    published = {r["order_id"]: r for r in read_rows(p.sink)}
    assert published["a-2"] == {"order_id": "a-2", "customer": "c2", "amount": 2.5}
    assert published["c-0"] == {"order_id": "c-0", "customer": None, "amount": None}
    quarantined = {(r["source"], r["position"]): (r["reason"], r["batch_id"]) for r in read_rows(p.quarantine)}
    assert quarantined == {(b, 2): ("missing required field 'order_id'", 1),
                           (c, 1): ("field 'amount': expected DOUBLE, got 12 euros", 2)}
    prepared = p.protocol().ledger.prepared(2)
    assert (prepared.rows_in, prepared.rows_valid, prepared.rows_quarantined) == (2, 1, 1)


def test_a_forged_footer_row_count_skips_that_file_and_the_others_publish(tmp_path):
    """Files written by pyarrow, then their footers' row counts forged (negative; not their row
    groups' sum): each is skipped at plan, named in the batch's notes, never read; the good files
    of the same batch publish, and the next run has nothing left to retry."""
    from support.parquet_forge import forge_rows

    p = _pipeline(tmp_path)
    good = [{"order_id": f"g-{i}", "customer": "c", "amount": 1.0} for i in range(3)]
    rows = pa.Table.from_pylist([{"order_id": f"x-{i}", "customer": "x", "amount": 2.0} for i in range(4)])
    forged = []
    for i, n in enumerate((-5, 10**12)):
        path = _land(p, f"forged-{i}.parquet", rows, T0 + i)
        forge_rows(path, n)
        os.utime(path, (T0 + i, T0 + i))
        forged.append(path)
    _land(p, "good.parquet", pa.Table.from_pylist(good), T0 + 5)
    p.landed += good

    assert run_batch(p) == 1
    assert run_batch(p) is None
    assert_exactly_once(p, batches=1)
    plan = p.protocol().ledger.plan(1)
    assert plan.rows_in == 3 and [f["records"] for f in plan.range["files"]] == [0, 0, 3]
    assert [n.split(" (")[0] for n in plan.notes] == [f"skipped {f}" for f in forged]
    assert "negative row count" in plan.notes[0] and "1000000000000 rows" in plan.notes[1]
    assert read_rows(p.quarantine) == []


# -- identity: time of check is not time of use --------------------------------------------------


def _same_size_other_rows(p: Pipeline, name: str, prefix: str, mtime_s: int) -> str:
    """A file of 3 rows whose bytes differ only in the ids' prefix (same size, same layout)."""
    rows = [{"order_id": f"{prefix}-{i}", "customer": "c", "amount": 1.0} for i in range(3)]
    final = p.landing / name
    tmp = final.parent / f".{final.name}.{prefix}.tmp"
    pq.write_table(pa.Table.from_pylist(rows), tmp, compression="NONE", use_dictionary=False)
    os.replace(tmp, final)
    os.utime(final, (mtime_s, mtime_s))
    return str(final)


def test_a_parquet_file_replaced_after_the_plan_by_one_of_the_same_name_size_and_mtime_is_never_read(tmp_path):
    """The planned file is replaced by another of the same name, size and modification time (a
    writer's rename, then ``touch -r``): the stage job refuses it, naming the file, and stages
    nothing; the replacement's rows are never read."""
    from support.harness import stage

    p = _pipeline(tmp_path)
    a = _same_size_other_rows(p, "a.parquet", "a", T0)
    plan, _ = p.protocol().plan()
    assert plan.rows_in == 3
    size = os.stat(a).st_size
    _same_size_other_rows(p, "a.parquet", "x", T0)
    assert os.stat(a).st_size == size and int(os.stat(a).st_mtime) == T0
    r = stage(p, plan.batch_id, "a1")
    out = r.stdout + r.stderr
    assert r.returncode != 0 and f"{a}: another file than the one planned is there now" in out, out[-3000:]
    assert p.protocol().ledger.stage_summary(plan.batch_id, "a1") is None


def test_a_parquet_file_swapped_for_a_link_while_the_job_reads_is_read_as_planned(tmp_path, local_spark):
    """The job opens each planned Parquet file itself (no link followed) and Spark reads that
    descriptor: the planned file swapped for a link to another Parquet file while the job reads
    (and back) has the job read the planned rows; a plan from before identities reads as before."""
    from eobatch.sources.parquet import KIND

    p = _pipeline(tmp_path)
    a = _same_size_other_rows(p, "a.parquet", "a", T0)
    other = _same_size_other_rows(p, "_other.parquet", "x", T0)
    rng, n, _ = KIND.planner(p.cfg).next_range([], 100)
    assert n == 3 and rng["files"][0]["identity"] == [os.stat(a).st_dev, os.stat(a).st_ino, os.stat(a).st_mtime_ns]
    job = KIND.job_source(p.cfg.source)
    lines = KIND.read(local_spark, rng, job)  # opened and checked here; read lazily, below
    os.rename(a, tmp_path / "moved.parquet")
    os.symlink(other, a)
    ids = sorted(r["raw"] for r in lines.collect())
    positions = KIND.positions(lines)
    os.remove(a)
    os.rename(tmp_path / "moved.parquet", a)
    assert ids == [f'{{"order_id":"a-{i}","customer":"c","amount":1.0}}' for i in range(3)]
    assert positions[a] == [3, 0, 2] and positions["files"][a][0] == os.stat(a).st_size
    assert KIND.range(rng).check_stage(stage_summary(3, positions)) == []
    old = {"files": [{k: v for k, v in f.items() if k != "identity"} for f in rng["files"]]}
    assert sorted(r["raw"] for r in KIND.read(local_spark, old, job).collect()) == ids

