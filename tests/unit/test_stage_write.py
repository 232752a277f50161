"""spark_jobs/stage_write.py without Spark: where a task's staged file goes (``staged_file``: its
path under the attempt's folder, its slice and partition folders, its adds' partition values) and
how a task's rows are split into those folders (``rows_by_folder``). Writing them in a Spark task
(``stage_dataframe``: files, then the manifest) is run by the integration tests of the job
(``tests/integration``); the manifests it writes are checked by verify (``test_verify.py``)."""

from __future__ import annotations

import datetime as dt
import re

import pyarrow as pa
import pytest

from eobatch.core.formats import HIVE_NULL, Layout, slice_name, slice_of
from spark_jobs.stage_write import rows_by_folder, staged_file

ATTEMPT = Layout("/lake/orders", "/lake/orders_q").attempt_staging_rel(7, "t1-abc")  # eo_batches/b0000000007/t1-abc
SLICE = slice_name(1_767_225_600_000)  # iv=20260101T000000Z
NAME = r"part-00003-1-[0-9a-f]{12}\.snappy\.parquet"

FILES = [
    # slice, partition columns, values, folders between the attempt's and the file name, partition values, why
    (None, [], (), "", {}, "no slice, no partitions: the attempt's folder"),
    (SLICE, [], (), SLICE, {}, "interval mode: the slice's folder"),
    (None, ["country", "day"], ("DE", dt.date(2026, 1, 2)), "country=DE/day=2026-01-02",
     {"country": "DE", "day": "2026-01-02"}, "one folder per partition column, in their order"),
    (SLICE, ["country"], ("DE",), f"{SLICE}/country=DE", {"country": "DE"}, "the slice first, then the partitions"),
    (None, ["country"], (None,), f"country={HIVE_NULL}", {"country": None}, "a null: Spark's and Hive's folder"),
    (None, ["flag", "n"], (True, -3), "flag=true/n=-3", {"flag": "true", "n": "-3"}, "booleans and numbers"),
    (None, ["c"], ("a/b",), "c=a~2Fb", {"c": "a/b"}, "a '/' never makes a folder; the log holds the value"),
    (None, ["c"], ("..",), "c=..", {"c": ".."}, "'..' is a folder name, never a step up"),
    (None, ["c"], ("x y=%",), "c=x~20y~3D~25", {"c": "x y=%"}, "a space, '=' and '%' escaped"),
]


@pytest.mark.parametrize("slice_, partition_by, values, folders, partition_values, why", FILES,
                         ids=[r[-1] for r in FILES])
def test_staged_file(slice_, partition_by, values, folders, partition_values, why):
    got = staged_file(ATTEMPT, slice_, partition_by, values, 3, 1)
    assert re.fullmatch("/".join(x for x in (re.escape(ATTEMPT), re.escape(folders), NAME) if x), got["path"]), \
        (got["path"], why)
    assert got["partition_values"] == partition_values, why
    # verify's rules for a listed path, and the slice a commit replaces (state.replaced_files) by its path
    assert got["path"].startswith(ATTEMPT + "/") and ".." not in got["path"].split("/")
    assert slice_of(got["path"]) == slice_, why


def test_every_file_of_a_task_attempt_has_its_own_name():
    """A task run again (or a zombie) never writes over another's file: names are attempt-unique."""
    paths = {staged_file(ATTEMPT, SLICE, ["c"], ("x",), 3, 1)["path"] for _ in range(50)}
    assert len(paths) == 50


TABLE = pa.table({
    "id": list(range(8)),
    "country": ["DE", "FR", "DE", None, "", "FR", None, "DE"],
    "flag": [True, False, True, True, None, False, None, True],
    "day": pa.array([dt.date(2026, 1, 1), dt.date(2026, 1, 2)] * 4, pa.date32()),
})

SPLITS = [
    # folder columns, ids per folder value expected, why
    ([], {(): [0, 1, 2, 3, 4, 5, 6, 7]}, "no folder columns: one part of every row"),
    (["country"], {("DE",): [0, 2, 7], ("FR",): [1, 5], (None,): [3, 6], ("",): [4]},
     "one part per value; null and the empty string are two folders"),
    (["flag"], {(True,): [0, 2, 3, 7], (False,): [1, 5], (None,): [4, 6]}, "booleans with nulls"),
    (["country", "flag"], {("DE", True): [0, 2, 7], ("FR", False): [1, 5], (None, True): [3], ("", None): [4],
                           (None, None): [6]}, "two columns: one part per pair"),
    (["day"], {(dt.date(2026, 1, 1),): [0, 2, 4, 6], (dt.date(2026, 1, 2),): [1, 3, 5, 7]}, "dates"),
]


@pytest.mark.parametrize("path_cols, want, why", SPLITS, ids=[r[-1] for r in SPLITS])
def test_rows_by_folder(path_cols, want, why):
    parts = rows_by_folder(TABLE, path_cols)
    got = {key: part["id"].to_pylist() for key, part in parts}
    assert len(got) == len(parts), "one part per value"
    assert {k: sorted(v) for k, v in got.items()} == want, why


@pytest.mark.parametrize("values, why", [
    ([1.0, float("nan"), None, float("nan")], "NaN equals nothing, not even itself"),
    ([0.0, -0.0, 1.0], "0.0 and -0.0 are equal but hash apart"),
], ids=["NaN", "signed zeros"])
def test_every_row_is_in_exactly_one_folder_whatever_its_value(values, why):
    """A transform may compute a partition column of its own type (a DOUBLE): each of its rows is
    written once, under the folder of its value, never dropped and never twice."""
    t = pa.table({"id": list(range(len(values))), "c": pa.array(values, pa.float64())})
    ids = sorted(i for _key, part in rows_by_folder(t, ["c"]) for i in part["id"].to_pylist())
    assert ids == list(range(len(values))), why
