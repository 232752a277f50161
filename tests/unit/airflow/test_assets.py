"""eobatch.airflow.assets: one mapping from a table's location to its Airflow Asset URI, and the extra of a
committed batch's asset event."""

from __future__ import annotations

import os

import pytest

from eobatch.airflow import assets
from eobatch.core.formats import BatchPlan, CommittedBatch, PreparedBatch


@pytest.mark.parametrize("location, uri", [
    ("/data/lake/orders", "file:///data/lake/orders"),
    ("/data/lake/orders/", "file:///data/lake/orders"),
    ("/data/lake/../lake/./orders", "file:///data/lake/orders"),
    ("s3a://bucket/lake/orders", "s3://bucket/lake/orders"),
    ("s3a://bucket/lake/orders/", "s3://bucket/lake/orders"),
    ("s3://bucket/lake/orders", "s3://bucket/lake/orders"),
    ("s3a://bucket", "s3://bucket"),
])
def test_a_local_path_is_a_file_uri_and_s3a_is_s3(location, uri):
    assert assets.asset_uri(location) == uri


def test_a_relative_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert assets.asset_uri("lake/orders") == "file://" + os.path.join(str(tmp_path), "lake", "orders")


def test_other_schemes_have_no_asset_uri():
    with pytest.raises(ValueError, match="local path or an s3a"):
        assets.asset_uri("hdfs://nn/lake/orders")


def test_the_asset_is_what_airflow_makes_of_the_uri():
    """Airflow's own Asset keeps the URI as given (no second normalisation that would make the
    producer's and the consumer's assets differ), and the name is the URI."""
    for location in ("/data/lake/orders", "s3a://bucket/lake/orders"):
        a = assets.table_asset(location)
        assert a.uri == a.name == assets.asset_uri(location)
    assert assets.batch_alias("orders").name == "eobatch-orders"


def _records(range_: dict, source_kind: str = "files", interval: dict | None = None):
    plan = BatchPlan(pipeline="orders", batch_id=3, source_kind=source_kind, range=range_, rows_in=12,
                     config_fingerprint="cf", planned_at="t", run_id="manual__1", interval=interval)
    prepared = PreparedBatch(pipeline="orders", batch_id=3, attempt="a1", adds={}, arrow_schema={}, partition_by={},
                             fingerprint="fp", rows_in=12, rows_valid=10, rows_quarantined=2, rows_published=10,
                             bytes=999, files=2, prepared_at="t", verify_seconds=0.0, stage_seconds=0.0)
    committed = CommittedBatch(pipeline="orders", batch_id=3, fingerprint="fp",
                               delta_versions={"sink": 7, "quarantine": 4}, committed_at="t", commit_seconds=0.1)
    return plan, prepared, committed


def test_each_table_gets_its_own_version_and_the_batch_facts():
    plan, prepared, committed = _records({"files": [{"path": "/l/a.jsonl", "size": 1, "mtime_ms": 0, "records": 12}]})
    extras = assets.batch_extras("orders", {"sink": "/lake/orders", "quarantine": "s3a://b/bad"}, plan, prepared,
                                 committed)
    sink, bad = extras["sink"], extras["quarantine"]
    assert (sink["pipeline"], sink["batch_id"], sink["table"], sink["delta_version"]) == ("orders", 3, "sink", 7)
    assert (bad["table"], bad["delta_version"], bad["table_uri"]) == ("quarantine", 4, "s3://b/bad")
    assert sink["table_uri"] == "file:///lake/orders"
    assert sink["delta_versions"] == {"sink": 7, "quarantine": 4}
    assert (sink["rows_in"], sink["rows_published"], sink["rows_quarantined"]) == (12, 10, 2)
    assert sink["range"]["files"] == ["/l/a.jsonl"] and sink["range"]["file_count"] == 1
    assert sink["fingerprint"] == "fp" and sink["planned_by_run"] == "manual__1"


def test_a_kafka_range_is_its_topic_and_offsets():
    plan, prepared, committed = _records({"topic": "orders", "isolation_level": "read_committed",
                                          "partitions": {"0": [0, 5], "1": [3, 9]}}, source_kind="kafka")
    r = assets.batch_extras("orders", {"sink": "/lake/orders"}, plan, prepared, committed)["sink"]["range"]
    assert (r["kind"], r["topic"], r["partitions"]) == ("kafka", "orders", {"0": [0, 5], "1": [3, 9]})


def test_a_long_files_range_is_counted_and_cut():
    files = [{"path": f"/l/f{i}.jsonl", "size": 1, "mtime_ms": 0, "records": 1} for i in range(250)]
    plan, prepared, committed = _records({"files": files},
                                         interval={"start": "2026-01-01T00:00:00+00:00",
                                                   "end": "2026-01-01T01:00:00+00:00"})
    r = assets.range_extra(plan)
    assert r["file_count"] == 250 and len(r["files"]) == assets.MAX_FILES_IN_EXTRA and r["truncated"]
    assert r["interval"]["start"].startswith("2026-01-01T00")


def test_a_lost_prepared_record_leaves_the_rows_out():
    plan, _, committed = _records({"files": []})
    sink = assets.batch_extras("orders", {"sink": "/lake/orders"}, plan, None, committed)["sink"]
    assert "rows_published" not in sink and sink["delta_version"] == 7
