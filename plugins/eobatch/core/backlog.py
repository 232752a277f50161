"""What a pipeline has not published yet: its backlog and the age of its oldest unpublished record.

Read-only, from the same parts the planner uses: the landing listing of a files-like source
(``list_landing``: visible ``*.jsonl`` / ``*.parquet``, links never followed) judged against the
ledger's "read so far" (the plans whose ranges count as read: rewound and abandoned batches do
not), or, for Kafka, the broker's end offsets against where the newest plan stopped. Used by the
UI's ledger page; never plans, never writes.

What the product can know, and says so when it cannot:

* files, parquet: the files not yet planned (count, bytes; records when counting them is cheap:
  parquet footers, or JSON-lines files up to ``count_bytes_limit`` bytes in all, since counting
  lines reads the files) and the oldest modification time among them and among the files of the
  batch planned but not yet committed: the age of the oldest unpublished landing file. A file's
  modification time is when it was written; its records are at least that old.
* kafka: the records not yet planned per partition (end offset minus the next start). Their
  timestamps are only known by reading them, which the page does not do: no age.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

UNPUBLISHED = ("PLANNED", "STAGED", "PREPARED")


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="seconds")


def backlog(proto, count_bytes_limit: int = 64 << 20, now_ms: int | None = None,
            kafka_timeout: float = 5.0, count_records: bool = True,
            count_files_limit: int | None = None) -> dict[str, Any]:
    """The backlog of ``proto``'s pipeline (a ``Protocol``), as a JSON-able dict:

    ``kind``; ``files`` and ``bytes`` (files-like kinds); ``records`` (None when not counted);
    ``partitions`` (Kafka: {partition: records}); ``oldest_unpublished_at`` (ISO) and
    ``oldest_unpublished_age_s`` (None when unknown); ``unpublished`` (False: nothing waits, True:
    something does, None: not known); ``notes``: how each figure was obtained or
    why it is missing. A source that cannot be read now gives ``error`` instead of figures (a
    Kafka broker: after ``kafka_timeout`` seconds). ``count_records=False``: a files-like source's
    records are not counted at all (no line counting, no Parquet footer read): the listing only;
    ``count_files_limit``: nor when more files than that are not yet planned (a footer or a line
    count each).
    """
    from ..sources import source_for

    cfg = proto.cfg
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    out: dict[str, Any] = {"kind": cfg.source.kind, "files": None, "bytes": None, "records": None,
                           "partitions": None, "oldest_unpublished_at": None, "oldest_unpublished_age_s": None,
                           "unpublished": None, "notes": [], "error": None}
    try:
        source = source_for(cfg)
        read = proto._read_so_far()  # what the next plan would start from (the planner's own view)
        if hasattr(source, "list_landing"):
            _landing(proto, source, read, out, count_bytes_limit if count_records else None, count_files_limit)
        elif cfg.source.kind == "kafka":
            _kafka(cfg, read, out, kafka_timeout)
        else:
            out["notes"].append(f"the backlog of a {cfg.source.kind!r} source is not known to this page")
    except Exception as e:  # noqa: BLE001 - the page shows why, the ledger is still shown
        from ..storage.credentials import scrub

        out["error"] = scrub(f"{type(e).__name__}: {e}")  # shown on the page: never a connection's password
        return out
    oldest = out.pop("_oldest_ms", None)
    if oldest is not None:
        out["oldest_unpublished_at"] = _iso(oldest)
        out["oldest_unpublished_age_s"] = max(0.0, round((now_ms - oldest) / 1000, 1))
    return out


def _landing(proto, source, read, out: dict, count_bytes_limit: int | None,
             count_files_limit: int | None = None) -> None:
    """``count_bytes_limit`` None: records are not counted."""
    pending = [f for f in source.list_landing() if read.consumed(f.path) is None and read.void(f.path) is None]
    out["files"], out["bytes"] = len(pending), sum(f.size for f in pending)
    if count_bytes_limit is None:
        out["notes"].append("records not counted (not asked)")
    elif count_files_limit is not None and len(pending) > count_files_limit:
        out["notes"].append(f"records not counted: {len(pending)} files not yet planned (the page counts the "
                            f"records of at most {count_files_limit} files)")
    elif proto.cfg.source.kind == "parquet" or out["bytes"] <= count_bytes_limit:  # parquet: footers only
        try:
            out["records"] = sum(source._entry(f)["records"] for f in pending)  # the planner's own count
            out["notes"].append("records counted as the planner counts them")
        except Exception as e:  # noqa: BLE001 - e.g. a file over max_file_bytes: the plan will say it too
            out["notes"].append(f"records not counted: {e}")
    else:
        out["notes"].append(f"records not counted: {out['bytes']} bytes not yet planned (counting lines reads "
                            f"every file; the page counts up to {count_bytes_limit} bytes)")
    stamps = [f.mtime_ms for f in pending]
    latest = proto.ledger.latest_batch_id()
    if latest and proto.state(latest) in UNPUBLISHED:  # batches are strictly ordered: at most this one
        plan = proto.ledger.plan(latest)
        stamps += [int(f["mtime_ms"]) for f in (plan.range.get("files", []) if plan else []) if "mtime_ms" in f]
    out["unpublished"] = bool(stamps)
    if stamps:
        out["_oldest_ms"] = min(stamps)
        out["notes"].append("age: the oldest modification time of a landing file not yet published (planned or not)")
    else:
        out["notes"].append("nothing unpublished: every landing file is in a committed batch")
    if getattr(source, "links", None):
        out["notes"].append(f"{len(source.links)} symbolic link(s) in the landing zone are never read")


def _kafka(cfg, read, out: dict, timeout: float) -> None:
    from ..sources.kafka.client import settings
    from ..sources.kafka.planner import partition_offsets

    src = cfg.source
    offsets = partition_offsets(settings(src), src.topic, src.isolation_level, timeout=timeout)
    prev = read[-1].range if read else None
    parts = {}
    for p, (low, high) in sorted(offsets.items()):
        if prev is not None and prev.get("topic") == src.topic:
            start = int((prev.get("scan") or prev.get("partitions", {})).get(str(p), [0, 0])[1])  # scan: interval mode
        else:
            start = low if src.starting_offsets == "earliest" else high
        parts[str(p)] = max(0, high - max(start, low))
    out["partitions"], out["records"] = parts, sum(parts.values())
    out["notes"].append(f"records: end offsets of topic {src.topic!r} minus where the newest plan stopped")
    pending = (prev or {}).get("pending") or {}
    if pending:  # interval mode: records read already, kept for intervals that have not run
        out["notes"].append(f"{sum(c.get('records') or 0 for c in pending.values())} record(s) read for "
                            f"{len(pending)} interval(s) that have not run yet are waiting for their runs")
    out["notes"].append("age of the oldest unpublished record: not known (a Kafka record's timestamp is only "
                        "known by reading it, which this page does not do)")
