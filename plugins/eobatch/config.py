"""Pipeline YAML: loading and validation (pure Python, no Airflow, no pyspark).

Every error names the file and the key, e.g. ``orders.yaml: source.path: must be ...``.
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import json
import os
import re
import string
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, NamedTuple

import yaml

from . import sinks
from .errors import ConfigError
from .policy import REPO, check_spark_conf, expand_vars
from .sinks import SinkConfig, SinkContext
from .sources import ConfigContext, SourceConfig, kind_for, kind_names

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
SIMPLE_TYPES = {
    "STRING", "VARCHAR", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "TINYINT",
    "BYTE", "DOUBLE", "FLOAT", "REAL", "BOOLEAN", "DATE", "TIMESTAMP", "BINARY",
}
PARTITION_TYPES = {"STRING", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "DATE", "BOOLEAN"}
TRANSFORMS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                              "spark_jobs", "transforms")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # upper-cased Spark SQL type text, e.g. DOUBLE, DECIMAL(10,2), ARRAY<STRING>
    not_null: bool = False


@dataclass(frozen=True)
class SparkConfig:
    conn_id: str = "spark_default"
    conf: dict = field(default_factory=dict)
    driver_memory: str | None = None
    executor_memory: str | None = None


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
    schedule: str | None = None  # None: run it from the UI or with `make maintain`
    compact: bool = True  # interval mode: slice by slice (eobatch.sinks.delta.compaction)
    target_file_bytes: int = 128 << 20
    vacuum_retention_hours: float = 168.0
    # an Airflow pool (create it with one slot: `make pools`) that the commit task and the
    # maintenance task take, so that they do not run at the same time on purpose (correctness
    # does not depend on it: eobatch.sinks.delta.compaction, eobatch.maintenance); None: no pool
    pool: str | None = None


@dataclass(frozen=True)
class Notifier:
    """One notifier of ``alerts.notify``: e-mail through the SMTP provider (``email``: the
    recipients) or an Airflow notifier class by its dotted path (``notifier``, ``args``)."""
    email: tuple[str, ...] = ()
    smtp_conn_id: str | None = None
    from_email: str | None = None
    notifier: str | None = None
    args: dict = field(default_factory=dict)


@dataclass(frozen=True)
class AlertsConfig:
    """``alerts``: who is told (``notify``) and of what: a task that failed for good
    (``on_failure``), a run still going ``run_deadline_minutes`` after it was queued, a backlog
    whose oldest unpublished record is older than ``backlog_max_age_minutes``."""
    notify: tuple[Notifier, ...] = ()
    on_failure: bool = False
    run_deadline_minutes: float | None = None
    backlog_max_age_minutes: float | None = None


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
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    aws_conn_id: str = "aws_default"  # the Airflow connection of S3 locations (Amazon provider)
    expectations: tuple[Expectation, ...] = ()
    schema_evolution: str = "add_columns"  # add_columns | fail: a new column of `schema` and the table
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)

    @property
    def sink_mode(self) -> str:
        """The YAML's ``sink.mode``: the mode of the sink's kind."""
        return sinks.kind_for(self.sink.kind).mode

    @property
    def sink_contract(self) -> str:
        """What a row of the sink means: appended records, or one row per key (an upsert's latest
        version, or running aggregates). Recorded in each plan: it cannot change under a table."""
        return self.sink.contract(self.mode)

    @property
    def participants(self) -> tuple[str, ...]:
        """The tables a batch is committed to, in commit order (the sink kind's ``participant_names``)."""
        return sinks.kind_for(self.sink.kind).participant_names(self)

    def fingerprint(self) -> str:
        """Hash of everything that changes what a batch publishes."""
        d = {
            "schema": self.schema, "transform": self.transform, "options": self.transform_options,
            "sink": self.sink_table, "partition_by": list(self.partition_by),
            "quarantine": self.quarantine_table, "source": self.source.fingerprint_dict(),
            "max_record_bytes": self.max_record_bytes,
        }
        d.update(self.sink.fingerprint_dict())  # an append sink adds nothing: the fingerprint it always had
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
        import datetime as dt

        from croniter import croniter

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


TOP_KEYS = {"name", "mode", "schedule", "source", "schema", "transform", "sink", "quarantine",
            "description", "max_record_bytes", "spark", "retries", "alerts", "aws_conn_id", "expectations",
            "schema_evolution", "maintenance"}
MAINTENANCE_KEYS = {"schedule", "compact", "target_file_mb", "vacuum_retention_hours", "pool"}
SINK_KEYS = {"table", "partition_by", "mode"}  # and each sink kind's own (sink_keys)
QUARANTINE_KEYS = {"table"}
SPARK_KEYS = {"conn_id", "conf", "driver_memory", "executor_memory"}
ALERT_KEYS = {"notify", "on_failure", "run_deadline_minutes", "backlog_max_age_minutes"}
EMAIL_NOTIFIER_KEYS = {"email", "smtp_conn_id", "from_email"}
CLASS_NOTIFIER_KEYS = {"notifier", "args"}
RETRY_KEYS = {"plan", "stage", "commit", "delay_seconds", "verify_timeout_seconds", "plan_wait_seconds"}


# -- a configuration edit is an event of the protocol ---------------------------------------------
# Every key of a pipeline YAML has one of three roles, defined here once (a test enumerates every key
# the loader accepts and checks it has one). Each plan records the values of the TABLE and PENDING
# keys (``BatchPlan.config``); plan, recover, verify and commit compare them with the file's now
# (``config_edits``) and refuse (``ConfigChanged``), naming the key, the old and the new value:
#   TABLE    what the tables' rows mean and where they are: fixed while the tables hold batches
#   PENDING  what a batch is staged, verified or committed with: a batch that is PLANNED, STAGED or
#            PREPARED finishes under the values that planned it (the edit waits until it has)
#   FREE     read only when a batch is planned or scheduled, or by no batch at all (the reason says)
TABLE, PENDING = "table", "pending"


def _source_value(attr: str):
    return lambda c: getattr(c.source, attr, None)


CONTRACT: dict[str, tuple[str, Any]] = {
    "name": (TABLE, lambda c: c.name),  # the tables' txn appId
    "sink.partition_by": (TABLE, lambda c: list(c.partition_by)),  # a Delta table's partitioning is fixed
    "sink.mode": (TABLE, lambda c: c.sink_mode),  # and each sink kind's keys (contract)
    "mode": (PENDING, lambda c: c.mode),
    "schema": (PENDING, lambda c: c.schema),
    "transform": (PENDING, lambda c: c.transform),
    "transform.options": (PENDING, lambda c: c.transform_options),
    "max_record_bytes": (PENDING, lambda c: c.max_record_bytes),
    "expectations": (PENDING, lambda c: [[e.name, e.expr, e.action] for e in c.expectations]),
    "schema_evolution": (PENDING, lambda c: c.schema_evolution),
    "source.kind": (PENDING, lambda c: c.source.kind),
    **{f"source.{k}": (PENDING, _source_value(k)) for k in
       ("path", "bootstrap_servers", "conn_id", "topic")},
}
HARMLESS: dict[str, str] = {
    "description": "text for people",
    "schedule": "when runs start; a pending batch's interval is in its plan",
    "aws_conn_id": "credentials, not what is read or written",
    # the tables' txn says what they hold: a table moved with the ledger under it goes on, a new empty one
    # under an existing ledger is a gap that recover and plan refuse (LedgerMismatch)
    "sink.table": "where the tables are, not what they mean",
    "quarantine.table": "where the tables are, not what they mean",
    **{f"spark.{k}": "where and with what resources the stage job runs" for k in SPARK_KEYS},
    **{f"retries.{k}": "how often and how long a run tries" for k in RETRY_KEYS},
    **{f"alerts.{k}": "who is told what" for k in ALERT_KEYS},
    **{f"maintenance.{k}": "maintenance keeps exactly-once under any settings" for k in MAINTENANCE_KEYS},
    **{f"source.{k}": "read when the next range is planned; a pending batch's range is in its plan" for k in
       ("max_records_per_batch", "interval_prefix", "settle_seconds", "late_files", "late_lookback_intervals",
        "starting_offsets", "max_file_bytes", "isolation_level")},
    "source.on_data_loss": "the policy when records are gone before they are read: changing it is a repair",
    "source.consumer_timeout_seconds": "how long a read waits for progress",
    "source.read_batch_bytes": "how much a read task buffers before Spark takes it, not what is read",
    "source.open_transaction_wait_seconds": "how long a plan waits for an open transaction; the range is in the plan",
}


def contract() -> dict[str, tuple[str, Any]]:
    """CONTRACT and the keys each sink kind adds (``SinkKind.contract_keys``, roles of its
    ``sink:`` keys): a pipeline of another kind records None for them."""
    out = dict(CONTRACT)
    for kind in sinks.kinds():
        out.update({key: (role, _sink_value(kind.name, get)) for key, (role, get) in kind.contract_keys.items()})
    return out


def _sink_value(kind: str, get):
    return lambda c: get(c.sink) if c.sink.kind == kind else None


def sink_keys() -> set[str]:
    """The keys a ``sink:`` mapping may hold: every pipeline's, and those of every sink kind."""
    return SINK_KEYS.union(*(k.config_keys for k in sinks.kinds()))


def config_values(cfg: PipelineConfig) -> dict[str, Any]:
    """The values of the TABLE and PENDING keys, as JSON (what a plan records)."""
    return json.loads(json.dumps({k: get(cfg) for k, (_role, get) in contract().items()}, sort_keys=True))


def config_edits(recorded: dict | None, cfg: PipelineConfig, pending: bool) -> list[tuple[str, str, Any, Any]]:
    """(key, role, recorded value, value now) of each TABLE key (and PENDING key when ``pending``)
    that differs from ``recorded`` (a plan's ``config``; a key it does not hold is not compared)."""
    now = config_values(cfg)
    keys = contract()
    roles = (TABLE, PENDING) if pending else (TABLE,)
    was = recorded or {}
    return [(k, keys[k][0], was[k], now[k]) for k in sorted(was)
            if k in keys and keys[k][0] in roles and was[k] != now[k]]


def _split_top(s: str, sep: str = ",") -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    quote: str | None = None
    for ch in s:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"`":
            quote = ch
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _check_type(t: str) -> bool:
    t = t.strip().upper()
    if t in SIMPLE_TYPES:
        return True
    if re.fullmatch(r"DECIMAL\s*\(\s*\d+\s*(,\s*\d+\s*)?\)", t) or t == "DECIMAL":
        return True
    m = re.fullmatch(r"(ARRAY|MAP|STRUCT)\s*<(.*)>", t, re.S)
    if not m:
        return False
    kind, inner = m.group(1), m.group(2)
    if kind == "ARRAY":
        return _check_type(inner)
    if kind == "MAP":
        kv = _split_top(inner)
        return len(kv) == 2 and all(_check_type(x) for x in kv)
    for f in _split_top(inner):
        fm = re.fullmatch(r"`?([A-Za-z_][A-Za-z0-9_]*)`?\s*:?\s*(.+)", f, re.S)
        if not fm or not _check_type(fm.group(2)):
            return False
    return True


def parse_schema(ddl: str, file: str = "<schema>", key: str = "schema") -> tuple[Column, ...]:
    """Parse a Spark DDL record schema ("a STRING, b DOUBLE NOT NULL") without Spark."""
    if not isinstance(ddl, str) or not ddl.strip():
        raise ConfigError(file, key, "must be a non-empty Spark DDL string such as 'id STRING, amount DOUBLE'")
    cols: list[Column] = []
    for part in _split_top(ddl):
        m = re.fullmatch(r"`?([A-Za-z_][A-Za-z0-9_]*)`?\s+(.+?)(\s+NOT\s+NULL)?(\s+COMMENT\s+'[^']*')?",
                         part, re.S | re.I)
        if not m:
            raise ConfigError(file, key, f"cannot parse column definition {part!r} (expected 'name TYPE')")
        name, typ, nn = m.group(1), re.sub(r"\s+", " ", m.group(2).strip()).upper(), bool(m.group(3))
        if not _check_type(typ):
            raise ConfigError(file, key, f"column {name!r}: unknown or unsupported type {m.group(2).strip()!r}")
        if name.lower() in {c.name.lower() for c in cols}:
            raise ConfigError(file, key, f"column {name!r} is declared twice")
        if name.startswith("_"):
            raise ConfigError(file, key, f"column {name!r}: names starting with '_' are reserved")
        cols.append(Column(name, typ, nn))
    return tuple(cols)


def require(d: dict, k: str, file: str, prefix: str = ""):
    if k not in d or d[k] is None:
        raise ConfigError(file, prefix + k, "is required")
    return d[k]


def refuse_unknown(d: dict, allowed: AbstractSet[str], file: str, prefix: str = "") -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise ConfigError(file, prefix + extra[0],
                          f"unknown key (allowed: {', '.join(sorted(allowed))})")


def table_path(v: Any, file: str, key: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(file, key, "must be a path or s3a:// URI")
    v = v.strip()
    if v.startswith(("s3a://", "s3://")):
        if not re.fullmatch(r"s3a?://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/[^\s]*)?", v):
            raise ConfigError(file, key, f"{v!r} is not a valid s3a://bucket/prefix URI")
        return "s3a://" + v.split("://", 1)[1].rstrip("/")  # one spelling everywhere: what Spark reads
    if "://" in v:
        raise ConfigError(file, key, f"unsupported scheme in {v!r} (use a local path or s3a://)")
    if not os.path.isabs(v):
        raise ConfigError(file, key, f"{v!r} must be an absolute path")
    return os.path.normpath(v)


def pos_int(v: Any, file: str, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConfigError(file, key, f"must be a positive integer, got {v!r}")
    return v


def load_pipeline(file: str) -> PipelineConfig:
    """The pipeline of YAML ``file``, validated section by section (the first error is raised)."""
    raw = _read_yaml(file)
    expand_vars(raw, file)
    refuse_unknown(raw, TOP_KEYS, file)
    name = _parse_name(raw, file)
    mode = _parse_mode(raw, file)
    schedule = _parse_schedule(raw, mode, file)
    source = _parse_source(raw, mode, schedule, file)
    schema = require(raw, "schema", file)
    columns = parse_schema(schema, file)
    transform, transform_options = _parse_transform(raw, file)
    sink_table, partition_by = _parse_sink(raw, transform, columns, file)
    sink = _parse_sink_kind(raw, transform, columns, file)
    quarantine_table = _parse_quarantine(raw, file)
    _check_separate_locations({"sink.table": sink_table, "quarantine.table": quarantine_table,
                               "source.path": source.path}, file)
    max_record_bytes = pos_int(raw.get("max_record_bytes", 1 << 20), file, "max_record_bytes")
    spark = _parse_spark(raw, file)
    retries_section = _optional_mapping(raw, "retries", RETRY_KEYS, file, "must be a mapping (plan, stage, commit, "
                                        "delay_seconds, verify_timeout_seconds, plan_wait_seconds)")
    retries = _parse_retries(retries_section, file)
    timeouts = _parse_timeouts(retries_section, file)
    alerts = _parse_alerts(raw, source, file)
    aws_conn_id = conn_id(raw.get("aws_conn_id", "aws_default"), file, "aws_conn_id")
    expectations = _parse_expectations(raw.get("expectations"), columns, file)
    evolution = raw.get("schema_evolution", SCHEMA_EVOLUTION[0])
    if evolution not in SCHEMA_EVOLUTION:
        raise ConfigError(file, "schema_evolution", f"{evolution!r} must be one of {', '.join(SCHEMA_EVOLUTION)}")
    maintenance = _parse_maintenance(raw, file)
    return PipelineConfig(
        name=name, file=os.path.abspath(file), mode=mode, schedule=schedule, source=source,
        schema=schema, columns=columns, transform=transform, transform_options=transform_options,
        sink_table=sink_table, partition_by=partition_by, quarantine_table=quarantine_table,
        max_record_bytes=max_record_bytes, description=str(raw.get("description", "")), spark=spark,
        plan_retries=retries.plan, stage_retries=retries.stage, commit_retries=retries.commit,
        retry_delay_seconds=retries.delay_seconds, verify_timeout_seconds=timeouts.verify_seconds,
        plan_wait_seconds=timeouts.plan_wait_seconds, alerts=alerts, aws_conn_id=aws_conn_id,
        expectations=expectations, schema_evolution=evolution, maintenance=maintenance, sink=sink,
    )


# -- the steps of load_pipeline, in its order: each parses and checks one key or section --------


def _read_yaml(file: str) -> dict:
    try:
        with open(file, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(file, "", f"invalid YAML: {e}") from None
    except OSError as e:
        raise ConfigError(file, "", f"cannot read: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(file, "", "must be a YAML mapping of keys (name, mode, source, ...)")
    return raw


def _required_mapping(raw: dict, key: str, allowed: AbstractSet[str], file: str, not_a_mapping: str) -> dict:
    """The mapping under top-level ``key``, which must be there; no key of it outside ``allowed``."""
    section = require(raw, key, file)
    if not isinstance(section, dict):
        raise ConfigError(file, key, not_a_mapping)
    refuse_unknown(section, allowed, file, f"{key}.")
    return section


def _optional_mapping(raw: dict, key: str, allowed: AbstractSet[str], file: str, not_a_mapping: str) -> dict:
    """The mapping under top-level ``key``; absent, null or empty: ``{}``; no key outside ``allowed``."""
    section = raw.get(key) or {}
    if not isinstance(section, dict):
        raise ConfigError(file, key, not_a_mapping)
    refuse_unknown(section, allowed, file, f"{key}.")
    return section


def _parse_name(raw: dict, file: str) -> str:
    name = require(raw, "name", file)
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError(file, "name", f"{name!r} must match [a-z][a-z0-9_]* (it is the DAG id and the Delta appId)")
    return name


def _parse_mode(raw: dict, file: str) -> str:
    mode = raw.get("mode", "continuous")
    if mode not in ("continuous", "interval"):
        raise ConfigError(file, "mode", f"{mode!r} must be 'continuous' or 'interval'")
    return mode


def _parse_schedule(raw: dict, mode: str, file: str) -> str | None:
    """null, a cron expression or a preset; interval mode needs one that has data intervals."""
    schedule = raw.get("schedule")
    if schedule is None:
        if mode == "interval":
            raise ConfigError(file, "schedule", "interval mode needs a schedule (a cron expression or a preset such "
                                                "as '@hourly'): its runs' data intervals are the batches' ranges")
        return None
    if not isinstance(schedule, str) or not schedule.strip():
        raise ConfigError(file, "schedule", "must be null, a cron expression or a preset such as '@hourly'")
    _check_schedule(schedule, file)
    if mode == "interval" and schedule.strip() in ("@once", "@continuous"):
        raise ConfigError(file, "schedule", f"{schedule!r} has no data intervals; interval mode needs a "
                                            f"cron expression or a preset such as '@hourly'")
    return schedule


def _parse_source(raw: dict, mode: str, schedule: str | None, file: str) -> SourceConfig:
    """The ``source`` mapping, parsed by its kind (which knows the kind's keys)."""
    section = require(raw, "source", file)
    if not isinstance(section, dict):
        raise ConfigError(file, "source", "must be a mapping with 'kind'")
    kind_name = require(section, "kind", file, "source.")
    if kind_name not in kind_names():
        raise ConfigError(file, "source.kind", f"{kind_name!r} must be one of {', '.join(kind_names())}")
    kind = kind_for(kind_name)
    refuse_unknown(section, kind.config_keys, file, "source.")
    return kind.parse_config(section, ConfigContext(file, mode, schedule))


def _parse_transform(raw: dict, file: str) -> tuple[str, dict]:
    """(module name, options): ``transform: <name>`` or ``transform: {name: ..., options: {...}}``."""
    transform = raw.get("transform", "passthrough")
    options: dict = {}
    if isinstance(transform, dict):
        refuse_unknown(transform, {"name", "options"}, file, "transform.")
        options = _transform_options(transform.get("options") or {}, file)
        transform = require(transform, "name", file, "transform.")
    if not isinstance(transform, str) or not NAME_RE.fullmatch(transform):
        raise ConfigError(file, "transform", f"{transform!r} must be a module name in spark_jobs/transforms/")
    if not os.path.exists(os.path.join(TRANSFORMS_DIR, transform + ".py")):
        known = sorted(p[:-3] for p in os.listdir(TRANSFORMS_DIR) if p.endswith(".py") and not p.startswith("_"))
        raise ConfigError(file, "transform", f"no module {transform!r} in spark_jobs/transforms/ "
                                             f"(known: {', '.join(known)})")
    return transform, options


def _transform_options(options: Any, file: str) -> dict:
    """The options reach the Spark job in its JSON spec: plain JSON values only."""
    if not isinstance(options, dict):
        raise ConfigError(file, "transform.options", "must be a mapping")
    try:
        json.dumps(options)
    except TypeError as e:
        raise ConfigError(file, "transform.options", f"values must be plain strings, numbers, lists or "
                          f"mappings (quote dates and times): {e}") from None
    return options


def _parse_sink(raw: dict, transform: str, columns: tuple[Column, ...], file: str) -> tuple[str, tuple[str, ...]]:
    """(table, partition columns) of the ``sink`` mapping."""
    section = _required_mapping(raw, "sink", sink_keys(), file, "must be a mapping with 'table'")
    table = table_path(require(section, "table", file, "sink."), file, "sink.table")
    partition_by = section.get("partition_by") or []
    if not isinstance(partition_by, list) or not all(isinstance(c, str) for c in partition_by):
        raise ConfigError(file, "sink.partition_by", "must be a list of column names")
    if transform == "passthrough":  # the published columns are the schema's (other transforms: unknown here)
        _check_partition_columns(partition_by, columns, file)
    return table, tuple(partition_by)


def _parse_sink_kind(raw: dict, transform: str, columns: tuple[Column, ...], file: str) -> SinkConfig:
    """``sink.mode`` and the keys of its kind (``eobatch.sinks``), parsed by the kind."""
    section = raw["sink"]
    mode = section.get("mode", sinks.kind_for(sinks.DEFAULT).mode)
    if mode not in sinks.modes():
        raise ConfigError(file, "sink.mode", f"{mode!r} must be one of {', '.join(sinks.modes())}")
    kind = sinks.kind_for_mode(mode)
    for other in sinks.kinds():
        for key in sorted(other.config_keys - kind.config_keys):
            if key in section:
                raise ConfigError(file, f"sink.{key}", f"is only for sink.mode: {other.mode}")
    return kind.parse_config(section, SinkContext(file, transform, columns))


def _check_partition_columns(partition_by: list[str], columns: tuple[Column, ...], file: str) -> None:
    types = {c.name: c.type for c in columns}
    for c in partition_by:
        if c not in types:
            raise ConfigError(file, "sink.partition_by", f"{c!r} is not a column of the schema")
        if types[c] not in PARTITION_TYPES:
            raise ConfigError(file, "sink.partition_by", f"{c!r} has type {types[c]}; partition columns must be "
                                                         f"one of {sorted(PARTITION_TYPES)}")
    if partition_by and len(partition_by) == len(columns):
        raise ConfigError(file, "sink.partition_by", "at least one column must stay out of the partitioning")


def _parse_quarantine(raw: dict, file: str) -> str:
    """The table of the ``quarantine`` mapping."""
    section = _required_mapping(raw, "quarantine", QUARANTINE_KEYS, file, "must be a mapping with 'table'")
    return table_path(require(section, "table", file, "quarantine."), file, "quarantine.table")


def _check_separate_locations(locations: dict[str, str | None], file: str) -> None:
    """No two of the tables and the landing folder (when the kind has one) may be or contain each other."""
    paths = {key: path for key, path in locations.items() if path}
    for a, pa in paths.items():
        for b, pb in paths.items():
            if a < b and (pa == pb or pa.startswith(pb.rstrip("/") + "/") or pb.startswith(pa.rstrip("/") + "/")):
                raise ConfigError(file, b, f"{pb!r} overlaps {a} {pa!r}; they must be separate folders")


def _parse_spark(raw: dict, file: str) -> SparkConfig:
    section = _optional_mapping(raw, "spark", SPARK_KEYS, file, "must be a mapping")
    conf = section.get("conf") or {}
    if not isinstance(conf, dict):
        raise ConfigError(file, "spark.conf", "must be a mapping of Spark settings")
    return SparkConfig(conn_id=str(section.get("conn_id", "spark_default")), conf=check_spark_conf(conf, file),
                       driver_memory=section.get("driver_memory"), executor_memory=section.get("executor_memory"))


class _Retries(NamedTuple):
    plan: int
    stage: int
    commit: int
    delay_seconds: float


class _Timeouts(NamedTuple):
    verify_seconds: int
    plan_wait_seconds: int


def _parse_retries(section: dict, file: str) -> _Retries:
    """How often the plan, stage and commit tasks are retried, and the delay between tries."""
    return _Retries(plan=_retry_count(section, "plan", 2, file), stage=_retry_count(section, "stage", 1, file),
                    commit=_retry_count(section, "commit", 8, file), delay_seconds=_retry_delay(section, file))


def _retry_count(section: dict, key: str, default: int, file: str) -> int:
    count = section.get(key, default)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigError(file, f"retries.{key}", f"must be a non-negative integer, got {count!r}")
    return count


def _retry_delay(section: dict, file: str) -> float:
    delay = section.get("delay_seconds", 10)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
        raise ConfigError(file, "retries.delay_seconds", f"must be a non-negative number, got {delay!r}")
    return float(delay)


def _parse_timeouts(section: dict, file: str) -> _Timeouts:
    """The verify sensor's timeout (``retries.verify_timeout_seconds``) and how long an interval
    run's plan waits for another run's batch (``retries.plan_wait_seconds``)."""
    return _Timeouts(
        verify_seconds=pos_int(section.get("verify_timeout_seconds", 900), file, "retries.verify_timeout_seconds"),
        plan_wait_seconds=pos_int(section.get("plan_wait_seconds", 3600), file, "retries.plan_wait_seconds"))


POOL_RE = re.compile(r"[A-Za-z0-9_.-]{1,256}")


def _parse_maintenance(raw: dict, file: str) -> MaintenanceConfig:
    section = _optional_mapping(raw, "maintenance", MAINTENANCE_KEYS, file, "must be a mapping (schedule, compact, "
                                "target_file_mb, vacuum_retention_hours, pool)")
    schedule = section.get("schedule")
    if schedule is not None:
        if not isinstance(schedule, str):
            raise ConfigError(file, "maintenance.schedule", f"must be a cron expression or a preset, got {schedule!r}")
        _check_schedule(schedule, file, "maintenance.schedule")
    compact = section.get("compact", True)
    if not isinstance(compact, bool):
        raise ConfigError(file, "maintenance.compact", f"must be true or false, got {compact!r}")
    target = pos_int(section.get("target_file_mb", 128), file, "maintenance.target_file_mb")
    retention = section.get("vacuum_retention_hours", 168)
    if isinstance(retention, bool) or not isinstance(retention, (int, float)) or retention < 0:
        raise ConfigError(file, "maintenance.vacuum_retention_hours", f"must be a number of hours >= 0, got "
                          f"{retention!r}")
    pool = section.get("pool")
    if pool is not None and (not isinstance(pool, str) or not POOL_RE.fullmatch(pool)):
        raise ConfigError(file, "maintenance.pool", f"must be an Airflow pool name (letters, digits, '_', '-', '.'; "
                          f"at most 256), got {pool!r}")
    return MaintenanceConfig(schedule=schedule, compact=compact, target_file_bytes=target << 20,
                             vacuum_retention_hours=float(retention), pool=pool)


def _parse_expectations(section: Any, columns: tuple[Column, ...], file: str) -> tuple[Expectation, ...]:
    """``expectations``: a list of {name, expr, action}, names unique. The expression is Spark SQL,
    checked by Spark in the stage job (its error names the expectation); here: that it is one
    non-empty expression naming at least one column of the schema."""
    if section is None:
        return ()
    if not isinstance(section, list):
        raise ConfigError(file, "expectations", "must be a list of {name, expr, action}, e.g. "
                          "[{name: positive_amount, expr: \"amount >= 0\", action: quarantine}]")
    out: list[Expectation] = []
    names = {c.name.lower() for c in columns}
    for i, e in enumerate(section):
        key = f"expectations[{i}]"
        if not isinstance(e, dict):
            raise ConfigError(file, key, "must be a mapping {name, expr, action}")
        refuse_unknown(e, {"name", "expr", "action"}, file, f"{key}.")
        name = require(e, "name", file, f"{key}.")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ConfigError(file, f"{key}.name", f"{name!r} must match [a-z][a-z0-9_]*")
        if any(x.name == name for x in out):
            raise ConfigError(file, f"{key}.name", f"{name!r} is defined twice")
        expr = require(e, "expr", file, f"{key}.")
        if not isinstance(expr, str) or not expr.strip() or ";" in expr:
            raise ConfigError(file, f"{key}.expr", f"must be one Spark SQL boolean expression, got {expr!r}")
        words = {w.lower() for pair in re.findall(r"`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*)", expr) for w in pair if w}
        if not words & names:
            raise ConfigError(file, f"{key}.expr", f"{expr!r} names no column of the schema "
                              f"({', '.join(c.name for c in columns)})")
        action = e.get("action", "quarantine")
        if action not in EXPECTATION_ACTIONS:
            raise ConfigError(file, f"{key}.action", f"{action!r} must be one of {', '.join(EXPECTATION_ACTIONS)}")
        out.append(Expectation(name=name, expr=expr.strip(), action=action))
    return tuple(out)


CONN_ID_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
EMAIL_RE = re.compile(r"^[^@\s,;<>]+@[^@\s,;<>]+$")


def _parse_alerts(raw: dict, source: SourceConfig, file: str) -> AlertsConfig:
    """``alerts``: notifiers (e-mail or an Airflow notifier class) and the conditions that call
    them. Only connection ids are named here, never a password."""
    section = _optional_mapping(raw, "alerts", ALERT_KEYS, file, "must be a mapping (notify, on_failure, "
                                "run_deadline_minutes, backlog_max_age_minutes)")
    if not section:
        return AlertsConfig()
    notify = section.get("notify")
    if not isinstance(notify, list) or not notify:
        raise ConfigError(file, "alerts.notify", "must be a list of at least one notifier, e.g. "
                          "[{email: [ops@example.com]}]")
    notifiers = tuple(_parse_notifier(n, file, f"alerts.notify[{i}]") for i, n in enumerate(notify))
    on_failure = section.get("on_failure", True)
    if not isinstance(on_failure, bool):
        raise ConfigError(file, "alerts.on_failure", f"must be true or false, got {on_failure!r}")
    deadline = _positive_minutes(section, "run_deadline_minutes", file)
    backlog_age = _positive_minutes(section, "backlog_max_age_minutes", file)
    if backlog_age is not None and kind_for(source.kind).position_based:
        raise ConfigError(file, "alerts.backlog_max_age_minutes", f"the age of a {source.kind} backlog is not known "
                          "(a record's timestamp is only known by reading it, the backlog age of landing files "
                          "is their modification time); alert with on_failure and run_deadline_minutes instead")
    return AlertsConfig(notify=notifiers, on_failure=on_failure, run_deadline_minutes=deadline,
                        backlog_max_age_minutes=backlog_age)


def _parse_notifier(n: Any, file: str, key: str) -> Notifier:
    if not isinstance(n, dict) or ("email" in n) == ("notifier" in n):
        raise ConfigError(file, key, "must be a mapping with either 'email' (a list of addresses) or 'notifier' "
                          "(the dotted path of an Airflow notifier class)")
    if "email" in n:
        refuse_unknown(n, EMAIL_NOTIFIER_KEYS, file, f"{key}.")
        to = n["email"]
        to = [to] if isinstance(to, str) else to
        if not isinstance(to, list) or not to or not all(isinstance(a, str) and EMAIL_RE.match(a) for a in to):
            raise ConfigError(file, f"{key}.email", f"must be an e-mail address or a list of them, got {n['email']!r}")
        smtp = n.get("smtp_conn_id")
        smtp = None if smtp is None else conn_id(smtp, file, f"{key}.smtp_conn_id")
        sender = n.get("from_email")
        if sender is not None and not (isinstance(sender, str) and EMAIL_RE.match(sender)):
            raise ConfigError(file, f"{key}.from_email", f"must be an e-mail address, got {sender!r}")
        return Notifier(email=tuple(to), smtp_conn_id=smtp, from_email=sender)
    refuse_unknown(n, CLASS_NOTIFIER_KEYS, file, f"{key}.")
    path = n["notifier"]
    if not isinstance(path, str) or not DOTTED_RE.match(path):
        raise ConfigError(file, f"{key}.notifier", f"must be the dotted path of a notifier class, e.g. "
                          f"airflow.providers.slack.notifications.slack.SlackNotifier; got {path!r}")
    args = n.get("args") or {}
    if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        raise ConfigError(file, f"{key}.args", "must be a mapping of the notifier's keyword arguments")
    return Notifier(notifier=path, args=dict(args))


def conn_id(v: Any, file: str, key: str) -> str:
    """An Airflow connection id (the YAML names connections, never their secrets)."""
    if not (isinstance(v, str) and CONN_ID_RE.match(v)):
        raise ConfigError(file, key, f"must be an Airflow connection id, got {v!r}")
    return v


def _positive_minutes(section: dict, key: str, file: str) -> float | None:
    v = section.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ConfigError(file, f"alerts.{key}", f"must be a positive number of minutes, got {v!r}")
    return float(v)


LATE_FILE_POLICIES = ("republish", "fail", "ignore")


def non_negative_int(v: Any, file: str, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(file, key, f"must be a non-negative integer, got {v!r}")
    return v


def interval_source_keys(src: dict, mode: str, file: str) -> dict:
    """settle_seconds (every kind) and the late-file policy (landing-file kinds) of interval mode."""
    out = {}
    for key in ("settle_seconds", "late_files", "late_lookback_intervals"):
        if key in src and mode != "interval":
            raise ConfigError(file, f"source.{key}", "only used in interval mode (set mode: interval, or remove it)")
    if "settle_seconds" in src:
        out["settle_seconds"] = non_negative_int(src["settle_seconds"], file, "source.settle_seconds")
    if "late_files" in src:
        if src["late_files"] not in LATE_FILE_POLICIES:
            raise ConfigError(file, "source.late_files", f"{src['late_files']!r} must be one of "
                                                         f"{', '.join(LATE_FILE_POLICIES)}")
        out["late_files"] = src["late_files"]
    if "late_lookback_intervals" in src:
        out["late_lookback_intervals"] = non_negative_int(src["late_lookback_intervals"], file,
                                                           "source.late_lookback_intervals")
    return out


INTERVAL_FIELDS = {"ds", "hh", "ds_nodash"}


def check_interval_prefix(prefix, mode: str, schedule: str | None, file: str) -> None:
    key = "source.interval_prefix"
    if mode != "interval":
        raise ConfigError(file, key, "only used in interval mode (set mode: interval, or remove it)")
    if not isinstance(prefix, str) or not prefix.strip("/ "):
        raise ConfigError(file, key, "must be a sub-folder pattern such as 'dt={ds}' or 'dt={ds}/hour={hh}'")
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(prefix) if f is not None}
    except ValueError as e:
        raise ConfigError(file, key, f"{prefix!r} is not a valid pattern: {e}") from None
    unknown = names - INTERVAL_FIELDS
    if unknown or not names:
        raise ConfigError(file, key, f"{prefix!r} must use only the placeholders {{ds}} (YYYY-MM-DD), "
                                     f"{{ds_nodash}} (YYYYMMDD) and {{hh}} (hour, 00-23), and at least one of them")
    if prefix.startswith("/") or ".." in prefix.split("/"):
        raise ConfigError(file, key, f"{prefix!r} must be a relative sub-folder of source.path")
    if schedule is None:  # parse_config refuses this before it parses the source
        raise ConfigError(file, "schedule", "interval mode needs a schedule (a cron expression or a preset such "
                                            "as '@hourly'): its runs' data intervals are the batches' ranges")
    _check_prefix_grain(prefix, names, schedule, file)


HOUR, DAY = dt.timedelta(hours=1), dt.timedelta(days=1)
PREFIX_HINT = "use dt={ds}/hour={hh} with @hourly ('0 * * * *'), or dt={ds} with @daily ('0 0 * * *')"


def _check_prefix_grain(prefix: str, names: set, schedule: str, file: str) -> None:
    """The prefix must name exactly one interval: its folder changes at every interval boundary, never inside.

    With {hh} every interval must be one clock hour (and the folder needs the date too); with the
    date alone, one UTC day from 00:00 to 00:00.
    """
    key = "source.interval_prefix"
    hourly = "hh" in names
    if hourly and not names & {"ds", "ds_nodash"}:
        raise ConfigError(file, key, f"{prefix!r} has {{hh}} and also needs {{ds}} or {{ds_nodash}}: without "
                                     f"the date, hour 10 of every day is the same folder; {PREFIX_HINT}")
    odd = _odd_interval(PRESET_CRON.get(schedule.strip(), schedule.strip()), HOUR if hourly else DAY)
    if odd:
        unit, shape = ("clock hour", "HH:00 to HH+1:00") if hourly else ("UTC day", "00:00 to 00:00")
        raise ConfigError(file, key, f"{prefix!r} names one folder per {unit}, so every interval must be one "
                                     f"{unit} ({shape} UTC), but schedule {schedule!r} has intervals such as "
                                     f"{_at(odd[0])} to {_at(odd[1])} UTC ({_span(odd[1] - odd[0])}); {PREFIX_HINT}")


GRAIN_CHECK_FROM = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)  # a Monday 00:00 of a leap year


def _odd_interval(cron: str, step: dt.timedelta) -> tuple[dt.datetime, dt.datetime] | None:
    """The first interval of ``cron`` that is not exactly one ``step`` (an hour or a day) starting on a
    multiple of it, or None. Intervals are UTC (no DST), from one tick to the next, as Airflow's.

    Cron's ticks are (the days it runs) x (its times of day): the times are checked over one day of
    ticks, the days over a year of midnights (every month, day of the month and weekday).
    """
    from croniter import croniter

    for a, b in pairwise(_ticks(cron, DAY // step + 1)):
        if b - a != step or (a - GRAIN_CHECK_FROM) % step:
            return a, b
    for a, b in pairwise(_ticks(" ".join(["0", "0", *cron.split()[2:5]]), 367)):
        if b - a != DAY:  # a day it does not run: the interval that ends at b spans it
            return croniter(cron, b).get_prev(dt.datetime), b
    return None


def _ticks(cron: str, n: int) -> list[dt.datetime]:
    from croniter import croniter

    it = croniter(cron, GRAIN_CHECK_FROM - dt.timedelta(microseconds=1))
    return [it.get_next(dt.datetime) for _ in range(n)]


def _at(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S" if t.second else "%Y-%m-%d %H:%M")


def _span(d: dt.timedelta) -> str:
    for unit, size in (("day", DAY), ("hour", HOUR), ("minute", dt.timedelta(minutes=1))):
        if not d % size:
            return f"{d // size} {unit}{'' if d == size else 's'}"
    return f"{int(d.total_seconds())} seconds"


# Cron spelling of Airflow's presets, for interval mode's CronDataIntervalTimetable.
PRESET_CRON = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
               "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@quarterly": "0 0 1 */3 *",
               "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *"}
PRESETS = {"@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly", "@annually", "@midnight"}


def _check_schedule(s: str, file: str, key: str = "schedule") -> None:
    s = s.strip()
    if s.startswith("@"):
        if s not in PRESETS:
            raise ConfigError(file, key, f"unknown preset {s!r} (known: {', '.join(sorted(PRESETS))})")
        return
    fields = s.split()
    if len(fields) not in (5, 6) or not all(re.fullmatch(r"[0-9A-Za-z*/,\-?LW#]+", f) for f in fields):
        raise ConfigError(file, key, f"{s!r} is not a cron expression (5 fields) or a preset")
    try:
        from croniter import croniter  # ships with Airflow; optional here
    except ImportError:
        return
    if not croniter.is_valid(s):
        raise ConfigError(file, key, f"{s!r} is not a valid cron expression")


def pipelines_dir() -> str:
    return os.environ.get("PIPELINES_DIR") or os.path.join(REPO, "include", "pipelines")


def load_all(directory: str | None = None) -> tuple[dict[str, PipelineConfig], dict[str, str]]:
    """Every *.yaml of the pipelines folder: ({name: config}, {file: error}).

    A bad file never stops the others from loading; duplicate names are errors of the later file.
    """
    directory = directory or pipelines_dir()
    good: dict[str, PipelineConfig] = {}
    errors: dict[str, str] = {}
    for f in sorted(glob.glob(os.path.join(directory, "*.yaml")) + glob.glob(os.path.join(directory, "*.yml"))):
        try:
            cfg = load_pipeline(f)
        except ConfigError as e:
            errors[f] = str(e)
            continue
        if cfg.name in good:
            errors[f] = str(ConfigError(f, "name", f"{cfg.name!r} is already defined in {os.path.basename(good[cfg.name].file)}"))
            continue
        clash = next((g for g in good.values() if {g.sink_table, g.quarantine_table} &
                      {cfg.sink_table, cfg.quarantine_table}), None)
        if clash is not None:
            errors[f] = str(ConfigError(f, "sink.table", f"{cfg.sink_table} or {cfg.quarantine_table} is already "
                                        f"written by pipeline {clash.name!r} ({os.path.basename(clash.file)}); "
                                        f"each table has exactly one pipeline (its ledger lives in the table)"))
            continue
        good[cfg.name] = cfg
    return good, errors


def find_pipeline(name: str, directory: str | None = None) -> PipelineConfig:
    good, errors = load_all(directory)
    if name in good:
        return good[name]
    hint = "; ".join(errors.values())
    raise KeyError(f"no pipeline named {name!r} in {directory or pipelines_dir()}" + (f" (errors: {hint})" if hint else ""))
