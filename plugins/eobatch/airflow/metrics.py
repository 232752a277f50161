"""A pipeline's metrics, sent through Airflow's own metrics client (StatsD or OpenTelemetry, as
``[metrics]`` configures Airflow; nothing is sent when neither is on).

One definition of the names (Airflow adds its ``statsd_prefix``, ``airflow.`` by default):

================================================  =======  ========================================
``eobatch.<pipeline>.batches_committed``          counter  1 per batch, by the call that committed it
``eobatch.<pipeline>.rows_in``                    counter  the batch's source records
``eobatch.<pipeline>.rows_published``             counter  rows the batch published in the sink
``eobatch.<pipeline>.rows_quarantined``           counter  records it published in the quarantine
``eobatch.<pipeline>.rows_dropped``               counter  records an expectation (action drop) removed
``eobatch.<pipeline>.expectation_<name>_failed``  counter  records that failed expectation <name>
``eobatch.<pipeline>.bytes_published``            counter  bytes of the files it published
``eobatch.<pipeline>.<phase>_seconds``            timer    plan, stage, verify, commit (ms, StatsD)
``eobatch.<pipeline>.backlog_files``              gauge    files not planned yet (files-like kinds)
``eobatch.<pipeline>.backlog_bytes``              gauge    their bytes
``eobatch.<pipeline>.backlog_records``            gauge    records not planned yet (Kafka)
``eobatch.<pipeline>.oldest_unpublished_age_s``   gauge    age of the oldest unpublished landing file
``eobatch.<pipeline>.late_files``                 counter  files a plan found late (interval mode)
``eobatch.<pipeline>.late_files_<action>``        counter  the same, by what was done with them
``eobatch.<pipeline>.landing_skipped``            gauge    landing inputs the plan skipped (bad name,
                                                           unreadable, not a regular file, not taken)
``eobatch.<pipeline>.landing_not_taken``          gauge    landing files whose names ``source.include``
                                                           does not take (never read)
``eobatch.<pipeline>.landing_unreadable``         gauge    1: the plan failed, the landing folder
                                                           cannot be read (missing, not a folder,
                                                           denied); 0 after a plan task that succeeded
``eobatch.<pipeline>.stuck_runs``                 gauge    runs that tried the stuck batch (0: nothing
                                                           is stuck; ``eobatch.core.stuck``)
================================================  =======  ========================================

The batch figures are sent once per committed batch: by the task whose call wrote the batch's
COMMITTED ledger record (put-if-absent), the same condition as its asset events; the backlog by
each plan, after it recorded its range. The functions building them are pure; ``send`` is the
only one that talks to Airflow, and a metrics failure never fails a task.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from ..sources.base import skipped_count

log = logging.getLogger(__name__)
PHASES = ("plan", "stage", "verify", "commit")


class Metric(NamedTuple):
    kind: str  # "incr", "gauge" or "timing"
    name: str
    value: float


def _name(pipeline: str, what: str) -> str:
    return f"eobatch.{pipeline}.{what}"


def batch_metrics(pipeline: str, plan, prepared, committed) -> list[Metric]:
    """The metrics of one committed batch (its plan, PREPARED and COMMITTED ledger records)."""
    out = [Metric("incr", _name(pipeline, "batches_committed"), 1)]
    for what, value in (("rows_in", prepared.rows_in), ("rows_published", prepared.rows_published),
                        ("rows_quarantined", prepared.rows_quarantined), ("rows_dropped", prepared.rows_dropped),
                        ("bytes_published", prepared.bytes)):
        out.append(Metric("incr", _name(pipeline, what), int(value or 0)))
    for name, failed in sorted((prepared.expectations or {}).items()):
        out.append(Metric("incr", _name(pipeline, f"expectation_{name}_failed"), int(failed)))
    seconds = {"plan": plan.plan_seconds, "stage": prepared.stage_seconds, "verify": prepared.verify_seconds,
               "commit": committed.commit_seconds}
    for phase in PHASES:
        if seconds[phase] is not None:
            out.append(Metric("timing", _name(pipeline, f"{phase}_seconds"), round(1000 * float(seconds[phase]), 1)))
    return out


def backlog_metrics(pipeline: str, backlog: dict[str, Any]) -> list[Metric]:
    """Gauges of a backlog (``eobatch.protocol.backlog.backlog``); a figure that is not known is not sent."""
    if backlog.get("error"):
        return []
    out = []
    for key, what in (("files", "backlog_files"), ("bytes", "backlog_bytes"), ("records", "backlog_records"),
                      ("oldest_unpublished_age_s", "oldest_unpublished_age_s")):
        if backlog.get(key) is not None:
            out.append(Metric("gauge", _name(pipeline, what), backlog[key]))
    if backlog.get("unpublished") is False and backlog.get("oldest_unpublished_age_s") is None:
        out.append(Metric("gauge", _name(pipeline, "oldest_unpublished_age_s"), 0))
    return out


def late_file_metrics(pipeline: str, late: list[dict]) -> list[Metric]:
    """Counters of the files a plan found late (``BatchPlan.late`` / ``Protocol.last_late``)."""
    out = []
    for found in late:
        out.append(Metric("incr", _name(pipeline, "late_files"), len(found["files"])))
        out.append(Metric("incr", _name(pipeline, f"late_files_{found['action']}"), len(found["files"])))
    return out


def skipped_metrics(pipeline: str, skipped: list[dict]) -> list[Metric]:
    """The gauges of the landing inputs a plan skipped (``Protocol.last_skipped``, each file of an
    entry of files not taken counted: ``sources.base.skipped_count``) and of the files not taken
    among them; 0 when none. After a plan task that succeeded: ``landing_unreadable`` 0."""
    not_taken = sum(int(s.get("count", 1)) for s in skipped if s.get("not_taken"))
    return [Metric("gauge", _name(pipeline, "landing_skipped"), skipped_count(skipped)),
            Metric("gauge", _name(pipeline, "landing_not_taken"), not_taken),
            Metric("gauge", _name(pipeline, "landing_unreadable"), 0)]


def unreadable_metrics(pipeline: str) -> list[Metric]:
    """The gauge of a plan that failed because the landing folder cannot be read (``LandingUnreadable``)."""
    return [Metric("gauge", _name(pipeline, "landing_unreadable"), 1)]


def stuck_metrics(pipeline: str, found: Any) -> list[Metric]:
    """The gauge of the stuck detector after a recover (``eobatch.core.stuck.Stuck`` or None): the
    runs that tried the stuck batch, 0 when nothing is stuck."""
    return [Metric("gauge", _name(pipeline, "stuck_runs"), found.runs if found is not None else 0)]


def send(metrics: list[Metric]) -> None:
    """Through Airflow's metrics client; logged and dropped on any error (metrics are best effort)."""
    if not metrics:
        return
    try:
        # inside the try: a metrics client that cannot even be loaded never fails a batch
        from airflow.sdk.observability import stats

        for m in metrics:
            if m.kind == "incr":
                stats.incr(m.name, count=int(m.value))
            elif m.kind == "gauge":
                stats.gauge(m.name, m.value)
            else:
                stats.timing(m.name, m.value)
    except Exception as e:  # noqa: BLE001 - a metrics backend must never fail a batch
        log.warning("metrics not sent (%s: %s)", type(e).__name__, e)
