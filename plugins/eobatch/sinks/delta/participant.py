"""A Delta table as a participant of the two-phase commit, through delta-rs.

It answers "what is committed" (the txn version of the pipeline's appId) and "commit these
already-written files with txn(appId, batch)" as one metadata-only Delta transaction.
delta-rs checks none of our invariants (it accepts missing files, a wrong schema, a txn
version lower than the stored one): every such check is made here or in ``verify``.
A concurrent commit with the same appId fails in delta-rs with CommitFailedError (its
conflict checker sees both transactions touch the same txn); the caller then re-reads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet

import pyarrow as pa

from ...core.formats import StagedFile, partition_text
from ...core.table_files import delta_add
from ...errors import SliceRewritten
from ...storage import s3conf
from ...storage.fs import join
from ..base import CommitConflict, Replace
from .compaction import current_slice_files
from .schema import schema_change

log = logging.getLogger(__name__)
# how long a just-created table may take to be listed by the store before creating it failed
TABLE_VISIBLE_S = 10.0


# What delta-rs says when a table is not there (yet): no log at all, or (S3, a create racing this
# read) a log whose version 0 is not readable yet. Treating the latter as "no table" is safe:
# creating a table is a put-if-absent of version 0 (ensure_table), which then waits for it.
NO_TABLE_YET = ("no log files", "not a delta table", "no table metadata or protocol found")


class DeltaParticipant:
    """A table whose batches are the stage job's files, added as they are (append; interval
    mode: replacing its slices' files)."""

    reads_from: str | None = None  # whose staged files its commit takes (None: its own)
    table_properties: dict[str, str] | None = None  # set when the table is created, and on a table that lacks them
    keeps_staged_files = True  # its staged files become table files: never swept once PREPARED

    def __init__(self, name: str, table_uri: str, storage_options: dict | None = None):
        self.name = name
        # S3 tables: delta-rs wants s3:// and the endpoint/credentials as storage options
        self.uri = s3conf.table_uri(table_uri)
        self.storage_options = storage_options or s3conf.delta_storage_options(table_uri)

    def _table(self):
        # deltalake: the commit side only, never the Spark job
        from deltalake import DeltaTable

        try:
            return DeltaTable(self.uri, storage_options=self.storage_options)
        except Exception as e:  # TableNotFoundError differs between versions
            if type(e).__name__ == "TableNotFoundError" or any(s in str(e).lower() for s in NO_TABLE_YET):
                return None
            raise

    def exists(self) -> bool:
        return self._table() is not None

    def committed_batch(self, app_id: str) -> int:
        """The last batch of ``app_id`` this table holds (0 when none or no table)."""
        dt = self._table()
        if dt is None:
            return 0
        return dt.transaction_version(app_id) or 0

    def schema_for(self, staged: pa.Schema) -> pa.Schema:
        """The table's schema, from the staged files' schema (its own: they are added as they are)."""
        return staged

    def accepts(self, staged: pa.Schema, partition_by: list[str], evolution: str, where: str = "") -> list[str]:
        """The table, when it exists, must take files of ``staged``: as it is, or with the new
        columns the commit adds (``schema_change`` under ``evolution``), and their partitioning."""
        tschema = self.table_schema()
        if tschema is None:
            return []
        problems = schema_change(tschema, self.schema_for(staged), evolution, where)[1]
        tparts = self.partition_columns()
        if tparts is not None and list(tparts) != partition_by:
            problems.append(f"{self.name}: partition columns {partition_by} differ from the table's {list(tparts)}")
        return problems

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
        # deltalake: the commit side only, never the Spark job
        from deltalake import DeltaTable
        from deltalake.transaction import CommitProperties

        dt = self._table()
        if dt is not None:
            return self._with_properties(dt)
        log.info("%s: creating Delta table %s (partitioned by %s)", self.name, self.uri, partition_by or "nothing")
        error: Exception | None = None
        try:
            DeltaTable.create(self.uri, schema=schema, mode="ignore", partition_by=partition_by or None,
                              storage_options=self.storage_options, configuration=self.table_properties,
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

    def _with_properties(self, dt):
        """``dt`` with ``table_properties`` set (a table created before the YAML asked for them);
        setting them again is harmless, so a commit retried after a crash in between is fine."""
        want = self.table_properties or {}
        have = dt.metadata().configuration or {}
        missing = {k: v for k, v in want.items() if have.get(k) != v}
        if not missing:
            return dt
        log.info("%s: setting table properties %s on %s", self.name, missing, self.uri)
        dt.alter.set_table_properties(missing, raise_if_not_exists=False)
        return self._table()

    def commit(self, app_id: str, batch_id: int, adds: list[StagedFile], schema: pa.Schema,
               partition_by: list[str], metadata: dict, expected_prev: int | None = None,
               replace: Replace | None = None) -> int:
        """One Delta transaction: the files, txn(app_id, batch_id), and ``metadata``.

        ``expected_prev`` is the batch the table must hold now (default ``batch_id - 1``).
        ``replace`` (interval mode): the live files it matches are removed in the same
        transaction, so the batch replaces its interval slices of the table.
        Returns the new table version. Raises CommitConflict when another writer won.
        """
        dt = self._begin(app_id, batch_id, schema, partition_by, expected_prev)
        now = int(time.time() * 1000)
        actions = [delta_add(f, data_change=True, now=now) for f in adds]
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
        # deltalake: the commit side only, never the Spark job
        from deltalake import DeltaTable

        before = DeltaTable(self.uri, version=version - 1, storage_options=self.storage_options)
        gone = removed - set(pa.table(before.get_add_actions(flatten=False)).column("path").to_pylist())
        if gone:
            log.error("%s: batch %s replaced %s in version %s, but a commit between version %s and it (another "
                      "writer's OPTIMIZE?) had already rewritten %d of those files (e.g. %s): the interval's old rows "
                      "may now be published twice, in that commit's files. Inspect the table's history; repair with "
                      "`eobatch rewind` (`make rewind` in a checkout) to before the compaction's version, and never compact interval-mode tables "
                      "with another tool (documentation: Operations, Maintenance)", self.name, batch_id, replace.describe(), version,
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
        # deltalake: the commit side only, never the Spark job
        from deltalake.transaction import CommitProperties, Transaction

        return CommitProperties(custom_metadata=metadata, app_transactions=[Transaction(app_id, batch_id)])

    @contextlib.contextmanager
    def _conflicts(self):
        """Another writer's commit won: CommitConflict (the caller re-reads the table)."""
        # deltalake: the commit side only, never the Spark job
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
        # deltalake: the commit side only, never the Spark job
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
        # deltalake: the commit side only, never the Spark job
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
        # deltalake: the commit side only, never the Spark job
        from deltalake import DeltaTable

        dt = DeltaTable(self.uri, version=version, storage_options=self.storage_options)
        root = self.uri if not self.uri.startswith("s3://") else "s3a://" + self.uri[len("s3://"):]
        paths = pa.table(dt.get_add_actions(flatten=False)).column("path").to_pylist()
        return [f for f in paths if fs.stat(join(root, f)) is None]

    def restore_point(self, app_id: str, batch_id: int) -> int | None:
        """The table version just before the commit of batch ``batch_id`` (None: its commit is no
        longer in the log's history)."""
        found = self.find_batch_commit(app_id, batch_id)
        return None if found is None else found[0] - 1

    def roll_back(self, version: int, metadata: dict, mark: str) -> int:
        """Delta RESTORE to ``version`` (keeps txn ids: see Protocol.rewind), carrying
        ``txn(mark, 1)``: the table's state says the restore was done (``rolled_back``) for as long
        as the table lives, through checkpoints and log cleanup. Returns the new version."""
        # deltalake: the commit side only, never the Spark job
        from deltalake.transaction import CommitProperties, Transaction

        dt = self._table()
        dt.restore(version, commit_properties=CommitProperties(custom_metadata=metadata,
                                                               app_transactions=[Transaction(mark, 1)]))
        return self._table().version()

    def rolled_back(self, mark: str) -> bool:
        """Whether a ``roll_back`` carrying ``mark`` is in the table."""
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


    def slice_files(self, proto, batch_id: int, slice_: str, published: set[str],
                    live: Callable[[], set[str]]) -> set[str]:
        """Interval mode: the files holding ``slice_`` of ``batch_id`` now, after the compactions
        of it (``compaction.current_slice_files``)."""
        return current_slice_files(proto, batch_id, self.name, slice_, published, live)

    def dataset(self):
        """The table's current rows as a pyarrow dataset, or None when there is no table yet."""
        dt = self._table()
        return None if dt is None else dt.to_pyarrow_dataset()
