"""The participants of a merge sink (``sink.mode: merge``, ``config.MergeConfig``).

An accumulating merge sink (``accumulate``) folds each batch's per-key partials into the key's
row (``MergeParticipant._accumulate``) in the same commit as the batch's txn: the running state
is the published table itself, so state and output can never be a batch apart. What follows is
about the upsert.

A merge batch's staged rows are the latest record of each key of the batch
(``job.py``), flagged ``_eo_delete`` when they delete their key. They are not
added to the table: the commit applies them with one Delta MERGE, which carries
``txn(appId, batch)`` and the batch's commit info like every other commit, so the protocol
does not change: a retried commit finds the txn and checks the fingerprint, a crash between the
MERGE and the ledger is completed by ``recover``. The files a MERGE writes keep no float or
decimal statistics (delta-rs would write them wrong: ``eobatch.core.table_files``), so readers never skip
them for such a filter; maintenance rewrites the small ones with exact stats.

A record changes its key's row only when its ``sequence_by`` is higher than the row's, so an
out-of-order update never overwrites a newer one. A delete removes the row, and with it the
sequence that would stop an older record of the key arriving later: that is what the
**tombstones** table keeps (``<sink>/_eo_tombstones``: each deleted key with the sequence that
deleted it). It is the batch's third participant, committed after the sink from the same staged
rows, so the sink's MERGE of batch N reads the tombstones as of batch N-1, in every attempt and
every retry: the commit is a function of the PREPARED rows and the tables' state at N-1.
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa
import pyarrow.compute as pc

from ...core.formats import SINK, SLICE_COL, StagedFile, slice_of
from ...core.table_files import delta_rs_writer_properties
from ...errors import LedgerMismatch, ProtocolError
from ...storage.fs import Storage
from ..base import CommitConflict, Replace
from ..delta import DeltaParticipant
from .config import MergeConfig
from .job import DELETE_COL
from .staged import published_schema, read_staged

log = logging.getLogger(__name__)
CDF = "delta.enableChangeDataFeed"
TOMBSTONES, PARTIALS = "tombstones", "partials"  # its own tables (formats.Layout.table: T/_eo_<name>)
GONE_COL = "_eo_gone"  # a partials row of a key a re-run of its slice no longer holds
CONFLICT_RETRIES = 5  # a MERGE that lost to another writer's commit is built again on the new snapshot


def q(column: str) -> str:
    """A column name for delta-rs's SQL (DataFusion folds unquoted names to lower case)."""
    return "`" + column.replace("`", "``") + "`"


# how a key's row and a batch's partial fold (``accumulate``): nulls are ignored, as Spark's
# aggregates ignore them, so a fold over batches equals the aggregate over all their records
FOLD = {
    "sum": "CASE WHEN {t} IS NULL THEN {s} WHEN {s} IS NULL THEN {t} ELSE {t} + {s} END",
    "min": "CASE WHEN {t} IS NULL OR {s} < {t} THEN {s} ELSE {t} END",
    "max": "CASE WHEN {t} IS NULL OR {s} > {t} THEN {s} ELSE {t} END",
}


def _merger(dt, source: pa.Table, keys: tuple[str, ...], props):
    """A MERGE of ``source`` into ``dt`` by ``keys``; the files it rewrites keep no statistics
    delta-rs would get wrong (``table_files.delta_rs_writer_properties``)."""
    return dt.merge(source, predicate=" AND ".join(f"t.{q(k)} = s.{q(k)}" for k in keys),
                    source_alias="s", target_alias="t", commit_properties=props,
                    writer_properties=delta_rs_writer_properties(pa.schema(dt.schema().to_arrow())))


def rows_of_keys(dt, types: pa.Schema, keys: tuple[str, ...], of: pa.Table) -> pa.Table:
    """The rows of table ``dt`` (columns ``types``, cast to them) whose ``keys`` are those of a row
    of ``of``. Scanned batch by batch: a filter pushed into the scan would compare the view
    types delta-rs writes with the log's types, which pyarrow refuses."""
    wanted = {k: pc.unique(of[k]) for k in keys}
    found = []
    for rb in dt.to_pyarrow_dataset().to_batches(columns=types.names):
        t = pa.Table.from_batches([rb]).cast(types)
        mask = None
        for k in keys:
            hit = pc.is_in(t[k], value_set=wanted[k])
            mask = hit if mask is None else pc.and_(mask, hit)
        found.append(t.filter(mask))
    return pa.concat_tables(found) if found else types.empty_table()


class _MergeCommit(DeltaParticipant):
    """A participant whose batch is applied with a MERGE of the staged rows (never added)."""

    keeps_staged_files = False

    def __init__(self, name: str, table_uri: str, storage_options: dict | None, merge: MergeConfig,
                 staged_fs: Storage, staged_root: str):
        super().__init__(name, table_uri, storage_options)
        self.merge = merge
        self.seq = merge.sequence_by or ""  # an upsert's sequence column (the accumulating sink has none)
        self.staged_fs, self.staged_root = staged_fs, staged_root

    def commit(self, app_id: str, batch_id: int, adds: list[StagedFile], schema: pa.Schema,
               partition_by: list[str], metadata: dict, expected_prev: int | None = None,
               replace: Replace | None = None) -> int:
        """The batch's MERGE, with txn(app_id, batch_id) and ``metadata``; retried on a new
        snapshot when another writer committed first (a PREPARED batch is never given up). A
        commit that finds the txn moved raises CommitConflict at once: the protocol decides."""
        if replace is not None and replace.paths:
            raise ProtocolError(f"{self.name}: a merge commit replaces no files by name (an interval re-run "
                                f"re-applies its rows, or replaces its partials by slice; the protocol passes it "
                                f"no files to remove)")
        for attempt in range(CONFLICT_RETRIES + 1):
            dt = self._begin(app_id, batch_id, self.schema_for(schema), self.partitioning(partition_by),
                             expected_prev)
            try:
                with self._conflicts():
                    metrics = self._apply(dt, app_id, batch_id, adds, schema, metadata, replace or Replace())
                break
            except CommitConflict as e:
                if attempt == CONFLICT_RETRIES:
                    raise
                log.info("%s; merging batch %s again on the new snapshot", e, batch_id)
                time.sleep(min(0.2 * 2 ** attempt, 5.0))
        fresh = self._table()
        if (fresh.transaction_version(app_id) or 0) < batch_id:
            # the MERGE changed nothing, and delta-rs then writes no commit: the batch's txn
            # still needs one (an empty one), on the snapshot the MERGE was built on
            with self._conflicts():
                dt.create_write_transaction([], mode="append", schema=dt.schema(),
                                            partition_by=list(dt.metadata().partition_columns) or None,
                                            commit_properties=self._properties(app_id, batch_id, metadata))
        log.info("%s: batch %s merged: %s", self.name, batch_id,
                 ", ".join(f"{k.removeprefix('num_target_rows_')} {v}" for k, v in metrics.items()
                           if k.startswith("num_target_rows_")))
        found = self.find_batch_commit(app_id, batch_id)
        return found[0] if found else -1

    @staticmethod
    def _companion(other: DeltaParticipant, app_id: str, expected: int, relation: str):
        """The table of ``other``, a participant this one's commit reads, after checking that it
        holds batch ``expected`` (LedgerMismatch otherwise: another writer changed one of them)."""
        dt = other._table()
        at = (dt.transaction_version(app_id) or 0) if dt is not None else 0
        if at != expected:
            raise LedgerMismatch(f"the {other.name} table {other.uri} holds batch {at} of {app_id!r}; {relation}: "
                                 f"another writer changed one of them. Nothing was merged")
        return dt

    def schema_for(self, staged: pa.Schema) -> pa.Schema:
        """The table's schema, from the staged rows' schema (by default their published columns)."""
        return published_schema(staged)

    def slice_files(self, proto, batch_id: int, slice_: str, published: set[str], live) -> set[str]:
        return published  # its batches are rows, never compacted by slice

    def partitioning(self, staged: list[str]) -> list[str]:
        """The table's partition columns, from the staged rows' ones."""
        return staged

    def _apply(self, dt, app_id: str, batch_id: int, adds: list[StagedFile], schema: pa.Schema, metadata: dict,
               replace: Replace) -> dict:
        """The batch's Delta commit on ``dt`` (with ``self._properties``); returns its metrics.
        ``replace.slices``: interval mode, the slices this batch publishes."""
        raise NotImplementedError


class MergeParticipant(_MergeCommit):
    """The sink of a merge pipeline: an upsert of the latest record of each key."""

    def __init__(self, name: str, table_uri: str, storage_options: dict | None, merge: MergeConfig,
                 staged_fs: Storage, staged_root: str, tombstones: TombstoneParticipant | None):
        super().__init__(name, table_uri, storage_options, merge, staged_fs, staged_root)
        self.tombstones = tombstones

    def _apply(self, dt, app_id: str, batch_id: int, adds: list[StagedFile], schema: pa.Schema, metadata: dict,
               replace: Replace) -> dict:
        m = self.merge
        if not m.upsert:
            return self._accumulate(dt, app_id, batch_id, adds, schema, metadata)
        source = self._after_tombstones(read_staged(self.staged_fs, self.staged_root, adds, schema), app_id,
                                        dt.transaction_version(app_id) or 0)
        cols = [f.name for f in published_schema(schema)]
        values = {q(c): f"s.{q(c)}" for c in cols}
        newer = f"s.{q(self.seq)} > t.{q(self.seq)}"
        return (_merger(dt, source, m.keys, self._properties(app_id, batch_id, metadata))
                .when_matched_update(updates=values, predicate=f"NOT s.{q(DELETE_COL)} AND {newer}")
                .when_matched_delete(predicate=f"s.{q(DELETE_COL)} AND {newer}")
                .when_not_matched_insert(updates=values, predicate=f"NOT s.{q(DELETE_COL)}")
                .execute())

    def _accumulate(self, dt, app_id: str, batch_id: int, adds: list[StagedFile], schema: pa.Schema, metadata: dict) -> dict:
        """Running aggregates: each staged row (one per key, the batch's partials) folded into its
        key's row, or inserted. Exactly once because the fold and the txn are one commit."""
        source = read_staged(self.staged_fs, self.staged_root, adds, schema)
        folded = {q(c): FOLD[fn].format(t=f"t.{q(c)}", s=f"s.{q(c)}") for c, fn in self.merge.accumulate}
        return (_merger(dt, source, self.merge.keys, self._properties(app_id, batch_id, metadata))
                .when_matched_update(updates=folded)
                .when_not_matched_insert(updates={q(c): f"s.{q(c)}" for c in source.column_names})
                .execute())

    def _after_tombstones(self, source: pa.Table, app_id: str, held: int) -> pa.Table:
        """``source`` without the records older than a delete of their key in an earlier batch
        (the tombstones as of batch ``held``, which the sink holds: they commit after it)."""
        if self.tombstones is None or source.num_rows == 0:
            return source
        tomb = self._companion(self.tombstones, app_id, held, f"the sink {self.uri} holds batch {held}: they are "
                               f"committed together, sink first")
        if tomb is None:
            return source
        m = self.merge
        seq_col = "_eo_deleted_at"
        cols = [*m.keys, self.seq]
        found = rows_of_keys(tomb, pa.schema([source.schema.field(c) for c in cols]), m.keys, source)
        deleted = found.rename_columns([*m.keys, seq_col])
        if deleted.num_rows == 0:
            return source
        joined = source.join(deleted, keys=list(m.keys), join_type="left outer")
        later = pc.or_kleene(pc.is_null(joined[seq_col]), pc.greater(joined[self.seq], joined[seq_col]))
        kept = joined.filter(pc.fill_null(later, False)).drop_columns([seq_col]).select(source.schema.names)
        if kept.num_rows < source.num_rows:
            log.info("%s: %d record(s) are older than the delete of their key in an earlier batch: not merged",
                     self.name, source.num_rows - kept.num_rows)
        return kept


class TombstoneParticipant(_MergeCommit):
    """The deleted keys of a merge sink and the sequence that deleted each (see the module)."""

    reads_from: str | None = SINK

    def schema_for(self, staged: pa.Schema) -> pa.Schema:
        m = self.merge
        return pa.schema([pa.field(c, staged.field(c).type, nullable=False) for c in (*m.keys, self.seq)])

    def partitioning(self, staged: list[str]) -> list[str]:
        return []

    def _apply(self, dt, app_id: str, batch_id: int, adds: list[StagedFile], schema: pa.Schema, metadata: dict,
               replace: Replace) -> dict:
        m = self.merge
        cols = [*m.keys, self.seq]
        source = read_staged(self.staged_fs, self.staged_root, adds, schema, [*cols, DELETE_COL])
        newer = f"s.{q(self.seq)} > t.{q(self.seq)}"
        return (_merger(dt, source, m.keys, self._properties(app_id, batch_id, metadata))
                .when_matched_update(updates={q(self.seq): f"s.{q(self.seq)}"},
                                     predicate=f"s.{q(DELETE_COL)} AND {newer}")
                .when_matched_delete(predicate=f"NOT s.{q(DELETE_COL)} AND {newer}")
                .when_not_matched_insert(updates={q(c): f"s.{q(c)}" for c in cols}, predicate=f"s.{q(DELETE_COL)}")
                .execute())


# -- running aggregates in interval mode ---------------------------------------------------------
def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _with_nulls(keys: pa.Table, schema: pa.Schema, flags: dict[str, bool]) -> pa.Table:
    """Rows of ``schema``: the columns of ``keys``, each of ``flags`` set to its value, nulls elsewhere."""
    n = keys.num_rows
    cols = [keys[f.name] if f.name in keys.column_names else
            pa.array([flags[f.name]] * n, pa.bool_()) if f.name in flags else pa.nulls(n, f.type)
            for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


class PartialsParticipant(_MergeCommit):
    """Running aggregates in interval mode (``PipelineConfig.interval_partials``): the per-key
    partials of each interval slice (the stage folds the rows of a key within a slice), one row
    per key and slice, named by the slice (``SLICE_COL``). A batch replaces the partials of its
    slices in one commit: an overwrite whose predicate names them by that column, so a
    compaction of the table cannot make it inexact. A key the slice held before and no longer
    holds keeps a row flagged ``GONE_COL`` (no values): the sink's recompute must visit it.
    Committed first: the sink (``RefoldParticipant``) is recomputed from it as of the batch."""

    reads_from: str | None = SINK

    def schema_for(self, staged: pa.Schema) -> pa.Schema:
        return pa.schema([*published_schema(staged), pa.field(SLICE_COL, pa.string(), nullable=False),
                          pa.field(GONE_COL, pa.bool_(), nullable=False)])

    def partitioning(self, staged: list[str]) -> list[str]:
        return [SLICE_COL]

    def _apply(self, dt, app_id: str, batch_id: int, adds: list[StagedFile], schema: pa.Schema, metadata: dict,
               replace: Replace) -> dict:
        # deltalake: the commit side only, never the Spark job
        from deltalake import write_deltalake

        slices = sorted(replace.slices)
        if not slices:
            raise ProtocolError(f"{self.name}: batch {batch_id} names no interval slice: its partials would "
                                f"replace nothing (interval mode passes the batch's slices)")
        table_schema = self.schema_for(schema)
        keys = [*self.merge.keys, SLICE_COL]
        new = self._staged_rows(adds, schema, slices)
        old = dt.to_pyarrow_table(filters=[(SLICE_COL, "in", slices)], columns=[*keys, GONE_COL])
        old = old.cast(pa.schema([table_schema.field(c) for c in old.column_names]))
        gone = (old.filter(pc.invert(old[GONE_COL])).select(keys)
                .join(new.select(keys), keys=keys, join_type="left anti"))
        data = pa.concat_tables([
            new.append_column(pa.field(GONE_COL, pa.bool_(), nullable=False),
                              pa.array([False] * new.num_rows, pa.bool_())).select(table_schema.names)
            .cast(table_schema),
            _with_nulls(gone, table_schema, {GONE_COL: True})])
        write_deltalake(dt, data, mode="overwrite", partition_by=[SLICE_COL],
                        predicate=" OR ".join(f"{q(SLICE_COL)} = {_sql_text(s)}" for s in slices),
                        writer_properties=delta_rs_writer_properties(table_schema),
                        commit_properties=self._properties(app_id, batch_id, metadata))
        return {"num_target_rows_partials": new.num_rows, "num_target_rows_gone": gone.num_rows,
                "num_target_rows_slices": len(slices)}

    def _staged_rows(self, adds: list[StagedFile], schema: pa.Schema, slices: list[str]) -> pa.Table:
        """The staged partials with their slice: the folder of each staged file (a range without
        files, e.g. Kafka offsets, is one slice: the batch's)."""
        out = []
        for f in adds:
            name = slice_of(f.path) or (slices[0] if len(slices) == 1 else None)
            if name not in slices:
                raise ProtocolError(f"{self.name}: staged file {f.path} is in no slice of this batch "
                                    f"({', '.join(slices)})")
            t = read_staged(self.staged_fs, self.staged_root, [f], published_schema(schema))
            out.append(t.append_column(pa.field(SLICE_COL, pa.string(), nullable=False),
                                       pa.array([name] * t.num_rows, pa.string())))
        if not out:
            return pa.schema([*published_schema(schema), pa.field(SLICE_COL, pa.string(), nullable=False)]).empty_table()
        return pa.concat_tables(out)


class RefoldParticipant(_MergeCommit):
    """The sink of running aggregates in interval mode: a key's row is the fold (``accumulate``)
    of its partials over every interval. Each batch recomputes it, for every key its slices hold
    or held (a ``GONE_COL`` row), from the partials table as of this batch (committed just
    before): a key left with no partials is deleted. The sink is a function of the partials, so
    a retried or recovered commit, or a re-run of an interval, folds nothing twice."""

    def __init__(self, name: str, table_uri: str, storage_options: dict | None, merge: MergeConfig,
                 staged_fs: Storage, staged_root: str, partials: PartialsParticipant):
        super().__init__(name, table_uri, storage_options, merge, staged_fs, staged_root)
        self.partials = partials

    def _apply(self, dt, app_id: str, batch_id: int, adds: list[StagedFile], schema: pa.Schema, metadata: dict,
               replace: Replace) -> dict:
        source = self._refolded(app_id, batch_id, schema, sorted(replace.slices))
        cols = {q(c): f"s.{q(c)}" for c in published_schema(schema).names}
        return (_merger(dt, source, self.merge.keys, self._properties(app_id, batch_id, metadata))
                .when_matched_delete(predicate=f"s.{q(DELETE_COL)}")
                .when_matched_update(updates=cols, predicate=f"NOT s.{q(DELETE_COL)}")
                .when_not_matched_insert(updates=cols, predicate=f"NOT s.{q(DELETE_COL)}")
                .execute())

    def _refolded(self, app_id: str, batch_id: int, schema: pa.Schema, slices: list[str]) -> pa.Table:
        """The new row of every key of ``slices`` in the partials (flagged ``DELETE_COL`` when it
        has no partials left)."""
        p = self._companion(self.partials, app_id, batch_id, f"the sink {self.uri} is recomputed from its batch "
                            f"{batch_id} (committed just before it)")
        m = self.merge
        keys = list(m.keys)
        pschema = self.partials.schema_for(schema)
        out = pa.schema([*published_schema(schema), pa.field(DELETE_COL, pa.bool_(), nullable=False)])
        touched = p.to_pyarrow_table(filters=[(SLICE_COL, "in", slices)], columns=keys)
        touched = touched.cast(pa.schema([pschema.field(k) for k in keys])).group_by(keys).aggregate([])
        if touched.num_rows == 0:
            return out.empty_table()
        cols = [c for c, _ in m.accumulate]
        rows = rows_of_keys(p, pa.schema([pschema.field(c) for c in [*keys, *cols, GONE_COL]]), m.keys, touched)
        rows = rows.filter(pc.invert(rows[GONE_COL]))
        folded = rows.group_by(keys).aggregate([(c, fn) for c, fn in m.accumulate])
        folded = folded.rename_columns([next((c for c, fn in m.accumulate if n == f"{c}_{fn}"), n)
                                        for n in folded.column_names])
        left = touched.join(folded.select(keys), keys=keys, join_type="left anti")
        live = folded.append_column(pa.field(DELETE_COL, pa.bool_(), nullable=False),
                                    pa.array([False] * folded.num_rows, pa.bool_()))
        return pa.concat_tables([live.select(out.names).cast(out), _with_nulls(left, out, {DELETE_COL: True})])
