"""eobatch.sinks.delta: the creation of a table by committers racing for it, and schema
evolution (``schema_change``: what a commit of a staged schema needs of a table)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from eobatch.sinks.delta import is_widening, schema_change


def test_committers_racing_to_create_a_local_table_create_it_once(tmp_path):
    """The first commit of a pipeline, by several committers at once: each sees the table, one
    commits the batch, the others are told so, and version 0 is the only CREATE TABLE (a lost
    create retried on top would change the table id under the batch)."""
    from support.checks import delta_log_commits
    from support.delta_races import race_first_commit

    for round_ in range(15):
        race_first_commit(str(tmp_path / f"t{round_}"), delta_log_commits)


# -- schema evolution: what a commit of a staged schema needs of a table ------------------------------


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
    add, problems = schema_change(pa.schema([("n", pa.int32())]), pa.schema([("n", pa.int64())]))
    assert add == [] and problems == ["column 'n' is int32 in the table and int64 in this batch: a widening Delta's "
                                      "typeWidening table feature allows, which delta-rs (the commit engine) cannot "
                                      "apply: cast the column back to int32 in the transform, or publish it under a "
                                      "new name"]
    add, problems = schema_change(pa.schema([("n", pa.int64())]), pa.schema([("n", pa.int32())]))
    assert "type is never changed" in problems[0]  # a narrowing
    add, problems = schema_change(table, pa.schema([("a", pa.string())]))
    assert add == [] and "column(s) b are not in this batch's schema" in problems[0]


@pytest.mark.parametrize("old,new,widening", [
    (pa.int8(), pa.int64(), True), (pa.int32(), pa.int64(), True), (pa.int64(), pa.int32(), False),
    (pa.float32(), pa.float64(), True), (pa.int32(), pa.float64(), True), (pa.int64(), pa.float64(), False),
    (pa.date32(), pa.timestamp("us"), True), (pa.date32(), pa.timestamp("us", "UTC"), False),
    (pa.decimal128(10, 2), pa.decimal128(12, 3), True), (pa.decimal128(10, 2), pa.decimal128(10, 3), False),
    (pa.decimal128(10, 2), pa.decimal128(10, 2), False), (pa.string(), pa.large_string(), False)])
def test_the_type_changes_delta_calls_widenings(old, new, widening):
    assert is_widening(old, new) is widening
