"""eobatch.delta_sink: the Arrow schema helpers (``normalize_type``, ``schema_signature``, the
schema's base64 form) and the creation of a table by committers racing for it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from eobatch.delta_sink import normalize_type, schema_change, schema_from_b64, schema_signature, schema_to_b64

TS_US = pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize("a,b", [
    (pa.string(), pa.large_string()),
    (pa.string(), pa.string_view()),
    (pa.binary(), pa.large_binary()),
    (pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="Etc/UTC")),
    (pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="+00:00")),
    (pa.list_(pa.string()), pa.large_list(pa.large_string())),
    (pa.struct([("x", pa.string())]), pa.struct([("x", pa.large_string())])),
    (pa.map_(pa.string(), pa.timestamp("us", tz="Etc/UTC")), pa.map_(pa.large_string(), TS_US)),
])
def test_normalize_type_treats_variants_alike(a, b):
    assert normalize_type(a) == normalize_type(b)


@pytest.mark.parametrize("a,b", [
    (pa.string(), pa.binary()),
    (pa.timestamp("us", tz="UTC"), pa.timestamp("ms", tz="UTC")),
    (pa.timestamp("us", tz="UTC"), pa.timestamp("us")),
    (pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="Europe/Paris")),
    (pa.int32(), pa.int64()),
    (pa.list_(pa.int32()), pa.list_(pa.int64())),
    (pa.struct([("x", pa.int32())]), pa.struct([("y", pa.int32())])),
])
def test_normalize_type_keeps_real_differences(a, b):
    assert normalize_type(a) != normalize_type(b)


def test_normalize_type_names():
    assert normalize_type(pa.large_string()) == "string" == normalize_type(pa.string())
    assert normalize_type(pa.timestamp("us", tz="Etc/UTC")) == "timestamp[us,UTC]"
    assert normalize_type(pa.int64()) == "int64"


def test_schema_signature_and_drop():
    schema = pa.schema([("id", pa.large_string()), ("day", pa.date32()), ("ts", pa.timestamp("us", tz="Etc/UTC"))])
    assert schema_signature(schema) == [("id", "string"), ("day", "date32[day]"), ("ts", "timestamp[us,UTC]")]
    assert schema_signature(schema, drop=("day",)) == [("id", "string"), ("ts", "timestamp[us,UTC]")]


def test_schema_b64_roundtrip():
    schema = pa.schema([
        pa.field("id", pa.string(), nullable=False),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("ts", TS_US),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("attrs", pa.map_(pa.string(), pa.int32())),
        pa.field("st", pa.struct([("x", pa.int32()), ("y", pa.large_string())])),
    ], metadata={b"k": b"v"})
    s = schema_to_b64(schema)
    assert isinstance(s, str)
    s.encode("ascii")
    back = schema_from_b64(s)
    assert back.equals(schema, check_metadata=True)
    assert back.field("id").nullable is False


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
    from eobatch.delta_sink import is_widening

    assert is_widening(old, new) is widening
