"""One maintenance pass over one Delta table of a pipeline: compaction, lite VACUUM, a Delta
checkpoint and log cleanup (why each keeps exactly-once: ``eobatch.protocol.maintenance``)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pyarrow as pa

from . import compaction

log = logging.getLogger("eobatch.protocol.maintenance")


def _snapshot(dt) -> tuple[int, int]:
    """(live files, their bytes) of a table snapshot."""
    t = pa.table(dt.get_add_actions(flatten=False))
    return t.num_rows, int(sum(t.column("size_bytes").to_pylist())) if t.num_rows else 0


def maintain_table(proto, participant: str, *, compact: bool, retention_hours: float,
                   checkpoint: bool) -> tuple[dict[str, Any] | None, list[str]]:
    """One pass over ``participant``'s table of ``proto`` (a ``Protocol``): (its report entry,
    None when the table does not exist yet; notes)."""
    # deltalake: the commit side only, never the Spark job
    from deltalake.transaction import CommitProperties

    cfg = proto.cfg
    part = proto.participants[participant]
    # interval mode: a table of staged files is compacted one slice at a time (``compaction``),
    # so that a re-run still replaces exactly its slice; a merge table's batches are rows
    by_slice = cfg.mode == "interval" and part.keeps_staged_files
    notes: list[str] = []
    dt = part._table()
    if dt is None:
        return None, notes
    t0 = time.time()
    files0, bytes0 = _snapshot(dt)
    entry: dict[str, Any] = {"table": part.uri, "exists": True, "version_before": dt.version(),
                             "files_before": files0, "bytes_before": bytes0}
    meta = {"eo.maintenance": cfg.name}
    if by_slice:
        entry["dead_compactions_removed"] = compaction.sweep_dead(proto, participant, dt)
    if compact:
        compact_one = compaction.compact_slices if by_slice else compaction.compact_table
        done = compact_one(proto, participant, dt, cfg.maintenance.target_file_bytes)
        notes += done.pop("notes")
        entry["compacted"] = done
        dt = part._table()
    vacuumed = dt.vacuum(retention_hours=int(retention_hours), dry_run=False, enforce_retention_duration=False,
                         full=False, commit_properties=CommitProperties(custom_metadata=meta))
    entry["files_vacuumed"] = len(vacuumed)
    if checkpoint:
        dt = part._table()
        dt.create_checkpoint()
        dt.cleanup_metadata()
    dt = part._table()
    entry["files_after"], entry["bytes_after"] = _snapshot(dt)
    entry["version_after"] = dt.version()
    entry["seconds"] = round(time.time() - t0, 3)
    log.info("maintenance of %s (%s): %d files / %d bytes -> %d files / %d bytes; %d vacuumed; %.1fs",
             participant, part.uri, files0, bytes0, entry["files_after"], entry["bytes_after"],
             entry["files_vacuumed"], entry["seconds"])
    return entry, notes
