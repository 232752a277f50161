"""What the ``source:`` section models of the kinds share (pydantic: the Airflow side only; the
Spark job imports a kind's package, never its section model).

A kind's model (``<kind>/section.py``) is a ``SourceSection``: ``kind``, the record limit and
interval mode's ``settle_seconds``; ``LandingSection`` adds the keys of landing-file kinds (files,
parquet). ``parse`` validates a ``source:`` mapping with the pipeline's mode and schedule (the
validation context) and returns the kind's config (``SourceConfig``).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Annotated, Any, ClassVar

from pydantic import ValidationInfo, model_validator

from ..config.model import (
    Check,
    ConnId,
    Invalid,
    NonNegativeInt,
    PosInt,
    Section,
    TablePath,
    one_of,
    pos_int,
    required,
    validate,
)
from ..config.schedule import ONLY_INTERVAL, check_interval_prefix
from .base import (
    DEFAULT_MAX_FILES_PER_BATCH,
    DISCOVERY_MODES,
    MAX_FILES_PER_BATCH,
    TOPIC_RE,
    ConfigContext,
    NotificationsConfig,
    SourceConfig,
)

LATE_FILE_POLICIES = ("republish", "fail", "ignore")


def _max_files(v: Any) -> int:
    n = pos_int(v)
    if n > MAX_FILES_PER_BATCH:
        raise Invalid(f"must be at most {MAX_FILES_PER_BATCH}, got {n} (the stage job holds one open file per "
                      f"file it reads)")
    return n


# ``max_files_per_batch`` of the kinds that read files (files, parquet, delta)
MaxFiles = Annotated[int, Check(_max_files, {
    "type": "integer", "minimum": 1, "maximum": MAX_FILES_PER_BATCH, "default": DEFAULT_MAX_FILES_PER_BATCH,
    "description": "files a batch reads at most, empty ones too (the plan record, the ledger page and the stage "
                   "job's open files stay bounded)"})]


def _include(v: Any) -> tuple[str, ...]:
    """``source.include``: one glob or a list of globs of a landing file's name (not its folder)."""
    globs = [v] if isinstance(v, str) else v
    if not isinstance(globs, list) or not globs or not all(isinstance(g, str) and g.strip() for g in globs):
        raise Invalid(f"must be a glob of file names or a non-empty list of them (e.g. ['*.jsonl', '*.json']), got {v!r}")
    for g in globs:
        if "/" in g:
            raise Invalid(f"{g!r}: a glob of a file's name, not of its folder (it is matched against the name "
                          f"of each file below source.path, in any sub-folder); drop the '/'")
        if g.startswith((".", "_")):
            raise Invalid(f"{g!r}: names starting with . or _ are never read (in-progress files, as Spark does); "
                          f"land the files under a visible name")
    return tuple(globs)


def include_field(default: str) -> Any:
    """The ``include`` key of a landing kind whose files are named ``default`` unless it says otherwise."""
    return Annotated[tuple[str, ...], Check(_include, {
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}],
        "default": [default],
        "description": "the landing files it reads: globs (*, ?, [abc]) of a file's name, matched case-sensitively "
                       "in every sub-folder of path; a visible file no glob takes is never read and is reported "
                       "(the plan's log and notes, the ledger page, a metric)"})]


class SourceSection(Section):
    INTERVAL_ONLY: ClassVar[tuple[str, ...]] = ("settle_seconds",)  # keys refused outside interval mode
    kind: Annotated[Any, Check(str, {"type": "string"})]
    max_records_per_batch: PosInt = 100_000
    settle_seconds: NonNegativeInt = 60  # interval mode: an interval is planned only this long after its end

    @model_validator(mode="before")
    @classmethod
    def _interval_keys(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and (info.context or {}).get("mode") != "interval":
            for key in cls.INTERVAL_ONLY:
                if key in data:
                    raise Invalid(ONLY_INTERVAL, at=key)
        return data

    CONFIG: ClassVar[type[SourceConfig]]  # the kind's config

    def value(self) -> SourceConfig:
        """The kind's config: the keys the YAML sets, over the config's defaults."""
        return self.CONFIG(**{k: getattr(self, k) for k in self.model_fields_set | {"kind"}})

    @classmethod
    def parse(cls, src: dict, ctx: ConfigContext) -> SourceConfig:
        return validate(cls, src, ctx.file, "source", {"mode": ctx.mode, "schedule": ctx.schedule}).value()


def _interval_prefix(v: Any, info: ValidationInfo) -> str | None:
    if v is None:
        return None
    context = info.context or {}
    return check_interval_prefix(v, context.get("mode", "continuous"), context.get("schedule"))


def kafka_servers(v: Any) -> str | None:
    """A Kafka cluster's ``bootstrap_servers`` (kafka sources, discovery notifications)."""
    if v is None:
        return None
    if not isinstance(v, str) or not all(re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+:\d{1,5}", s.strip()) for s in v.split(",")):
        raise Invalid(f"{v!r} must be host:port[,host:port...]")
    return v.strip()


def kafka_topic(v: Any) -> str:
    if not isinstance(v, str) or not TOPIC_RE.fullmatch(v):
        raise Invalid(f"{v!r} is not a valid Kafka topic name")
    return v


class NotificationsSection(Section):
    """``source.notifications`` (``discovery: notification``): the Kafka topic that carries the landing
    zone's new-object events (S3 event notifications, MinIO or Ceph bucket notifications, EventBridge)."""
    NULL = "invalid"
    NOT_A_MAPPING = ("source.notifications needs a mapping {topic: <Kafka topic>, bootstrap_servers: host:port} "
                     "(or conn_id: an Airflow Kafka connection instead of bootstrap_servers)")
    topic: Annotated[Any, Check(required(kafka_topic), {"type": "string", "pattern": TOPIC_RE.pattern,
                                                  "description": "the topic of the new-object events"})]
    bootstrap_servers: Annotated[Any, Check(kafka_servers, {"type": "string", "description": "host:port[,host:port...]; "
                                                       "or conn_id"})] = None
    conn_id: ConnId | None = None  # an Airflow connection (Kafka provider) whose extra is the client config

    @model_validator(mode="after")
    def _servers_or_connection(self) -> NotificationsSection:
        if (self.conn_id is None) == (self.bootstrap_servers is None):
            raise Invalid("give either bootstrap_servers or conn_id (an Airflow Kafka connection whose extra holds "
                          "bootstrap.servers)", at="bootstrap_servers")
        return self

    def value(self) -> NotificationsConfig:
        return NotificationsConfig(topic=self.topic, bootstrap_servers=self.bootstrap_servers, conn_id=self.conn_id)


class LandingSection(SourceSection):
    """The keys of the kinds that read landing files below a folder."""
    INTERVAL_ONLY = ("settle_seconds", "late_files", "late_lookback_intervals")
    path: TablePath  # every file of the kind below it, sub-folders included
    interval_prefix: Annotated[Any, Check(_interval_prefix, {"type": "string", "description": "interval mode: the interval's "
                                                "sub-folder, with {ds}, {ds_nodash}, {hh}"})] = None
    late_files: Annotated[str, one_of(*LATE_FILE_POLICIES)] = "republish"  # interval mode: a file landing in a published interval
    late_lookback_intervals: NonNegativeInt = 24  # interval mode: how many earlier intervals are Check
    max_files_per_batch: MaxFiles = DEFAULT_MAX_FILES_PER_BATCH
    discovery: Annotated[str, one_of(*DISCOVERY_MODES)] = "full"  # continuous mode: how a plan finds new files
    full_listing_hours: PosInt = 24  # discovery: lexical, notification: hours between two full listings
    notifications: NotificationsSection | None = None  # discovery: notification

    @model_validator(mode="after")
    def _discovery_of_continuous_mode(self, info: ValidationInfo) -> LandingSection:
        if self.discovery != "full" and (info.context or {}).get("mode") == "interval":
            raise Invalid(f"interval mode lists the interval's own folders (interval_prefix); discovery: "
                          f"{self.discovery} is for continuous mode", at="discovery")
        if self.discovery == "notification":
            if self.notifications is None:
                raise Invalid("discovery: notification needs source.notifications: {topic: ..., bootstrap_servers: "
                              "...} (the Kafka topic of the landing zone's new-object events)", at="notifications")
            if not str(self.path).startswith(("s3a://", "s3://")):
                raise Invalid("discovery: notification reads S3 event notifications, which name objects of a "
                              "bucket: source.path must be an s3a:// location (a local folder: discovery lexical "
                              "or full)", at="discovery")
        elif self.notifications is not None:
            raise Invalid("is read only with discovery: notification", at="notifications")
        return self

    def value(self) -> SourceConfig:
        cfg = super().value()
        if self.notifications is None:
            return cfg
        return replace(cfg, notifications=self.notifications.value())  # type: ignore[call-arg]
