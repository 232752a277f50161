"""eobatch.sources.base: what every source kind implements (the SourceKind members, ranges as the
ledger holds them) and the fingerprint of a pipeline's source, the same as before source kinds
were packages."""

from __future__ import annotations

import pytest

from eobatch.pipelines.loader import load_pipeline
from eobatch.sources import kind_for
from support.pipeline_yaml import PINNED
from support.pipeline_yaml import write_named as _write


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_fingerprint_of_a_files_or_kafka_pipeline_is_the_one_from_before_kinds_were_packages(tmp_path, name):
    body, expected = PINNED[name]
    assert load_pipeline(_write(tmp_path, name, body)).fingerprint() == expected


def test_every_source_key_still_changes_the_fingerprint(tmp_path):
    base = load_pipeline(_write(tmp_path, "fp_kafka", PINNED["fp_kafka"][0])).fingerprint()
    other = PINNED["fp_kafka"][0].replace("consumer_timeout_seconds: 60", "consumer_timeout_seconds: 61")
    assert load_pipeline(_write(tmp_path, "fp_kafka", other)).fingerprint() != base


def test_the_members_protocol_uses():
    files, kafka, parquet = kind_for("files"), kind_for("kafka"), kind_for("parquet")
    assert (files.position_based, kafka.position_based, parquet.position_based) == (False, True, False)
    assert (files.checks_late_files, kafka.checks_late_files, parquet.checks_late_files) == (True, False, True)
    rng = {"topic": "t", "isolation_level": "read_committed", "partitions": {"0": [5, 9], "1": [7, 7]},
           "lost": {"0": [2, 5]}}
    assert kafka.start_marker(rng) == {"topic": "t", "isolation_level": "read_committed",
                                       "partitions": {"0": [5, 5], "1": [7, 7]}, "lost": {}}
    assert files.start_marker({"files": []}) is None and parquet.start_marker({"files": []}) is None


# Ranges as ledgers hold them, old and new: the typed range gives back exactly the same JSON.


LEDGER_RANGES = [
    ("files", {"files": []}),
    ("files", {"files": [{"path": "/l/a.jsonl", "size": 10, "mtime_ms": 1000, "records": 3}]}),
    ("files", {"files": [{"path": "/l/dt=2026-01-01/a.jsonl", "size": 1, "mtime_ms": 2, "records": 0,
                          "slice": "iv=20260101T000000Z"}]}),
    ("kafka", {"topic": "t", "isolation_level": "read_committed", "partitions": {"0": [0, 3], "1": [4, 4]}}),
    ("kafka", {"topic": "t", "isolation_level": "read_uncommitted", "partitions": {"0": [0, 3]},
               "lost": {"0": [0, 2]}}),
    ("kafka", {"topic": "t", "isolation_level": "read_committed", "partitions": {"0": [3, 3]}, "lost": {}}),
    ("kafka", {"topic": "t", "partitions": {"0": [0, 3]}}),  # before isolation levels were recorded
    ("parquet", {"files": [{"path": "s3a://b/in/a.parquet", "size": 900, "mtime_ms": 5, "records": 7}]}),
]


@pytest.mark.parametrize("kind,rng", LEDGER_RANGES)
def test_a_recorded_range_round_trips_exactly(kind, rng):
    assert kind_for(kind).range(rng).to_json() == rng
