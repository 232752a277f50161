"""Records and layout shared by the Airflow side and the Spark job (pure Python).

Layout, for a pipeline whose sink table is ``T`` and quarantine table ``Q``::

    T/_eo_ledger/plans/<batch>.json                        PLANNED   (put-if-absent; the exact source range)
    T/_eo_ledger/attempts/<batch>/<attempt>/manifests/<participant>/part-<n>.json
                                                           one per Spark partition, written by the task
    T/_eo_ledger/attempts/<batch>/<attempt>/started.json   the stage task started the attempt (put-if-absent:
                                                           its run and time, before the job is submitted)
    T/_eo_ledger/attempts/<batch>/<attempt>/stage.json     STAGED    (written by the driver at the end)
    T/_eo_ledger/attempts/<batch>/<attempt>/decision.json  the attempt's one decision (put-if-absent):
                                                           "prepare" (verify won: its files are never
                                                           removed by abort) or "abort" (abort won: its
                                                           files go, it can never become PREPARED)
    T/_eo_ledger/prepared/<batch>.json                     PREPARED  (put-if-absent; the file set to commit)
                                                           or ABANDONED (interval mode: same file, so a
                                                           batch is either prepared or abandoned, never both)
    T/_eo_ledger/rewinds/<after>-<to>.json                 a rewind after batch <after> to before batch <to>
    T/_eo_ledger/runs/<batch>/<run key>.json               a run that took up a batch planned by another run,
                                                           or was refused while it was pending (put-if-absent,
                                                           one per run; eobatch.core.stuck counts them)
    T/_eo_ledger/committed/<batch>.json                    COMMITTED (ledger copy; the truth is the Delta txn)
    T/_eo_ledger/checkpoints/<batch>-r<n>.json             a checkpoint: what batches 1..<batch> (all final)
                                                           mean for planning, with the <n> rewinds it
                                                           applied (put-if-absent; see eobatch.core.checkpoint)
    T/_eo_ledger/checkpoints/index/<sha256>.json           a chunk of a checkpoint's sorted index (content-addressed)
    T/_eo_ledger/discovery.json                            advisory: where the discovery of an idle plan got
                                                           to after the newest plan (``source.discovery:
                                                           lexical``; overwritten; never a range)
    T/_eo_ledger/replays/<n>.json                          replay <n> of quarantined records (put-if-absent;
                                                           see eobatch.protocol.replay): which records, its landing file
    T/_eo_ledger/replays/data/<n>-<nonce>.jsonl            the raw lines of replay <n>, written before it
    T/eo_batches/b<batch>/<attempt>/...parquet             staged data of the sink
    Q/eo_batches/b<batch>/<attempt>/...parquet             staged data of the quarantine table

``_eo_ledger`` starts with ``_`` so Delta readers and VACUUM leave it alone; staged data lives
under the table root (delta-rs reads relative paths only) in a folder that does not start
with ``_`` or ``.``, so VACUUM can later clean files that compaction removed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Literal, Self

from ..config.ddl import PARTITION_PATH_MAX_BYTES as PARTITION_PATH_MAX_BYTES
from ..config.ddl import PARTITION_SEGMENT_MAX_BYTES as PARTITION_SEGMENT_MAX_BYTES
from ..config.ddl import partition_min_bytes
from ..errors import UsageError
from ..storage.fs import join

FORMAT_VERSION = 1
BatchState = Literal["PLANNED", "STAGED", "PREPARED", "COMMITTED", "ABANDONED", "REWOUND"]
LEDGER_DIR = "_eo_ledger"
STAGING_DIR = "eo_batches"
COMPACTED_DIR = "eo_compacted"  # interval mode: the files a compaction of a slice wrote (maintenance)
SINK, QUARANTINE = "sink", "quarantine"
# the participants the stage job writes files for; every pipeline has both (a sink kind may add its
# own tables, under the sink table: Layout.table)
STAGED = (SINK, QUARANTINE)
OWN_TABLE_PREFIX = "_eo_"  # a sink's own table <name> is T/_eo_<name>: Delta readers and VACUUM skip "_" folders
# interval mode: the column naming the interval slice of a record (as the stage job calls it)
SLICE_COL = "_eo_slice"
# a JSON object as the records and the Delta commit info hold it (its values are whatever JSON gives)
JSON = dict[str, Any]
# interval mode: one file a batch published for a slice, as plans record it: (path, size, mtime_ms)
PublishedFile = tuple[str, int, int]


QUARANTINE_SCHEMA_DDL = "batch_id BIGINT, source STRING, position BIGINT, raw STRING, reason STRING"


class InvalidId(UsageError):
    """A batch or attempt id that is not one this product writes (from XCom, the CLI, a spec)."""


# Attempt ids become folder names under the tables and the ledger: never a path, never '..'.
ATTEMPT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def check_attempt(attempt: object) -> str:
    """The one check of an attempt id, wherever it comes from. Raises InvalidId."""
    if not isinstance(attempt, str) or not ATTEMPT_ID.fullmatch(attempt):
        raise InvalidId(f"invalid attempt id {attempt!r}: attempt ids match {ATTEMPT_ID.pattern} "
                        f"(letters, digits, '_' and '-'; written by the stage task)")
    return attempt


def check_batch_id(batch_id: object) -> int:
    """The one check of a batch id (a positive integer). Raises InvalidId."""
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or not 1 <= batch_id <= 9_999_999_999:
        raise InvalidId(f"invalid batch id {batch_id!r}: batch ids are integers from 1")
    return batch_id


def slice_name(interval_start_ms: int) -> str:
    """Interval mode: the folder (under an attempt's staging folder) of one interval's staged files,
    ``iv=<start, UTC, YYYYMMDDTHHMMSSZ>``. A batch publishes one or more interval slices; its commit
    replaces the files its slices' newest committed batches published (``state.replaced_files``)."""
    start = dt.datetime.fromtimestamp(interval_start_ms / 1000, dt.timezone.utc)
    return "iv=" + start.strftime("%Y%m%dT%H%M%SZ")


def partition_text(v: object) -> str | None:
    """A partition value as the Delta log spells it (``partitionValues``, the Delta protocol's
    serialization), for the stage job's adds and the commit's removes alike: None is null,
    booleans true/false, dates YYYY-MM-DD, timestamps YYYY-MM-DD HH:MM:SS.ffffff (UTC when
    zoned), anything else its str()."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(v, dt.date):
        return v.isoformat()
    return str(v)


# A partition value in a file path: the one definition for every writer of this product's table
# files (the stage job; the stage job's check of the records, spark_jobs/classify.py). Bounds
# (eobatch.config.ddl, which the pipeline file's check uses too): a folder name is at most 255 bytes
# on local filesystems (ENAMETOOLONG beyond), and an S3 key at most 1024 bytes, of which the
# table's prefix, the staging folders and the file name take part.
PATH_SAFE_CHARS = "A-Za-z0-9_.-"  # kept as they are in a folder name (a regex character class body)
PATH_ESCAPE = "~"  # any other byte is "~XX" (hex): no "%", so the Delta log's path (a URI) is the folder's name
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # a null value's folder, as Spark and Hive name it
_SAFE_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def partition_segment(column: str, value: object, cap: int = PARTITION_SEGMENT_MAX_BYTES) -> str:
    """The folder of one partition value, ``<column>=<value>``: bytes of the value's UTF-8 text
    (``partition_text``) outside ``PATH_SAFE_CHARS`` written as ``~XX``, so that "/", "..",
    NUL, "=", "%" or a space never make another folder or need escaping in a URI (Delta
    readers and delta-rs take a file's path from the log, which holds the value itself). A
    folder longer than ``PARTITION_SEGMENT_MAX_BYTES`` keeps a prefix of it and a digest of the
    value (``~h<32 hex>``); the stage job quarantines the records whose partition fields would
    need that (``classify.bound_partition_values``), so only a value a transform computed gets it."""
    text = partition_text(value)
    if text is None:
        return f"{column}={HIVE_NULL}"
    raw = text.encode("utf-8", "surrogatepass")
    escaped = "".join(chr(b) if b in _SAFE_BYTES else f"{PATH_ESCAPE}{b:02X}" for b in raw)
    seg = f"{column}={escaped}"
    if len(seg) <= cap:
        return seg
    digest = f"{PATH_ESCAPE}h" + hashlib.sha256(raw).hexdigest()[:32]
    keep = max(0, cap - len(column) - 1 - len(digest))
    head = escaped[:keep]
    cut = head.rfind(PATH_ESCAPE, max(0, len(head) - 2))
    return f"{column}={head[:cut] if cut >= 0 else head}{digest}"


def partition_path(columns: Iterable[str], values: Iterable[object]) -> str:
    """The partition folders of a file (``partition_segment`` of each column), "" for none, in at
    most PARTITION_PATH_MAX_BYTES together: folders that do not fit together (values a transform
    computed: the records' own are quarantined beyond the bound, ``classify.bound_partition_values``)
    keep a shorter prefix of their value and its digest, the longest first, so the path of a file
    stays within an S3 key and a local path whatever the values."""
    pairs = list(zip(columns, values))
    segs = [partition_segment(c, v) for c, v in pairs]
    cap = PARTITION_SEGMENT_MAX_BYTES
    while len("/".join(segs)) > PARTITION_PATH_MAX_BYTES:
        if cap <= 0:
            raise ValueError(f"partition columns {[c for c, _ in pairs]} cannot take fewer than "
                             f"{partition_min_bytes(c for c, _ in pairs)} bytes as folders, more than "
                             f"{PARTITION_PATH_MAX_BYTES}")
        cap -= 8
        segs = [partition_segment(c, v, cap) for c, v in pairs]
    return "/".join(segs)


def slice_of(path: str) -> str | None:
    """The slice folder of a staged file's table-relative path
    (``eo_batches/b<id>/<attempt>/<slice>/...``), or None."""
    parts = path.split("/")
    return parts[3] if len(parts) > 4 and parts[0] == STAGING_DIR and parts[3].startswith("iv=") else None


def bid(batch_id: int) -> str:
    return f"{check_batch_id(batch_id):010d}"


DECISION_FILE = "decision.json"  # an attempt's one decision (prepare or abort), put-if-absent
REPLAY_DIR = "replay"  # the sub-folder of a landing folder that replays land in (``protocol.replay``)
REPLAY_LINEAGE = ".jsonl.lineage.json"  # the lineage of an older version's replay file, beside it


@dataclass(frozen=True)
class Layout:
    sink_table: str
    quarantine_table: str

    @property
    def ledger(self) -> str:
        return join(self.sink_table, LEDGER_DIR)

    def table(self, participant: str) -> str:
        """The table of a participant: the sink's, the quarantine's, or a table of the sink kind's
        own (a merge sink's tombstones: ``T/_eo_tombstones``), under the sink table like the ledger."""
        if participant not in STAGED:
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", participant or ""):
                raise InvalidId(f"invalid participant name {participant!r}")
            return join(self.sink_table, OWN_TABLE_PREFIX + participant)
        return self.sink_table if participant == SINK else self.quarantine_table

    def plan(self, batch_id: int) -> str:
        return join(self.ledger, "plans", bid(batch_id) + ".json")

    def plans_dir(self) -> str:
        return join(self.ledger, "plans")

    def attempts_dir(self, batch_id: int) -> str:
        return join(self.ledger, "attempts", bid(batch_id))

    def attempt_dir(self, batch_id: int, attempt: str) -> str:
        return join(self.attempts_dir(batch_id), check_attempt(attempt))

    def stage_summary(self, batch_id: int, attempt: str) -> str:
        return join(self.attempt_dir(batch_id, attempt), "stage.json")

    def job_spec(self, batch_id: int, attempt: str) -> str:
        """The stage job's spec of the run whose first batch is ``batch_id``, staged by ``attempt``
        (``eobatch.job.launch.spec_args``)."""
        return join(self.attempt_dir(batch_id, attempt), "job.json")

    def attempt_started(self, batch_id: int, attempt: str) -> str:
        """The stage task's record of starting the attempt (before its job is submitted)."""
        return join(self.attempt_dir(batch_id, attempt), "started.json")

    def run_tries_dir(self, batch_id: int) -> str:
        return join(self.ledger, "runs", bid(batch_id))

    def run_try(self, batch_id: int, run_id: str) -> str:
        """The record of run ``run_id`` taking up batch ``batch_id`` (named by the run id's digest:
        a run id is any text Airflow or a person gave)."""
        if not isinstance(run_id, str) or not run_id:
            raise InvalidId(f"invalid run id {run_id!r}")
        return join(self.run_tries_dir(batch_id), hashlib.sha256(run_id.encode()).hexdigest()[:32] + ".json")

    def aborted(self, batch_id: int, attempt: str) -> str:
        """Abort records of ledgers written before attempt decisions existed (read only)."""
        return join(self.attempt_dir(batch_id, attempt), "aborted.json")

    def decision(self, batch_id: int, attempt: str) -> str:
        return join(self.attempt_dir(batch_id, attempt), DECISION_FILE)

    def manifest(self, batch_id: int, attempt: str, participant: str, partition: int) -> str:
        return join(self.attempt_dir(batch_id, attempt), "manifests", participant, f"part-{partition:05d}.json")

    def prepared(self, batch_id: int) -> str:
        return join(self.ledger, "prepared", bid(batch_id) + ".json")

    def committed(self, batch_id: int) -> str:
        return join(self.ledger, "committed", bid(batch_id) + ".json")

    def rewinds_dir(self) -> str:
        return join(self.ledger, "rewinds")

    def rewind(self, after_batch: int, to_batch: int) -> str:
        return join(self.rewinds_dir(), f"{bid(after_batch)}-{bid(to_batch)}.json")

    def rewinds_cancelled_dir(self) -> str:
        return join(self.rewinds_dir(), "cancelled")

    def rewind_cancelled(self, after_batch: int, to_batch: int) -> str:
        """The decision that a rewind whose restore became impossible did not happen."""
        return join(self.rewinds_cancelled_dir(), f"{bid(after_batch)}-{bid(to_batch)}.json")

    def replays_dir(self) -> str:
        return join(self.ledger, "replays")

    def replay(self, n: int) -> str:
        """The record of quarantine replay ``n`` (numbered from 1, like batches)."""
        return join(self.replays_dir(), bid(n) + ".json")

    @property
    def discovery(self) -> str:
        return join(self.ledger, "discovery.json")

    def checkpoints_dir(self) -> str:
        return join(self.ledger, "checkpoints")

    def checkpoint(self, batch_id: int, rewinds: int) -> str:
        """The checkpoint of batches 1..``batch_id``, made with ``rewinds`` rewinds recorded (the
        rewinds to a batch <= ``batch_id``): a later rewind into those batches makes another one."""
        if isinstance(rewinds, bool) or not isinstance(rewinds, int) or rewinds < 0:
            raise InvalidId(f"invalid rewind count {rewinds!r}")
        return join(self.checkpoints_dir(), f"{bid(batch_id)}-r{rewinds}.json")

    def checkpoint_index_dir(self) -> str:
        return join(self.checkpoints_dir(), "index")

    def checkpoint_chunk(self, name: str) -> str:
        """A chunk of a checkpoint's index, named by the sha256 of its bytes."""
        if not isinstance(name, str) or not re.fullmatch(r"[0-9a-f]{64}", name):
            raise InvalidId(f"invalid checkpoint chunk name {name!r}")
        return join(self.checkpoint_index_dir(), name + ".json")

    def compactions_dir(self, batch_id: int, participant: str, slice_: str) -> str:
        """Interval mode: the records of the compactions of one slice of one batch in one table."""
        if not re.fullmatch(r"iv=\d{8}T\d{6}Z", slice_ or "") or participant not in STAGED:
            raise InvalidId(f"invalid slice {slice_!r} of participant {participant!r}")
        return join(self.ledger, "compactions", bid(batch_id), participant, slice_)

    def compacted_rel(self, batch_id: int, slice_: str, token: str) -> str:
        """Interval mode: the folder, relative to a table, of one compaction's files of a slice."""
        return f"{COMPACTED_DIR}/b{bid(batch_id)}/{slice_}/{check_attempt(token)}"

    def staging_root(self, participant: str) -> str:
        return join(self.table(participant), STAGING_DIR)

    def batch_staging_rel(self, batch_id: int) -> str:
        return f"{STAGING_DIR}/b{bid(batch_id)}"

    def attempt_staging_rel(self, batch_id: int, attempt: str) -> str:
        """Staging folder of one attempt, relative to each participant table's root."""
        return f"{self.batch_staging_rel(batch_id)}/{check_attempt(attempt)}"


class Record:
    """JSON (de)serialisation for the dataclass records below: each field as JSON holds it, but for
    the fields a record keeps as typed values (``_json_fields``, ``_typed_fields``: its own)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # every subclass is a dataclass

    def to_json(self) -> bytes:
        return json.dumps(self._json_fields(), sort_keys=True, indent=1, default=str).encode()

    def _json_fields(self) -> JSON:
        """Its fields as its JSON holds them."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        d = json.loads(data)
        names = {f.name for f in fields(cls)}
        return cls(**cls._typed_fields({k: v for k, v in d.items() if k in names}))

    @classmethod
    def _typed_fields(cls, d: JSON) -> JSON:
        """``d`` (the fields its JSON holds) with the values it keeps typed made so."""
        return d


@dataclass(frozen=True)
class PlannedFile:
    """One file a recorded range reads, typed: what the landing kinds (files, parquet: their
    ``FilesRange``) and the delta source record of each file under their range's ``files``
    (``planned_files`` reads them). Code outside those kinds asks for these, never for the range's
    JSON. ``identity``: [device, inode, mtime in ns] of a local file, [ETag, VersionId, LastModified
    in ms] of an S3 object (plans written before them have none)."""

    path: str
    size: int
    mtime_ms: int
    records: int | None = None  # None only in ranges that never counted (kept as recorded)
    slice: str | None = None  # interval mode: the interval slice the file's records publish in
    skipped: str | None = None  # why the kind will not read it (it was planned, so it counts as consumed)
    identity: tuple[Any, ...] | None = None
    entry: JSON = field(default_factory=dict, compare=False, repr=False)  # the range's own entry (not a copy)

    @classmethod
    def of(cls, entry: JSON) -> PlannedFile:
        """The file of a range's entry (the entry itself kept: ``entry``)."""
        identity = entry.get("identity")
        return cls(str(entry["path"]), int(entry.get("size") or 0), int(entry.get("mtime_ms") or 0),
                   entry.get("records"), entry.get("slice"), entry.get("skipped"),
                   tuple(identity) if identity is not None else None, entry)

    def to_json(self) -> JSON:
        """The entry a range records of it."""
        d: JSON = {"path": self.path, "size": self.size, "mtime_ms": self.mtime_ms}
        if self.records is not None:
            d["records"] = self.records
        if self.slice is not None:
            d["slice"] = self.slice
        if self.skipped is not None:
            d["skipped"] = self.skipped
        if self.identity is not None:
            d["identity"] = list(self.identity)
        return d


def planned_files(rng: object) -> tuple[PlannedFile, ...] | None:
    """The files a recorded range (its JSON) reads, in the plan's order; None for a range that
    names no files (Kafka's offsets, or anything that is not a range of files)."""
    files = rng.get("files") if isinstance(rng, dict) else None
    if not isinstance(files, list):
        return None
    return tuple(PlannedFile.of(f) if isinstance(f, dict) else PlannedFile(str(f), 0, 0) for f in files)


def files_shown(rng: JSON, limit: int) -> JSON:
    """``rng`` as a page shows it: at most ``limit`` of its files, and ``files_not_shown`` saying how
    many more there are (the range itself when it names no more than that)."""
    files = rng.get("files")
    if not isinstance(files, list) or len(files) <= limit:
        return dict(rng)
    return {**rng, "files": files[:limit], "files_not_shown": len(files) - limit}


@dataclass
class BatchPlan(Record):
    """PLANNED: what a batch contains, written before any data is."""

    pipeline: str
    batch_id: int
    source_kind: str
    range: JSON  # the source kind's range as JSON (sources/<kind>/range.py), e.g.
    #              files, parquet: {"files": [{"path", "size", "mtime_ms", "records", "slice"?, "skipped"?}]}
    #              kafka: {"topic", "isolation_level", "partitions": {"<p>": [from, to)}, "lost"?}, in
    #              interval mode also "scan", "slices", "pending" (sources/kafka/intervals.py)
    rows_in: int | None  # the source's own count of records in the range, when it knows it
    config_fingerprint: str
    planned_at: str
    plan_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    interval: dict[str, str] | None = None  # interval mode: {"start", "end"} (ISO, UTC) of the run's data interval
    run_id: str | None = None  # the Airflow run that planned it (interval mode: its owner)
    rewind: JSON | None = None  # the RewindRecord that reserved this batch as its first replay
    late: list[JSON] = field(default_factory=list)  # interval mode: [{"interval", "files", "action"}] found late
    sink: str | None = None  # what the sink's rows mean (PipelineConfig.sink_contract); None: append
    config: JSON | None = None  # the values of the keys the batch depends on (config.contract); None: older plans
    # the first batch of the run's reservation when a run planned several batches at once (plans
    # n..m, each with run_first n); None: a run's only batch
    run_first: int | None = None
    # the sha256 of the plan record of the batch before it, when the same run planned that one
    # (its range starts where that one ends): the plan is VOID when that record is not the one the
    # ledger holds now (a reset forgot it while this run planned); None: a run's first batch
    base: str | None = None
    format: int = FORMAT_VERSION

    @property
    def first_of_run(self) -> int:
        """The first batch planned with this one: every table held the batch before it then."""
        return self.run_first or self.batch_id

    @property
    def interval_key(self) -> str | None:
        return f"{self.interval['start']}/{self.interval['end']}" if self.interval else None

    def slices(self) -> dict[str, list[JSON]]:
        """Interval mode: slice name -> the planned files of that interval slice. A range without
        files (Kafka offsets) and a plan written before slices existed hold one slice, their own
        interval's (with no files for a range without files)."""
        if not self.interval:
            return {}
        files = self.files()
        if files is None:  # Kafka: its slices by record time, or (planned before them) one slice
            if "slices" in self.range:
                return {name: [] for name in self.range["slices"]}
            return {slice_name(_epoch_ms(self.interval["start"])): []}
        if files and all(f.slice is not None for f in files):
            out: dict[str, list[JSON]] = {}
            for f in files:
                out.setdefault(str(f.slice), []).append(f.entry)
            return out
        return {slice_name(_epoch_ms(self.interval["start"])): [f.entry for f in files]}

    def files(self) -> tuple[PlannedFile, ...] | None:
        """The files its range reads (``planned_files``); None for a range that names none."""
        return planned_files(self.range)


@dataclass
class ManifestFile(Record):
    """One file a Spark task wrote, as its ``PartitionManifest`` lists it (verify checks it and
    makes it a ``StagedFile`` of the PREPARED record)."""

    path: str  # relative to the participant table's root
    size: int
    rows: int
    partition_values: JSON = field(default_factory=dict)
    # float/double columns the writer checked hold no NaN: only those get min/max in the Delta
    # stats (Parquet footers' min/max ignore NaN, readers do not). None: not checked.
    nan_free: list[str] | None = None


@dataclass
class PartitionManifest(Record):
    """Written by each Spark task for its partition: what it wrote, where, how many rows."""

    batch_id: int
    attempt: str
    participant: str
    partition: int
    task_attempt: int
    rows: int
    files: list[JSON]  # of ManifestFile dicts
    format: int = FORMAT_VERSION


@dataclass
class StageSummary(Record):
    """STAGED: written by the Spark driver once every task of the attempt has finished."""

    batch_id: int
    attempt: str
    rows_in: int  # records read (non-blank lines; Kafka: records delivered)
    rows_valid: int  # parsed and fitting the schema
    rows_quarantined: int
    row_preserving: bool  # the transform publishes exactly the valid rows
    partitions: dict[str, int]  # participant -> number of Spark partitions (manifests 0..n-1)
    manifests: dict[str, list[JSON]]  # participant -> list of PartitionManifest dicts, as the driver collected them
    arrow_schema: dict[str, str]  # participant -> base64 Arrow IPC schema of the staged files
    partition_by: dict[str, list[str]]  # participant -> list of partition columns
    stage_seconds: float
    spark_app_id: str = ""
    config_fingerprint: str = ""
    # what the source kind checks per source (verify, its range's check_stage): kafka
    # {"<p>": [count, min offset, max offset]}, parquet {"<file>": [rows, min row index, max row index]};
    # files and parquet: "files": {"<file>": [size, *identity]} of each file after the reads
    source_positions: JSON = field(default_factory=dict)
    plan_digest: str = ""  # Ledger.plan_digest of the plan the attempt read ("" from older stage jobs)
    rows_dropped: int = 0  # valid records an expectation with action drop removed
    expectations: dict[str, int] = field(default_factory=dict)  # expectation name -> records that failed it
    # the values of the configuration keys the job ran with (pipelines.loader.config_values, its spec's
    # "contract"): verify refuses an attempt staged under other values than its plan's
    contract: JSON | None = None
    format: int = FORMAT_VERSION


@dataclass(frozen=True)
class StagedFile:
    """One staged file of a PREPARED batch, typed: the Delta AddFile its table's commit adds
    (``PreparedBatch.adds``, ``Participant.commit``), as verify made it from the file's footer
    (``table_files.add_action``). Code outside this module asks for these, never for the record's
    JSON (``to_json``, ``from_json``). ``modification_time`` and ``stats`` are None only when a
    record does not hold them; a commit then takes its own time (as for 0) and no statistics
    (``"{}"``)."""

    path: str  # relative to the participant table's root
    size: int
    # the Delta log's spelling of each partition column's value (``partition_text``)
    partition_values: dict[str, str | None] = field(default_factory=dict, hash=False)
    modification_time: int | None = None  # ms since the epoch
    stats: str | None = None  # the Delta statistics, JSON text (``table_files.footer_stats``)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StagedFile:
        """The file a PREPARED record lists as ``d``: ``path`` and ``size`` are required; without
        ``partition_values`` it has none, without ``modification_time`` or ``stats`` (or null) None."""
        mtime, stats = d.get("modification_time"), d.get("stats")
        return cls(str(d["path"]), int(d["size"]), dict(d.get("partition_values") or {}),
                   None if mtime is None else int(mtime), None if stats is None else str(stats))

    def to_json(self) -> JSON:
        """The entry a PREPARED record holds of it: ``path``, ``size``, ``partition_values``,
        and ``modification_time`` and ``stats`` unless None (a record that had none gets none)."""
        d: JSON = {"path": self.path, "size": self.size, "partition_values": dict(self.partition_values)}
        if self.modification_time is not None:
            d["modification_time"] = self.modification_time
        if self.stats is not None:
            d["stats"] = self.stats
        return d


@dataclass
class PreparedBatch(Record):
    """PREPARED: the verified file set of one attempt. From here on the commit must succeed."""

    pipeline: str
    batch_id: int
    attempt: str
    adds: dict[str, list[StagedFile]]  # participant -> its staged files (the record's JSON: each one's to_json())
    arrow_schema: dict[str, str]  # participant -> base64 Arrow IPC schema
    partition_by: dict[str, list[str]]
    fingerprint: str
    rows_in: int
    rows_valid: int
    rows_quarantined: int
    rows_published: int
    bytes: int
    files: int
    prepared_at: str
    verify_seconds: float
    stage_seconds: float
    rows_dropped: int = 0
    expectations: dict[str, int] = field(default_factory=dict)  # expectation name -> records that failed it
    format: int = FORMAT_VERSION

    def _json_fields(self) -> JSON:
        adds = {participant: [f.to_json() for f in files] for participant, files in self.adds.items()}
        return {**asdict(replace(self, adds={})), "adds": adds}

    @classmethod
    def _typed_fields(cls, d: JSON) -> JSON:
        if not isinstance(d.get("adds"), dict):
            return d  # the constructor says what is missing
        return {**d, "adds": {participant: [StagedFile.from_json(a) for a in files]
                              for participant, files in d["adds"].items()}}


@dataclass
class CommittedBatch(Record):
    """COMMITTED (ledger copy). The Delta txn version is the source of truth."""

    pipeline: str
    batch_id: int
    fingerprint: str
    delta_versions: dict[str, int]  # participant -> table version holding this batch's txn
    committed_at: str
    commit_seconds: float
    recovered: bool = False  # completed by recovery rather than by the batch's own commit task
    # what the commit did to the sink table per kind of change, when its published count does not say
    # it (a merge sink: inserted, updated, deleted, ignored; ``SinkKind.changes``); {}: an append, or
    # a record written before this field
    changes: dict[str, int] = field(default_factory=dict)
    format: int = FORMAT_VERSION


CHANGE_KINDS = ("inserted", "updated", "deleted", "ignored")  # CommittedBatch.changes, in the order shown


def changes_text(changes: dict[str, int] | None) -> str:
    """A batch's changes to the sink table as the ledger shows them: "100 inserted, 200 updated,
    1 deleted, 1 ignored"; "" when none are recorded."""
    got = changes or {}
    return ", ".join(f"{got[k]:,} {k}" for k in CHANGE_KINDS if k in got)


@dataclass
class RewindRecord(Record):
    """A rewind: the tables went back to before ``to_batch``; batches to_batch..after_batch are
    REWOUND (their ranges are read again by the next batches, whose ids continue after
    ``after_batch`` so the Delta txn version only ever grows)."""

    pipeline: str
    after_batch: int
    to_batch: int
    restore_versions: dict[str, int]  # participant -> the table version restored (the one before to_batch's commit)
    requested_at: str
    run_id: str | None = None
    format: int = FORMAT_VERSION

    @property
    def key(self) -> str:
        return f"{self.after_batch}-{self.to_batch}"


@dataclass
class SliceCompaction(Record):
    """Interval mode: maintenance rewrote the files ``replaces`` that batch ``batch_id`` published
    for ``slice`` in table ``participant`` into ``added``, so that the slice is held by ``files``
    (paths relative to the table); written before that Delta commit. A re-run of the slice
    removes ``files`` instead when they are live (the commit landed;
    ``compaction.current_slice_files``), so the slice stays exactly replaceable; a record whose
    files are not live (the commit lost or never ran, or a restore went back before it) changes
    nothing."""

    pipeline: str
    batch_id: int
    participant: str
    slice: str
    replaces: list[str]  # the paths it removes (of the slice's files before it)
    files: list[str]  # the paths of the slice's files after it
    added: list[JSON]  # the AddAction dicts of the files it wrote: {"path", "size", "partition_values", ...}
    written_at: str
    format: int = FORMAT_VERSION


def utcnow() -> str:
    """Now, as every record of the ledger writes a time (ISO 8601, UTC, milliseconds)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def _epoch_ms(iso: str) -> int:
    d = dt.datetime.fromisoformat(iso)
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.timezone.utc)
    return int(d.timestamp() * 1000)


def fingerprint_of(adds: Mapping[str, Iterable[StagedFile]]) -> str:
    """Fingerprint of a file set: participant, relative path and size of every file."""
    h = hashlib.sha256()
    for participant in sorted(adds):
        for f in sorted(adds[participant], key=lambda x: x.path):
            h.update(f"{participant}\0{f.path}\0{f.size}\n".encode())
    return h.hexdigest()


def commit_metadata(plan: BatchPlan, prepared: PreparedBatch, participant: str, offsets: Any) -> dict[str, Any]:
    """What each Delta commit of a batch carries in its commitInfo, besides txn(appId, version);
    ``offsets``: the batch's range in its kind's words (``eobatch.sources.compact_offsets``)."""
    return {
        "eo.pipeline": plan.pipeline,
        "eo.batchId": str(plan.batch_id),
        "eo.attempt": prepared.attempt,
        "eo.participant": participant,
        "eo.fingerprint": prepared.fingerprint,
        "eo.source": plan.source_kind,
        "eo.offsets": json.dumps(offsets, sort_keys=True, separators=(",", ":")),
        "eo.rows": json.dumps({"in": prepared.rows_in, "published": prepared.rows_published,
                               "quarantined": prepared.rows_quarantined}),
        **({"eo.interval": plan.interval_key} if plan.interval else {}),
    }

