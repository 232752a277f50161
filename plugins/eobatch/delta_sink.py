"""A Delta table as a participant of the two-phase commit, through delta-rs.

It answers "what is committed" (the txn version of the pipeline's appId) and "commit these
already-written files with txn(appId, batch)" as one metadata-only Delta transaction.
delta-rs checks none of our invariants (it accepts missing files, a wrong schema, a txn
version lower than the stored one): every such check is made here or in ``verify``.
A concurrent commit with the same appId fails in delta-rs with CommitFailedError (its
conflict checker sees both transactions touch the same txn); the caller then re-reads.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from .errors import RetryableError, SliceRewritten, TerminalError
from .formats import DELETE_COL, partition_text

log = logging.getLogger(__name__)
# how long a just-created table may take to be listed by the store before creating it failed
TABLE_VISIBLE_S = 10.0


@dataclass(frozen=True)
class Replace:
    """Interval mode: the exact live files a commit removes in the same transaction (slice
    replace), and the slices they hold (for the log, the commit info and the errors)."""

    paths: frozenset = frozenset()
    slices: tuple = ()

    def describe(self) -> str:
        return ", ".join(self.slices)


# What delta-rs says when a table is not there (yet): no log at all, or (S3, a create racing this
# read) a log whose version 0 is not readable yet. Treating the latter as "no table" is safe:
# creating a table is a put-if-absent of version 0 (ensure_table), which then waits for it.
NO_TABLE_YET = ("no log files", "not a delta table", "no table metadata or protocol found")


class CommitConflict(RetryableError):
    """Another writer committed first; re-read the table and decide again."""


class FingerprintMismatch(TerminalError):
    """The table holds this batch with a different file set than the one prepared."""


def schema_from_b64(s: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(s)))


def schema_to_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def normalize_type(t: pa.DataType) -> str:
    """A type name that treats Arrow's large/view variants and UTC spellings alike."""
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_timestamp(t):
        tz = "UTC" if t.tz in ("UTC", "Etc/UTC", "+00:00", "Z") else t.tz
        return f"timestamp[{t.unit},{tz}]"
    if pa.types.is_large_list(t) or pa.types.is_list(t) or pa.types.is_list_view(t):
        return f"list<{normalize_type(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{normalize_type(f.type)}" for f in t) + ">"
    if pa.types.is_map(t):
        return f"map<{normalize_type(t.key_type)},{normalize_type(t.item_type)}>"
    return str(t)


def schema_change(table: pa.Schema | None, staged: pa.Schema, policy: str = "add_columns",
                  where: str = "") -> tuple[list[pa.Field], list[str]]:
    """What committing files of schema ``staged`` to a table of schema ``table`` needs: (the
    columns the batch's commit adds to the table first; the problems that refuse it). Columns
    match by name. ``add_columns``: a column of ``staged`` the table lacks is added, nullable
    (rows already published read null); ``fail``: it is a problem naming it. Always problems: a
    column whose type changes (named with both types), a table column the batch no longer writes.
    """
    if table is None:
        return [], []
    have = {f.name: f for f in table}
    new = [f for f in staged if f.name not in have]
    problems = []
    for f in staged:
        old = have.get(f.name)
        if old is not None and normalize_type(old.type) != normalize_type(f.type):
            problems.append(f"{where}column {f.name!r} is {normalize_type(old.type)} in the table and "
                            f"{normalize_type(f.type)} in this batch: " + (
                                "a widening Delta's typeWidening table feature allows, which delta-rs (the "
                                "commit engine) cannot apply: cast the column back to "
                                f"{normalize_type(old.type)} in the transform, or publish it under a new name"
                                if is_widening(old.type, f.type) else
                                "a column's type is never changed (Delta keeps it; add a column of the new type "
                                "under a new name instead)"))
    gone = [n for n in have if n not in {f.name for f in staged}]
    if gone:
        problems.append(f"{where}the table's column(s) {', '.join(gone)} are not in this batch's schema: removing a "
                        f"column is not supported (keep it in the pipeline's schema)")
    if new and policy != "add_columns":
        problems.append(f"{where}new column(s) {', '.join(f.name for f in new)} are not in the table and "
                        f"schema_evolution is {policy!r}: set schema_evolution: add_columns in the pipeline YAML "
                        f"to add them with the next batch (rows already published read null)")
    return ([pa.field(f.name, f.type, nullable=True) for f in new] if not problems else []), problems


def is_widening(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether ``old`` -> ``new`` is a type change of the Delta protocol's typeWidening feature
    (integers to wider integers or to double, float to double, date to timestamp_ntz, decimals
    to decimals with room for every value)."""
    ints = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
    if old in ints and new in ints:
        return ints.index(new) > ints.index(old)
    if new == pa.float64() and (old in ints[:3] or old == pa.float32()):
        return True
    if old == pa.date32() and pa.types.is_timestamp(new) and new.tz is None:
        return True
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale and new != old
    return False


def published_schema(staged: pa.Schema) -> pa.Schema:
    """The table columns of a staged schema: without a merge's ``_eo_delete`` flag."""
    return pa.schema([f for f in staged if f.name != DELETE_COL])


def schema_signature(schema: pa.Schema, drop: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    return [(f.name, normalize_type(f.type)) for f in schema if f.name not in drop]


class Participant(Protocol):
    """One table of a batch's commit (the sink, the quarantine; later a merge target, a state
    table). The protocol needs only this of it; ``DeltaParticipant`` is the Delta Lake one."""

    name: str
    uri: str
    storage_options: dict | None  # how a reader opens the table (S3: endpoint, region, credentials; None: local)
    reads_from: str | None  # the participant whose staged files its commit takes (None: its own)
    keeps_staged_files: bool  # False: its commit reads them (merge), so they can go once every table holds the batch

    def exists(self) -> bool: ...
    def committed_version(self, app_id: str) -> int: ...
    def find_batch_commit(self, app_id: str, batch_id: int) -> tuple[int, dict] | None: ...
    def find_commit(self, key: str, value: str, limit: int | None = None) -> int | None: ...
    def commit(self, app_id: str, batch_id: int, adds: list[dict], schema: pa.Schema, partition_by: list[str],
               metadata: dict, expected_prev: int | None = None, replace: Replace | None = None) -> int: ...
    def restore(self, version: int, metadata: dict, mark: str) -> int: ...
    def restored(self, mark: str) -> bool: ...
    def missing_files_at(self, version: int, fs) -> list[str]: ...
    def live_files(self) -> set[str]: ...
    def rewritten_text(self, replace: Replace, missing: AbstractSet[str], app_id: str) -> str: ...


class DeltaParticipant:
    """A table whose batches are the stage job's files, added as they are (append; interval
    mode: replacing its slices' files)."""

    reads_from: str | None = None  # whose staged files its commit takes (None: its own)
    keeps_staged_files = True  # its staged files become table files: never swept once PREPARED

    def __init__(self, name: str, table_uri: str, storage_options: dict | None = None):
        from . import s3conf

        self.name = name
        # S3 tables: delta-rs wants s3:// and the endpoint/credentials as storage options
        self.uri = s3conf.table_uri(table_uri)
        self.storage_options = storage_options or s3conf.delta_storage_options(table_uri)

    def _table(self):
        from deltalake import DeltaTable

        try:
            return DeltaTable(self.uri, storage_options=self.storage_options)
        except Exception as e:  # TableNotFoundError differs between versions
            if type(e).__name__ == "TableNotFoundError" or any(s in str(e).lower() for s in NO_TABLE_YET):
                return None
            raise

    def exists(self) -> bool:
        return self._table() is not None

    def committed_version(self, app_id: str) -> int:
        """The last batch of ``app_id`` this table holds (0 when none or no table)."""
        dt = self._table()
        if dt is None:
            return 0
        return dt.transaction_version(app_id) or 0

    def table_schema(self) -> pa.Schema | None:
        dt = self._table()
        if dt is None:
            return None
        return pa.schema(dt.schema().to_arrow())

    def partition_columns(self) -> list[str] | None:
        dt = self._table()
        return None if dt is None else list(dt.metadata().partition_columns)

    def find_batch_commit(self, app_id: str, batch_id: int) -> tuple[int, dict] | None:
        """(version, commitInfo) of the commit that carried this batch, newest first."""
        dt = self._table()
        if dt is None:
            return None
        for limit in (20, None):
            for h in dt.history(limit):
                if h.get("eo.pipeline") == app_id and str(h.get("eo.batchId")) == str(batch_id):
                    return int(h["version"]), h
            if limit is not None and dt.version() < limit:
                break
        return None

    def ensure_table(self, schema: pa.Schema, partition_by: list[str]):
        """The table, created (version 0, nothing else) when there is none yet; returns its handle.

        Creating is a put-if-absent of version 0: delta-rs must not retry a create that lost the
        race as a later version (its default), which would commit a second CREATE TABLE, a new
        table id, on top of the winner's, maybe after a batch (a streaming reader of the table
        then stops on the changed id). The loser re-reads the winner's table instead.
        """
        from deltalake import DeltaTable
        from deltalake.transaction import CommitProperties

        dt = self._table()
        if dt is not None:
            return dt
        log.info("%s: creating Delta table %s (partitioned by %s)", self.name, self.uri, partition_by or "nothing")
        error: Exception | None = None
        try:
            DeltaTable.create(self.uri, schema=schema, mode="ignore", partition_by=partition_by or None,
                              storage_options=self.storage_options,
                              commit_properties=CommitProperties(max_commit_retries=0))
        except Exception as e:  # noqa: BLE001 - another committer created it (checked below)
            error = e
        # whoever won, the table must now be there; a store may list a new entry a moment late
        deadline = time.monotonic() + TABLE_VISIBLE_S
        while True:
            dt = self._table()
            if dt is not None:
                return dt
            if time.monotonic() > deadline:
                if error is not None:
                    raise error
                raise RuntimeError(f"{self.name}: created Delta table {self.uri} but it is not listed "
                                   f"after {TABLE_VISIBLE_S:.0f} s")
            time.sleep(0.2)

    def commit(self, app_id: str, batch_id: int, adds: list[dict], schema: pa.Schema,
               partition_by: list[str], metadata: dict, expected_prev: int | None = None,
               replace: Replace | None = None) -> int:
        """One Delta transaction: the files, txn(app_id, batch_id), and ``metadata``.

        ``expected_prev`` is the batch the table must hold now (default ``batch_id - 1``).
        ``replace`` (interval mode): the live files it matches are removed in the same
        transaction, so the batch replaces its interval slices of the table.
        Returns the new table version. Raises CommitConflict when another writer won.
        """
        from deltalake.transaction import AddAction

        dt = self._begin(app_id, batch_id, schema, partition_by, expected_prev)
        now = int(time.time() * 1000)
        actions = [AddAction(a["path"], int(a["size"]), a.get("partition_values") or {},
                             int(a.get("modification_time") or now), True, a.get("stats") or "{}")
                   for a in adds]
        removes = self._removes(dt, replace, now, app_id) if replace else []
        if replace and removes:
            log.info("%s: batch %s replaces %d file(s) of %s", self.name, batch_id, len(removes), replace.describe())
            metadata = {**metadata, "eo.replaces": json.dumps(list(replace.slices))}
        actions += removes
        with self._conflicts():
            dt.create_write_transaction(actions, mode="append", schema=dt.schema(), partition_by=partition_by or None,
                                        commit_properties=self._properties(app_id, batch_id, metadata))
        found = self.find_batch_commit(app_id, batch_id)
        if replace and removes and found and found[0] > dt.version() + 1:
            self._check_removed_alone(dt, found[0], {r.path for r in removes}, replace, batch_id)
        return found[0] if found else -1

    def _check_removed_alone(self, dt, version: int, removed: set[str], replace: Replace, batch_id: int) -> None:
        """After a slice-replacing commit at ``version`` built on ``dt``'s snapshot: whether a
        commit in between removed some of the same files. delta-rs lets that pass when the other
        commit removed them with ``dataChange=false`` (another tool's OPTIMIZE: the pipeline's own
        compaction restates its txn and cannot), and the interval's old rows then live on in that
        commit's rewritten files. It cannot be undone here: said as loudly as possible."""
        from deltalake import DeltaTable

        before = DeltaTable(self.uri, version=version - 1, storage_options=self.storage_options)
        gone = removed - set(pa.table(before.get_add_actions(flatten=False)).column("path").to_pylist())
        if gone:
            log.error("%s: batch %s replaced %s in version %s, but a commit between version %s and it (another "
                      "writer's OPTIMIZE?) had already rewritten %d of those files (e.g. %s): the interval's old rows "
                      "may now be published twice, in that commit's files. Inspect the table's history; repair with "
                      "`make rewind` to before the compaction's version, and never compact interval-mode tables "
                      "with another tool (README, Maintenance)", self.name, batch_id, replace.describe(), version,
                      dt.version(), len(gone), min(gone))

    def _begin(self, app_id: str, batch_id: int, schema: pa.Schema, partition_by: list[str],
               expected_prev: int | None):
        """The table (created, new columns added) that batch ``batch_id``'s transaction is built
        on, after checking that it holds ``expected_prev`` (default ``batch_id - 1``)."""
        dt = self.ensure_table(schema, partition_by)
        dt = self._add_columns(dt, schema)
        # Re-read the txn in the very snapshot this transaction is built on: a writer that
        # committed before it is seen here, one that commits after it makes delta-rs fail
        # the commit (same appId). A check made before ensure_table could be stale.
        current = dt.transaction_version(app_id) or 0
        expected = batch_id - 1 if expected_prev is None else expected_prev
        if current != expected:
            raise CommitConflict(f"{self.name}: {self.uri} holds batch {current} of {app_id!r} at version "
                                 f"{dt.version()}; batch {batch_id} cannot be committed on top of it now")
        return dt

    @staticmethod
    def _properties(app_id: str, batch_id: int, metadata: dict):
        """The commit's txn(app_id, batch_id) and commitInfo: what makes a batch's commit one."""
        from deltalake.transaction import CommitProperties, Transaction

        return CommitProperties(custom_metadata=metadata, app_transactions=[Transaction(app_id, batch_id)])

    @contextlib.contextmanager
    def _conflicts(self):
        """Another writer's commit won: CommitConflict (the caller re-reads the table)."""
        from deltalake.exceptions import CommitFailedError, DeltaError

        try:
            yield
        except CommitFailedError as e:
            raise CommitConflict(f"{self.name}: concurrent commit on {self.uri}: {e}") from e
        except DeltaError as e:
            # On S3 the loser of a race for a log version can also see the winner's entry as not
            # yet listed ("Invalid table version", "snapshot version N is not available"): the
            # caller re-reads the table, like after CommitFailedError.
            if "version" not in str(e).lower():
                raise
            raise CommitConflict(f"{self.name}: concurrent commit on {self.uri}: {e}") from e

    def _add_columns(self, dt, schema: pa.Schema):
        """The columns of ``schema`` the table lacks (``schema_change``, which verify checked),
        added as nullable columns just before the batch's commit; a no-op when there are none, so
        a retried commit after a crash in between adds nothing twice. Returns the table to commit on."""
        from deltalake.schema import Field

        new, _ = schema_change(pa.schema(dt.schema().to_arrow()), schema)
        if not new:
            return dt
        log.info("%s: adding column(s) %s to %s", self.name, ", ".join(f"{f.name} {f.type}" for f in new), self.uri)
        try:
            dt.alter.add_columns([Field.from_arrow(f) for f in new])
        except Exception as e:  # another committer added them first: fine when they are there now
            fresh = self._table()
            if fresh is None or not {f.name for f in new} <= {f.name for f in pa.schema(fresh.schema().to_arrow())}:
                raise CommitConflict(f"{self.name}: adding columns to {self.uri} failed: {e}") from e
            return fresh
        return self._table()

    def _removes(self, dt, replace: Replace, now: int, app_id: str) -> list:
        """RemoveActions for ``replace``'s files in ``dt``'s snapshot (the one the commit is built
        on). Raises SliceRewritten when some of them are not there any more."""
        from deltalake.transaction import RemoveAction

        t = pa.table(dt.get_add_actions(flatten=False))
        paths = t.column("path").to_pylist()
        sizes = t.column("size_bytes").to_pylist()
        pvals = t.column("partition").to_pylist() if "partition" in t.column_names else [None] * len(paths)
        missing = replace.paths - set(paths)
        if missing:
            raise SliceRewritten(self.rewritten_text(replace, missing, app_id, dt))
        out = []
        for path, size, pv in zip(paths, sizes, pvals):
            if path in replace.paths:
                pv = {k: partition_text(v) for k, v in (pv or {}).items()}
                out.append(RemoveAction(path, True, now, int(size), pv))
        return out

    def rewritten_text(self, replace: Replace, missing: AbstractSet[str], app_id: str, dt=None) -> str:
        """What happened to a slice's files, for SliceRewritten: how many are gone, and the
        table's recent commits by other writers (the rewrite is among them)."""
        dt = dt or self._table()
        foreign = [f"version {h['version']} {h.get('operation', '?')}" for h in (dt.history(50) if dt else [])
                   if h.get("eo.pipeline") != app_id and h.get("operation") != "CREATE TABLE"]
        return (f"the {self.name} table {self.uri} no longer holds {len(missing)} of the {len(replace.paths)} "
                f"file(s) {replace.describe()} was last published in (e.g. {min(missing)}): another "
                f"writer rewrote them (its recent commits: {', '.join(foreign[:5]) or 'none left in the history'})")

    def missing_files_at(self, version: int, fs) -> list[str]:
        """Files of table version ``version`` that are no longer on storage (VACUUM removed them,
        e.g. after a compaction): RESTORE to that version would fail on them."""
        from deltalake import DeltaTable

        from .storage import join

        dt = DeltaTable(self.uri, version=version, storage_options=self.storage_options)
        root = self.uri if not self.uri.startswith("s3://") else "s3a://" + self.uri[len("s3://"):]
        paths = pa.table(dt.get_add_actions(flatten=False)).column("path").to_pylist()
        return [f for f in paths if fs.stat(join(root, f)) is None]

    def restore(self, version: int, metadata: dict, mark: str) -> int:
        """Delta RESTORE to ``version`` (keeps txn ids: see Protocol.rewind), carrying
        ``txn(mark, 1)``: the table's state says the restore was done (``restored``) for as long
        as the table lives, through checkpoints and log cleanup. Returns the new version."""
        from deltalake.transaction import CommitProperties, Transaction

        dt = self._table()
        dt.restore(version, commit_properties=CommitProperties(custom_metadata=metadata,
                                                               app_transactions=[Transaction(mark, 1)]))
        return self._table().version()

    def restored(self, mark: str) -> bool:
        """Whether a ``restore`` carrying ``mark`` is in the table."""
        dt = self._table()
        return dt is not None and (dt.transaction_version(mark) or 0) >= 1

    def find_commit(self, key: str, value: str, limit: int | None = None) -> int | None:
        """Version of the newest commit (of the last ``limit``) whose commitInfo has ``key == value``."""
        dt = self._table()
        if dt is None:
            return None
        for h in dt.history(limit):
            if str(h.get(key)) == value:
                return int(h["version"])
        return None

    def live_files(self) -> set[str]:
        dt = self._table()
        if dt is None:
            return set()
        return set(pa.table(dt.get_add_actions(flatten=False)).column("path").to_pylist())

