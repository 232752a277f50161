"""What every source kind implements (``SourceKind``) and what the kinds share.

A kind is one package under ``eobatch/sources/`` whose ``KIND`` object answers, for the three
places that used to branch on the kind's name:

* the pipeline YAML (``config``): which ``source:`` keys exist and what they mean;
* the Airflow side (``protocol``, ``formats``, ``verify``, ``launch``): how to plan the next
  range, how a recorded range reads in logs and in the Delta commit, how the stage summary is
  checked against it, what the Spark job needs to know;
* the Spark job (``spark_jobs/stage_batch.py``): whether the range can still be read exactly,
  and the DataFrame of its records (the "lines" contract below).

The lines contract: one row per record, columns ``source`` (string: where it came from),
``position`` (long: where in that source; ``locate`` may compute it only for the records that are
quarantined, the only ones whose position is written), ``raw`` (string: a JSON object text, null for a
tombstone) and any number of ``_``-prefixed metadata columns, which transforms may use and which
are never published (``_eo_``-prefixed ones are the kind's own internals, hidden from transforms). A kind may
add ``_eo_unreadable`` (string): for a record it could not read at that position (``raw`` null),
why; the record is quarantined with that reason. Everything after the read (parse, schema check, quarantine, transform,
manifests) is one code path for every kind.

No pyspark and no Airflow at module level, here and in every kind's package (pyspark's types for
the annotations under ``if TYPE_CHECKING:`` only, which never runs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

# the roles of the configuration contract's keys (``config.contract``), for the kinds' ``contract_keys``
from ..config.contract import PENDING as PENDING
from ..config.contract import TABLE as TABLE

# the base of every kind's ``source:`` config, under the kinds (``config.pipeline`` holds one)
from ..config.sections import NOT_FINGERPRINTED as NOT_FINGERPRINTED
from ..config.sections import SourceConfig as SourceConfig
from ..config.sections import unless_default as unless_default
from ..errors import TerminalError
from ..storage import s3conf
from ..storage.fs import printable

if TYPE_CHECKING:
    # pyspark: types for the annotations only (never imported here: the Airflow side imports this module)
    from pyspark.sql import DataFrame, SparkSession

    from ..core.formats import JSON, BatchPlan, PlannedFile, StageSummary
    from ..storage.lineage import LineageDataset


class LandingUnreadable(TerminalError):
    """The landing folder of a landing kind (``source.path``) does not exist, is not a folder, or
    cannot be listed (permission denied; on S3 a bucket that does not exist, access denied)."""


class IntervalTooLarge(TerminalError):
    """An interval holds more records than the batch limit allows (interval mode: one batch each)."""


@dataclass(frozen=True)
class ConfigContext:
    """What a kind's parser needs besides its ``source:`` mapping: the file (for ConfigError) and
    the pipeline's mode and schedule (interval-only keys, ``interval_prefix`` against the schedule)."""

    file: str
    mode: str
    schedule: str | None


# files a batch of a file-reading kind (files, parquet, delta) reads at most (``max_files_per_batch``):
# empty files count too, so a plan record, and the ledger page, stay small whatever lands. The stage
# job holds one descriptor per local file it reads (``files.read.open_planned``): the cap stays well
# under the open-file limits hosts give (a hard limit of 4096 is common; the job needs 256 more)
TOPIC_RE = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")  # a Kafka topic's name
DEFAULT_MAX_FILES_PER_BATCH = 1000
MAX_FILES_PER_BATCH = 3000
# ``source.discovery`` of the landing kinds: list the whole folder at each plan, or (names that grow in
# byte order) only the paths after the last one a plan passed, or the objects the store's event
# notifications name (``source.notifications``), each with a full listing every ``full_listing_hours``
# for the late names and the lost events
DISCOVERY_MODES = ("full", "lexical", "notification")


@dataclass(frozen=True)
class NotificationsConfig:
    """``source.notifications`` of the landing kinds (``discovery: notification``): the Kafka topic of
    the landing zone's new-object events (``sources.files.notifications``)."""

    topic: str
    bootstrap_servers: str | None = None
    conn_id: str | None = None  # an Airflow connection (Kafka provider) whose extra is the client config


def bucket_shared_with(source: SourceConfig, locations: dict[str, str]) -> tuple[str, str, str] | None:
    """(key, bucket, connection) when a bucket of ``source.bucket_connections()`` also holds one of
    ``locations`` (key -> path: the pipeline's own tables), which one bucket's one set of
    settings (``s3conf.settings_for``) cannot serve both ways; None when none does."""
    for bucket, conn in source.bucket_connections().items():
        for key, path in locations.items():
            if s3conf.is_s3(path) and s3conf.split(path)[0] == bucket:
                return key, bucket, conn
    return None


def fields_as_keys(config: type[SourceConfig]) -> frozenset[str]:
    """The ``source:`` keys of a kind whose config's fields are its keys (the built-in kinds)."""
    return frozenset(f.name for f in fields(config))


# -- each kind's part of the configuration contract (``config.contract``): its ``source:`` keys' roles
PLANNED = "read when the next range is planned; a pending batch's range is in its plan"


def pinned(*keys: str, role: str = PENDING) -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """``contract_keys`` of the keys ``source.<key>`` whose value is the config's attribute of that
    name: what a pending batch depends on (PENDING) or what the tables' rows mean (TABLE)."""
    assert role in (PENDING, TABLE), role
    return {f"source.{k}": (role, attrgetter(k)) for k in keys}


def harmless(why: str, *keys: str) -> dict[str, str]:
    """``harmless_keys`` of the keys ``source.<key>``, for the reason ``why``."""
    return {f"source.{k}": why for k in keys}


# every kind's own (SourceConfig): ``max_records_per_batch``, ``settle_seconds``
COMMON_HARMLESS = harmless(PLANNED, "max_records_per_batch", "settle_seconds")


@runtime_checkable
class LateFilesConfig(Protocol):
    """The ``source:`` config of a kind that ``checks_late_files`` (files, parquet)."""

    late_lookback_intervals: int  # how many earlier intervals are checked


# asdict() of the single SourceConfig that files and Kafka shared before kinds were packages. The
# fingerprint of an existing pipeline hashed all of it, so the files and Kafka configs hash their
# own fields over these defaults: the same YAML keeps the same fingerprint.
LEGACY_SOURCE_DEFAULTS: dict[str, Any] = {
    "kind": None, "path": None, "max_records_per_batch": 100_000, "interval_prefix": None,
    "bootstrap_servers": None, "topic": None, "starting_offsets": "earliest", "isolation_level": "read_committed",
    "on_data_loss": "fail", "consumer_timeout_seconds": 120, "settle_seconds": 60, "late_files": "republish",
    "late_lookback_intervals": 24, "max_file_bytes": 128 << 20,
}


def legacy_fingerprint_dict(cfg: SourceConfig, added: tuple[str, ...] = ()) -> JSON:
    """``cfg`` over LEGACY_SOURCE_DEFAULTS; ``added``: fields newer than those, hashed only when
    set (not None), so a YAML that does not use them keeps its fingerprint; ``HASHED_UNLESS_DEFAULT``
    ones only when not their default (``unless_default``)."""
    own = {k: v for k, v in asdict(cfg).items() if k not in NOT_FINGERPRINTED and k not in cfg.HASHED_UNLESS_DEFAULT}
    newer = {k: own.pop(k) for k in added}
    out = {**LEGACY_SOURCE_DEFAULTS, **own}
    if set(out) != set(LEGACY_SOURCE_DEFAULTS):
        raise AssertionError(f"{type(cfg).__name__} has fields the legacy fingerprint never hashed: "
                             f"{sorted(set(out) - set(LEGACY_SOURCE_DEFAULTS))}")
    return unless_default(cfg, out | {k: v for k, v in newer.items() if v is not None})


@dataclass(frozen=True)
class BacklogAsk:
    """How much work ``Planner.backlog`` may do: ``count_records`` False lists only (no line count,
    no footer read); a files-like kind counts lines of at most ``count_bytes_limit`` bytes and of at
    most ``count_files_limit`` files not yet planned; a broker answers within ``timeout`` seconds."""

    count_records: bool = True
    count_bytes_limit: int = 64 << 20
    count_files_limit: int | None = None
    timeout: float = 5.0


class SourcePipeline(Protocol):
    """The pipeline a source kind plans for (``SourceKind.planner``): a ``config.pipeline.PipelineConfig``
    is one. A structural type: the pipeline's config holds the kind's ``SourceConfig`` (a subclass
    of ``config.sections.SourceConfig``), and the kinds name only what they read of it."""

    @property
    def name(self) -> str:
        """The pipeline's name."""
        ...

    @property
    def source(self) -> SourceConfig:
        """Its ``source:`` mapping, as this kind's ``parse_config`` returned it."""
        ...


class Planner(Protocol):
    """What ``source_for(cfg)`` returns: the Airflow side's planner of one pipeline.

    ``next_range`` / ``interval_range`` return ``(range, records, notes)``: the range as the JSON
    dict the ledger records (None when there is nothing to read), the source's own count of its
    records (None when it cannot know before reading) and notes for the batch plan. After
    ``interval_range``, ``late`` lists what it found late (``[{"interval", "files", "action"}]``).
    ``previous_plans`` is a sequence of the plans whose ranges count as read, oldest first; from
    the protocol it is a ``checkpoint.ReadSoFar``, whose ``[-1]`` and ``consumed(path)`` come from
    the ledger's checkpoint (any other use reads every plan of the ledger).
    """

    late: list[JSON]
    """After ``interval_range``: what it found late, ``[{"interval", "files", "action"}]``."""
    skipped: list[JSON]
    """After a plan: the inputs it left out (``{"path", "reason", "retried", "note"}``: a landing
    file it cannot read now, a name it never reads); [] for a kind that leaves none out."""

    def next_range(self, previous_plans: Sequence[BatchPlan], limit: int) -> tuple[JSON | None, int | None, list[str]]:
        """Continuous mode: ``(range, records, notes)`` of the next batch, starting where the ranges of
        ``previous_plans`` end, of at most ``limit`` records; range None when there is nothing new."""
        ...

    def interval_range(self, start_ms: int, end_ms: int, limit: int, earlier: BatchPlan | None = None,
                       **late_files: Any) -> tuple[JSON | None, int | None, list[str]]:
        """Interval mode: ``(range, records, notes)`` of the records of ``[start_ms, end_ms)``, at most
        ``limit`` (more is ``IntervalTooLarge``); ``earlier``: the plan of the interval before it. The
        protocol passes more keywords by the kind's flags: ``lookback`` and ``published`` when it
        ``checks_late_files``, ``previous``, ``holder``, ``cron``, ``first_start_ms`` when its
        ``interval_by_record_time``."""
        ...

    def check_readable(self) -> str:
        """What ``eobatch doctor`` says of this source when it can be read (a landing folder that can
        be listed, a topic's partitions, a Delta table's version): one line naming what was found;
        an exception (a TerminalError saying the fix, for the cases a plan refuses too) when it
        cannot be read. Reads no data: metadata only, bounded in time."""
        ...

    def begin_run(self) -> None:
        """The ``next_range`` calls from now on plan the batches of one run, each after the one
        before it (the protocol calls it before each run's plans); a planner may read its source
        once for all of them and for the ``backlog`` after them (a landing folder's listing)."""

    def discovered(self) -> JSON | None:
        """After a ``next_range`` that planned nothing: where its discovery got to, for the next plan
        to start from (the ledger keeps it, advisory: ``Ledger.put_discovery``), or None when there is
        nothing to keep (``source.discovery: lexical`` keeps its position and full listing time, so an
        idle pipeline does not list its whole landing zone at every plan once a full listing is due)."""
        ...

    def backlog(self, previous_plans: Sequence[BatchPlan], unpublished: JSON | None, ask: BacklogAsk) -> dict[str, Any]:
        """What waits to be read after ``previous_plans`` (as for ``next_range``), for the backlog
        page and the plan task's alert; ``unpublished``: the range of the newest batch when it is
        not committed yet. Any of ``files``, ``bytes``, ``records`` (None: not counted),
        ``partitions`` ({partition: records}), ``unpublished`` (bool), ``oldest_ms`` (the oldest
        unpublished input's time) and ``notes`` (how each figure was obtained, or why it is
        missing); a key left out is not known for this kind."""


@dataclass(frozen=True)
class RangeDetail:
    """What the ledger page lists of a recorded range below its one-line summary, in its kind's
    words (``SourceRange.detail``)."""

    files: tuple[PlannedFile, ...] = ()  # the files it reads
    partitions: tuple[tuple[str, str, int, int], ...] = ()  # (topic, partition, first offset, end offset)
    upstream: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (upstream pipeline, its batches this range read)


class SourceRange(Protocol):
    """A recorded range, typed. ``kind.range(d).to_json() == d`` for every range a ledger holds."""

    def to_json(self) -> JSON:
        """The range as the ledger records it (JSON): the dict it was made from."""
        ...

    def summary(self) -> str:
        """One line for logs and ``make ledger``."""

    def commit_offsets(self) -> Any:
        """The range as the Delta commit's ``eo.offsets`` carries it (JSON)."""

    def locations(self) -> list[str]:
        """Paths or URIs the Spark job reads (for the S3 credentials of the executors)."""

    def detail(self) -> RangeDetail:
        """What the ledger page lists of it below its summary (``RangeDetail``)."""

    def check_stage(self, summary: StageSummary) -> list[str]:
        """Problems of the stage summary against this range (verify), beyond the record count
        every kind reconciles (``rows_in``); ``summary.source_positions`` is what the kind's
        ``positions`` computed in the job."""


@runtime_checkable
class SourceKind(Protocol):
    """One source kind. Register an instance with ``eobatch.sources.register``. Every capability is a
    member it declares (a flag, or a method whose answer may be "none"): nothing of a kind is probed."""

    name: str
    """The kind's name: what a pipeline YAML gives as ``source.kind``."""
    config_keys: frozenset[str]
    """The keys allowed under ``source:`` (any other is refused, naming the file and the key)."""
    contract_keys: dict[str, tuple[str, Callable[[Any], Any]]]
    """Its keys that a plan records, in the configuration contract (``config.contract``): ``source.<key>``
    -> (``PENDING`` or ``TABLE``, the key's value of the kind's ``SourceConfig``), e.g. ``pinned("path")``;
    a pipeline of another kind records None for them."""
    harmless_keys: dict[str, str]
    """Its other keys: ``source.<key>`` -> why a pending batch does not depend on it, e.g.
    ``harmless(PLANNED, "max_records_per_batch")``."""
    position_based: bool
    """A rewind restarts at a recorded start position (Kafka offsets; see ``start_marker``)."""
    checks_late_files: bool
    """Interval mode looks back for files that landed in intervals already planned."""
    interval_by_record_time: bool
    """Interval mode assigns records to intervals by their own timestamps (Kafka: ``interval_slices``)."""
    replayable: bool
    """``make replay`` can land selected records again as a JSON-lines file that this kind reads."""
    located_columns: tuple[str, ...]
    """Columns of ``read`` that ``locate`` recomputes: not kept per record."""
    quarantine_columns: tuple[str, ...]
    """Columns of ``read`` that only ``locate`` needs: kept for the quarantined records only."""
    reads_alike: bool
    """Its ``read`` of a range gives the same rows, numbered the same way, every time it runs. The
    stage job writes the sink of such a kind straight from the read when the job's classification
    gives the same answers twice, observing the records to quarantine as it goes (beyond the
    observation's cap it reads the range again); the others are cached on local disk
    (spark_jobs/stage_batch.py)."""
    reads_table_versions: bool
    """Its offsets are another table's versions: ``first_batch_reading`` answers, and
    ``eobatch rewind --upstream-version`` applies to its pipelines."""

    # -- Airflow side --------------------------------------------------------------------
    def lineage_inputs(self, source: SourceConfig, rng: JSON) -> list[LineageDataset]:
        """The datasets a recorded range read, named the OpenLineage way (``eobatch.storage.lineage``),
        each with the range's own facts in ``detail`` (bounded: never one dataset per file); the
        Airflow tasks report them (``eobatch.protocol.lineage``)."""

    def first_batch_reading(self, plans: Sequence[BatchPlan], version: int) -> tuple[int, list[int]] | None:
        """A kind that ``reads_table_versions``: (batch, its versions [from, to)) of the first of
        ``plans`` (the pipeline's live plans, in batch order) that read ``version`` or a later one,
        or None when none has; the other kinds: None."""

    def parse_config(self, src: dict[str, Any], ctx: ConfigContext) -> SourceConfig:
        """The ``source:`` mapping (unknown keys already refused); ConfigError naming file and key."""

    def planner(self, cfg: SourcePipeline) -> Planner:
        """The planner of pipeline ``cfg`` (a PipelineConfig whose ``source`` this kind parsed)."""

    def range(self, data: JSON) -> SourceRange:
        """The typed view of a range recorded in the ledger."""

    def gone(self, rng: JSON) -> list[str]:
        """What of a recorded range is no longer in the source (a landing file expired since):
        a repair that would read the range again names it (``Protocol.reset``, ``rewind``)."""

    def start_marker(self, rng: JSON) -> JSON | None:
        """An empty range at ``rng``'s first positions (where a rewind to it reads again from);
        None for a kind that is not position based."""

    def job_source(self, source: SourceConfig) -> JSON:
        """What the Spark job needs of the source config (the job spec's ``source``), ``kind`` included."""

    def job_env(self, source: SourceConfig) -> dict[str, str]:
        """Settings the Spark job needs that must not be in its spec (secrets of a connection):
        spark-submit's environment variables, masked in Airflow's logs; {} for none."""

    # -- Spark side (the job spec's ``source`` is ``job``) ---------------------------------------
    def unreadable(self, rng: JSON, job: JSON) -> list[str]:
        """Why the range can no longer be read exactly (checked before the read); [] when it can."""

    def read(self, spark: SparkSession, rng: JSON, job: JSON) -> DataFrame:
        """The lines DataFrame of exactly this range (see the module docstring)."""

    def interval_slices(self, lines: DataFrame, rng: JSON) -> tuple[DataFrame, list[str]] | None:
        """Interval mode, a kind that ``interval_by_record_time``: (the lines this batch publishes,
        each with its slice in ``core.formats.SLICE_COL``, the slice names); None for a range without
        slices, and always for the other kinds (a record's slice is its planned file's)."""

    def locate(self, spark: SparkSession, records: DataFrame, rng: JSON, job: JSON) -> DataFrame:
        """``records`` (rows of ``read``, the quarantined ones) with their final ``position``; a
        kind whose ``read`` gives exact positions already returns ``records`` unchanged."""

    def positions(self, lines: DataFrame) -> JSON:
        """``StageSummary.source_positions`` from the lines DataFrame; {} when the kind checks none."""

    def release(self, rng: JSON) -> None:
        """Give back what the job holds for this range (open files, clients) once its batch is
        staged or has failed: one application stages a run's batches one after another, and its
        resources must not grow with the run."""


def consumed_skip(entry: JSON) -> JSON:
    """A planned entry the kind will not read (``skipped``), as one of ``Protocol.last_skipped``'s
    landing inputs (path, reason, note): the plan task's gauge and alert count both kinds."""
    note = (f"skipped {entry['path']} ({entry['size']} bytes): {entry['skipped']}; not published. Land a corrected "
            f"file under a new name (a consumed file is never read again)")
    return {"path": entry["path"], "reason": entry["skipped"], "retried": False, "note": note}


NOT_TAKEN_NOTE = "not taken: "  # a plan's note of the landing files whose names the source does not take
NOT_TAKEN_SHOWN = 10  # names a note, a log line and an alert name at most (the count says the rest)


def not_taken_skip(folder: str, paths: Sequence[str], include: Sequence[str]) -> JSON:
    """The landing files below ``folder`` a landing kind sees but whose names ``source.include``
    does not take, as ONE of ``Protocol.last_skipped``'s landing inputs (its ``count``: how many
    files; ``not_taken``: True): logged, in every plan's notes while they are there (``NOT_TAKEN_NOTE``,
    bounded: the first ``NOT_TAKEN_SHOWN`` names and the count), the plan task's gauges and alert."""
    n, names = len(paths), sorted(printable(p) for p in paths)
    shown = ", ".join(names[:NOT_TAKEN_SHOWN]) + (f" and {n - NOT_TAKEN_SHOWN} more" if n > NOT_TAKEN_SHOWN else "")
    globs = ", ".join(include)
    reason = f"{n} file(s) whose names source.include [{globs}] does not take"
    note = (f"{NOT_TAKEN_NOTE}{n} landing file(s) below {printable(folder)} are never read: their names do not match "
            f"source.include [{globs}]: {shown}. Rename them to a name it takes, add their pattern to "
            f"source.include, or move them out of the landing folder (names starting with . or _ are ignored "
            f"without a word: land in-progress files under such a name)")
    return {"path": printable(folder), "reason": reason, "retried": True, "note": note, "count": n, "not_taken": True}


def skipped_count(skipped: Sequence[JSON]) -> int:
    """The landing inputs ``skipped`` (``Protocol.last_skipped``) stands for: an entry of files not
    taken counts each of its files."""
    return sum(int(s.get("count", 1)) for s in skipped)


def local_frame(spark: SparkSession, ddl: str, rows: list[tuple[Any, ...]]) -> DataFrame:
    """A DataFrame of the driver's ``rows`` (schema ``ddl``), handed to the JVM as Arrow: unlike
    ``createDataFrame`` of a list, which re-pickles the rows in a Python worker of its own (a
    second workers' daemon in the stage job), nothing of it runs in Python."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType, _parse_datatype_string

    schema = _parse_datatype_string(ddl)
    assert isinstance(schema, StructType), ddl
    arrow = to_arrow_schema(schema)
    columns = list(zip(*rows)) if rows else [()] * len(arrow)
    table = pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, arrow)], schema=arrow)
    return spark.createDataFrame(table, schema)
