"""A loaded pipeline (``PipelineConfig``, what ``pipelines.loader.load_pipeline`` returns) and the values
of its sections: what a batch is planned, staged, verified and committed with, and its fingerprint
(pure Python, no pydantic: the loader's models are ``pipelines.loader``'s).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from croniter import croniter

from ..errors import ConfigError
from .ddl import Column
from .schedule import PRESET_CRON
from .sections import SinkConfig, SourceConfig

# Continuous mode: how many batches one run plans, stages in one Spark application and commits
# one after another (YAML max_batches_per_run, the run param of that name up to the maximum).
# The default, measured (`make bench`, catch-up case: 10 batches of 500k records, local[*], 2 cores):
# one run of 10 batches 157.9 s, Structured Streaming (maxFilesPerTrigger=1) 154.0 s, one batch per
# run 838.4 s. A run plans only what is there: with a batch's worth or less it carries one batch.
DEFAULT_BATCHES_PER_RUN = 10
MAX_BATCHES_PER_RUN = 1000


@dataclass(frozen=True)
class SparkConfig:
    conn_id: str = "spark_default"
    conf: dict = field(default_factory=dict)
    driver_memory: str | None = None
    executor_memory: str | None = None
    log_level: str | None = None  # Spark's log level in the stage job (eobatch.job.driver_jvm.log_level)


# log4j's levels: ``spark.log_level`` and EOBATCH_SPARK_LOG_LEVEL (the stage job's Spark log level)
LOG_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")


@dataclass(frozen=True)
class Expectation:
    """A data-quality rule: a Spark SQL boolean expression over a record's fields. A record passes
    when it is true; false or null fails it, and ``action`` says what then happens to the record
    (quarantine) or to it alone (drop) or to the whole batch (fail)."""
    name: str
    expr: str
    action: str = "quarantine"


EXPECTATION_ACTIONS = ("quarantine", "drop", "fail")
SCHEMA_EVOLUTION = ("add_columns", "fail")  # what verify and commit do with a new column (the sink's ``accepts``)


@dataclass(frozen=True)
class MaintenanceConfig:
    """``maintenance``: the ``<name>_maintenance`` DAG's schedule and what a pass does."""
    schedule: str | None = None  # None: run it from the UI or with `eobatch maintain` (`make maintain`)
    compact: bool = True  # interval mode: slice by slice (eobatch.sinks.delta.compaction)
    target_file_bytes: int = 128 << 20
    vacuum_retention_hours: float = 168.0
    # an Airflow pool (create it with one slot: `eobatch pools --create`) that the commit task and the
    # maintenance task take, so that they do not run at the same time on purpose (correctness
    # does not depend on it: eobatch.sinks.delta.compaction, eobatch.protocol.maintenance); None: no pool
    pool: str | None = None


@dataclass(frozen=True)
class Notifier:
    """One notifier of ``alerts.notify``: e-mail through the SMTP provider (``email``: the
    recipients) or an Airflow notifier class by its dotted path (``notifier``, ``args``: literal
    keyword arguments; ``alert_args``: keyword arguments given fields of the alert)."""
    email: tuple[str, ...] = ()
    smtp_conn_id: str | None = None
    from_email: str | None = None
    notifier: str | None = None
    args: dict = field(default_factory=dict)
    alert_args: dict = field(default_factory=dict)


STUCK_AFTER_RUNS = 3  # a batch that this many runs tried without committing it is stuck (eobatch.core.stuck)
STUCK_ATTEMPT_HOURS = 6.0  # and so is a stage attempt without a stage summary this many hours after it started


@dataclass(frozen=True)
class AlertsConfig:
    """``alerts``: who is told (``notify``) and of what: a task that failed for good
    (``on_failure``), a run still going ``run_deadline_minutes`` after it was queued, a backlog
    whose oldest unpublished record is older than ``backlog_max_age_minutes``, a stuck batch
    (``stuck_after_runs``, ``stuck_attempt_hours``: the detector's bounds, which the ledger page,
    `eobatch ledger` and `eobatch doctor` use too, with or without notifiers)."""
    notify: tuple[Notifier, ...] = ()
    on_failure: bool = False
    run_deadline_minutes: float | None = None
    backlog_max_age_minutes: float | None = None
    stuck_after_runs: int = STUCK_AFTER_RUNS
    stuck_attempt_hours: float = STUCK_ATTEMPT_HOURS


@dataclass(frozen=True)
class PipelineConfig:
    name: str
    file: str
    mode: str
    schedule: str | None
    source: SourceConfig
    schema: str
    columns: tuple[Column, ...]
    transform: str
    transform_options: dict
    sink_table: str
    partition_by: tuple[str, ...]
    quarantine_table: str
    sink: SinkConfig  # the sink kind's own keys (sink.mode: its kind, eobatch.sinks)
    max_record_bytes: int = 1 << 20
    description: str = ""
    spark: SparkConfig = field(default_factory=SparkConfig)
    plan_retries: int = 2
    stage_retries: int = 1
    commit_retries: int = 8
    retry_delay_seconds: float = 10.0
    verify_timeout_seconds: int = 900
    plan_wait_seconds: int = 3600  # interval mode: how long a run waits for another run's batch
    # how long one try of the stage task (its Spark job) may run: past it Airflow kills the job, and
    # the try fails like any other (retried as a new attempt; the run's abort removes its files)
    stage_timeout_seconds: int = 21600
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    aws_conn_id: str = "aws_default"  # the Airflow connection of S3 locations (Amazon provider)
    expectations: tuple[Expectation, ...] = ()
    schema_evolution: str = "add_columns"  # add_columns | fail: a new column of `schema` and the table
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    max_batches_per_run: int = DEFAULT_BATCHES_PER_RUN  # interval mode: 1
    # schedule: {asset: <table or pipeline name>}: runs start on that table's asset events (another
    # pipeline's sink); each run plans from the source as it is then, never from an event's content
    schedule_asset: str | None = None
    transform_file: str | None = None  # the pipeline folder's own transform (config.transforms); None: shipped
    transform_code: str | None = None  # that file's SHA-256, recorded in each plan
    # (value, "${NAME}") of each environment variable the file's locations name: what a DAG's doc, its
    # description or an error shows is ``shown(text)``, the name in place of the value (never compared,
    # never hashed: the locations themselves are the expanded values)
    concealed: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    # the sink kind's answers for this pipeline, which the loader (pipelines.loader) records when it
    # builds the config (config imports no kind): derived from ``sink`` and ``mode``, so never compared
    # nor shown. sink_mode: the YAML's ``sink.mode``, the mode of the sink's kind
    sink_mode: str = field(default="", compare=False, repr=False)
    # the tables a batch is committed to, in commit order (the sink kind's ``participant_names``)
    participants: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def shown(self, text: str) -> str:
        """``text`` for people: each value that came from the environment replaced by its ``${NAME}``."""
        return conceal(text, self.concealed)

    @property
    def sink_contract(self) -> str:
        """What a row of the sink means: appended records, or one row per key (an upsert's latest
        version, or running aggregates). Recorded in each plan: it cannot change under a table."""
        return self.sink.contract(self.mode)

    def fingerprint(self) -> str:
        """Hash of everything that changes what a batch publishes."""
        d = {
            "schema": self.schema, "transform": self.transform, "options": self.transform_options,
            "sink": self.sink_table, "partition_by": list(self.partition_by),
            "quarantine": self.quarantine_table, "source": self.source.fingerprint_dict(),
            "max_record_bytes": self.max_record_bytes,
        }
        d.update(self.sink.fingerprint_dict())  # an append sink adds nothing: the fingerprint it always had
        if self.transform_code:  # a shipped transform is the product's code: the fingerprint it always had
            d["transform_code"] = self.transform_code
        if self.expectations:  # a pipeline without any keeps the fingerprint it always had
            d["expectations"] = [[e.name, e.expr, e.action] for e in self.expectations]
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def interval_cron(self) -> str | None:
        """Interval mode: the schedule as a cron expression (presets spelled out)."""
        if self.schedule is None:
            return None
        return PRESET_CRON.get(self.schedule.strip(), self.schedule.strip())

    def require_interval_cron(self) -> str:
        """``interval_cron`` where interval mode needs it (loading refuses interval mode without a schedule)."""
        cron = self.interval_cron
        if cron is None:
            raise ConfigError(self.file, "schedule", "interval mode needs a schedule (a cron expression or a "
                                                     "preset such as '@hourly')")
        return cron

    def interval_starting(self, start):
        """Interval mode: (start, end) of the interval that starts at ``start`` (a cron tick)."""
        if start.tzinfo is None:
            start = start.replace(tzinfo=dt.timezone.utc)
        it = croniter(self.interval_cron, start - dt.timedelta(microseconds=1))
        first = it.get_next(dt.datetime)
        if first != start:
            raise ValueError(f"{start.isoformat()} is not a start of a {self.schedule!r} interval "
                             f"(the next one starts at {first.isoformat()})")
        return start, it.get_next(dt.datetime)

    @property
    def app_id(self) -> str:
        """The Delta txn appId of this pipeline."""
        return self.name


def conceal(text: str, values: Iterable[tuple[str, str]]) -> str:
    """``text`` with each ``value`` of ``values`` ((value, "${NAME}") pairs) replaced by its name, in
    every spelling a location gives it (a trailing ``/`` dropped, a path normalised, ``s3://`` as
    ``s3a://`` and back), longest first, in one pass."""
    names: dict[str, str] = {}
    for value, name in values:
        for v in (value, value.rstrip("/"), os.path.normpath(value) if value.startswith("/") else value,
                  *(("s3a://" + value[5:],) if value.startswith("s3://") else ()),
                  *(("s3://" + value[6:],) if value.startswith("s3a://") else ())):
            if v:
                names.setdefault(v, name)
    if not names:
        return text
    pattern = re.compile("|".join(re.escape(v) for v in sorted(names, key=len, reverse=True)))
    return pattern.sub(lambda m: names[m.group(0)], text)
