"""Quarantine replay: the raw records a batch quarantined, written back as one new landing file,
so that once fixed upstream (or once the rule that refused them changed) they go through the
normal exactly-once path, once.

``make replay PIPELINE=<name> BATCH=<id> [REASON=<text>]`` selects the quarantine rows of that
batch (whose reason contains REASON, when given) and writes their raw text, in source order, to
``<landing>/replay/replay-b<batch>-<digest>.jsonl`` (temp name, then rename: the planner never
sees half a file), plus ``<same name>.lineage.json`` (not a landing file: never read as data)
naming, line by line, the original batch, source and position. The digest covers the batch and
the selection, so replaying the same selection twice is refused (the file exists, or a batch
consumed it) instead of publishing it twice. A record whose raw text the quarantine could not
keep exactly (cut at 64 KiB, or invalid UTF-8 made valid) is skipped and counted.

Landing-file sources in continuous mode only: a Kafka record cannot be written back into its
topic's past (produce it again upstream), and an interval-mode file must land in the folder of
an interval still to run (copy the lines there yourself; the lineage file says where they came
from).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .errors import UsageError
from .storage import join, storage_for

REPLAY_DIR = "replay"
RAW_LIMIT = 65536  # the quarantine keeps at most this many characters of a record


def quarantined(proto, batch_id: int, reason: str | None = None) -> list[dict[str, Any]]:
    """The quarantine rows of ``batch_id`` (reason containing ``reason``), in source order."""
    import pyarrow.compute as pc

    from .formats import QUARANTINE

    dt = proto.participants[QUARANTINE]._table()
    if dt is None:
        raise UsageError(f"the quarantine table {proto.cfg.quarantine_table} does not exist yet")
    rows = dt.to_pyarrow_dataset().to_table(filter=pc.field("batch_id") == batch_id,
                                            columns=["batch_id", "source", "position", "raw", "reason"]).to_pylist()
    if reason:
        rows = [r for r in rows if reason in (r["reason"] or "")]
    return sorted(rows, key=lambda r: (str(r["source"]), int(r["position"] or 0)))


def replay(proto, batch_id: int, reason: str | None = None) -> dict[str, Any]:
    """Write the selected records as one new landing file; what was done (``file``, ``records``,
    ``skipped``, ``lineage``). UsageError when it cannot or must not be done."""
    cfg = proto.cfg
    if cfg.source.kind == "kafka" or getattr(cfg.source, "path", None) is None:
        raise UsageError(f"replay writes landing files; pipeline {cfg.name} reads {cfg.source.describe()}: "
                         f"produce the records again upstream instead")
    if cfg.mode == "interval":
        raise UsageError(f"pipeline {cfg.name} is in interval mode: a replayed file must land in the folder of an "
                         f"interval still to run; copy the records there yourself (`make replay` does not guess it)")
    if cfg.source.kind != "files":
        raise UsageError(f"replay writes JSON lines; pipeline {cfg.name} reads {cfg.source.kind} files")
    rows = quarantined(proto, batch_id, reason)
    keep = [r for r in rows if r["raw"] is not None and len(r["raw"]) < RAW_LIMIT and "\ufffd" not in r["raw"]
            and "\n" not in r["raw"]]
    skipped = len(rows) - len(keep)
    if not keep:
        raise UsageError(f"batch {batch_id} has no quarantined record to replay"
                         + (f" whose reason contains {reason!r}" if reason else "")
                         + (f" ({skipped} could not be kept exactly)" if skipped else ""))
    digest = hashlib.sha256(json.dumps([batch_id, reason or "", [(r["source"], r["position"]) for r in keep]])
                            .encode()).hexdigest()[:12]
    name = f"replay-b{batch_id}-{digest}.jsonl"
    path = join(join(cfg.source.path, REPLAY_DIR), name)
    fs = storage_for(path)
    consumed = proto._read_so_far().consumed(path)
    if fs.exists(path) or consumed is not None:
        raise UsageError(f"these records of batch {batch_id} were already replayed as {path}"
                         + (" and published by a later batch" if consumed is not None else "")
                         + "; replaying them again would publish them twice")
    lineage = [{"line": i + 1, "batch_id": batch_id, "source": r["source"], "position": r["position"],
                "reason": r["reason"]} for i, r in enumerate(keep)]
    fs.write_atomic(path + ".lineage.json", json.dumps({"replay_of_batch": batch_id, "reason_filter": reason,
                                                        "records": lineage}, indent=1).encode())
    fs.write_atomic(path, "".join(r["raw"] + "\n" for r in keep).encode())
    return {"file": path, "records": len(keep), "skipped": skipped, "lineage": path + ".lineage.json"}
