"""Schema evolution: a column added to a pipeline's schema mid-stream reaches the table with the
first batch that writes it (real delta-rs tables, the protocol's own verify and commit); a type
change, a removed column, or a new column under ``schema_evolution: fail`` is refused at verify,
before PREPARED, naming the column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from eobatch.delta_sink import schema_change
from eobatch.errors import EobatchError
from eobatch.protocol import Protocol
from support.checks import delta_log_commits
from support.protocol_runs import land_and_run
from support.pyarrow_stager import stage

BASE = "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"


def _land(cfg, name: str, records: list[dict]) -> None:
    (Path(cfg.source.path) / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def _stage_and_verify(proto: Protocol):
    plan, _ = proto.plan()
    assert plan is not None, "nothing to plan"
    return plan.batch_id, proto.verify(plan.batch_id, stage(proto, plan.batch_id))


def test_schema_change_adds_new_columns_and_refuses_the_rest():
    table = pa.schema([("a", pa.string()), ("b", pa.float64())])
    add, problems = schema_change(table, pa.schema([("a", pa.large_string()), ("c", pa.int64()), ("b", pa.float64())]))
    assert ([(f.name, f.type, f.nullable) for f in add], problems) == ([("c", pa.int64(), True)], [])
    assert schema_change(None, table) == ([], [])
    assert schema_change(table, table, "fail") == ([], [])
    add, problems = schema_change(table, pa.schema([("a", pa.string()), ("b", pa.float64()), ("c", pa.int64())]),
                                  "fail")
    assert add == [] and "new column(s) c" in problems[0] and "schema_evolution: add_columns" in problems[0]
    add, problems = schema_change(table, pa.schema([("a", pa.string()), ("b", pa.string())]))
    assert add == [] and problems == ["column 'b' is double in the table and string in this batch: a column's "
                                      "type is never changed (Delta keeps it; add a column of the new type under "
                                      "a new name instead)"]
    add, problems = schema_change(table, pa.schema([("a", pa.string())]))
    assert add == [] and "column(s) b are not in this batch's schema" in problems[0]


def test_a_column_added_mid_stream_arrives_with_the_batch_that_writes_it(make_cfg):
    before = make_cfg()
    land_and_run(Protocol(before), range(3), "a.jsonl")
    after = make_cfg(schema=BASE + ", coupon STRING")
    proto = Protocol(after)
    _land(after, "b.jsonl", [{"order_id": "n1", "amount": 1.0, "coupon": "SPRING"}, {"order_id": "n2"}])
    batch_id, prepared = _stage_and_verify(proto)
    proto.commit(batch_id)

    from deltalake import DeltaTable

    dt = DeltaTable(after.sink_table)
    assert [f.name for f in pa.schema(dt.schema().to_arrow())] == ["order_id", "customer", "amount", "ts", "coupon"]
    rows = {r["order_id"]: r["coupon"] for r in dt.to_pyarrow_table().to_pylist()}
    assert rows == {"o0": None, "o1": None, "o2": None, "n1": "SPRING", "n2": None}
    commits = delta_log_commits(Path(after.sink_table))
    data = [c for c in commits if c["txns"]]
    assert [c["txns"][0]["version"] for c in data] == [1, 2]
    (added,) = [c for c in commits if c["version"] == data[-1]["version"] - 1]
    assert not added["txns"] and not added["adds"]  # the columns, just before the batch that writes them
    assert added["commitInfo"]["operation"] == "ADD COLUMN", added["commitInfo"]
    # a retried commit adds nothing twice and publishes nothing twice
    proto.commit(batch_id)
    assert len(delta_log_commits(Path(after.sink_table))) == len(commits)


@pytest.mark.parametrize("schema, evolution, words", [
    (BASE + ", coupon STRING", "fail", "new column(s) coupon are not in the table and schema_evolution is 'fail'"),
    ("order_id STRING NOT NULL, customer STRING, amount STRING, ts TIMESTAMP", "add_columns",
     "column 'amount' is double in the table and string in this batch"),
    ("order_id STRING NOT NULL, customer STRING, ts TIMESTAMP", "add_columns",
     "the table's column(s) amount are not in this batch's schema"),
])
def test_a_schema_change_the_table_cannot_take_is_refused_before_prepared(make_cfg, schema, evolution, words):
    land_and_run(Protocol(make_cfg()), range(2), "a.jsonl")
    proto = Protocol(make_cfg(schema=schema, schema_evolution=evolution))
    _land(proto.cfg, "b.jsonl", [{"order_id": "n1", "amount": 1.0}])
    with pytest.raises(EobatchError) as e:
        _stage_and_verify(proto)
    assert words in str(e.value)
    assert proto.ledger.prepared(2) is None
