"""eobatch.core.table_files: Delta AddFile stats from Parquet footers (``footer_stats``), bound by bound
(``_json_value``)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eobatch.core.table_files import _json_value, footer_stats

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
    out = footer_stats(pf.metadata, SCHEMA, nan_free=["f"])  # the writer saw no NaN in "f"
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


def test_float_bounds_need_the_writer_to_vouch_for_no_nan(parquet_file):
    # without the writer's word that "f" holds no NaN, its footer min/max (which Parquet writers
    # compute ignoring NaN) are not published; everything else is the same
    meta = pq.ParquetFile(parquet_file).metadata
    for nan_free in (None, [], ["i", "s"]):
        s = json.loads(footer_stats(meta, SCHEMA, nan_free=nan_free))
        assert "f" not in s["minValues"] and "f" not in s["maxValues"]
        assert s["nullCount"]["f"] == 1
        assert set(s["minValues"]) == set(s["maxValues"]) == {"i", "s", "ts", "d"}
    assert footer_stats(meta, SCHEMA) == footer_stats(meta, SCHEMA, nan_free=None)


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


def _stats_of(tmp_path, table: pa.Table, nan_free=None, name="t.parquet", **kw) -> tuple[str, dict]:
    pq.write_table(table, tmp_path / name, **kw)
    text = footer_stats(pq.ParquetFile(tmp_path / name).metadata, table.schema, nan_free=nan_free)
    return text, json.loads(text, parse_float=decimal.Decimal)


D = decimal.Decimal


def test_decimal_bounds_are_exact_json_numbers(tmp_path):
    schema = pa.schema([("d20", pa.decimal128(20, 0)), ("d38", pa.decimal128(38, 18)), ("d5", pa.decimal128(5, 2)),
                        ("neg", pa.decimal128(12, 3))])
    table = pa.table({
        "d20": pa.array([D(1), D(9007199254740993), None, D(-9007199254740993)], schema.field("d20").type),
        "d38": pa.array([D("-12345678901234567890.123456789012345678"), D("0.000000000000000001"), None,
                         D("99999999999999999999.999999999999999999")], schema.field("d38").type),
        "d5": pa.array([D("12.30"), D("-0.50"), D("0.00"), None], schema.field("d5").type),
        "neg": pa.array([D("-1.000"), D("-123456789.125"), D("-0.001"), D("-2.500")], schema.field("neg").type),
    }, schema=schema)
    text, s = _stats_of(tmp_path, table, row_group_size=2)
    # the very text of the numbers: no float rounding, no exponent, the column's scale kept
    assert '"d20":-9007199254740993' in text and '"d20":9007199254740993' in text
    assert '"d38":-12345678901234567890.123456789012345678' in text
    assert '"d38":99999999999999999999.999999999999999999' in text
    assert '"d5":-0.50' in text and '"d5":12.30' in text
    assert '"neg":-123456789.125' in text and '"neg":-0.001' in text
    assert re.search(r"\d[eE]", text) is None  # no exponent anywhere
    assert s["minValues"] == {"d20": D(-9007199254740993), "d38": D("-12345678901234567890.123456789012345678"),
                              "d5": D("-0.50"), "neg": D("-123456789.125")}
    assert s["maxValues"] == {"d20": D(9007199254740993), "d38": D("99999999999999999999.999999999999999999"),
                              "d5": D("12.30"), "neg": D("-0.001")}
    assert s["nullCount"] == {"d20": 1, "d38": 1, "d5": 1, "neg": 0}


def test_decimal_stored_as_integers_is_exact_too(tmp_path):
    schema = pa.schema([("d", pa.decimal128(18, 0)), ("c", pa.decimal128(9, 2))])
    table = pa.table({"d": pa.array([D(9007199254740993), D(3)], schema.field("d").type),
                      "c": pa.array([D("1.10"), D("-7.05")], schema.field("c").type)}, schema=schema)
    text, s = _stats_of(tmp_path, table, store_decimal_as_integer=True)
    assert pq.ParquetFile(tmp_path / "t.parquet").metadata.row_group(0).column(0).physical_type == "INT64"
    assert '"d":9007199254740993' in text and '"c":-7.05' in text and '"c":1.10' in text


def test_decimal_json_text_and_everything_else_unchanged(tmp_path):
    # the stats JSON is compact, in the same key order, with the same text for other types
    schema = pa.schema([("i", pa.int64()), ("s", pa.string()), ("d", pa.decimal128(20, 0)), ("u", pa.string())])
    table = pa.table({"i": [1, 2], "s": ["a\"b", "c"], "d": pa.array([D(1), D(2)], schema.field("d").type),
                      "u": ["\u00e9t\u00e9", "z\u00fc"]}, schema=schema)
    text, _ = _stats_of(tmp_path, table)
    assert text == ('{"numRecords":2,"minValues":{"i":1,"s":"a\\"b","d":1,"u":"z\\u00fc"},'
                    '"maxValues":{"i":2,"s":"c","d":2,"u":"\\u00e9t\\u00e9"},"nullCount":{"i":0,"s":0,"d":0,"u":0}}')


NEG_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]  # what -float("nan") gives


@pytest.mark.parametrize("values", [
    [1.0, float("nan"), 2.0],  # Spark, DuckDB, DataFusion: NaN above +inf (x > 5 matches it)
    [1.0, NEG_NAN, 2.0],  # DataFusion orders a sign-bit NaN below -inf (x < 0 matches it)
    [float("nan"), None],  # footer has no min/max at all
])
def test_float_column_holding_nan_gets_no_bounds(tmp_path, values):
    table = pa.table({"x": pa.array(values, pa.float64()), "y": pa.array(values, pa.float32())})
    pq.write_table(table, tmp_path / "nan.parquet")
    meta = pq.ParquetFile(tmp_path / "nan.parquet").metadata
    st = meta.row_group(0).column(0).statistics
    if st.has_min_max:  # what pyarrow (Arrow C++) writes: min/max computed as if the NaN were not there
        assert (st.min, st.max) == (1.0, 2.0)
    # the writer of this file would not vouch for x or y: no bounds (whatever the footer says)
    s = json.loads(footer_stats(meta, table.schema, nan_free=None))
    assert s["minValues"] == {} and s["maxValues"] == {}
    assert s["nullCount"] == {"x": values.count(None), "y": values.count(None)}


def test_float_column_without_nan_keeps_bounds_zero_outward_inf_omitted(tmp_path):
    table = pa.table({
        "pos0": pa.array([0.0, 1.5], pa.float64()),  # min 0 -> written as -0.0
        "neg0": pa.array([-0.0, -1.0], pa.float64()),  # max 0 -> written as 0.0
        "f32": pa.array([0.1, 2.5, None], pa.float32()).slice(0, 2),
        "inf": pa.array([float("-inf"), 1.0], pa.float64()),
        "pinf": pa.array([1.0, float("inf")], pa.float64()),
    })
    text, s = _stats_of(tmp_path, table, nan_free=["pos0", "neg0", "f32", "inf", "pinf"])
    assert '"pos0":-0.0' in text.split('"maxValues"')[0] and '"neg0":0.0' in text.split('"maxValues"')[1]
    assert s["minValues"]["pos0"] == 0 and s["maxValues"]["pos0"] == D("1.5")
    assert s["minValues"]["neg0"] == -1 and s["maxValues"]["neg0"] == 0
    # float32 bounds: the exact float32 values, which a reader parses back to the same float32
    f32 = json.loads(text)
    assert (f32["minValues"]["f32"], f32["maxValues"]["f32"]) == (float(pa.scalar(0.1, pa.float32()).as_py()), 2.5)
    assert pa.scalar(f32["minValues"]["f32"], pa.float32()).as_py() == pa.scalar(0.1, pa.float32()).as_py()
    # JSON has no infinity: a column whose bound is infinite has none (both or nothing)
    for c in ("inf", "pinf"):
        assert c not in s["minValues"] and c not in s["maxValues"] and s["nullCount"][c] == 0


def test_row_group_with_values_but_no_min_max_drops_the_column_bounds(tmp_path):
    # Arrow drops a row group's string statistics above 4 KiB: the other row group's a..b is not
    # the file's range (it holds "zzz..."), so the file gets no bounds for the column
    table = pa.table({"s": ["z" * 5000, "y" * 5000, "a", "b"], "i": [4, 3, 2, 1]})
    text, s = _stats_of(tmp_path, table, row_group_size=2)
    meta = pq.ParquetFile(tmp_path / "t.parquet").metadata
    assert not meta.row_group(0).column(0).statistics.has_min_max
    assert meta.row_group(1).column(0).statistics.has_min_max
    assert "s" not in s["minValues"] and "s" not in s["maxValues"] and s["nullCount"]["s"] == 0
    assert (s["minValues"]["i"], s["maxValues"]["i"]) == (1, 4)


def test_row_group_of_only_nulls_does_not_hide_bounds(tmp_path):
    table = pa.table({"i": pa.array([None, None, 5, 7], pa.int64())})
    _, s = _stats_of(tmp_path, table, row_group_size=2)
    assert (s["minValues"]["i"], s["maxValues"]["i"], s["nullCount"]["i"]) == (5, 7, 2)


class _FakeStats:
    def __init__(self, **kw):
        self.has_min_max, self.has_null_count, self.null_count, self.num_values = True, True, 0, 1
        self.min = self.max = None
        self.__dict__.update(kw)


class _FakeMeta:
    """A footer with one column ``i`` and one row group, for statistics pyarrow never writes."""

    def __init__(self, st):
        col = type("Col", (), {"path_in_schema": "i", "statistics": st})()
        self._rg = type("RG", (), {"column": lambda _self, ci: col})()
        self.num_columns, self.num_row_groups, self.num_rows = 1, 1, 3

    def row_group(self, rg):
        return self._rg


def test_footer_without_null_count_publishes_no_null_count():
    schema = pa.schema([("i", pa.int64())])
    s = json.loads(footer_stats(_FakeMeta(_FakeStats(has_null_count=False, min=1, max=3, num_values=3)), schema))
    assert s["nullCount"] == {} and (s["minValues"], s["maxValues"]) == ({"i": 1}, {"i": 3})


# -- _json_value directly ------------------------------------------------------------------


@pytest.mark.parametrize("v,t,is_max,expected", [
    (None, pa.int64(), False, None),
    (True, pa.bool_(), True, None),
    (0, pa.bool_(), False, None),
    (5, pa.int32(), False, 5),
    (2.5, pa.float64(), True, 2.5),
    (float("nan"), pa.float64(), True, None),
    (float("inf"), pa.float64(), True, None),
    (float("-inf"), pa.float64(), False, None),
    (decimal.Decimal("12.34"), pa.decimal128(10, 2), False, decimal.Decimal("12.34")),
    (decimal.Decimal("NaN"), pa.decimal128(10, 2), False, None),
    (12.34, pa.decimal128(10, 2), False, None),  # a decimal bound that is not a Decimal: not trusted
    ("x" * 32, pa.string(), False, "x" * 32),
    ("x" * 33, pa.string(), False, None),
    (b"abc", pa.string(), False, "abc"),
    (b"\xff\xfe", pa.string(), False, None),
    (b"abc", pa.binary(), False, None),  # Delta collects no min/max for binary columns
    (b"\x00<", pa.float16(), False, None),  # half floats come back as raw bytes: never a string bound
    ("abc", pa.int64(), False, None),  # a bound of the wrong kind for the column: none
    (5, pa.float64(), True, None),
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
    got = _json_value(v, t, is_max)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("is_max,sign", [(False, -1.0), (True, 1.0)])
@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_json_value_zero_bounds_go_outward(zero, is_max, sign):
    # readers that order -0.0 below +0.0 (delta-rs/DataFusion) must not skip a -0.0 row because
    # a min said +0.0, nor a +0.0 row because a max said -0.0
    got = _json_value(zero, pa.float64(), is_max)
    assert got == 0.0 and math.copysign(1.0, got) == sign

