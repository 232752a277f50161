"""Delta planner: the next upstream versions after the ones read, and the files they added.

A batch's range is the upstream versions ``[from, to)`` (``versions``): ``from`` is the previous
batch's ``to`` (``starting_version`` for a new pipeline), ``to`` is where the next batch starts.
It lists the files the versions added with ``dataChange=true`` (``files``, each with its version,
its partition values, and its records counted from its Parquet footer: the plan knows exactly
what the job must read), and what it did not read and why:

* versions that change no data (OPTIMIZE, compaction, metadata) are passed over: compacted rows
  were read when they were first added, so maintenance upstream never doubles a row downstream;
* a RESTORE upstream to a version this pipeline has not read past makes the versions it undid,
  and itself, count for nothing (``log.effective_versions``); one that undid versions already
  published is refused, naming the batch to rewind to;
* a version that changes or deletes rows (MERGE, DELETE, UPDATE, an overwrite) is read as its
  changes when the source reads the Change Data Feed (``change_feed: true``): its change data
  files when the upstream wrote them; otherwise, as the Delta protocol defines the changes of a
  version without change data, the rows of its added files as inserts and the rows of its
  removed files as deletes (entries marked ``removed``: whole partitions deleted, a DELETE
  without a condition, an overwrite). Without ``change_feed`` it is refused
  (``on_change_commit: fail``, the default) or passed over and recorded (``skip``);
* versions or files removed before they were read (log cleanup, VACUUM) are refused
  (``on_data_loss: fail``) or passed over and recorded (``accept``, ``lost``);
* a version that names a file to read outside the table's root (an absolute path or URI, ``..``,
  percent-encoded or not, another bucket or store) is refused (``UpstreamOutside``), its files
  never opened, unless the platform allows that location (``log.ALLOW_LOCATIONS_ENV``): whoever can
  append to the upstream's ``_delta_log`` could otherwise publish any Parquet file this pipeline
  can read (another team's) into its tables. The batch before it is planned as far as it goes.

Batches end at version boundaries: at least one version with data, then versions while their
records fit ``max_records_per_batch``, their files ``max_files_per_batch`` (empty files count) and
there are at most ``max_versions_per_batch`` of them,
and before a version that reads a file the batch already reads (a file added, then removed: its
rows inserted, then deleted), so that each planned file of a batch is read once, as one kind.
Every version of the upstream is a batch boundary of the upstream's pipeline (one commit per
batch and table), so a batch never reads half an upstream batch.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ...errors import TerminalError
from ...storage import s3conf
from ...storage.fs import printable, storage_for
from ..base import BacklogAsk
from ..files.planner import planned_file
from ..parquet.planner import ForgedFooter, footer_rows
from .log import ALLOW_LOCATIONS_ENV, Commit, DataFile, DeltaLog, UndoneRead, allowed_locations, effective_versions, within

log = logging.getLogger(__name__)
COLUMN_MAPPING = "delta.columnMapping.mode"


class UpstreamRefused(TerminalError):
    """An upstream version or table this source cannot read exactly; the message says what to do."""


class UpstreamChanged(UpstreamRefused):
    """An upstream version changes or deletes rows (``on_change_commit: fail``)."""


class UpstreamDataLoss(UpstreamRefused):
    """Upstream versions or files were removed before they were read (``on_data_loss: fail``)."""


class UpstreamOutside(UpstreamRefused):
    """An upstream version names a file outside the table's root that the platform does not allow."""


class DeltaSource:
    kind = "delta"

    def __init__(self, cfg):
        self.cfg = cfg
        self.src = cfg.source
        self.fs = storage_for(self.src.table)
        self.late: list = []
        self.skipped: list = []  # versions passed over are the range's ``skipped``, with their notes
        # versions read so far by this planner (a version's commit file never changes): the batches of one
        # run each walk from their start to the newest version, the log is read once
        self._commits: dict[int, Commit | None] = {}
        self.allowed = allowed_locations()  # the platform's (the workers' environment), never the YAML's

    def describe(self) -> str:
        return self.src.describe()

    def _snapshot(self):
        """The upstream table now (delta-rs: its version, metadata and schema; not its list of files,
        which a large table makes costly and the plan never needs), or None when there is none yet."""
        # deltalake: the Airflow side only, never the Spark job
        from deltalake import DeltaTable

        try:
            return DeltaTable(s3conf.table_uri(self.src.table), without_files=True,
                              storage_options=s3conf.delta_storage_options(self.src.table))
        except Exception as e:  # TableNotFoundError differs between versions
            if type(e).__name__ == "TableNotFoundError" or "not a delta table" in str(e).lower() \
                    or "no log files" in str(e).lower():
                return None
            raise

    def begin_run(self) -> None:
        """``Planner.begin_run``: nothing to read once for a run (each plan asks the source again)."""

    def discovered(self) -> dict | None:
        """``Planner.discovered``: nothing (each plan starts from the newest plan's range)."""
        return None

    def check_readable(self) -> str:
        """``Planner.check_readable``: the upstream table's version, as a plan reads it (none yet is
        fine: the plan waits for the table's first version)."""
        snap = self._snapshot()
        if snap is None:
            return f"no Delta table at {printable(self.src.table)} yet: the plans wait for its first version"
        return f"Delta table {printable(self.src.table)}: version {snap.version()}"

    def _start(self, prev: dict | None, table_id: str) -> int:
        name = self.cfg.name
        if prev is None:
            return self.src.starting_version
        if prev.get("table") != self.src.table:
            raise UpstreamRefused(f"the last batch read Delta table {prev.get('table')!r}, the pipeline now names "
                                  f"{self.src.table!r}; reading another table needs a new pipeline name")
        if prev.get("table_id") not in (None, table_id):
            raise UpstreamRefused(f"the Delta table at {self.src.table} is another table now (table id "
                                  f"{prev['table_id']} when the last batch read it, {table_id} now: it was dropped and "
                                  f"created again); reading it needs a new pipeline name (or rewind {name} "
                                  f"to its first batch: `make rewind PIPELINE={name} BATCH=1`)")
        return int(prev["versions"][1])

    def next_range(self, previous_plans, limit: int) -> tuple[dict | None, int | None, list[str]]:
        table = self.src.table
        dt = self._snapshot()
        if dt is None:
            return None, None, [f"the upstream table {table} does not exist yet"]
        meta = dt.metadata()
        prev = previous_plans[-1].range if previous_plans else None
        start = self._start(prev, meta.id)
        latest = dt.version()
        if latest < start:
            return None, None, []
        self._check_table(meta)
        delta_log = DeltaLog(self.fs, table)
        for v in range(start, latest + 1):
            if v not in self._commits:
                self._commits[v] = delta_log.commit(v)
        commits = {v: self._commits[v] for v in range(start, latest + 1)}
        try:
            effective = effective_versions(commits, start, latest)
        except UndoneRead as e:
            raise UpstreamRefused(self._undone_text(e, previous_plans, delta_log, latest)) from None
        partition_types = {f["name"]: f["type"] for f in json.loads(dt.schema().to_json())["fields"]
                           if f["name"] in meta.partition_columns}
        files: list[dict] = []
        notes: list[str] = []
        skipped: dict[str, str] = {}
        lost: list[int] = []
        upstream: dict[str, list[int]] = {}
        records = with_data = 0
        end = latest + 1
        for v in effective:
            c = commits[v]
            if c is None:
                if self.src.on_data_loss == "fail":
                    if with_data:
                        end = v
                        break
                    raise UpstreamDataLoss(self._gone_text([u for u in effective if commits[u] is None], start))
                lost.append(v)
                continue
            self._check_commit(c, meta.partition_columns)
            if c.change == "none":
                continue
            # a RESTORE to a timestamp is a change too: its version is not recorded
            if c.change == "change" and not self.src.change_feed:
                if self.src.on_change_commit == "fail":
                    if with_data or lost or skipped:
                        end = v
                        break
                    raise UpstreamChanged(self._change_text(c))
                skipped[str(v)] = f"{c.operation}: rows changed or deleted (on_change_commit: skip)"
                notes.append(f"upstream {c.describe()} changed or deleted rows; passed over (on_change_commit: "
                             f"skip): those changes are not in this pipeline's tables")
                continue
            if (outside := self._outside(c)) is not None:  # refused; the versions before it are a batch
                if with_data or lost or skipped:
                    end = v
                    break
                raise UpstreamOutside(outside)
            entries = self._entries(c, table)
            n = sum(e["records"] for e in entries)
            if with_data and (records + n > limit or with_data >= self.src.max_versions_per_batch
                              or len(files) + len(entries) > self.src.max_files_per_batch
                              or {e["path"] for e in entries} & {f["path"] for f in files}):
                end = v
                break
            files += entries
            records += n
            with_data += 1
            if c.pipeline_batch:
                upstream.setdefault(c.pipeline_batch[0], []).append(c.pipeline_batch[1])
        if not files and not skipped and not lost:
            return None, None, notes
        rng: dict[str, Any] = {"table": table, "table_id": meta.id, "versions": [start, end], "files": files}
        optional = {"change_feed": self.src.change_feed, "partition_columns": partition_types, "skipped": skipped,
                    "lost": lost, "upstream": upstream}
        rng.update({k: v for k, v in optional.items() if v})  # each only when it holds something
        return rng, records, notes + self._range_notes(rng)

    @staticmethod
    def _range_notes(rng: dict) -> list[str]:
        """The notes of a range about what it passes over: versions gone from the log, files gone."""
        notes = []
        if rng.get("lost"):
            notes.append(f"upstream version(s) {', '.join(map(str, rng['lost']))} are no longer in the table's log "
                         f"(log cleanup); passed over (on_data_loss: accept): their rows are not in this pipeline's "
                         f"tables")
        return notes + [f"{f['path']} (upstream version {f['version']}): {f['skipped']}"
                        + ("" if f.get("removed") else "; not published") for f in rng["files"] if f.get("skipped")]

    def _read_set(self, c: Commit) -> list[DataFile]:
        """The files of version ``c`` a batch would read (``_entries``)."""
        if not self.src.change_feed:
            return list(c.adds)
        return list(c.changes) if c.changes else list(c.adds) + list(c.removes)

    def _outside(self, c: Commit) -> str | None:
        """Why version ``c`` is refused: a file it names to read lies outside the table's root and
        outside every location the platform allows; None when every one is inside."""
        table = self.src.table
        bad = [f for f in self._read_set(c) if not within(f.path, table)
               and not any(within(f.path, loc) for loc in self.allowed)]
        if not bad:
            return None
        f = bad[0]
        return (f"upstream {c.describe()} of {table} names the file {f.log_path!r} (at {f.path}"
                f"{f', and {len(bad) - 1} more such file(s)' if len(bad) > 1 else ''}), outside the table's root "
                f"{table}: a Delta source reads only files below its table, or whoever can append to the upstream's "
                f"_delta_log could publish any file this pipeline can read into its tables. Nothing was planned "
                f"from version {c.version} on and that file was not read. If the upstream keeps its files there on "
                f"purpose (a shallow clone), the platform may allow the location in the workers' environment "
                f"({ALLOW_LOCATIONS_ENV}); otherwise have the upstream's owner remove that version (RESTORE to "
                f"before it: followed here), or start a new pipeline after it (source.starting_version)")

    def _entries(self, c: Commit, table: str) -> list[dict]:
        """The planned files of version ``c``, which has data: its added files; with ``change_feed``,
        a version that changed rows is read as its changes: its change data files when it wrote
        them, else its added files (inserts) and its removed files (``removed``: deletes), as the
        Delta protocol defines the changes of a version without change data."""
        if not self.src.change_feed:
            return [self._entry(f, c, table) for f in c.adds]
        if c.changes:
            return [self._entry(f, c, table, "change_data") for f in c.changes]
        dv = [f.path for f in c.removes if f.deletion_vector]
        if dv:
            raise UpstreamRefused(f"upstream {c.describe()} of {self.src.table} removed {len(dv)} file(s) with "
                                  f"deletion vectors (e.g. {dv[0]}) and wrote no change data: the rows it deleted "
                                  f"are a removed file's rows less those its deletion vector had deleted already, "
                                  f"which this source does not apply. Turn on delta.enableChangeDataFeed upstream "
                                  f"(its changes are then written), or set source.on_change_commit: skip and "
                                  f"source.change_feed: false to pass over such versions")
        return [self._entry(f, c, table) for f in c.adds] + [self._entry(f, c, table, "removed") for f in c.removes]

    def _entry(self, f: DataFile, c: Commit, table: str, kind: str | None = None) -> dict:
        """A planned file of version ``c``: its identity and records (its footer), its version and
        partition values; ``kind``: ``change_data`` (its rows carry ``_change_type``) or ``removed``
        (its rows are the version's deletes); with ``change_feed``, the version's commit time
        (``timestamp_ms``: the records' ``_commit_timestamp``)."""
        path, version = f.path, c.version
        extra: dict[str, Any] = {"version": version}
        if kind:
            extra[kind] = True
        if self.src.change_feed:
            extra["timestamp_ms"] = c.timestamp_ms
        if f.partition_values:
            extra["partition_values"] = dict(f.partition_values)
        try:
            n, info = footer_rows(self.fs, path, table)
            return {**planned_file(info), "records": n, **extra}
        except ForgedFooter as e:
            reason = f"{e.args[0]}: no reader can read it as it says"
            log.warning("skipping %s: %s", path, reason)
            return {**planned_file(e.args[1]), "records": 0, "skipped": reason, **extra}
        except FileNotFoundError:
            if self.src.on_data_loss == "fail":
                raise UpstreamDataLoss(self._lost_file_text(f, c, kind == "removed")) from None
            what = ("its rows are that version's deletes, which are not applied downstream" if kind == "removed"
                    else "its rows are not published")
            return {"path": path, "size": 0, "mtime_ms": 0, "records": 0, "lost": True,
                    "skipped": f"gone from storage (VACUUM) before it was read (on_data_loss: accept): {what}", **extra}

    def _lost_file_text(self, f: DataFile, c: Commit, removed: bool) -> str:
        table = self.src.table
        if removed:
            how = (f"{f.path}, removed by upstream {c.describe()} of {table}, is no longer on storage: a VACUUM "
                   f"deleted it before this pipeline read it, and its rows are that version's deletes (the version "
                   f"wrote no change data). Which rows it deleted cannot be read exactly any more. Options: VACUUM "
                   f"upstream with a retention longer than this pipeline's lag; set source.on_data_loss: accept to "
                   f"pass over files that are gone (recorded in the ledger: those rows are then not deleted "
                   f"downstream, and stay until a later change deletes them)")
        else:
            how = (f"{f.path}, added by upstream version {c.version} of {table}, is no longer on storage: a VACUUM "
                   f"removed it (after a compaction or a change rewrote it) before this pipeline read it. Its rows "
                   f"cannot be read exactly any more. Options: VACUUM upstream with a retention longer than this "
                   f"pipeline's lag; set source.on_data_loss: accept to pass over files that are gone (recorded "
                   f"in the ledger)")
        return how + "; or start a new pipeline at a later version (source.starting_version)"

    def _check_table(self, meta) -> None:
        mode = (meta.configuration or {}).get(COLUMN_MAPPING)
        if mode not in (None, "none"):
            raise UpstreamRefused(f"the Delta table {self.src.table} uses column mapping ({COLUMN_MAPPING} = {mode}): "
                                  f"its files' column names are not the table's, which this source does not read")

    def _check_commit(self, c: Commit, partition_columns: list[str]) -> None:
        if c.metadata is not None:
            cols = list(c.metadata.get("partitionColumns") or [])
            if cols != list(partition_columns):
                raise UpstreamRefused(f"upstream {c.describe()} of {self.src.table} set its partition columns to "
                                      f"{cols}; the table's are {list(partition_columns)} now: a table whose "
                                      f"partitioning changed is another table; read it with a new pipeline")
            mode = (c.metadata.get("configuration") or {}).get(COLUMN_MAPPING)
            if mode not in (None, "none"):
                raise UpstreamRefused(f"upstream {c.describe()} of {self.src.table} turned on column mapping "
                                      f"({COLUMN_MAPPING} = {mode}), which this source does not read")
        dv = [f.path for f in c.adds if f.deletion_vector]
        if dv:
            raise UpstreamRefused(f"upstream {c.describe()} of {self.src.table} added {len(dv)} file(s) with deletion "
                                  f"vectors (e.g. {dv[0]}), which this source does not apply; turn off "
                                  f"delta.enableDeletionVectors upstream")

    def _change_text(self, c: Commit) -> str:
        """The refusal of a version that changed rows, for a source that does not read changes."""
        name = self.cfg.name
        how = (f"which an append-only read cannot apply exactly. Nothing was planned. It wrote "
               f"{'change data' if c.changes else 'no change data'}: set source.change_feed: true in {name}'s YAML "
               f"to read the upstream's changes as records (with _change_type: "
               + ("its change data" if c.changes else "its removed files' rows as deletes, its added files' rows as "
                  "inserts, as the Delta protocol defines such a version's changes")
               + "; transform: change_rows then keeps a merge sink equal to the upstream); or: ")
        return (f"upstream {c.describe()} of {self.src.table} changed or deleted rows ({c.removed_with_data} file(s) "
                f"removed with their data), {how}if the upstream is not meant to change rows, rewind it to before "
                f"that version (its RESTORE is then followed here); or set source.on_change_commit: skip in {name}'s "
                f"YAML to pass over such versions, recorded in the ledger (their changes do not reach {name}'s tables)")

    def _gone_text(self, gone: list[int], start: int) -> str:
        return (f"upstream version(s) {gone[0]}..{gone[-1]} of {self.src.table} are no longer in its log (log "
                f"cleanup, delta.logRetentionDuration) and this pipeline has read up to version {start - 1}: what they "
                f"added cannot be known any more. Options: set source.on_data_loss: accept in {self.cfg.name}'s YAML "
                f"to pass over them (recorded in the ledger); or start a new pipeline at a later version "
                f"(source.starting_version)")

    def _undone_text(self, e: UndoneRead, previous_plans, delta_log: DeltaLog, latest: int) -> str:
        """``e``'s message, with the batch to rewind to: the first one that read past the restore's
        target, or an earlier one when reading again from that batch's start would meet another
        RESTORE that undid versions read before it (the rewind then plans from a start it can read)."""
        name = self.cfg.name
        plans = [p for p in previous_plans if p.source_kind == self.kind and p.range.get("files") is not None]
        target, batch = e.target, None  # the error path only: reading every plan and commit is fine here
        while True:
            k = next((p for p in plans if int(p.range.get("versions", [0, 0])[1]) > target + 1), None)
            if k is None or (batch is not None and k.batch_id >= batch):
                break
            batch, start = k.batch_id, int(k.range["versions"][0])
            for v in range(start, latest + 1):
                if v not in self._commits:
                    self._commits[v] = delta_log.commit(v)
            try:
                effective_versions(self._commits, start, latest)
                break
            except UndoneRead as again:
                target = again.target
        how = (f" Rewind {name} to batch {batch} (`make rewind PIPELINE={name} BATCH={batch}`): it then reads the "
               f"upstream again from before the restore's target, and passes over what the restore undid"
               if batch is not None else "")
        return f"{e}; nothing was planned.{how}"

    def backlog(self, previous_plans, unpublished: dict | None, ask: BacklogAsk) -> dict[str, Any]:
        """``Planner.backlog``: the upstream versions after the newest plan's end (no record count:
        that needs each version's files counted)."""
        dt = self._snapshot()
        prev = previous_plans[-1].range if previous_plans else None
        start = int(prev["versions"][1]) if prev and prev.get("table") == self.src.table else self.src.starting_version
        latest = -1 if dt is None else dt.version()
        return {"records": None, "versions": max(0, latest + 1 - start),
                "notes": [f"upstream versions {start}..{latest} of {self.src.table} not read yet"
                          if latest >= start else f"no upstream version after {start - 1} yet"]}

    def interval_range(self, start_ms, end_ms, limit, earlier=None, **late_files):
        raise TerminalError("a delta source has no intervals: use mode: continuous")
