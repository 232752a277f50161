"""spark_jobs/classify.py without Spark: the plain-Python parts its column expressions rely on.

Every rule of ``classify``, ``bound_partition_values`` and ``expect`` is a Spark column
expression (its reasons, "record too large: ...", "missing required field ...", "expectation
<name> failed (action fail)", are built per record by Spark): those are run, and their reasons
read back, by ``tests/integration/test_spark_read_classify.py`` and ``test_bad_input.py``. Here:
the parse option sets, the column names the job shares with the sources' readers and the
configuration, and the arithmetic of ``bound_partition_values`` against ``formats.partition_segment``
(the one definition of a partition value's folder), which must quarantine exactly the values
whose folder would not fit.
"""

from __future__ import annotations

import datetime as dt
import random
import re

import pytest

from eobatch.core.formats import (
    HIVE_NULL,
    PARTITION_PATH_MAX_BYTES,
    PARTITION_SEGMENT_MAX_BYTES,
    PATH_SAFE_CHARS,
    partition_path,
    partition_segment,
)
from eobatch.pipelines.loader import EXPECTATION_ACTIONS, PARTITION_TYPES, ConfigError
from spark_jobs import classify as cl

# -- the parse options ---------------------------------------------------------------------------
OPTIONS = [
    # option set, key, value, why
    (cl.LENIENT, "mode", "PERMISSIVE", "a record that does not parse is a row to quarantine, never a failed job"),
    (cl.STRICT, "mode", "PERMISSIVE", "the fast path too"),
    (cl.LENIENT, "columnNameOfCorruptRecord", cl.CORRUPT, "the full rule list reads the corrupt record column"),
    (cl.STRICT, "columnNameOfCorruptRecord", cl.CORRUPT, "the fast path accepts a record only when it is null"),
    (cl.STRICT, "allowNonNumericNumbers", "false", "the fast path refuses a bare NaN / Infinity token"),
    (cl.LENIENT, "allowNonNumericNumbers", None, "the full rule list keeps Spark's default (\"NaN\" strings parse)"),
]


@pytest.mark.parametrize("options, key, value, why", OPTIONS, ids=[r[-1] for r in OPTIONS])
def test_parse_options(options, key, value, why):
    assert options.get(key) == value, why


def test_the_fast_path_parses_as_the_full_rule_list_but_for_bare_non_numeric_tokens():
    assert {k: v for k, v in cl.STRICT.items() if k != "allowNonNumericNumbers"} == cl.LENIENT


# -- the columns the job shares with the readers and the configuration ---------------------------
def test_the_kafka_reader_gives_the_unreadable_column_classify_reads():
    from eobatch.sources.kafka.read import FIELDS, SPARK_SCHEMA

    assert cl.UNREADABLE in FIELDS and f"{cl.UNREADABLE} STRING" in SPARK_SCHEMA


@pytest.mark.parametrize("column", [cl.CORRUPT, cl.UNREADABLE, cl.CUT_BYTES, "_eo_rec0", "_eo_fast"])
def test_no_record_field_can_be_named_like_a_column_of_the_job(make_cfg, column):
    """The job adds its own columns beside the record's fields (the corrupt record, a reader's
    unreadable reason and cut length, ``kept_records``' ``_eo_rec<i>``): a declared field never
    starts with "_", so none is shadowed."""
    assert column.startswith("_")
    with pytest.raises(ConfigError, match="names starting with '_' are reserved"):
        make_cfg(schema=f"order_id STRING NOT NULL, {column} STRING")


def test_every_expectation_action_of_the_configuration_has_a_precedence_in_the_job():
    assert sorted(cl.EXPECTATION_PRECEDENCE) == sorted(EXPECTATION_ACTIONS)
    assert cl.EXPECTATION_PRECEDENCE[0] == "fail"  # a record failing a "fail" and a "quarantine" one fails the batch


# -- bound_partition_values: its byte counts are partition_segment's -------------------------------
SAFE = re.compile(f"[{PATH_SAFE_CHARS}]")  # the class of the job's regexp_replace (Java's regex reads it alike)


def _job_bytes(column: str, value: str | None) -> int:
    """The folder length ``bound_partition_values`` computes for a STRING value, in Python:
    octet_length(v) + 2 * octet_length(regexp_replace(v, "[<safe>]", "")) + the "<column>=" head."""
    head = len(column.encode()) + 1
    if value is None:
        return head + len(HIVE_NULL)
    return head + len(value.encode()) + 2 * len(SAFE.sub("", value).encode())


def _digested(segment: str) -> bool:
    return re.search(r"~h[0-9a-f]{32}$", segment) is not None


def test_the_jobs_safe_character_class_is_the_set_partition_segment_keeps():
    for code in [*range(0x80), 0xE9, 0x2028, 0x1F600]:
        ch = chr(code)
        kept = partition_segment("c", ch) == f"c={ch}"
        assert bool(SAFE.fullmatch(ch)) == kept, repr(ch)


SEGMENTS = [
    # column, value, why
    ("c", "abc", "safe characters"),
    ("c", "a/b", "a '/' takes 3 bytes"),
    ("c", "x y=%\x00~", "every unsafe ASCII byte takes 3"),
    ("c", "é", "2 UTF-8 bytes take 6"),
    ("c", "日本", "3-byte characters"),
    ("c", "😀", "a 4-byte character"),
    ("country", None, "a null: the null folder"),
    ("c", "y" * 198, "the longest value that fits: 200 bytes"),
    ("c", "y" * 199, "one byte more: over the bound"),
    ("c", "é" * 33, "33 x 6 + 2 = 200 bytes: fits"),
    ("c", "é" * 34, "over the bound by multi-byte escapes"),
    ("c" * 150, "x" * 49, "a long column name counts too"),
]


@pytest.mark.parametrize("column, value, why", SEGMENTS, ids=[r[-1] for r in SEGMENTS])
def test_a_value_is_quarantined_exactly_when_its_folder_would_not_fit(column, value, why):
    n = _job_bytes(column, value)
    seg = partition_segment(column, value)
    if n <= PARTITION_SEGMENT_MAX_BYTES:
        assert len(seg.encode()) == n and not _digested(seg), why  # what the writer writes, byte for byte
    else:
        assert _digested(seg), why  # the writer would have to shorten it: quarantined before


def test_the_jobs_byte_count_is_the_folders_length():
    """Random values of every width of UTF-8 character, short and over the bound."""
    rnd = random.Random(28)
    alphabet = "aZ9_.-~/ =%\x00\x7féß€日本😀"
    for _ in range(400):
        value = "".join(rnd.choice(alphabet) for _ in range(rnd.choice([0, 1, 5, 40, 70, 120])))
        seg = partition_segment("col", value)
        if _digested(seg):
            assert _job_bytes("col", value) > PARTITION_SEGMENT_MAX_BYTES, value
        else:
            assert len(seg.encode()) == _job_bytes("col", value), value


# the longest value of each non-string partition type: the job counts the null folder's length for them
LONGEST = {
    "INT": -2**31, "INTEGER": -2**31, "BIGINT": -2**63, "LONG": -2**63, "SMALLINT": -2**15, "SHORT": -2**15,
    "DATE": dt.date(9999, 12, 31), "BOOLEAN": False,
}


def test_no_non_string_partition_value_needs_a_longer_folder_than_a_null():
    """``bound_partition_values`` counts every non-STRING partition value as long as a null's
    folder: true of every type the configuration lets a table be partitioned by (a type added
    there, such as TIMESTAMP, "2026-01-02~2003~3A04~3A05.000000", needs its own count here)."""
    assert set(LONGEST) == PARTITION_TYPES - {"STRING"}
    for typ, value in LONGEST.items():
        assert len(partition_segment("c", value)) <= len(partition_segment("c", None)), typ


PATHS = [
    # values of the partition columns (a, b, c), over PARTITION_PATH_MAX_BYTES, why
    (("x" * 100, "y" * 100, "z" * 100), False, "three folders within the bound"),
    (("x" * 170, "y" * 170, "z" * 170), True, "three folders of 172 bytes: 518 with the '/' between"),
    (("x" * 170, "y" * 170, None), False, "a null's folder counts too"),
]


@pytest.mark.parametrize("values, over, why", PATHS, ids=[r[-1] for r in PATHS])
def test_the_jobs_path_count_is_the_partition_path_length(values, over, why):
    cols = ["a", "b", "c"]
    total = sum(_job_bytes(c, v) for c, v in zip(cols, values)) + len(cols) - 1
    assert total == len("/".join(partition_segment(c, v) for c, v in zip(cols, values)).encode()), why
    assert (total > PARTITION_PATH_MAX_BYTES) is over, why
    # a record's values over the bound are quarantined; a transform's computed ones get shorter folders
    path = partition_path(cols, values)
    assert len(path.encode()) == total if not over else len(path.encode()) <= PARTITION_PATH_MAX_BYTES < total, why
