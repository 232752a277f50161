"""What the ledger page and the JSON API read: the pipeline's ledger rows (``eobatch.cli.ledger_rows``,
the function behind `make ledger`), its backlog, a page of batches. No Airflow, no pyspark.

Only what the ledger holds is shown (and the pipeline's name, mode, source kind and schedule):
never the pipeline's connection settings, locations of its tables or any credential.
"""

from __future__ import annotations

import re

from ..backlog import backlog
from ..cli import ledger_rows, rows_json
from ..config import PipelineConfig, load_all
from ..protocol import Protocol
from .page import CHART_BATCHES, Pager, PageView

NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
RUN_SEARCH_LIMIT = 1000  # plans read, newest first, to find the batch of a DAG run


class UnknownPipeline(LookupError):
    def __init__(self, name: str, known: list[str]):
        super().__init__(f"no pipeline named {name!r}")
        self.name, self.known = name, known


def find(name: str) -> PipelineConfig:
    """The pipeline called ``name`` (the DAG id); ``UnknownPipeline`` when there is none."""
    good, _errors = load_all()  # the errors are the DAG file's import errors: not repeated here
    if not NAME.match(name) or name not in good:
        raise UnknownPipeline(name, sorted(good))
    return good[name]


def batch_of_run(proto: Protocol, run_id: str, latest: int) -> int | None:
    """The newest batch planned by DAG run ``run_id`` (looking at the newest plans only)."""
    for b in range(latest, max(0, latest - RUN_SEARCH_LIMIT), -1):
        plan = proto.ledger.plan(b)
        if plan is not None and plan.run_id == run_id:
            return b
    return None


def page_view(cfg: PipelineConfig, page: int = 1, per_page: int = 25, run_id: str | None = None,
              airflow_base: str = "") -> PageView:
    """One page of the ledger, newest first; with ``run_id`` the page holding that run's batch."""
    proto = Protocol(cfg)
    latest = proto.ledger.latest_batch_id()
    if run_id:
        b = batch_of_run(proto, run_id, latest)
        if b is not None:
            page = Pager.page_of(latest, b, per_page)
    pager = Pager.of(latest, page, per_page)
    page_ids = pager.batch_ids(latest)
    chart_ids = list(range(latest, max(0, latest - CHART_BATCHES), -1))
    rows = {r["batch_id"]: r for r in ledger_rows(proto, sorted(set(page_ids) | set(chart_ids)))}
    return PageView(
        pipeline=cfg.name, mode=cfg.mode, source_kind=cfg.source.kind, schedule=cfg.schedule, pager=pager,
        rows=[rows[b] for b in page_ids if b in rows], chart_rows=[rows[b] for b in reversed(chart_ids) if b in rows],
        backlog=backlog(proto), committed_versions=proto.committed_versions(), run_id=run_id,
        airflow_base=airflow_base, description=cfg.description,
        maintenance=_maintenance_line(proto),
        rewinds=[f"rewind at {r.requested_at} (run {r.run_id or '-'}): the tables back to before batch {r.to_batch}, "
                 f"batches {r.to_batch}..{r.after_batch} REWOUND and read again by later batches"
                 for r in proto.ledger.rewinds()])


def _maintenance_line(proto) -> str | None:
    from ..maintenance import last_report, summary_line

    try:
        report = last_report(proto)
    except Exception as e:  # noqa: BLE001 - the page still shows the ledger
        return f"last maintenance: not readable now ({type(e).__name__})"
    return summary_line(report) if report else None


def batches_json(cfg: PipelineConfig, limit: int | None = None, offset: int = 0) -> str:
    """`make ledger FORMAT=json` of the pipeline: the same rows, the same encoding (oldest first);
    ``limit`` / ``offset``: a slice of that list."""
    proto = Protocol(cfg)
    if limit is None and not offset:
        return rows_json(ledger_rows(proto))
    # batch ids are 1..latest without gaps: the slice [offset, offset + limit) is ids offset+1..
    latest = proto.ledger.latest_batch_id()
    end = latest if limit is None else min(latest, offset + limit)
    return rows_json(ledger_rows(proto, range(offset + 1, end + 1)))
