"""eobatch.sources: the registry of source kinds; adding a kind is one object, registered."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from eobatch import sources
from eobatch.core.formats import PreparedBatch, commit_metadata
from eobatch.pipelines.loader import ConfigError, load_pipeline
from eobatch.sources import (
    ConfigContext,
    SourceConfig,
    SourceKind,
    compact_offsets,
    kind_for,
    kind_names,
    range_summary,
    register,
)
from support.pipeline_yaml import write_named as _write
from support.records import kind_plan as _plan
from support.records import plan_record


def test_the_registry_knows_the_builtin_kinds_and_refuses_others(tmp_path):
    assert kind_names() == ["delta", "files", "kafka", "parquet"]
    for name in kind_names():
        kind = kind_for(name)
        assert isinstance(kind, SourceKind) and kind.name == name
    with pytest.raises(KeyError, match="unknown source kind 'ftp'"):
        kind_for("ftp")
    path = _write(tmp_path, "bad", "source:\n  kind: ftp\n  path: /data/in\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: source.kind: 'ftp' must be one of delta, files, kafka, parquet"):
        load_pipeline(path)


# -- adding a kind: one object, registered -------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class NumbersConfig(SourceConfig):
    count: int = 3

    def describe(self) -> str:
        return f"the numbers 1..{self.count}"


class NumbersKind:
    """A toy kind: the records {"n": 1} .. {"n": count}, one batch."""

    name, config_keys = "numbers", frozenset({"kind", "count"})
    contract_keys = {"source.count": (sources.base.PENDING, lambda s: s.count)}  # its part of config.contract
    harmless_keys: dict[str, str] = {}
    position_based, checks_late_files, located_columns, quarantine_columns = False, False, (), ()
    interval_by_record_time = replayable = reads_alike = reads_table_versions = False

    def lineage_inputs(self, source, rng):
        return []

    def first_batch_reading(self, plans, version):
        return None

    def interval_slices(self, lines, rng):
        return None

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

    def job_env(self, source):
        return {}

    def gone(self, rng):
        return []

    def unreadable(self, rng, job):
        return []

    def read(self, spark, rng, job):
        raise NotImplementedError("not run by this unit test")

    def locate(self, spark, records, rng, job):
        return records

    def positions(self, lines):
        return {}

    def release(self, rng):
        pass


@dataclass
class NumbersPlanner:
    count: int
    late = skipped = ()

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

    def detail(self):
        return sources.base.RangeDetail()

    def check_stage(self, summary):
        return []


def test_a_new_kind_is_one_registered_object(tmp_path, monkeypatch):
    monkeypatch.setattr(sources.REGISTRY, "registered", dict(sources.REGISTRY.registered))
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
    assert (n, range_summary(plan), compact_offsets(plan)) == (4, "1..4", 4)
    prepared = PreparedBatch(pipeline="p", batch_id=3, attempt="a", adds={}, arrow_schema={}, partition_by={},
                             fingerprint="x", rows_in=4, rows_valid=4, rows_quarantined=0, rows_published=4, bytes=0,
                             files=0, prepared_at="", verify_seconds=0.0, stage_seconds=0.0)
    assert commit_metadata(plan, prepared, "sink", compact_offsets(plan))["eo.offsets"] == "4"


def test_the_keys_of_each_built_in_kind_are_those_of_its_section_model():
    """``config_keys`` (the config's fields, known without pydantic) and the YAML model agree."""
    from eobatch.sources import BUILTIN

    for name in BUILTIN:
        kind = kind_for(name)
        assert kind.config_keys == kind.config_model.yaml_keys(), name


# -- a plan's range in its kind's words (range_summary, compact_offsets) ------------------------------


def test_range_summary():
    assert range_summary(plan_record()) == "2 files [a.jsonl, b.jsonl]"
    many = [{"path": f"/l/f{i}.jsonl", "size": 1, "mtime_ms": i, "records": 1} for i in range(5)]
    assert range_summary(plan_record(files=many)) == "5 files [f0.jsonl, f1.jsonl, f2.jsonl, +2]"
    assert range_summary(plan_record(files=[])) == "0 files"
    assert compact_offsets(plan_record()) == [["/landing/a.jsonl", 10, 1000], ["/landing/b.jsonl", 20, 2000]]


def test_summaries_and_commit_offsets_per_kind():
    kafka = _plan("kafka", {"topic": "t", "isolation_level": "read_committed",
                            "partitions": {"0": [0, 3], "1": [4, 4]}, "lost": {}})
    assert range_summary(kafka) == "t: 3 offsets p0[0,3)"
    assert compact_offsets(kafka) == {"topic": "t", "partitions": {"0": [0, 3], "1": [4, 4]}}
    pq = _plan("parquet", {"files": [{"path": "/in/x/a.parquet", "size": 9, "mtime_ms": 5, "records": 7}]})
    assert range_summary(pq) == "1 files [a.parquet]"
    assert compact_offsets(pq) == [["/in/x/a.parquet", 9, 5]]
    unknown = _plan("someday", {"what": 1})
    assert range_summary(unknown) == '{"what": 1}'
