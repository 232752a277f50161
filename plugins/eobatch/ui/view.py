"""What the ledger page and the JSON API read: the pipeline's ledger rows (``eobatch.cli.ledger_rows``,
the function behind `make ledger`), its backlog, a page of batches, each with the pipeline's own
S3 settings (``pipeline_scope``: its connections, resolved per request). No pyspark; Airflow only
for the connections.

Only what the ledger holds is shown (and the pipeline's name, mode, source kind and schedule):
never the pipeline's connection settings, locations of its tables or any credential, nor the
names of other pipelines.

What one request may cost is bounded, whatever a signed-in user asks for:

* the pipeline files: each loaded again only when it changed (``PIPELINES``, a ``LoadCache``), each
  load bounded whatever the file holds (``config.yamlfile``);

* the JSON: at most ``JSON_LIMIT_MAX`` batches a request (``JSON_LIMIT_DEFAULT`` without ``limit``);
* the page: at most ``MAX_PER_PAGE`` + ``CHART_BATCHES`` batches read, each batch's plan shown with
  at most ``PAGE_FILES`` of its files and ``PAGE_NOTES`` of its notes (``PAGE_NOTE_CHARS`` each), and
  parsed once per process (``PagePlans``, by the plan record's identity): a page load costs the
  same whether a batch read 3 files or 20,000;
* the backlog (a landing listing and up to 64 MiB of line counting): computed at most once per
  ``BACKLOG_TTL_S`` seconds per pipeline in this process, by one request at a time (the others get
  the last figures, or a note); records are counted for at most ``BACKLOG_COUNT_FILES`` files;
* ``run_id``: looked up in an index of the newest ``RUN_SEARCH_LIMIT`` plans, built once per
  process and extended with the plans written since: an unknown run id reads no plan.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from ..airflow import pipelines_dir
from ..cli import ledger_row, ledger_rows, rows_json
from ..core.formats import BatchPlan, files_shown
from ..core.ledger import Ledger
from ..core.stuck import find_stuck
from ..errors import EobatchError
from ..pipelines.loader import LoadCache, PipelineConfig, load_all
from ..protocol import Protocol
from ..protocol.backlog import backlog
from ..protocol.maintenance import last_report, summary_line
from ..sources import range_summary
from ..storage import s3conf
from ..storage.credentials import scrub
from .page import CHART_BATCHES, Pager, PageView

NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
RUN_SEARCH_LIMIT = 1000  # the newest plans indexed by run id, to find the batch of a DAG run
JSON_LIMIT_DEFAULT = 1000  # batches of one JSON answer without ``limit``
JSON_LIMIT_MAX = 10000  # and with it
BACKLOG_TTL_S = 30.0  # the page's backlog figures are this old at most
BACKLOG_COUNT_FILES = 1000  # records are counted for at most this many files not yet planned
PAGE_FILES = 20  # files of one batch's range the page lists (the JSON lists them all)
PAGE_NOTES = 20  # notes of one batch the page shows, each cut at PAGE_NOTE_CHARS characters
PAGE_NOTE_CHARS = 2000
PAGE_PLANS = 1024  # plans kept as the page shows them, per process


PIPELINES = LoadCache()  # the pipeline files' loads, by file identity (every request looks a pipeline up)


class UnknownPipeline(LookupError):
    def __init__(self, name: str):
        super().__init__(f"no pipeline named {name!r}")
        self.name = name


def find(name: str) -> PipelineConfig:
    """The pipeline called ``name`` (the DAG id); ``UnknownPipeline`` when there is none."""
    # the errors are the DAG file's import errors: not repeated here; a file unchanged since the last
    # request is not loaded again (PIPELINES)
    good, _errors = load_all(pipelines_dir(), cache=PIPELINES)
    if not NAME.match(name) or name not in good:
        raise UnknownPipeline(name)
    return good[name]


class Memo:
    """One value per key, computed by one caller at a time and reused for ``ttl`` seconds. A caller
    that finds another one computing it gets the last value without waiting (``busy`` when there
    is none yet): a slow computation ties up one server thread, never one per request."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.ttl, self.clock = ttl, clock
        self._guard = threading.Lock()
        self._locks: dict[Any, threading.Lock] = {}
        self._values: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any, compute: Callable[[], Any], busy: Any = None) -> Any:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        hit = self._values.get(key)
        if hit is not None and self.clock() - hit[0] < self.ttl:
            return hit[1]
        if not lock.acquire(blocking=False):
            return hit[1] if hit is not None else busy
        try:
            hit = self._values.get(key)  # computed by the caller that held the lock just now
            if hit is not None and self.clock() - hit[0] < self.ttl:
                return hit[1]
            value = compute()
            self._values[key] = (self.clock(), value)
            return value
        finally:
            lock.release()


BACKLOGS = Memo(BACKLOG_TTL_S)
BACKLOG_BUSY = {"error": "being computed for another page load just now: reload in a moment"}


def page_backlog(proto: Protocol, problem: str | None = None) -> dict:
    """The backlog shown on the page (``BACKLOGS``: once per pipeline per ``BACKLOG_TTL_S``);
    ``problem``: why the source cannot be read with its own settings (``pipeline_scope``)."""
    if problem:
        return {"error": problem}
    cfg = proto.cfg
    return BACKLOGS.get((cfg.file, cfg.name), lambda: backlog(proto, count_files_limit=BACKLOG_COUNT_FILES),
                        busy=BACKLOG_BUSY)


@contextmanager
def pipeline_scope(cfg: PipelineConfig) -> Iterator[str | None]:
    """One request's calls for pipeline ``cfg`` with the pipeline's own S3 settings: its
    ``aws_conn_id``'s and its source's own connection's, resolved in the api-server as its tasks
    resolve them (``airflow.hooks.pipeline_store``), and never the process's environment (the next
    request is another pipeline's). Yields None, or why the source's own connection cannot serve
    (the backlog shows it; the ledger is read with the pipeline's own settings still)."""
    # the Airflow side's hooks: the UI runs in the api-server
    from ..airflow.hooks import pipeline_store

    problem = None
    try:
        store = pipeline_store(cfg)
    except EobatchError as e:
        problem, store = str(e), pipeline_store(cfg, buckets=False)
    with s3conf.using(store):
        yield problem


def page_plan(plan: BatchPlan) -> tuple[BatchPlan, str]:
    """(``plan`` as the page shows it, its range's summary): at most ``PAGE_FILES`` of its files
    (``files_not_shown`` says how many more) and ``PAGE_NOTES`` of its notes, each cut short."""
    rng = plan.range
    small = files_shown(rng, PAGE_FILES) if isinstance(rng, dict) else rng
    notes = [n if len(n) <= PAGE_NOTE_CHARS else n[:PAGE_NOTE_CHARS] + " [...]" for n in plan.notes[:PAGE_NOTES]]
    if len(plan.notes) > PAGE_NOTES:
        notes.append(f"... and {len(plan.notes) - PAGE_NOTES} more notes (the JSON and `eobatch ledger` show them all)")
    return dataclasses.replace(plan, range=small, notes=notes, late=[]), range_summary(plan)


class PagePlans:
    """Batch plans as the page shows them (``page_plan``) with their record's sha256, read once per
    process: keyed by the plan record's identity (path, size, and inode and mtime, or ETag and
    version on S3), so a batch that ``reset-batch`` forgot and planned again is read again. At
    most ``PAGE_PLANS``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: collections.OrderedDict[Any, tuple[BatchPlan, str, str]] = collections.OrderedDict()

    def get(self, proto: Protocol, batch_id: int) -> tuple[BatchPlan, str, str] | None:
        """(the plan as shown, its range's summary, its record's sha256), or None: no such plan."""
        fs, path = proto.ledger.fs, proto.layout.plan(batch_id)
        before = fs.stat(path)
        if before is None:
            return None
        key = (path, before.size, before.mtime_ms, tuple(before.identity or ()))
        with self._lock:
            hit = self._plans.get(key)
            if hit is not None:
                self._plans.move_to_end(key)
                return hit
        try:
            data = fs.read_bytes(path)
        except FileNotFoundError:
            return None
        shown = (*page_plan(BatchPlan.from_json(data)), hashlib.sha256(data).hexdigest())
        if fs.stat(path) == before:  # the record parsed is the one the key names
            with self._lock:
                self._plans[key] = shown
                while len(self._plans) > PAGE_PLANS:
                    self._plans.popitem(last=False)
        return shown


PLANS = PagePlans()


def page_rows(proto: Protocol, batch_ids: list[int]) -> list[dict]:
    """``ledger_rows`` of ``batch_ids`` as the page shows them: each plan from ``PLANS``."""
    versions = proto.committed_versions()
    rows = []
    for b in batch_ids:
        got = PLANS.get(proto, b)
        if got is not None:
            plan, summary, _digest = got
            rows.append(ledger_row(proto, plan, versions) | {"source_range": summary})
    return rows


class RunIndex:
    """DAG run id -> the newest batch it planned, over the newest ``RUN_SEARCH_LIMIT`` plans of a
    pipeline's ledger: each plan is read once per process (the index is extended with the plans
    written since the last look), so looking up a run id, known or not, reads at most one plan."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ledgers: dict[Any, tuple[int, dict[int, str | None]]] = {}  # key -> (latest, {batch: run id})

    def batch_of_run(self, key: Any, proto: Protocol, run_id: str, latest: int) -> int | None:
        with self._lock:
            seen, runs = self._ledgers.get(key, (0, {}))
            if latest < seen:  # batches were forgotten (reset-batch): index again
                seen, runs = 0, {}
            low = max(seen, latest - RUN_SEARCH_LIMIT)
            for b in range(low + 1, latest + 1):
                plan = proto.ledger.plan(b)
                runs[b] = plan.run_id if plan is not None else None
            runs = {b: r for b, r in runs.items() if b > latest - RUN_SEARCH_LIMIT}
            self._ledgers[key] = (latest, runs)
            hits = [b for b, r in runs.items() if r == run_id]
        if not hits:
            return None
        plan = proto.ledger.plan(max(hits))  # still that run's (a reset batch planned again is not)
        return plan.batch_id if plan is not None and plan.run_id == run_id else None


RUNS = RunIndex()


def batch_of_run(proto: Protocol, run_id: str, latest: int) -> int | None:
    """The newest batch planned by DAG run ``run_id`` (among the newest plans only)."""
    return RUNS.batch_of_run((proto.cfg.file, proto.cfg.name), proto, run_id, latest)


def page_view(cfg: PipelineConfig, page: int = 1, per_page: int = 25, run_id: str | None = None,
              airflow_base: str = "", batch: int | None = None) -> PageView:
    """One page of the ledger, newest first; with ``run_id`` the page holding that run's batch, with
    ``batch`` the page holding that batch (a downstream pipeline's link to a batch it read)."""
    with pipeline_scope(cfg) as problem:
        return _page_view(Protocol(cfg), page, per_page, run_id, airflow_base, batch, problem)


def _page_view(proto: Protocol, page: int, per_page: int, run_id: str | None, airflow_base: str,
               batch: int | None, problem: str | None) -> PageView:
    cfg = proto.cfg
    latest = proto.ledger.latest_batch_id()
    if batch is not None and 1 <= batch <= latest:
        page = Pager.page_of(latest, batch, per_page)
    elif run_id:
        b = batch_of_run(proto, run_id, latest)
        if b is not None:
            page = Pager.page_of(latest, b, per_page)
    pager = Pager.of(latest, page, per_page)
    page_ids = pager.batch_ids(latest)
    chart_ids = list(range(latest, max(0, latest - CHART_BATCHES), -1))
    rows = {r["batch_id"]: r for r in page_rows(proto, sorted(set(page_ids) | set(chart_ids)))}
    return PageView(
        pipeline=cfg.name, mode=cfg.mode, source_kind=cfg.source.kind, pager=pager,
        schedule=cfg.schedule or (f"on the asset events of {cfg.schedule_asset}" if cfg.schedule_asset else None),
        rows=[rows[b] for b in page_ids if b in rows], chart_rows=[rows[b] for b in reversed(chart_ids) if b in rows],
        backlog=page_backlog(proto, problem), committed_versions=proto.committed_versions(), run_id=run_id, batch=batch,
        airflow_base=airflow_base, description=cfg.description,
        maintenance=_maintenance_line(proto), stuck=page_stuck(proto),
        rewinds=[f"rewind at {r.requested_at} (run {r.run_id or '-'}): the tables back to before batch {r.to_batch}, "
                 f"batches {r.to_batch}..{r.after_batch} REWOUND and read again by later batches"
                 for r in proto.ledger.rewinds()]
        + [f"rewind to before batch {k.to_batch} CANCELLED: "
           f"{(proto.ledger.rewind_cancelled(k.after_batch, k.to_batch) or {}).get('why')}"
           for k in sorted(proto.ledger.cancelled_rewinds())])


class _PageLedger:
    """``proto``'s ledger whose plans are read through ``PLANS`` (the stuck detector reads the
    plan of the oldest open batch at every page load)."""

    def __init__(self, proto: Protocol):
        self._proto = proto

    def plan(self, batch_id: int) -> BatchPlan | None:
        got = PLANS.get(self._proto, batch_id)
        return got[0] if got is not None else None

    def plan_digest(self, batch_id: int) -> str | None:
        got = PLANS.get(self._proto, batch_id)
        return got[2] if got is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._proto.ledger, name)


def page_stuck(proto: Protocol) -> dict | None:
    """The stuck detector's finding (``eobatch.core.stuck``) as the page and its JSON show it; a
    ledger that cannot be read now: a finding that says so (the page still shows the rest)."""
    try:
        found = find_stuck(cast(Ledger, _PageLedger(proto)), proto.cfg)
    except Exception as e:  # noqa: BLE001 - the page shows why
        return {"error": scrub(f"{type(e).__name__}: {e}")}
    return found.to_json() if found is not None else None


def stuck_json(cfg: PipelineConfig) -> str:
    """``GET /eobatch/api/pipelines/<name>/stuck``: {"pipeline", "stuck"}, ``stuck`` the detector's
    finding (``eobatch.core.stuck.Stuck``) or null."""
    with pipeline_scope(cfg):
        return json.dumps({"pipeline": cfg.name, "stuck": page_stuck(Protocol(cfg))}, indent=1, default=str)


def _maintenance_line(proto) -> str | None:
    try:
        report = last_report(proto)
    except Exception as e:  # noqa: BLE001 - the page still shows the ledger
        return f"last maintenance: not readable now ({type(e).__name__})"
    return summary_line(report, proto.names) if report else None


def batches_json(cfg: PipelineConfig, limit: int = JSON_LIMIT_DEFAULT, offset: int = 0) -> str:
    """`make ledger FORMAT=json` of the pipeline: the same rows, the same encoding (oldest first);
    ``limit`` / ``offset``: a slice of that list, ``limit`` at most ``JSON_LIMIT_MAX``."""
    limit = max(0, min(limit, JSON_LIMIT_MAX))
    with pipeline_scope(cfg):
        proto = Protocol(cfg)
        # batch ids are 1..latest without gaps: the slice [offset, offset + limit) is ids offset+1..
        latest = proto.ledger.latest_batch_id()
        end = min(latest, offset + limit)
        return rows_json(ledger_rows(proto, range(offset + 1, end + 1)))
