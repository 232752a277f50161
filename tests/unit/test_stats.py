"""Delta AddFile stats from Parquet footers (verify.footer_stats) and Arrow schema helpers."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eobatch.delta_sink import normalize_type, schema_from_b64, schema_signature, schema_to_b64
from eobatch.verify import _json_value, footer_stats

UTC = dt.timezone.utc
TS_US = pa.timestamp("us", tz="UTC")

SCHEMA = pa.schema([
    ("i", pa.int64()),
    ("f", pa.float64()),
    ("s", pa.string()),
    ("ts", TS_US),
    ("d", pa.date32()),
    ("b", pa.bool_()),
    ("long", pa.string()),
    ("mixed", pa.string()),
    ("allnull", pa.int64()),
])

ROWS = {
    "i": [3, None, 1, 10, -2, None],
    "f": [1.5, 2.25, None, -0.5, 7.0, 3.0],
    "s": ["m", "b", None, "z", "a", None],
    "ts": [
        dt.datetime(2024, 1, 1, 0, 0, 0, 0, tzinfo=UTC),
        dt.datetime(2024, 1, 1, 0, 0, 0, 999, tzinfo=UTC),
        None,
        dt.datetime(2024, 6, 30, 23, 59, 59, 999_500, tzinfo=UTC),  # max: rounds UP to the next second
        dt.datetime(2023, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),  # min: rounds DOWN to .999
        None,
    ],
    "d": [dt.date(2024, 1, 2), dt.date(2020, 2, 29), None, dt.date(2030, 12, 31), dt.date(2024, 1, 1),
          dt.date(2024, 1, 1)],
    "b": [True, False, None, True, True, False],
    "long": ["a" * 33, "b" * 40, None, "c" * 50, "d" * 33, "e" * 34],
    "mixed": ["abc", "short", None, None, "z" * 33, "def"],  # min fits, max does not: both omitted
    "allnull": [None] * 6,
}


@pytest.fixture(scope="module")
def parquet_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("stats") / "part-00000.parquet"
    table = pa.table({k: pa.array(v, SCHEMA.field(k).type) for k, v in ROWS.items()}, schema=SCHEMA)
    pq.write_table(table, path, row_group_size=3)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 2
    return path


@pytest.fixture(scope="module")
def stats(parquet_file):
    pf = pq.ParquetFile(parquet_file)
    out = footer_stats(pf.metadata, SCHEMA)
    assert isinstance(out, str) and " " not in out  # compact JSON
    return json.loads(out)


def test_num_records(stats):
    assert stats["numRecords"] == 6


def test_null_counts_over_both_row_groups(stats):
    assert stats["nullCount"] == {"i": 2, "f": 1, "s": 2, "ts": 2, "d": 1, "b": 1, "long": 1, "mixed": 2,
                                  "allnull": 6}


def test_min_max_numbers_strings_dates(stats):
    mins, maxs = stats["minValues"], stats["maxValues"]
    assert (mins["i"], maxs["i"]) == (-2, 10)
    assert (mins["f"], maxs["f"]) == (-0.5, 7.0)
    assert (mins["s"], maxs["s"]) == ("a", "z")
    assert (mins["d"], maxs["d"]) == ("2020-02-29", "2030-12-31")


def test_timestamps_in_milliseconds_min_down_max_up(stats):
    assert stats["minValues"]["ts"] == "2023-12-31T23:59:59.999Z"
    assert stats["maxValues"]["ts"] == "2024-07-01T00:00:00.000Z"


def test_omitted_values(stats):
    for k in ("b", "long", "mixed", "allnull"):
        assert k not in stats["minValues"] and k not in stats["maxValues"], k
    assert set(stats["minValues"]) == set(stats["maxValues"]) == {"i", "f", "s", "ts", "d"}


def test_exact_millisecond_timestamps_are_not_rounded(tmp_path):
    t0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
    t1 = dt.datetime(2024, 1, 1, 12, 30, 15, 123_000, tzinfo=UTC)
    schema = pa.schema([("ts", TS_US)])
    pq.write_table(pa.table({"ts": pa.array([t1, t0], TS_US)}), tmp_path / "x.parquet")
    s = json.loads(footer_stats(pq.ParquetFile(tmp_path / "x.parquet").metadata, schema))
    assert s["minValues"]["ts"] == "2024-01-01T00:00:00.000Z"
    assert s["maxValues"]["ts"] == "2024-01-01T12:30:15.123Z"


def test_nested_columns_have_no_stats_and_row_groups_without_columns(tmp_path):
    schema = pa.schema([("id", pa.int32()), ("st", pa.struct([("x", pa.int32())])), ("tags", pa.list_(pa.string()))])
    table = pa.table({"id": [1, 2], "st": [{"x": 1}, {"x": 5}], "tags": [["a"], []]}, schema=schema)
    pq.write_table(table, tmp_path / "n.parquet")
    s = json.loads(footer_stats(pq.ParquetFile(tmp_path / "n.parquet").metadata, schema))
    assert s == {"numRecords": 2, "minValues": {"id": 1}, "maxValues": {"id": 2}, "nullCount": {"id": 0}}


def test_empty_file(tmp_path):
    schema = pa.schema([("id", pa.int64())])
    pq.write_table(schema.empty_table(), tmp_path / "e.parquet")
    s = json.loads(footer_stats(pq.ParquetFile(tmp_path / "e.parquet").metadata, schema))
    assert s["numRecords"] == 0 and s["minValues"] == {} and s["maxValues"] == {}


def test_nanosecond_timestamp_max_rounds_up(tmp_path):
    ts_ns = pa.timestamp("ns", tz="UTC")
    base = 1_704_067_200_000_000_000  # 2024-01-01T00:00:00Z in ns
    schema = pa.schema([("ts", ts_ns)])
    pq.write_table(pa.table({"ts": pa.array([base + 1, base + 500], ts_ns)}, schema=schema),
                   tmp_path / "ns.parquet")
    s = json.loads(footer_stats(pq.ParquetFile(tmp_path / "ns.parquet").metadata, schema))
    assert s["minValues"]["ts"] == "2024-01-01T00:00:00.000Z"
    assert s["maxValues"]["ts"] == "2024-01-01T00:00:00.001Z"  # above the real max (…000000500)


# -- _json_value directly ------------------------------------------------------------------


@pytest.mark.parametrize("v,t,is_max,expected", [
    (None, pa.int64(), False, None),
    (True, pa.bool_(), True, None),
    (0, pa.bool_(), False, None),
    (5, pa.int32(), False, 5),
    (2.5, pa.float64(), True, 2.5),
    (float("nan"), pa.float64(), True, None),
    (float("inf"), pa.float64(), True, None),
    (decimal.Decimal("12.34"), pa.decimal128(10, 2), False, 12.34),
    ("x" * 32, pa.string(), False, "x" * 32),
    ("x" * 33, pa.string(), False, None),
    (b"abc", pa.binary(), False, "abc"),
    (b"\xff\xfe", pa.binary(), False, None),
    # integer timestamps in the column's unit
    (1_500, pa.timestamp("us", tz="UTC"), False, "1970-01-01T00:00:00.001Z"),
    (1_500, pa.timestamp("us", tz="UTC"), True, "1970-01-01T00:00:00.002Z"),
    (2_000, pa.timestamp("us"), True, "1970-01-01T00:00:00.002Z"),
    (1_500, pa.timestamp("ms"), False, "1970-01-01T00:00:01.500Z"),
    (3, pa.timestamp("s"), True, "1970-01-01T00:00:03.000Z"),
    (-1, pa.timestamp("us", tz="UTC"), False, "1969-12-31T23:59:59.999Z"),
    (-1, pa.timestamp("us", tz="UTC"), True, "1970-01-01T00:00:00.000Z"),
    # datetimes: naive ones are UTC
    (dt.datetime(2024, 2, 29, 1, 2, 3, 4), pa.timestamp("us"), False, "2024-02-29T01:02:03.000Z"),
    (dt.datetime(2024, 2, 29, 1, 2, 3, 4), pa.timestamp("us"), True, "2024-02-29T01:02:03.001Z"),
    (dt.datetime(2024, 1, 1, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=1))), TS_US, False,
     "2024-01-01T00:00:00.000Z"),
    (19_723, pa.date32(), False, "2024-01-01"),
    (dt.date(1999, 12, 31), pa.date32(), True, "1999-12-31"),
])
def test_json_value(v, t, is_max, expected):
    assert _json_value(v, t, is_max) == expected


# -- normalize_type / schema_signature / b64 -------------------------------------------------


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
