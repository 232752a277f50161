"""A source kind of a distribution of its own (``eobatch-numbers``), published under the entry-point
group ``eobatch.sources`` as ``numbers = eobatch_numbers:KIND``: the integers ``[start, stop)``,
each the record ``{<field>: n}``, at most ``max_records_per_batch`` of them a batch.

It uses eobatch's public API only (``eobatch.sources``, ``eobatch.sources.base``, ``eobatch.errors``)
and changes no file of the product (tests/unit/core/test_registry.py installs and runs it).

    source:
      kind: numbers
      stop: 25          # the integers [start, stop): harmless, read when a range is planned
      start: 0
      field: n          # the record's field: a pending batch depends on it (contract_keys)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from eobatch.errors import ConfigError
from eobatch.sources import ConfigContext, SourceConfig
from eobatch.sources.base import COMMON_HARMLESS, PLANNED, BacklogAsk, RangeDetail, harmless, pinned

KEYS = frozenset({"kind", "start", "stop", "field", "max_records_per_batch"})


@dataclass(frozen=True, kw_only=True)
class NumbersConfig(SourceConfig):
    stop: int
    start: int = 0
    field: str = "n"

    def describe(self) -> str:
        return f"the integers [{self.start}, {self.stop})"

    def fingerprint_dict(self) -> dict:
        """What the batches publish: the field (the bounds only say how far the plans go)."""
        return {k: v for k, v in asdict(self).items() if k not in ("start", "stop")}


@dataclass(frozen=True)
class NumbersRange:
    """A recorded range: ``{"from": a, "to": b}``, the integers [a, b)."""

    first: int
    end: int

    @classmethod
    def from_json(cls, data: dict) -> NumbersRange:
        return cls(int(data["from"]), int(data["to"]))

    def to_json(self) -> dict:
        return {"from": self.first, "to": self.end}

    def summary(self) -> str:
        return f"numbers [{self.first}, {self.end})"

    def commit_offsets(self) -> Any:
        return [self.first, self.end]

    def locations(self) -> list[str]:
        return []

    def detail(self) -> RangeDetail:
        return RangeDetail()  # the summary says it all

    def check_stage(self, summary) -> list[str]:
        """The job read exactly the range: its first and last position (``NumbersKind.positions``)."""
        want = {"first": self.first, "last": self.end - 1}
        got = summary.source_positions
        return [] if got == want else [f"the job read positions {got}; the range is {want}"]


class NumbersPlanner:
    late: list = []
    skipped: list = []

    def __init__(self, cfg) -> None:
        self.source: NumbersConfig = cfg.source

    def _next(self, previous_plans: Sequence) -> int:
        return int(previous_plans[-1].range["to"]) if previous_plans else self.source.start

    def next_range(self, previous_plans: Sequence, limit: int) -> tuple[dict | None, int | None, list[str]]:
        first = self._next(previous_plans)
        end = min(self.source.stop, first + limit)
        if end <= first:
            return None, None, []
        return NumbersRange(first, end).to_json(), end - first, []

    def interval_range(self, start_ms: int, end_ms: int, limit: int, earlier=None,
                       **late_files) -> tuple[dict | None, int | None, list[str]]:
        raise NotImplementedError("kind numbers has no intervals (its parse_config refuses interval mode)")

    def check_readable(self) -> str:
        return self.source.describe()

    def begin_run(self) -> None:
        pass

    def discovered(self) -> dict | None:
        return None

    def backlog(self, previous_plans: Sequence, unpublished: dict | None, ask: BacklogAsk) -> dict[str, Any]:
        return {"records": max(0, self.source.stop - self._next(previous_plans))}


class NumbersKind:
    name = "numbers"
    config_keys = KEYS
    # its part of the configuration contract: what the records hold is pinned, the bounds are not
    contract_keys = pinned("field")
    harmless_keys = {**COMMON_HARMLESS, **harmless(PLANNED, "start", "stop")}
    position_based = False
    checks_late_files = False
    interval_by_record_time = False
    replayable = False
    reads_alike = False  # the stage job caches what it read (True would let it write straight from the read)
    reads_table_versions = False
    located_columns: tuple[str, ...] = ()
    quarantine_columns: tuple[str, ...] = ()

    # -- Airflow side --------------------------------------------------------------------------------
    def parse_config(self, src: dict, ctx: ConfigContext) -> NumbersConfig:
        if ctx.mode != "continuous":
            raise ConfigError(ctx.file, "mode", "kind numbers runs in continuous mode only")
        values = {k: src[k] for k in ("start", "stop", "max_records_per_batch") if k in src}
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(ctx.file, f"source.{key}", f"must be a non-negative integer, got {value!r}")
        if "stop" not in values:
            raise ConfigError(ctx.file, "source.stop", "is required: the first integer not read")
        field = src.get("field", "n")
        if not isinstance(field, str) or not field.isidentifier():
            raise ConfigError(ctx.file, "source.field", f"must be a field name, got {field!r}")
        return NumbersConfig(kind=self.name, field=field, **values)

    def planner(self, cfg) -> NumbersPlanner:
        return NumbersPlanner(cfg)

    def range(self, data: dict) -> NumbersRange:
        return NumbersRange.from_json(data)

    def gone(self, rng: dict) -> list[str]:
        return []

    def start_marker(self, rng: dict) -> dict | None:
        return None

    def job_source(self, source: NumbersConfig) -> dict:
        return {"kind": self.name, "field": source.field}

    def job_env(self, source: NumbersConfig) -> dict[str, str]:
        return {}

    def lineage_inputs(self, source: NumbersConfig, rng: dict) -> list:
        return []  # the integers are no dataset

    def first_batch_reading(self, plans, version: int) -> None:
        return None

    # -- Spark side ----------------------------------------------------------------------------------
    def unreadable(self, rng: dict, job: dict) -> list[str]:
        return []

    def read(self, spark, rng: dict, job: dict):
        """The lines of the range: one row per integer, ``position`` the integer itself."""
        from pyspark.sql import functions as F  # the Spark job only

        r = NumbersRange.from_json(rng)
        return spark.range(r.first, r.end).select(
            F.lit("numbers").alias("source"), F.col("id").alias("position"),
            F.to_json(F.struct(F.col("id").alias(job["field"]))).alias("raw"))

    def interval_slices(self, lines, rng: dict) -> None:
        return None  # continuous mode only

    def locate(self, spark, records, rng: dict, job: dict):
        return records  # the positions are exact already

    def positions(self, lines) -> dict:
        from pyspark.sql import functions as F  # the Spark job only

        row = lines.agg(F.min("position").alias("first"), F.max("position").alias("last")).first()
        return {"first": row["first"], "last": row["last"]}

    def release(self, rng: dict) -> None:
        pass


KIND = NumbersKind()
