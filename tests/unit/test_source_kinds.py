"""eobatch.sources: the registry, the SourceKind members, ranges as the ledger holds them, and the
compatibility of configs and fingerprints with the code before kinds were packages."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pytest

from eobatch import sources
from eobatch.config import ConfigError, load_pipeline
from eobatch.formats import BatchPlan, PreparedBatch, StageSummary, commit_metadata, compact_offsets
from eobatch.sources import ConfigContext, SourceConfig, SourceKind, kind_for, kind_names, register

SCHEMA = "order_id STRING NOT NULL, amount DOUBLE"

# Fingerprints computed by the code before source kinds were packages (config.SourceConfig hashed
# with asdict): a pipeline keeps its fingerprint across the change, so its batches still match.
PINNED = {
    "fp_files": ("""\
        mode: interval
        schedule: "@hourly"
        source:
          kind: files
          path: /data/landing/fp_files
          max_records_per_batch: 5000
          interval_prefix: "dt={ds}/hour={hh}"
          settle_seconds: 30
          late_files: fail
          late_lookback_intervals: 6
          max_file_bytes: 1048576
        """, "3075d3ad127ff0ea"),
    "fp_files_min": ("""\
        source:
          kind: files
          path: /data/landing/fp_files_min
        """, "6fd204a6d586dd2d"),  # was 834509e834844caa while max_file_bytes defaulted to 128 MiB
    "fp_kafka": ("""\
        source:
          kind: kafka
          bootstrap_servers: "127.0.0.1:9092,broker2:9093"
          topic: orders.v1
          max_records_per_batch: 2000
          starting_offsets: latest
          isolation_level: read_uncommitted
          on_data_loss: accept
          consumer_timeout_seconds: 60
        """, "598e3a33ad7963b7"),
    "fp_kafka_min": ("""\
        source:
          kind: kafka
          bootstrap_servers: "127.0.0.1:9092"
          topic: orders
        """, "ccb7f55617dfbc17"),
}


def _write(tmp_path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\n" + textwrap.dedent(body) + textwrap.dedent(f"""\
        schema: "{SCHEMA}"
        transform: passthrough
        sink:
          table: /data/lake/{name}
        quarantine:
          table: /data/lake/{name}_bad
        """))
    return str(path)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_fingerprint_of_a_files_or_kafka_pipeline_is_the_one_from_before_kinds_were_packages(tmp_path, name):
    body, expected = PINNED[name]
    assert load_pipeline(_write(tmp_path, name, body)).fingerprint() == expected


def test_every_source_key_still_changes_the_fingerprint(tmp_path):
    base = load_pipeline(_write(tmp_path, "fp_kafka", PINNED["fp_kafka"][0])).fingerprint()
    other = PINNED["fp_kafka"][0].replace("consumer_timeout_seconds: 60", "consumer_timeout_seconds: 61")
    assert load_pipeline(_write(tmp_path, "fp_kafka", other)).fingerprint() != base


def test_the_registry_knows_the_builtin_kinds_and_refuses_others(tmp_path):
    assert kind_names() == ["files", "kafka", "parquet"]
    for name in kind_names():
        kind = kind_for(name)
        assert isinstance(kind, SourceKind) and kind.name == name
    with pytest.raises(KeyError, match="unknown source kind 'ftp'"):
        kind_for("ftp")
    path = _write(tmp_path, "bad", "source:\n  kind: ftp\n  path: /data/in\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: source.kind: 'ftp' must be one of files, kafka, parquet"):
        load_pipeline(path)


def test_the_members_protocol_uses():
    files, kafka, parquet = kind_for("files"), kind_for("kafka"), kind_for("parquet")
    assert (files.position_based, kafka.position_based, parquet.position_based) == (False, True, False)
    assert (files.checks_late_files, kafka.checks_late_files, parquet.checks_late_files) == (True, False, True)
    rng = {"topic": "t", "isolation_level": "read_committed", "partitions": {"0": [5, 9], "1": [7, 7]},
           "lost": {"0": [2, 5]}}
    assert kafka.start_marker(rng) == {"topic": "t", "isolation_level": "read_committed",
                                       "partitions": {"0": [5, 5], "1": [7, 7]}, "lost": {}}
    assert files.start_marker({"files": []}) is None and parquet.start_marker({"files": []}) is None


def test_the_job_spec_ships_only_what_the_kind_reads(tmp_path):
    from eobatch.launch import job_spec

    files = load_pipeline(_write(tmp_path, "fp_files_min", PINNED["fp_files_min"][0]))
    kafka = load_pipeline(_write(tmp_path, "fp_kafka", PINNED["fp_kafka"][0]))
    assert job_spec(files, 1, "a1")["source"] == {"kind": "files"}
    assert job_spec(kafka, 1, "a1")["source"] == {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9092,broker2:9093",
                                                  "consumer_timeout_seconds": 60}


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


def _plan(kind, rng):
    return BatchPlan(pipeline="p", batch_id=3, source_kind=kind, range=rng, rows_in=None, config_fingerprint="f",
                     planned_at="2026-01-01T00:00:00+00:00")


def test_summaries_and_commit_offsets_per_kind():
    kafka = _plan("kafka", {"topic": "t", "isolation_level": "read_committed",
                            "partitions": {"0": [0, 3], "1": [4, 4]}, "lost": {}})
    assert kafka.range_summary() == "t: 3 offsets p0[0,3)"
    assert compact_offsets(kafka) == {"topic": "t", "partitions": {"0": [0, 3], "1": [4, 4]}}
    pq = _plan("parquet", {"files": [{"path": "/in/x/a.parquet", "size": 9, "mtime_ms": 5, "records": 7}]})
    assert pq.range_summary() == "1 files [a.parquet]"
    assert compact_offsets(pq) == [["/in/x/a.parquet", 9, 5]]
    unknown = _plan("someday", {"what": 1})
    assert unknown.range_summary() == '{"what": 1}'


def _summary(rows_in, positions):
    return StageSummary(batch_id=3, attempt="a", rows_in=rows_in, rows_valid=rows_in, rows_quarantined=0,
                        row_preserving=True, partitions={}, manifests={}, arrow_schema={}, partition_by={},
                        stage_seconds=0.0, source_positions=positions)


def test_the_kafka_check_against_the_stage_summary():
    rng = kind_for("kafka").range({"topic": "t", "partitions": {"0": [0, 3], "1": [4, 6]}})
    assert rng.check_stage(_summary(5, {"0": [3, 0, 2], "1": [2, 4, 5]})) == []
    assert rng.check_stage(_summary(4, {"0": [3, 0, 2], "1": [1, 4, 6]})) == [
        "partition 1: read offsets 4..6, outside the planned [4, 6)"]
    assert rng.check_stage(_summary(1, {"2": [1, 0, 0]})) == ["read partition 2, which is not in the plan",
                                                               "records per partition add up to 0, the job counted 1"]


# -- adding a kind: one object, registered -------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class NumbersConfig(SourceConfig):
    count: int = 3

    def describe(self) -> str:
        return f"the numbers 1..{self.count}"


class NumbersKind:
    """A toy kind: the records {"n": 1} .. {"n": count}, one batch."""

    name, config_keys = "numbers", frozenset({"kind", "count"})
    position_based, checks_late_files, located_columns = False, False, ()

    def parse_config(self, src, ctx: ConfigContext):
        if not isinstance(src.get("count", 3), int):
            raise ConfigError(ctx.file, "source.count", "must be an integer")
        return NumbersConfig(kind=self.name, count=src.get("count", 3))

    def planner(self, cfg):
        return NumbersPlanner(cfg.source.count)

    def range(self, data):
        return NumbersRange(data["upto"])

    def start_marker(self, rng):
        return None

    def job_source(self, source):
        return {"kind": self.name}

    def unreadable(self, rng, job):
        return []

    def read(self, spark, rng, job):
        raise NotImplementedError("not run by this unit test")

    def locate(self, spark, records, rng, job):
        return records

    def positions(self, lines):
        return {}


@dataclass
class NumbersPlanner:
    count: int
    late = ()

    def next_range(self, previous_plans, limit):
        return (None, 0, []) if previous_plans else ({"upto": self.count}, self.count, [])


@dataclass(frozen=True)
class NumbersRange:
    upto: int

    def to_json(self):
        return {"upto": self.upto}

    def summary(self):
        return f"1..{self.upto}"

    def commit_offsets(self):
        return self.upto

    def locations(self):
        return []

    def check_stage(self, summary):
        return []


def test_a_new_kind_is_one_registered_object(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "_registered", dict(sources._registered))
    with pytest.raises(TypeError, match="does not implement"):
        register(object())
    register(NumbersKind())
    assert "numbers" in kind_names()
    cfg = load_pipeline(_write(tmp_path, "nums", "source:\n  kind: numbers\n  count: 4\n"))
    assert cfg.source.describe() == "the numbers 1..4" and cfg.source.path is None
    with pytest.raises(ConfigError, match="source.other: unknown key"):
        load_pipeline(_write(tmp_path, "nums", "source:\n  kind: numbers\n  other: 4\n"))
    rng, n, _ = sources.source_for(cfg).next_range([], 100)
    plan = _plan("numbers", rng)
    assert (n, plan.range_summary(), compact_offsets(plan)) == (4, "1..4", 4)
    prepared = PreparedBatch(pipeline="p", batch_id=3, attempt="a", adds={}, arrow_schema={}, partition_by={},
                             fingerprint="x", rows_in=4, rows_valid=4, rows_quarantined=0, rows_published=4, bytes=0,
                             files=0, prepared_at="", verify_seconds=0.0, stage_seconds=0.0)
    assert commit_metadata(plan, prepared, "sink")["eo.offsets"] == "4"
