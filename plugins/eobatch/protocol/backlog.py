"""What a pipeline has not published yet: its backlog and the age of its oldest unpublished record.

Read-only, from the same parts the planner uses: each source kind's planner (``Planner.backlog``)
judges what it sees (a files-like kind its landing listing, ``list_landing``: visible ``*.jsonl``
/ ``*.parquet``, links never followed; Kafka the broker's end offsets) against the ledger's
"read so far" (the plans whose ranges count as read: rewound and abandoned batches do not). Used
by the UI's ledger page and the plan task's backlog alert; never plans, never writes.

What the product can know, and says so when it cannot:

* files, parquet: the files not yet planned (count, bytes; records when counting them is cheap:
  parquet footers, or JSON-lines files up to ``count_bytes_limit`` bytes in all, since counting
  lines reads the files) and the oldest modification time among them and among the files of the
  first batch planned but not yet committed (the oldest files: whole files are planned oldest
  first): the age of the oldest unpublished landing file. A file's
  modification time is when it was written; its records are at least that old.
* kafka: the records not yet planned per partition (end offset minus the next start). Their
  timestamps are only known by reading them, which the page does not do: no age.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Any

from ..sources import source_for
from ..sources.base import BacklogAsk, Planner
from ..storage.credentials import scrub

if TYPE_CHECKING:
    from ..core.formats import BatchPlan
    from .verbs import Protocol

UNPUBLISHED = ("PLANNED", "STAGED", "PREPARED")


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="seconds")


def _first_unpublished(proto: Protocol) -> BatchPlan | None:
    """The plan of the first batch not yet published (a run may carry several): planned first, its
    files the oldest."""
    latest = proto.ledger.latest_batch_id()
    versions = proto.committed_versions()
    first = next((b for b in range(min(versions.values()) + 1, latest + 1)
                  if proto.state(b, versions) in UNPUBLISHED), None) if latest else None
    return proto.ledger.plan(first) if first else None


def backlog(proto: Protocol, count_bytes_limit: int = 64 << 20, now_ms: int | None = None,
            kafka_timeout: float = 5.0, count_records: bool = True,
            count_files_limit: int | None = None, planner: Planner | None = None) -> dict[str, Any]:
    """The backlog of ``proto``'s pipeline, as a JSON-able dict:

    ``kind``; ``files`` and ``bytes`` (files-like kinds); ``records`` (None when not counted);
    ``partitions`` (Kafka: {partition: records}); ``oldest_unpublished_at`` (ISO) and
    ``oldest_unpublished_age_s`` (None when unknown); ``unpublished`` (False: nothing waits, True:
    something does, None: not known); ``notes``: how each figure was obtained or
    why it is missing. A source that cannot be read now gives ``error`` instead of figures (a
    Kafka broker: after ``kafka_timeout`` seconds). ``count_records=False``: a files-like source's
    records are not counted at all (no line counting, no Parquet footer read): the listing only;
    ``count_files_limit``: nor when more files than that are not yet planned (a footer or a line
    count each). ``not_taken``: landing files whose names ``source.include`` does not take (never
    read; a note names them); a landing folder that cannot be read is an ``error``. The figures are the source kind's (``Planner.backlog``).
    ``planner``: the one a plan just planned with (``Protocol.last_planner``), which answers from the
    run's own read of its source (a landing folder listed once per plan task); else a new one.
    """
    cfg = proto.cfg
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    out: dict[str, Any] = {"kind": cfg.source.kind, "files": None, "bytes": None, "records": None,
                           "partitions": None, "oldest_unpublished_at": None, "oldest_unpublished_age_s": None,
                           "unpublished": None, "not_taken": None, "notes": [], "error": None}
    ask = BacklogAsk(count_records=count_records, count_bytes_limit=count_bytes_limit,
                     count_files_limit=count_files_limit, timeout=kafka_timeout)
    try:
        source = planner or source_for(cfg)
        if planner is not None and proto.last_reading is not None:
            # the plan task's: the history its plans were planned from, with them (no second read of the
            # ledger); its first new batch is the oldest not yet published (it plans none while one is)
            hist, plan = proto.last_reading
            read = proto.read_so_far(hist=hist)
        else:
            read = proto.read_so_far()  # what the next plan would start from (the planner's own view)
            plan = _first_unpublished(proto)
        figures = source.backlog(read, plan.range if plan else None, ask)
    except Exception as e:  # noqa: BLE001 - the page shows why, the ledger is still shown
        out["error"] = scrub(f"{type(e).__name__}: {e}")  # shown on the page: never a connection's password
        return out
    oldest = figures.pop("oldest_ms", None)
    out["notes"] += figures.pop("notes", [])
    out.update({k: v for k, v in figures.items() if k in out})
    if oldest is not None:
        out["oldest_unpublished_at"] = _iso(oldest)
        out["oldest_unpublished_age_s"] = max(0.0, round((now_ms - oldest) / 1000, 1))
    return out
