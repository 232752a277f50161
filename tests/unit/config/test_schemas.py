"""eobatch.config.schemas: the Arrow schema helpers (``normalize_type``, ``schema_signature``, the
schema's base64 form)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from eobatch.config.schemas import normalize_type, schema_from_b64, schema_signature, schema_to_b64

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
