"""Pipeline YAML: loading and validation (pure Python, no Airflow, no pyspark).

A pipeline file is a typed model (pydantic v2): ``PipelineFile``, one model per section below
(``SparkSection``, ``RetriesSection``, ...), the ``source:`` section of each source kind and the
keys each sink kind adds under ``sink:`` from the kind's own model (``KIND.config_model``). The
models check each key with the product's wording (every problem of a file is reported at once, in
the order of the file's keys: ``ConfigError.problems``), and ``load_pipeline`` turns the file into the ``PipelineConfig`` of
``config.pipeline``. Every error names the file and the key path, e.g. ``orders.yaml: source.path: must
be ...``; an unknown key names the allowed ones. The configuration contract of the keys is
``config.contract``'s, with each kind's part (``contract`` puts them together); what a YAML may never do (Spark settings,
``${VAR}``) is ``config.policy``'s, schedules ``config.schedule``'s, Spark DDL ``config.ddl``'s, the JSON Schema of
the models ``json_schema``'s (beside this module), reading a file's bytes into a YAML mapping (every cost bounded, any
bytes a ``ConfigError``) ``config.yamlfile``'s.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from .. import settings, sinks
from ..config import model as cm
from ..config import notifiers, sql_guard, transforms
from ..config.access import check_access
from ..config.contract import PASSTHROUGH, Contract, Edit, assemble, contract_edits, kind_part
from ..config.ddl import PARTITION_PATH_MAX_BYTES, PARTITION_TYPES, Column, parse_schema, partition_min_bytes
from ..config.model import (
    NAME_RE,
    Bool,
    Check,
    ConnId,
    Invalid,
    NonNegativeInt,
    PosInt,
    Section,
    TablePath,
    context_file,
    one_of,
    required,
    table_path,
    validate,
)
from ..config.pipeline import (
    DEFAULT_BATCHES_PER_RUN,
    EXPECTATION_ACTIONS,
    LOG_LEVELS,
    MAX_BATCHES_PER_RUN,
    SCHEMA_EVOLUTION,
    STUCK_AFTER_RUNS,
    STUCK_ATTEMPT_HOURS,
    AlertsConfig,
    Expectation,
    MaintenanceConfig,
    Notifier,
    PipelineConfig,
    SparkConfig,
    conceal,
)
from ..config.policy import BUILTIN_VARS, EXPANDED_KEYS, VAR_RE, check_spark_conf, expand_vars
from ..config.schedule import check_schedule
from ..config.yamlfile import clip, read_mapping
from ..errors import ConfigError, UsageError
from ..paths import default_pipelines_dir
from ..sinks import SinkContext
from ..sources import ConfigContext, KindUnavailable, SourceConfig, kind_for, kind_names
from ..sources import kinds as source_kinds
from ..sources.base import bucket_shared_with

MODES = ("continuous", "interval")


# -- the YAML's sections as typed models (config.model): each checks its keys, in the order of the
# file's keys below; a section that needs another's values (the schema's columns, the mode) reads
# them from the pipeline's keys validated before it (``info.data``).


def _name(v: Any) -> str:
    if not isinstance(v, str) or not NAME_RE.fullmatch(v):
        raise Invalid(f"{v!r} must match [a-z][a-z0-9_]* (it is the DAG id and the Delta appId)")
    return v


def _mode(v: Any) -> str:
    if v not in MODES:
        raise Invalid(f"{v!r} must be 'continuous' or 'interval'")
    return v


def _schedule(v: Any, info: ValidationInfo) -> str | dict | None:
    """null, a cron expression or a preset; interval mode needs one that has data intervals.
    ``{asset: <table>}`` (continuous mode): runs start on the asset events of that table."""
    mode = info.data.get("mode")
    if isinstance(v, dict):
        if set(v) != {"asset"}:
            raise Invalid("a schedule mapping has one key, asset: the table (a path or s3a:// URI) whose asset "
                          "events start a run, e.g. another pipeline's sink.table, or that pipeline's name")
        if mode == "interval":
            raise Invalid("interval mode needs a cron schedule: its runs' data intervals are the batches' ranges; "
                          "{asset: ...} starts continuous-mode runs")
        if isinstance(v["asset"], str) and NAME_RE.fullmatch(v["asset"]):
            return {"asset": v["asset"]}  # another pipeline of the folder, by name: its sink table's asset
        try:
            return {"asset": table_path(v["asset"])}
        except Invalid as e:
            raise Invalid(f"{e.message}, or the name of another pipeline of the folder", at="asset") from None
    if v is None:
        if mode == "interval":
            raise Invalid("interval mode needs a schedule (a cron expression or a preset such "
                          "as '@hourly'): its runs' data intervals are the batches' ranges")
        return None
    if not isinstance(v, str) or not v.strip():
        raise Invalid("must be null, a cron expression or a preset such as '@hourly'")
    check_schedule(v)
    if mode == "interval" and v.strip() in ("@once", "@continuous"):
        raise Invalid(f"{v!r} has no data intervals; interval mode needs a cron expression or a preset such "
                      f"as '@hourly'")
    return v


def _source(v: Any, info: ValidationInfo) -> SourceConfig:
    """The ``source`` mapping, parsed by its kind (which knows the kind's keys)."""
    if "mode" not in info.data or "schedule" not in info.data:
        return v  # an error of the mode or schedule is the file's first
    if v is None:
        raise Invalid("is required")
    if not isinstance(v, dict):
        raise Invalid("must be a mapping with 'kind'")
    if v.get("kind") is None:
        raise Invalid("is required", at="kind")
    if v["kind"] not in kind_names():
        raise Invalid(f"{v['kind']!r} must be one of {', '.join(kind_names())}", at="kind")
    try:
        kind = kind_for(v["kind"])
    except KindUnavailable as e:  # an installed kind that cannot be used: the message names its distribution
        raise Invalid(str(e), at="kind") from None
    extra = sorted(set(v) - kind.config_keys)
    if extra:
        raise Invalid(f"unknown key (allowed: {', '.join(sorted(kind.config_keys))})", at=str(extra[0]))
    return kind.parse_config(v, ConfigContext(context_file(info), info.data["mode"],
                                             info.data["schedule"] if isinstance(info.data["schedule"], str) else None))


def _schema(v: Any, info: ValidationInfo) -> tuple[str, tuple[Column, ...]]:
    """(the DDL text, its columns)."""
    if v is None:
        raise Invalid("is required")
    return v, parse_schema(v, context_file(info))


def _transform_name(v: Any, info: ValidationInfo) -> transforms.ResolvedName:
    """A transform of the pipeline's own folder or one shipped (``transforms.resolve``), resolved
    once (the bare form's name comes here resolved already)."""
    if isinstance(v, transforms.ResolvedName):
        return v
    if v is None:
        raise Invalid("is required")
    code = transforms.resolve((info.context or {}).get("file"), v)  # no file: the default's
    name = transforms.ResolvedName(code.name)
    name.code = code
    return name


def _transform_options(v: Any) -> dict:
    """The options reach the Spark job in its JSON spec: plain JSON values only."""
    v = v or {}
    if not isinstance(v, dict):
        raise Invalid("must be a mapping")
    try:
        json.dumps(v)
    except TypeError as e:
        raise Invalid(f"values must be plain strings, numbers, lists or mappings (quote dates and times): "
                      f"{e}") from None
    return v


class TransformSection(Section):
    """``transform: <name>`` or ``transform: {name: ..., options: {...}}``."""
    name: Annotated[Any, Check(_transform_name, {"type": "string", "pattern": NAME_RE.pattern,
                                                 "description": transforms.DESCRIPTION})]
    options: Annotated[Any, Check(_transform_options, {"type": "object"})] = {}

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any, info: ValidationInfo) -> Any:
        return data if isinstance(data, dict) else {"name": _transform_name(data, info)}


def _partition_by(v: Any) -> tuple[str, ...]:
    v = v or []
    if not isinstance(v, list) or not all(isinstance(c, str) for c in v):
        raise Invalid("must be a list of column names")
    least = partition_min_bytes(v)
    if least > PARTITION_PATH_MAX_BYTES:  # every file's folders, each value shortened to its digest
        raise Invalid(f"the folders of these {len(v)} partition columns take at least {least} bytes in a file's "
                      f"path, more than {PARTITION_PATH_MAX_BYTES}: partition by fewer (or shorter-named) columns")
    return tuple(v)


# An S3 key holds at most 1024 bytes: a table's own key, then what the stage job adds below it
# (eo_batches/b<id>/<attempt>/<interval slice>/, the partition folders, the file name).
S3_KEY_MAX_BYTES = 1024
STAGED_NAME_BYTES = 128  # eo_batches/b0000000001/t<try>-<12 hex>/iv=<time>/ and part-<n>-<task>-<12 hex>.snappy.parquet


def _check_s3_key_room(table: str, partition_by: tuple[str, ...], key: str) -> None:
    """A table on S3 leaves room in a key for every file the stage job writes under it."""
    if not table.startswith("s3a://"):  # the loader's one spelling of an S3 location
        return
    own = len(table.removeprefix("s3a://").partition("/")[2].encode())
    room = S3_KEY_MAX_BYTES - STAGED_NAME_BYTES - (PARTITION_PATH_MAX_BYTES if partition_by else 0)
    if own > room:
        raise Invalid(f"the table's key takes {own} bytes; an S3 key holds at most {S3_KEY_MAX_BYTES}, and the staged "
                      f"files below it need {S3_KEY_MAX_BYTES - room}: a table key of at most {room} bytes", at=key)


SINK_KEYS = frozenset({"table", "partition_by", "mode"})  # and each sink kind's own (sink_keys)


class SinkSection(Section):
    """``sink``: the table and its partitioning, which every pipeline has, and the keys of the
    sink kind that ``mode`` names (``eobatch.sinks``: ``config``, parsed by the kind)."""
    NULL = "required"
    NOT_A_MAPPING = "must be a mapping with 'table'"
    model_config = ConfigDict(extra="allow")
    table: TablePath
    partition_by: Annotated[tuple[str, ...], Check(_partition_by, {"type": "array", "items": {"type": "string"}})] = ()
    mode: Annotated[Any, Check(lambda v: v, {"type": "string"})] = None  # its kind checks it (PipelineFile)
    config: SkipJsonSchema[Any] = None  # the kind's (SinkConfig), set by the pipeline's check

    @classmethod
    def yaml_keys(cls) -> frozenset[str]:
        return frozenset(sink_keys())


class QuarantineSection(Section):
    NULL = "required"
    NOT_A_MAPPING = "must be a mapping with 'table'"
    table: TablePath


def _spark_conf(v: Any, info: ValidationInfo) -> dict[str, str]:
    v = v or {}
    if not isinstance(v, dict):
        raise Invalid("must be a mapping of Spark settings")
    return check_spark_conf(v, context_file(info))


def _log_level(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or v.upper() not in LOG_LEVELS:
        raise Invalid(f"must be one of {', '.join(LOG_LEVELS)} (Spark's log level in the stage job), got {v!r}")
    return v.upper()


class SparkSection(Section):
    conn_id: Annotated[Any, Check(str, {"type": "string"})] = "spark_default"
    conf: Annotated[Any, Check(_spark_conf, {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}})] = {}
    driver_memory: Annotated[Any, Check(lambda v: v, {"type": "string"})] = None
    executor_memory: Annotated[Any, Check(lambda v: v, {"type": "string"})] = None
    # Spark's log level in the stage job: WARN unless this, or the deployment's EOBATCH_SPARK_LOG_LEVEL
    log_level: Annotated[Any, Check(_log_level, {"type": "string", "enum": [*LOG_LEVELS, *map(str.lower, LOG_LEVELS)]})] = None

    def value(self) -> SparkConfig:
        return SparkConfig(conn_id=self.conn_id, conf=self.conf, driver_memory=self.driver_memory,
                           executor_memory=self.executor_memory, log_level=self.log_level)


def _non_negative_number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise Invalid(f"must be a non-negative number, got {v!r}")
    return float(v)


class RetriesSection(Section):
    """How often the plan, stage and commit tasks are retried and the delay between tries; the
    verify sensor's timeout and how long an interval run's plan waits for another run's batch."""
    NOT_A_MAPPING = ("must be a mapping (plan, stage, commit, delay_seconds, verify_timeout_seconds, "
                     "plan_wait_seconds, stage_timeout_seconds)")
    plan: NonNegativeInt = 2
    stage: NonNegativeInt = 1
    commit: NonNegativeInt = 8
    delay_seconds: Annotated[Any, Check(_non_negative_number, {"type": "number", "minimum": 0})] = 10.0
    verify_timeout_seconds: PosInt = 900
    plan_wait_seconds: PosInt = 3600
    stage_timeout_seconds: PosInt = 21600


def _positive_minutes(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise Invalid(f"must be a positive number of minutes, got {v!r}")
    return float(v)


Minutes = Annotated[Any, Check(_positive_minutes, {"type": "number", "exclusiveMinimum": 0})]
DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
EMAIL_RE = re.compile(r"^[^@\s,;<>]+@[^@\s,;<>]+$")
EMAIL_NOTIFIER_KEYS = frozenset({"email", "smtp_conn_id", "from_email"})
CLASS_NOTIFIER_KEYS = frozenset({"notifier", "args", "alert_args"})


def _emails(v: Any) -> tuple[str, ...]:
    to = [v] if isinstance(v, str) else v
    if not isinstance(to, list) or not to or not all(isinstance(a, str) and EMAIL_RE.match(a) for a in to):
        raise Invalid(f"must be an e-mail address or a list of them, got {v!r}")
    return tuple(to)


def _email(v: Any) -> str | None:
    if v is not None and not (isinstance(v, str) and EMAIL_RE.match(v)):
        raise Invalid(f"must be an e-mail address, got {v!r}")
    return v


def _optional_conn_id(v: Any) -> str | None:
    return None if v is None else cm.conn_id(v)


def _notifier_class(v: Any) -> str:
    """A dotted path the platform allows (``[eobatch] allowed_notifiers``); never imported here."""
    if not isinstance(v, str) or not DOTTED_RE.match(v):
        raise Invalid(f"must be the dotted path of a notifier class, e.g. "
                      f"airflow.providers.slack.notifications.slack.SlackNotifier; got {v!r}")
    allowed = notifiers.allowed_notifiers()
    if v not in allowed:
        raise Invalid(f"{v} is not a notifier class the platform allows (the Airflow option [eobatch] "
                      f"{notifiers.OPTION}: {', '.join(sorted(allowed)) or 'none; only email: entries'})")
    return v


def _notifier_args(v: Any) -> dict:
    """Keyword arguments, literal text; none that chooses a file, a template or the message."""
    v = v or {}
    if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
        raise Invalid("must be a mapping of the notifier's keyword arguments")
    for k, x in v.items():
        why = notifiers.refused_arg(k, x)
        if why:
            raise Invalid(f"refused: {why}", at=k)
    return dict(v)


def _alert_args(v: Any) -> dict:
    """{keyword argument: alert field}: the product hands the notifier these fields of each alert."""
    v = v or {}
    if not isinstance(v, dict) or not all(isinstance(k, str) and k.isidentifier() for k in v):
        raise Invalid("must be a mapping of the notifier's keyword arguments to fields of the alert "
                      f"({', '.join(notifiers.ALERT_FIELDS)}), e.g. {{text: text}}")
    for k, x in v.items():
        if x not in notifiers.ALERT_FIELDS:
            raise Invalid(f"must be a field of the alert ({', '.join(notifiers.ALERT_FIELDS)}), got {x!r}", at=k)
        why = notifiers.refused_alert_arg(k)
        if why:
            raise Invalid(f"refused: {why}", at=k)
    return dict(v)


class NotifierSection(Section):
    """One notifier of ``alerts.notify``: ``email`` (with ``smtp_conn_id``, ``from_email``) or
    ``notifier`` (with ``args`` and ``alert_args``). Every value is literal text, never a template
    (``eobatch.config.notifiers``)."""
    email: Annotated[Any, Check(_emails, {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})] = ()
    smtp_conn_id: Annotated[Any, Check(_optional_conn_id, {"type": "string"})] = None
    from_email: Annotated[Any, Check(_email, {"type": "string"})] = None
    notifier: Annotated[Any, Check(_notifier_class, {"type": "string", "pattern": DOTTED_RE.pattern})] = None
    args: Annotated[Any, Check(_notifier_args, {"type": "object"})] = {}
    alert_args: Annotated[Any, Check(_alert_args, {"type": "object", "additionalProperties": {
        "enum": list(notifiers.ALERT_FIELDS)}})] = {}

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, data: Any) -> Any:
        if not isinstance(data, dict) or ("email" in data) == ("notifier" in data):
            raise Invalid("must be a mapping with either 'email' (a list of addresses) or 'notifier' "
                          "(the dotted path of an Airflow notifier class)")
        allowed = EMAIL_NOTIFIER_KEYS if "email" in data else CLASS_NOTIFIER_KEYS
        extra = sorted(set(data) - allowed)
        if extra:
            raise Invalid(f"unknown key (allowed: {', '.join(sorted(allowed))})", at=str(extra[0]))
        both = sorted(set(data.get("args") or {}) & set(data.get("alert_args") or {})
                      if isinstance(data.get("args"), dict) and isinstance(data.get("alert_args"), dict) else ())
        if both:
            raise Invalid("given both in args and in alert_args", at=f"args.{both[0]}")
        return data

    def value(self) -> Notifier:
        return Notifier(email=self.email, smtp_conn_id=self.smtp_conn_id, from_email=self.from_email,
                        notifier=self.notifier, args=self.args, alert_args=self.alert_args)


def _notify(v: Any) -> Any:
    if v == ():  # the stuck detector's bounds given alone (AlertsSection._bounds_alone): no notifier
        return v
    if not isinstance(v, list) or not v:
        raise Invalid("must be a list of at least one notifier, e.g. [{email: [ops@example.com]}]")
    return v


STUCK_KEYS = frozenset({"stuck_after_runs", "stuck_attempt_hours"})


def _stuck_runs(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 2:
        raise Invalid(f"must be an integer of at least 2 (the run that planned a batch is its first), got {v!r}")
    return v


def _positive_hours(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise Invalid(f"must be a positive number of hours, got {v!r}")
    return float(v)


class AlertsSection(Section):
    """``alerts``: notifiers (e-mail or an Airflow notifier class) and the conditions that call
    them. Only connection ids are named here, never a password."""
    NOT_A_MAPPING = ("must be a mapping (notify, on_failure, run_deadline_minutes, backlog_max_age_minutes, "
                     "stuck_after_runs, stuck_attempt_hours)")
    notify: Annotated[tuple[NotifierSection, ...], BeforeValidator(_notify)] = Field(None, validate_default=True)
    on_failure: Bool = True
    run_deadline_minutes: Minutes = None
    backlog_max_age_minutes: Minutes = None
    stuck_after_runs: Annotated[Any, Check(_stuck_runs, {"type": "integer", "minimum": 2}), Field(
        description="a batch that this many runs tried (the one that planned it included) without committing it "
                    "is stuck: alerted, and shown with its repair")] = STUCK_AFTER_RUNS
    stuck_attempt_hours: Annotated[Any, Check(_positive_hours, {"type": "number", "exclusiveMinimum": 0}), Field(
        description="a stage attempt still without its stage summary this many hours after the stage task "
                    "started it is stuck")] = STUCK_ATTEMPT_HOURS

    @model_validator(mode="before")
    @classmethod
    def _bounds_alone(cls, data: Any) -> Any:
        """The stuck detector's bounds need no notifier: the ledger page, the task log and doctor use
        them too. Any other key of the section does."""
        if isinstance(data, dict) and data and "notify" not in data and set(data) <= STUCK_KEYS:
            return {**data, "notify": ()}
        return data

    def value(self) -> AlertsConfig:
        return AlertsConfig(notify=tuple(n.value() for n in self.notify), on_failure=self.on_failure and bool(self.notify),
                            run_deadline_minutes=self.run_deadline_minutes,
                            backlog_max_age_minutes=self.backlog_max_age_minutes,
                            stuck_after_runs=self.stuck_after_runs, stuck_attempt_hours=self.stuck_attempt_hours)


def _expr(v: Any) -> str:
    if not isinstance(v, str) or not v.strip() or ";" in v:
        raise Invalid(f"must be one Spark SQL boolean expression, got {v!r}")
    refused = sql_guard.refusal(v)
    if refused:  # the stage job refuses it too, on Spark's own parse
        raise Invalid(f"{v.strip()!r} {refused}")
    return v.strip()


def _expectation_name(v: Any) -> str:
    if not isinstance(v, str) or not NAME_RE.match(v):
        raise Invalid(f"{v!r} must match [a-z][a-z0-9_]*")
    return v


class ExpectationSection(Section):
    """A data-quality rule (``Expectation``)."""
    NULL = "invalid"
    NOT_A_MAPPING = "must be a mapping {name, expr, action}"
    name: Annotated[Any, Check(required(_expectation_name), {"type": "string", "pattern": NAME_RE.pattern})]
    expr: Annotated[Any, Check(required(_expr), {"type": "string", "description": "a Spark SQL boolean expression"})]
    action: Annotated[str, one_of(*EXPECTATION_ACTIONS)] = "quarantine"


def _expectations(v: Any) -> Any:
    if v is None:
        return []
    if not isinstance(v, list):
        raise Invalid("must be a list of {name, expr, action}, e.g. "
                      "[{name: positive_amount, expr: \"amount >= 0\", action: quarantine}]")
    return v


def _maintenance_schedule(v: Any) -> str | None:
    if v is not None:
        if not isinstance(v, str):
            raise Invalid(f"must be a cron expression or a preset, got {v!r}")
        check_schedule(v)
    return v


def _hours(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise Invalid(f"must be a number of hours >= 0, got {v!r}")
    return float(v)


def _pool(v: Any) -> str | None:
    if v is not None and (not isinstance(v, str) or not POOL_RE.fullmatch(v)):
        raise Invalid(f"must be an Airflow pool name (letters, digits, '_', '-', '.'; at most 256), got {v!r}")
    return v


POOL_RE = re.compile(r"[A-Za-z0-9_.-]{1,256}")


class MaintenanceSection(Section):
    """``maintenance``: the ``<name>_maintenance`` DAG's schedule and what a pass does."""
    NOT_A_MAPPING = "must be a mapping (schedule, compact, target_file_mb, vacuum_retention_hours, pool)"
    schedule: Annotated[Any, Check(_maintenance_schedule, {"type": "string"})] = None
    compact: Bool = True
    target_file_mb: PosInt = 128
    vacuum_retention_hours: Annotated[Any, Check(_hours, {"type": "number", "minimum": 0})] = 168.0
    pool: Annotated[Any, Check(_pool, {"type": "string", "pattern": POOL_RE.pattern})] = None

    def value(self) -> MaintenanceConfig:
        return MaintenanceConfig(schedule=self.schedule, compact=self.compact,
                                 target_file_bytes=self.target_file_mb << 20,
                                 vacuum_retention_hours=self.vacuum_retention_hours, pool=self.pool)


def _batches_per_run(v: Any, info: ValidationInfo) -> int | None:
    if v is None:
        return None
    n = cm.pos_int(v)
    if n > MAX_BATCHES_PER_RUN:
        raise Invalid(f"must be at most {MAX_BATCHES_PER_RUN}, got {n}")
    if info.data.get("mode") == "interval" and n != 1:
        raise Invalid("interval mode: a run's batch is its data interval, one batch per run (a backfill runs "
                      "several intervals)")
    return n


class PipelineFile(Section):
    """A pipeline YAML, key by key (``load_pipeline`` makes its ``PipelineConfig``)."""
    name: Annotated[str, Check(required(_name), {"type": "string", "pattern": NAME_RE.pattern,
                                                 "description": "the DAG id and the Delta appId"})]
    description: Annotated[str, Check(str, {"type": "string"})] = ""
    mode: Annotated[str, Check(_mode, {"enum": list(MODES)})] = "continuous"
    schedule: Annotated[str | dict | None, Check(_schedule, {
        "type": ["string", "null", "object"], "properties": {"asset": {"type": "string"}}, "required": ["asset"],
        "additionalProperties": False, "description": "null, a cron expression, a preset such as '@hourly', or "
                                                      "{asset: <table or pipeline name>}: runs on that table's asset "
                                                      "events (a pipeline's: its sink table's)"}),
                        Field(validate_default=True)] = None
    source: Annotated[SourceConfig, Check(_source, {"type": "object"})]  # each kind's model: json_schema
    schema_: Annotated[tuple[str, tuple[Column, ...]],
                       Check(_schema, {"type": "string", "description": "a Spark DDL record schema, e.g. "
                                                                        "'id STRING NOT NULL, amount DOUBLE'"}),
                       Field(alias="schema")]
    transform: TransformSection = TransformSection(name=PASSTHROUGH)
    sink: SinkSection
    quarantine: QuarantineSection
    max_record_bytes: PosInt = 1 << 20
    max_batches_per_run: Annotated[int | None, Check(
        _batches_per_run, {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_BATCHES_PER_RUN,
                           "description": "continuous mode: how many batches one run plans, stages in one Spark "
                                          "application and commits, one after another (default "
                                          f"{DEFAULT_BATCHES_PER_RUN}); interval mode: 1"})] = None
    spark: SparkSection = SparkSection()
    retries: RetriesSection = RetriesSection()
    alerts: Annotated[AlertsSection | None, BeforeValidator(lambda v: v or None)] = None
    aws_conn_id: ConnId = "aws_default"
    expectations: Annotated[tuple[ExpectationSection, ...], BeforeValidator(_expectations)] = ()
    schema_evolution: Annotated[str, one_of(*SCHEMA_EVOLUTION)] = "add_columns"
    maintenance: MaintenanceSection = MaintenanceSection()

    @field_validator("sink")
    @classmethod
    def _sink_of_kind(cls, v: SinkSection, info: ValidationInfo) -> SinkSection:
        """The partition columns and ``sink.mode`` with the keys of its kind (``eobatch.sinks``)."""
        if "schema_" not in info.data or "transform" not in info.data:
            return v
        file, columns, transform = context_file(info), info.data["schema_"][1], info.data["transform"].name
        _check_s3_key_room(v.table, v.partition_by, "table")
        if transform == PASSTHROUGH:  # the published columns are the schema's (other transforms: unknown here)
            _check_partition_columns(v.partition_by, columns)
        mode = v.mode if "mode" in v.model_fields_set else sinks.kind_for(sinks.DEFAULT).mode
        if mode not in sinks.modes():
            raise Invalid(f"{mode!r} must be one of {', '.join(sinks.modes())}", at="mode")
        kind = sinks.kind_for_mode(mode)
        for other in sinks.kinds():
            for key in sorted(other.config_keys - kind.config_keys):
                if key in (v.model_extra or {}):
                    raise Invalid(f"is only for sink.mode: {other.mode}", at=key)
        section = {"table": v.table, "partition_by": list(v.partition_by), **(v.model_extra or {})}
        if "mode" in v.model_fields_set:
            section["mode"] = v.mode
        return v.model_copy(update={"config": kind.parse_config(section, SinkContext(file, transform, columns))})

    @field_validator("quarantine")
    @classmethod
    def _separate_locations(cls, v: QuarantineSection, info: ValidationInfo) -> QuarantineSection:
        """No two of the tables and the landing folder (when the kind has one) may be or contain each other."""
        if "sink" in info.data and isinstance(info.data.get("source"), SourceConfig):
            locations = {"sink.table": info.data["sink"].table, "quarantine.table": v.table,
                         "source.path": info.data["source"].path}
            paths = {key: path for key, path in locations.items() if path}
            for a, pa in paths.items():
                for b, pb in paths.items():
                    if a < b and (pa == pb or pa.startswith(pb.rstrip("/") + "/") or pb.startswith(pa.rstrip("/") + "/")):
                        raise Invalid(f"{pb!r} overlaps {a} {pa!r}; they must be separate folders", key=b)
            shared = bucket_shared_with(info.data["source"], {k: p for k, p in paths.items() if k != "source.path"})
            if shared:
                key, bucket, conn = shared
                raise Invalid(f"{conn!r} serves bucket {bucket!r}, which also holds this pipeline's {key}: a bucket "
                              f"is read and written with one set of settings; drop source.conn_id (the pipeline's "
                              f"aws_conn_id then serves both) or keep the pipeline's tables in another bucket",
                              key="source.conn_id")
        return v

    @field_validator("alerts")
    @classmethod
    def _backlog_age_known(cls, v: AlertsSection | None, info: ValidationInfo) -> AlertsSection | None:
        source = info.data.get("source")
        if v is not None and v.backlog_max_age_minutes is not None and isinstance(source, SourceConfig) \
                and kind_for(source.kind).position_based:
            raise Invalid(f"the age of a {source.kind} backlog is not known (a record's timestamp is only known by "
                          "reading it, the backlog age of landing files is their modification time); alert with "
                          "on_failure and run_deadline_minutes instead", at="backlog_max_age_minutes")
        return v

    @field_validator("expectations")
    @classmethod
    def _expectations_of_the_schema(cls, v: tuple[ExpectationSection, ...],
                                    info: ValidationInfo) -> tuple[ExpectationSection, ...]:
        """Names unique; each expression names at least one column of the schema (Spark checks the
        rest in the stage job, its error naming the expectation)."""
        columns = info.data["schema_"][1] if "schema_" in info.data else ()
        names = {c.name.lower() for c in columns}
        for i, e in enumerate(v):
            if any(x.name == e.name for x in v[:i]):
                raise Invalid(f"{e.name!r} is defined twice", at=f"[{i}].name")
            words = {w.lower() for pair in re.findall(r"`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*)", e.expr) for w in pair if w}
            if columns and not words & names:
                raise Invalid(f"{e.expr!r} names no column of the schema ({', '.join(c.name for c in columns)})",
                              at=f"[{i}].expr")
        return v

    def value(self, file: str) -> PipelineConfig:
        schema, columns = self.schema_
        code = self.transform.name.code
        cfg = PipelineConfig(
            name=self.name, file=os.path.abspath(file), mode=self.mode,
            schedule=self.schedule if not isinstance(self.schedule, dict) else None,
            schedule_asset=self.schedule["asset"] if isinstance(self.schedule, dict) else None, source=self.source,
            schema=schema, columns=columns, transform=str(self.transform.name), transform_options=self.transform.options,
            transform_file=code.file, transform_code=code.sha256, sink_table=self.sink.table, partition_by=self.sink.partition_by, quarantine_table=self.quarantine.table,
            max_record_bytes=self.max_record_bytes, description=self.description,
            max_batches_per_run=self.max_batches_per_run or (1 if self.mode == "interval" else DEFAULT_BATCHES_PER_RUN), spark=self.spark.value(),
            plan_retries=self.retries.plan, stage_retries=self.retries.stage, commit_retries=self.retries.commit,
            retry_delay_seconds=self.retries.delay_seconds, verify_timeout_seconds=self.retries.verify_timeout_seconds,
            plan_wait_seconds=self.retries.plan_wait_seconds, stage_timeout_seconds=self.retries.stage_timeout_seconds,
            alerts=self.alerts.value() if self.alerts else AlertsConfig(), aws_conn_id=self.aws_conn_id,
            expectations=tuple(Expectation(e.name, e.expr, e.action) for e in self.expectations),
            schema_evolution=self.schema_evolution, maintenance=self.maintenance.value(), sink=self.sink.config)
        # what the sink's kind answers for the pipeline (its participants: of the config built)
        kind = sinks.kind_for(cfg.sink.kind)
        return dataclasses.replace(cfg, sink_mode=kind.mode, participants=kind.participant_names(cfg))


def _check_partition_columns(partition_by: tuple[str, ...], columns: tuple[Column, ...]) -> None:
    types = {c.name: c.type for c in columns}
    for c in partition_by:
        if c not in types:
            raise Invalid(f"{c!r} is not a column of the schema", at="partition_by")
        if types[c] not in PARTITION_TYPES:
            raise Invalid(f"{c!r} has type {types[c]}; partition columns must be one of {sorted(PARTITION_TYPES)}",
                          at="partition_by")
    if partition_by and len(partition_by) == len(columns):
        raise Invalid("at least one column must stay out of the partitioning", at="partition_by")


TOP_KEYS = PipelineFile.yaml_keys()
MAINTENANCE_KEYS = MaintenanceSection.yaml_keys()
QUARANTINE_KEYS = QuarantineSection.yaml_keys()
SPARK_KEYS = SparkSection.yaml_keys()
ALERT_KEYS = AlertsSection.yaml_keys()
RETRY_KEYS = RetriesSection.yaml_keys()


# -- a configuration edit is an event of the protocol ---------------------------------------------
# Every key of a pipeline YAML has one of three roles (TABLE, PENDING, harmless: ``config.contract``);
# the keys every pipeline has are the contract's, each kind declares the roles of its own keys
# (``contract_keys``, ``harmless_keys``), and a test enumerates every key the loader accepts and
# checks it has one.
TABLE, PENDING = sinks.TABLE, sinks.PENDING


def contract() -> Contract:
    """The configuration contract of every key: the keys of every pipeline and of each section
    here, and the part of each source and sink kind the registries know (built in or plug-in; a
    pipeline of another kind records None for a kind's keys)."""
    parts = [kind_part("source", k) for k in source_kinds()] + [kind_part("sink", k) for k in sinks.kinds()]
    return assemble(parts, {"spark": SPARK_KEYS, "retries": RETRY_KEYS, "alerts": ALERT_KEYS,
                            "maintenance": MAINTENANCE_KEYS})


def harmless() -> dict[str, str]:
    """The keys no batch depends on, each with the reason (``contract().harmless``)."""
    return dict(contract().harmless)


def sink_keys() -> frozenset[str]:
    """The keys a ``sink:`` mapping may hold: every pipeline's, and those of every sink kind."""
    return SINK_KEYS.union(*(k.config_keys for k in sinks.kinds()))


def config_values(cfg: PipelineConfig) -> dict[str, Any]:
    """The values of the TABLE and PENDING keys, as JSON (what a plan records)."""
    return json.loads(json.dumps(contract().values(cfg), sort_keys=True))


def config_edits(recorded: dict | None, cfg: PipelineConfig, pending: bool) -> list[Edit]:
    """(key, role, recorded value, value now) of each TABLE key (and PENDING key when ``pending``)
    that differs from ``recorded`` (a plan's ``config``; a key it does not hold is not compared)."""
    return contract_edits(recorded, config_values(cfg), contract_roles(), pending)


def contract_roles() -> dict[str, str]:
    """Each contract key's role (TABLE or PENDING), for ``contract.contract_edits``."""
    return contract().roles()


def load_pipeline(file: str) -> PipelineConfig:
    """The pipeline of YAML ``file``, validated section by section: one ConfigError lists every problem
    found (``ConfigError.problems``).

    The one door from a file to a pipeline: every caller (the DAG file, the ledger page, doctor, the
    CLI, the tasks) gets a ``PipelineConfig`` or a ``ConfigError`` naming the file, whatever bytes it
    holds. Reading is bounded (``yamlfile``); an error's text shows the ``${NAME}`` of a value that came
    from the environment, never the value (``PipelineConfig.shown`` does the same for what is shown
    of a loaded pipeline), and is cut at ``yamlfile.MAX_MESSAGE_CHARS``."""
    raw = read_mapping(file)
    concealed = environment_values(raw)
    try:
        expand_vars(raw, file)
        cfg = validate(PipelineFile, raw, file).value(file)
        check_access(cfg)  # the platform's access policy: connections and locations (config.access)
    except ConfigError as e:  # each problem of the file, shown without the environment's values; all of them short
        found = ConfigError.of([ConfigError(p.file, p.key, clip(conceal(p.message, concealed))) for p in e.problems])
        if len(found.problems) > 1:
            found = ConfigError(found.file, "", clip(found.message), found.problems)
        raise found from None
    except Exception as e:  # noqa: BLE001 - not a refusal of ours (a bug, a library's error): still this file's
        raise ConfigError(file, "", clip(conceal(f"cannot be loaded: {type(e).__name__}: {e}", concealed))) from None
    return dataclasses.replace(cfg, concealed=concealed)


def environment_values(raw: dict) -> tuple[tuple[str, str], ...]:
    """(value, "${NAME}") of each variable named in the keys where ``policy`` expands them, whose
    value comes from the environment (or the product's built-in defaults); a ``:-default`` written in
    the file is the file's own text and is not hidden."""
    out: dict[str, str] = {}
    for key in EXPANDED_KEYS:
        section, leaf = key.split(".")
        text = raw.get(section, {}).get(leaf) if isinstance(raw.get(section), dict) else None
        for m in VAR_RE.finditer(text if isinstance(text, str) else ""):
            value = os.environ.get(m.group(1)) or BUILTIN_VARS.get(m.group(1))
            if value:
                out.setdefault(value, "${" + m.group(1) + "}")
    return tuple(out.items())


def pipelines_dir() -> str:
    """The folder of pipeline files: the setting ``[eobatch] pipelines_dir`` (``PIPELINES_DIR``, else
    Airflow's option from the environment or airflow.cfg: ``eobatch.settings``), else a checkout's
    ``include/pipelines``; UsageError naming where to set it when none is set."""
    found = settings.value(settings.PIPELINES_DIR) or default_pipelines_dir()
    if not found:
        raise UsageError(f"no folder of pipeline files: set {settings.PIPELINES_DIR.where}, or give the folder "
                         f"to pipeline_dags(globals(), folder) in the DAG file")
    return found


class LoadCache:
    """``load_pipeline``'s answers (a pipeline or its ConfigError) for a long-lived process that loads
    the folder again and again (the ledger page, on every request): a file is loaded again only when
    its identity changed (device, inode, size, modification and change times: an edit, a replacement,
    a moved symlink), or its folder's ``transforms/`` or its own transform file did, or the
    environment did, or after ``ttl`` seconds (what else a load reads, e.g. an Airflow setting)."""

    def __init__(self, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.ttl, self.clock = ttl, clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[tuple, float, PipelineConfig | tuple[str, str]]] = {}

    def load(self, file: str) -> PipelineConfig:
        """``load_pipeline(file)``, or its last answer while nothing it read changed."""
        with self._lock:
            hit = self._entries.get(file)
        if hit is not None and self.clock() - hit[1] < self.ttl and hit[0] == _identity(file, hit[2]):
            return _answer(file, hit[2])
        try:
            result: PipelineConfig | tuple[str, str] = load_pipeline(file)
        except ConfigError as e:
            result = (e.key, e.message)
        with self._lock:
            self._entries[file] = (_identity(file, result), self.clock(), result)
        return _answer(file, result)

    def keep_only(self, files: Iterable[str]) -> None:
        """Forget the files no longer in the folder."""
        keep = set(files)
        with self._lock:
            for f in [f for f in self._entries if f not in keep]:
                del self._entries[f]


def _answer(file: str, result: PipelineConfig | tuple[str, str]) -> PipelineConfig:
    if isinstance(result, PipelineConfig):
        return result
    raise ConfigError(file, *result)


def _stat_key(path: str | None) -> tuple | None:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return None if st is None else (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _identity(file: str, result: PipelineConfig | tuple[str, str]) -> tuple:
    """What a cached load of ``file`` depends on, as it is now."""
    own = result.transform_file if isinstance(result, PipelineConfig) else None
    env = hashlib.sha256(repr(sorted(os.environ.items())).encode()).hexdigest()
    return _stat_key(file), _stat_key(transforms.own_folder(file)), _stat_key(own), env


def load_all(directory: str | None = None, cache: LoadCache | None = None) -> tuple[dict[str, PipelineConfig], dict[str, str]]:
    """Every *.yaml of the pipelines folder: ({name: config}, {file: error}).

    A bad file never stops the others from loading; duplicate names are errors of the later file.
    ``cache``: a long-lived process's (``LoadCache``): unchanged files are not loaded again.
    """
    directory = directory or pipelines_dir()
    good: dict[str, PipelineConfig] = {}
    errors: dict[str, str] = {}
    files = sorted(glob.glob(os.path.join(directory, "*.yaml")) + glob.glob(os.path.join(directory, "*.yml")))
    if cache is not None:
        cache.keep_only(files)
    for f in files:
        try:
            cfg = cache.load(f) if cache is not None else load_pipeline(f)
        except ConfigError as e:
            errors[f] = str(e)
            continue
        if cfg.name in good:
            errors[f] = str(ConfigError(f, "name", f"{cfg.name!r} is already defined in {os.path.basename(good[cfg.name].file)}"))
            continue
        clash = next((g for g in good.values() if {g.sink_table, g.quarantine_table} &
                      {cfg.sink_table, cfg.quarantine_table}), None)
        if clash is not None:
            errors[f] = cfg.shown(str(ConfigError(
                f, "sink.table", f"{cfg.sink_table} or {cfg.quarantine_table} is already written by pipeline "
                f"{clash.name!r} ({os.path.basename(clash.file)}); each table has exactly one pipeline (its ledger "
                f"lives in the table)")))
            continue
        good[cfg.name] = cfg
    return good, errors


def find_pipeline(name: str, directory: str | None = None) -> PipelineConfig:
    good, errors = load_all(directory)
    if name in good:
        return good[name]
    hint = "; ".join(errors.values())
    raise KeyError(f"no pipeline named {name!r} in {directory or pipelines_dir()}" + (f" (errors: {hint})" if hint else ""))
