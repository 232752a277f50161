"""One maintenance pass over a pipeline's Delta tables (the sink, the quarantine, and a merge
sink's own tables), each by its sink kind (``sinks/delta/maintenance.py``): compaction,
VACUUM, a Delta checkpoint and log cleanup, with delta-rs; what it did is kept in the ledger.

Exactly-once holds whatever runs beside it, by construction rather than by scheduling:

* **Compaction** (``sinks/delta/compaction.py``, ``compact_table``) is one commit that removes
  small files and adds their rows in bigger ones (``dataChange=false``), never touching the pipeline's ``txn(appId,
  version)``; the product writes those files itself (not delta-rs OPTIMIZE, whose stats round
  decimals through a double and whose footers ignore NaN), with the stage job's statistics
  rules (``table_files``). A batch commit racing it is an append of new files, which does not
  conflict with it: both land, in either order; the batch's own txn check still decides in its
  snapshot. A merge sink's MERGE rewrites files too: when the compaction removed one it read,
  delta-rs refuses the MERGE, which is then built again on the new snapshot (by its participant);
  the compaction changes no row, so the result is the same. In interval mode a table of staged files (an
  append sink, the quarantine) is compacted one interval slice at a time instead, with a record
  of each, so that a re-run of an interval still replaces exactly its slice (``compaction``,
  which also says how it races a batch commit); a merge sink, its tombstones and the partials
  of running aggregates are compacted as in continuous mode (their batches are rows).
* **VACUUM** is delta-rs's *lite* vacuum (never ``full``): it deletes only files that a commit
  removed (tombstones) and that are older than the retention. Files that no commit ever added
  are never touched: the staged files of an attempt in flight, of a PREPARED batch waiting for
  its commit (its retry window), the ledger. The retention (``maintenance.vacuum_retention_hours``,
  default 168) also bounds how far back a rewind or a reader's time travel can go.
* **Checkpoint**: ``create_checkpoint`` and ``cleanup_metadata`` (log files older than the
  table's ``delta.logRetentionDuration``, 30 days by default, and covered by a checkpoint).

The report (files and bytes before and after, versions, files vacuumed, seconds, notes) is
written to ``_eo_ledger/maintenance/<utc time>.json``; ``make ledger`` and the ledger page show
the newest one.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from ..core.formats import JSON, utcnow
from ..sinks import sink_for
from ..storage.fs import join, storage_for

if TYPE_CHECKING:
    from .verbs import Protocol

log = logging.getLogger(__name__)
TARGET_FILE_BYTES = 128 << 20


def maintain(proto: Protocol, *, compact: bool | None = None, vacuum_retention_hours: float | None = None,
             checkpoint: bool = True, now: str | None = None) -> dict[str, Any]:
    """One pass over ``proto``'s tables (a ``Protocol``), each by its sink kind
    (``SinkKind.maintain_table``); the report, also written to the ledger."""
    cfg = proto.cfg
    m = cfg.maintenance
    compact = m.compact if compact is None else compact
    retention = m.vacuum_retention_hours if vacuum_retention_hours is None else vacuum_retention_hours
    report: dict[str, Any] = {"pipeline": cfg.name, "started_at": now or utcnow(), "tables": {}, "notes": []}
    t_all = time.time()
    kind = sink_for(cfg)
    for participant in proto.names:
        entry, notes = kind.maintain_table(proto, participant, compact=compact, retention_hours=retention,
                                           checkpoint=checkpoint)
        report["notes"] += notes
        report["tables"][participant] = entry or {"table": proto.participants[participant].uri, "exists": False}
    report["vacuum_retention_hours"] = retention
    report["seconds"] = round(time.time() - t_all, 3)
    report["finished_at"] = utcnow()
    fs = storage_for(proto.layout.sink_table)
    name = "".join(ch for ch in report["started_at"] if ch.isalnum())
    fs.write_atomic(join(proto.layout.ledger, "maintenance", f"{name}.json"),
                    json.dumps(report, indent=1, sort_keys=True).encode())
    return report


def last_report(proto: Protocol) -> JSON | None:
    """The newest maintenance report of ``proto``'s pipeline, or None."""
    fs = storage_for(proto.layout.sink_table)
    found = sorted((f.path for f in fs.list_files(join(proto.layout.ledger, "maintenance"), recursive=False)
                    if f.path.endswith(".json")), key=lambda p: p.rsplit("/", 1)[-1])
    report: JSON | None = json.loads(fs.read_bytes(found[-1])) if found else None
    return report


def summary_line(report: JSON, order: tuple[str, ...] = ()) -> str:
    """One line of a report, for `make ledger` and the task log; its tables in ``order`` (the
    pipeline's, ``Protocol.names``: commit order), any other after them."""
    parts = []
    tables = report.get("tables", {})
    for participant in sorted(tables, key=lambda p: order.index(p) if p in order else 9):
        e = tables[participant]
        if not e.get("exists"):
            continue
        parts.append(f"{participant} {e['files_before']} -> {e['files_after']} files, "
                     f"{e['bytes_before']:,} -> {e['bytes_after']:,} bytes, {e['files_vacuumed']} vacuumed")
    notes = "; ".join(report.get("notes") or [])
    return (f"last maintenance {report.get('started_at')} ({report.get('seconds')} s): " + "; ".join(parts)
            + (f" ({notes})" if notes else ""))
