"""Interval mode: compaction that keeps every interval slice exactly replaceable.

A re-run of an interval removes, by name, the files its newest committed batch published for
it in each table of staged files (``state.replaced_files``). A compaction that mixed them with
other slices' rows would make that impossible, so a slice is compacted on its own: the files
one batch published for one slice (in one partition) are rewritten into one, under
``eo_compacted/b<batch>/<slice>/<token>/``, and a record of it (``formats.SliceCompaction``,
``_eo_ledger/compactions/b<batch>/<participant>/<slice>/<token>.json``) is written before the
Delta commit that swaps them. ``current_slice_files`` then answers "which files hold this slice
now": the newest record whose files are all live, else what the batch published; so a record
whose commit never landed (a crash, a lost race) or that a restore went back before changes
nothing.

Races, decided by Delta, never by scheduling: the swap restates the pipeline's
``txn(appId, version)`` as it is in its snapshot (the version does not change). delta-rs fails
either of two commits that carry a txn of the same appId when the other landed first, so a
batch commit racing a compaction of the same table is rebuilt on the new snapshot (and then
removes the compacted files), and a compaction built before a batch landed is given up. (A
remove alone would not do: delta-rs lets a commit remove a file a concurrent commit removed
with ``dataChange=false``, which is how compactions remove.) The swap's actions say
``dataChange=false``: a streaming reader does not see the rows again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from ...core.formats import COMPACTED_DIR, STAGING_DIR, InvalidId, SliceCompaction, StagedFile, partition_text, slice_of, utcnow
from ...core.table_files import TableFileWriter, add_action, delta_add
from ...storage.fs import join

log = logging.getLogger(__name__)
DEAD_AFTER_S = 3600.0  # a record whose files never became live is removed (with them) after this long
LANDED = ".landed"  # beside a record whose commit landed
ROW_GROUP_BYTES = 64 << 20  # a compacted file's row groups: about this much Arrow data each
CONTINUOUS = "continuous"  # eo_compacted/continuous/<token>/: the files of a compaction of a whole table


def records(proto, batch_id: int, participant: str, slice_: str) -> list[tuple[str, SliceCompaction]]:
    """(path, record) of every compaction of ``slice_`` of ``batch_id`` in ``participant``, oldest first."""
    fs = proto.ledger.fs
    folder = proto.layout.compactions_dir(batch_id, participant, slice_)
    found = sorted(f.path for f in fs.list_files(folder, recursive=False) if f.path.endswith(".json"))
    return [(p, SliceCompaction.from_json(fs.read_bytes(p))) for p in found]


def current_slice_files(proto, batch_id: int, participant: str, slice_: str, published: set[str],
                        live: Callable[[], set[str]]) -> set[str]:
    """The files that hold ``slice_`` of ``batch_id`` in ``participant`` now: those of its newest
    compaction whose files are all ``live()``, else ``published`` (what the batch committed)."""
    recs = records(proto, batch_id, participant, slice_) if proto.cfg.mode == "interval" else []
    if not recs:
        return published
    now_live = live()
    for _path, rec in reversed(recs):
        files = set(rec.files)
        if files and files <= now_live:
            return files
    return published


def _owner(path: str) -> tuple[int, str | None] | None:
    """(batch, slice or None) of a table file the pipeline wrote, from its path; None for others."""
    parts = path.split("/")
    if len(parts) > 3 and parts[0] == STAGING_DIR and parts[1].startswith("b") and parts[1][1:].isdigit():
        return int(parts[1][1:]), slice_of(path)
    if len(parts) > 4 and parts[0] == COMPACTED_DIR and parts[1].startswith("b") and parts[1][1:].isdigit():
        return int(parts[1][1:]), parts[2]
    return None


def _published(proto, batch_id: int, participant: str, slice_: str) -> set[str] | None:
    """The files ``batch_id`` committed for ``slice_`` in ``participant`` (as replaced_files reads
    its PREPARED record), or None when the ledger does not have them."""
    plan, prepared = proto.ledger.plan(batch_id), proto.ledger.prepared(batch_id)
    if plan is None or prepared is None or slice_ not in plan.slices():
        return None
    one = len(plan.slices()) == 1
    return {f.path for f in prepared.adds.get(participant, []) if one or slice_of(f.path) == slice_}


def compact_slices(proto, participant: str, dt, target_bytes: int) -> dict:
    """Compact, in ``participant``'s table ``dt`` (a delta-rs handle), every slice whose files
    (those of one partition) are more than one and smaller on average than ``target_bytes``.
    Returns {"slices": n, "files_removed": r, "files_added": a, "notes": [...]}."""
    out: dict = {"slices": 0, "files_removed": 0, "files_added": 0, "notes": []}
    app = proto.app_id
    txn = dt.transaction_version(app) or 0
    if txn == 0:
        return out
    t = pa.table(dt.get_add_actions(flatten=False))
    pvs = t.column("partition").to_pylist() if "partition" in t.column_names else [None] * t.num_rows
    live: dict[str, dict] = {}
    groups: dict[tuple[int, str], list[str]] = {}
    for path, size, pv in zip(t.column("path").to_pylist(), t.column("size_bytes").to_pylist(), pvs):
        live[path] = {"size": int(size), "partition_values": {k: partition_text(v) for k, v in (pv or {}).items()}}
        owner = _owner(path)
        if owner is None:
            continue
        b, s = owner
        if s is None:  # a batch of one slice (a Kafka range): its plan names it
            plan = proto.ledger.plan(b)
            s = next(iter(plan.slices())) if plan is not None and len(plan.slices()) == 1 else None
        if s is not None:
            groups.setdefault((b, s), []).append(path)
    for (b, s), paths in sorted(groups.items()):
        published = _published(proto, b, participant, s)
        if published is None:
            continue
        current = current_slice_files(proto, b, participant, s, published, lambda: set(live))
        if set(paths) != current:
            out["notes"].append(f"{participant}: slice {s} of batch {b}: its live files are not the ones the ledger "
                                f"says it holds (another writer?): not compacted")
            continue
        by_partition: dict[tuple, list[str]] = {}
        for p in paths:
            by_partition.setdefault(tuple(sorted(live[p]["partition_values"].items())), []).append(p)
        small = [ps for ps in by_partition.values()
                 if len(ps) > 1 and sum(live[p]["size"] for p in ps) / len(ps) < target_bytes]
        if not small:
            continue
        done = _compact_one(proto, participant, dt, txn, b, s, current, small, live)
        if done is None:
            out["notes"].append(f"{participant}: slice {s} of batch {b}: a batch committed meanwhile; not compacted")
            break  # the snapshot is stale: the next pass starts from a new one
        out["slices"] += 1
        out["files_removed"] += done[0]
        out["files_added"] += done[1]
        dt = proto.participants[participant]._table()  # the next swap is built on this one's version
        if (dt.transaction_version(app) or 0) != txn:
            break  # a batch landed since the listing: the next pass starts from a new one
    return out


def _compact_one(proto, participant: str, dt, txn: int, b: int, s: str, current: set[str],
                 small: list[list[str]], live: dict[str, dict]) -> tuple[int, int] | None:
    """Rewrite each group of ``small`` into one file; record it; swap them in one Delta commit
    restating ``txn``. (removed, added), or None when that commit lost to a batch commit."""
    # deltalake: the commit side only, never the Spark job
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import CommitProperties, RemoveAction, Transaction

    fs = proto.fs_for(participant)
    root = proto.layout.table(participant)
    token = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:12]
    added, removed = [], []
    for i, group in enumerate(small):
        rel = f"{proto.layout.compacted_rel(b, s, token)}/part-{i:05d}-{uuid.uuid4().hex[:12]}.snappy.parquet"
        added.append(rewrite(fs, root, dt, group, rel, live[group[0]]["partition_values"]))
        removed += group
    files = sorted((current - set(removed)) | {a.path for a in added})
    rec = SliceCompaction(pipeline=proto.cfg.name, batch_id=b, participant=participant, slice=s,
                          replaces=sorted(removed), files=files, added=[a.to_json() for a in added],
                          written_at=utcnow())
    path = join(proto.layout.compactions_dir(b, participant, s), token + ".json")
    if not proto.ledger.fs.put_if_absent(path, rec.to_json()):
        raise RuntimeError(f"compaction record {path} exists already")
    now = int(time.time() * 1000)
    actions: list = [RemoveAction(p, False, now, live[p]["size"], live[p]["partition_values"]) for p in removed]
    actions += [delta_add(a, data_change=False, now=now) for a in added]
    meta = {"eo.maintenance": proto.cfg.name, "eo.compacted": _tag(b, s, path)}
    try:
        dt.create_write_transaction(actions, mode="append", schema=dt.schema(),
                                    partition_by=list(dt.metadata().partition_columns) or None,
                                    commit_properties=CommitProperties(
                                        custom_metadata=meta, app_transactions=[Transaction(proto.app_id, txn)]))
    except CommitFailedError as e:
        log.info("%s: compaction of slice %s of batch %s lost to a concurrent commit (%s); undone", participant, s,
                 b, e)
        _forget(proto, participant, path, rec)
        return None
    _mark_landed(proto, path)
    log.info("%s: slice %s of batch %s: %d file(s) compacted into %d", participant, s, b, len(removed), len(added))
    return len(removed), len(added)


def rewrite(fs, root: str, dt, group: list[str], rel: str, partition_values: dict) -> StagedFile:
    """Rewrite the rows of table files ``group`` (paths relative to ``root``, the table ``dt``)
    into one file ``rel``, file by file (memory holds about one row group, ``ROW_GROUP_BYTES``), with the
    product's statistics rules (``table_files``); returns its AddFile, stats from its footer."""
    schema = pa.schema(dt.schema().to_arrow())
    pcols = set(dt.metadata().partition_columns)
    afs = fs.arrow_fs()
    sources = [pq.ParquetFile(fs.arrow_path(join(root, p)), filesystem=afs) for p in group]
    # the columns the files hold (a column added by schema evolution is missing from older ones)
    data = pa.unify_schemas([pf.schema_arrow for pf in sources], promote_options="permissive")
    data = pa.schema([f for f in data if f.name not in pcols])
    full = join(root, rel)
    fs.makedirs(full.rsplit("/", 1)[0])
    w = TableFileWriter(fs.arrow_path(full), data, filesystem=afs, row_group_bytes=ROW_GROUP_BYTES)
    try:
        for pf in sources:
            for rb in pf.iter_batches():
                t = pa.Table.from_batches([rb])
                for f in data:
                    if f.name not in t.column_names:
                        t = t.append_column(f, pa.nulls(t.num_rows, f.type))
                w.write(t.select(data.names).cast(data))
    finally:
        w.close()
    info = fs.stat(full)
    if info is None:
        raise RuntimeError(f"{full}: written but not found")
    meta = pq.ParquetFile(fs.arrow_path(full), filesystem=afs).metadata
    return add_action(meta, schema, w.nan_free, path=rel, size=info.size, partition_values=partition_values,
                      modification_time=info.mtime_ms)


def compact_table(proto, participant: str, dt, target_bytes: int) -> dict:
    """Continuous mode (and a merge sink's tables): bin-pack, per partition, the live files smaller
    than ``target_bytes`` into files of about that size, each written by ``rewrite`` (so the new
    files keep the statistics promise, unlike delta-rs OPTIMIZE, whose stats round decimals
    through a double and whose footers ignore NaN), swapped in one commit (``dataChange=false``).

    The commit restates ``txn(<pipeline>.compaction, n+1)``: delta-rs refuses a second compaction
    built on the same snapshot (two passes would otherwise both land, and the rows twice). A
    batch commit racing it is an append: both land, either order. A MERGE that read a file it
    removes is refused by delta-rs and built again (``sinks.delta_merge``); a MERGE that removed a file
    first makes this commit fail: given up for the next pass.
    Returns {"files_removed": r, "files_added": a, "notes": [...]}."""
    # deltalake: the commit side only, never the Spark job
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import CommitProperties, RemoveAction, Transaction

    out: dict = {"files_removed": 0, "files_added": 0, "notes": []}
    fs = proto.fs_for(participant)
    root = proto.layout.table(participant)
    t = pa.table(dt.get_add_actions(flatten=False))
    out["dead_files_removed"] = _sweep_uncommitted(fs, root, set(t.column("path").to_pylist()))
    if t.num_rows == 0:
        return out
    pvs = t.column("partition").to_pylist() if "partition" in t.column_names else [None] * t.num_rows
    by_partition: dict[tuple, list[dict]] = {}
    for path, size, mtime, pv in zip(t.column("path").to_pylist(), t.column("size_bytes").to_pylist(),
                                     t.column("modification_time").to_pylist(), pvs):
        if int(size) >= target_bytes:
            continue
        values = {k: partition_text(v) for k, v in (pv or {}).items()}
        by_partition.setdefault(tuple(sorted(values.items())), []).append(
            {"path": path, "size": int(size), "mtime": mtime, "partition_values": values})
    bins: list[list[dict]] = []
    for files in by_partition.values():
        current: list[dict] = []
        for f in sorted(files, key=lambda f: (f["mtime"], f["path"])):  # in the order they were written
            if current and sum(x["size"] for x in current) + f["size"] > target_bytes:
                bins.append(current)
                current = []
            current.append(f)
        bins.append(current)
    bins = [b for b in bins if len(b) > 1]
    if not bins:
        return out
    token = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:12]
    now = int(time.time() * 1000)
    actions: list = []
    added = []
    for i, group in enumerate(bins):
        rel = f"{COMPACTED_DIR}/{CONTINUOUS}/{token}/part-{i:05d}-{uuid.uuid4().hex[:12]}.snappy.parquet"
        added.append(rewrite(fs, root, dt, [f["path"] for f in group], rel, group[0]["partition_values"]))
        actions += [RemoveAction(f["path"], False, now, f["size"], f["partition_values"]) for f in group]
    actions += [delta_add(a, data_change=False, now=now) for a in added]
    app = f"{proto.app_id}.compaction"
    try:
        dt.create_write_transaction(actions, mode="append", schema=dt.schema(),
                                    partition_by=list(dt.metadata().partition_columns) or None,
                                    commit_properties=CommitProperties(
                                        custom_metadata={"eo.maintenance": proto.cfg.name, "eo.compacted": token},
                                        app_transactions=[Transaction(app, (dt.transaction_version(app) or 0) + 1)]))
    except CommitFailedError as e:
        for a in added:
            fs.delete(join(root, a.path))
        out["notes"].append(f"{participant}: compaction lost to a concurrent commit ({e}); left for the next pass")
        return out
    out["files_removed"] = sum(len(b) for b in bins)
    out["files_added"] = len(added)
    log.info("%s: %d file(s) compacted into %d", participant, out["files_removed"], out["files_added"])
    return out


def _sweep_uncommitted(fs, root: str, live: set[str], older_than_s: float = DEAD_AFTER_S) -> int:
    """Files of ``compact_table`` that no commit added (a pass that died before its commit),
    once older than ``older_than_s`` (a pass in flight is younger). Returns how many."""
    removed = 0
    cutoff = time.time() - older_than_s
    for f in fs.list_files(join(root, COMPACTED_DIR, CONTINUOUS)):
        if f.path[len(root):].strip("/") not in live and f.mtime_ms / 1000 <= cutoff:
            fs.delete(f.path)
            removed += 1
    return removed


def _mark_landed(proto, record_path: str) -> None:
    """``<token>.landed`` beside a record whose commit landed: the sweep never reads it again."""
    try:
        proto.ledger.fs.put_if_absent(record_path.removesuffix(".json") + LANDED, b"")
    except Exception as e:  # noqa: BLE001 - an optimisation only: the sweep finds out from the log
        log.info("marking %s landed failed (%s); the next sweep checks the Delta log", record_path, e)


def _forget(proto, participant: str, record_path: str, rec: SliceCompaction) -> None:
    """Remove a compaction that never landed: its files, then its record."""
    fs = proto.fs_for(participant)
    root = proto.layout.table(participant)
    for a in rec.added:
        try:
            fs.delete(join(root, a["path"]))
        except FileNotFoundError:
            pass
    proto.ledger.fs.delete(record_path)


def sweep_dead(proto, participant: str, dt, older_than_s: float = DEAD_AFTER_S) -> int:
    """Remove the compactions of ``participant`` that never landed (a pass that died between its
    record and its commit), once older than ``older_than_s`` (a pass in flight is younger): no
    ``.landed`` mark, none of their files live, and no commit of the table's history carries
    their token (those that did are marked); and the files of a pass that died before its
    record. Returns how many records and such files were removed."""
    fs = proto.ledger.fs
    cutoff = time.time() - older_than_s
    found = [f for f in fs.list_files(join(proto.layout.ledger, "compactions")) if f"/{participant}/" in f.path]
    names = {f.path for f in found}
    removed = _sweep_unrecorded(proto, participant, cutoff, names)
    candidates = [f.path for f in found if f.path.endswith(".json") and f.mtime_ms / 1000 <= cutoff
                  and f.path.removesuffix(".json") + LANDED not in names]
    if not candidates:
        return removed
    live = {p.rsplit("/", 1)[0] for p in pa.table(dt.get_add_actions(flatten=False)).column("path").to_pylist()}
    landed = None
    for path in candidates:
        rec = SliceCompaction.from_json(fs.read_bytes(path))
        if not any(a["path"].rsplit("/", 1)[0] in live for a in rec.added):
            if landed is None:  # read once, only when some compaction may not have landed
                landed = {h.get("eo.compacted") for h in dt.history() if h.get("eo.compacted")}
            if _tag(rec.batch_id, rec.slice, path) not in landed:
                _forget(proto, participant, path, rec)
                removed += 1
                continue
        _mark_landed(proto, path)
    return removed


def _sweep_unrecorded(proto, participant: str, cutoff: float, names: set[str]) -> int:
    """Files a compaction wrote but never recorded (the pass died before its record), older
    than ``cutoff``: ``eo_compacted/b<batch>/<slice>/<token>/`` with no record of that token
    among ``names`` (the paths of the compaction records)."""
    fs = proto.fs_for(participant)
    root = proto.layout.table(participant)
    removed = 0
    for f in fs.list_files(join(root, COMPACTED_DIR)):
        parts = f.path[len(root):].strip("/").split("/")
        if len(parts) != 5 or f.mtime_ms / 1000 > cutoff or not parts[1][1:].isdigit():
            continue
        try:
            record = join(proto.layout.compactions_dir(int(parts[1][1:]), participant, parts[2]), parts[3] + ".json")
        except InvalidId:
            continue  # not a folder this module writes
        if record not in names:
            fs.delete(f.path)
            removed += 1
    return removed


def _tag(batch_id: int, slice_: str, record_path: str) -> str:
    """What a compaction's commit says of itself (commitInfo ``eo.compacted``)."""
    return f"batch {batch_id} {slice_} {record_path.rsplit('/', 1)[-1].removesuffix('.json')}"


__all__ = ["compact_slices", "compact_table", "current_slice_files", "records", "rewrite", "sweep_dead"]
