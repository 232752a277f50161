"""A pipeline's alerts (the YAML's ``alerts``), sent through Airflow notifiers.

Five conditions, each told to every notifier of ``alerts.notify``:

* ``failure``: a task of the pipeline failed for good (its retries exhausted): the task's
  ``on_failure_callback``, run by Airflow where the task ran;
* ``run_deadline``: a run still not finished ``run_deadline_minutes`` after it was queued:
  Airflow's own deadline alert (``DeadlineAlert`` on the DAG, checked by the scheduler, the
  callback run by the executor); no alert for a run that finished in time;
* ``backlog_age``: a plan left a backlog whose oldest unpublished landing file is older than
  ``backlog_max_age_minutes``: sent by that plan, then at most once per that many minutes
  while it lasts (an Airflow Variable remembers when), at once again after it recovered;
* ``stuck``: the pipeline's oldest pending batch passed a bound of the stuck detector
  (``eobatch.core.stuck``: tried by ``stuck_after_runs`` runs, or a stage attempt older than
  ``stuck_attempt_hours``): sent by the run's ``recover`` task, once per batch and cause, again at
  most once a day while it stays stuck (an Airflow Variable remembers it), at once again after it
  recovered;
* ``skipped_input``: a plan skipped landing inputs (a name that is not UTF-8, an unreadable
  folder or file, a file that is no longer a regular file, a Parquet footer whose row counts
  cannot be true, files whose names ``source.include`` does not take: one input, the landing
  folder, named once while any is there): sent by that plan for the inputs no earlier alert named (an Airflow Variable
  remembers which), whether ``alerts.on_failure`` is set or not, whenever ``alerts.notify`` has a
  notifier.

Notifiers are built afresh for each alert, and nothing of a pipeline file or of an alert is ever
a template: the e-mail notifier (``email:``) is the product's ``EmailNotifier``, which renders
nothing (literal recipients, sender, subject and body: ``alert.subject``, ``alert.html``), and a
notifier class (``notifier:``, imported only when the platform allows it in ``[eobatch]
allowed_notifiers``, see ``eobatch.config.notifiers``) is built as a subclass without templated
fields, with its literal ``args`` and the alert's fields its ``alert_args`` name (``subject``,
``text``, ``html``, ``kind``, ``pipeline``, ``url``, ``run_id``). The context handed to a notifier
holds no ``conn`` nor ``var``. An alert's text goes through Airflow's secrets masker first
(``connections.scrub``: the values it knows, and any URI's password, as ``***``; this module
registers the masker itself, as a deadline callback runs in the executor where nothing else of
eobatch may have). Sending never
fails a task; a notifier that fails is logged.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import importlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import BaseHook, Variable
from airflow.sdk.bases.notifier import BaseNotifier
from airflow.sdk.definitions.callback import SyncCallback
from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

from ..config import notifiers
from ..pipelines.loader import ConfigError, Notifier, PipelineConfig, load_pipeline
from ..sources.base import skipped_count
from ..storage.credentials import scrub
from . import connections as _masker  # noqa: F401 - registers Airflow's secrets masker with scrub

log = logging.getLogger(__name__)
SUBJECT_PREFIX = "[eobatch]"


@dataclass(frozen=True)
class Alert:
    kind: str  # failure | run_deadline | backlog_age | skipped_input | stuck
    pipeline: str
    subject: str
    lines: tuple[str, ...]
    url: str = ""  # the pipeline's ledger page
    run_id: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def html(self) -> str:
        body = "".join(f"<p>{html.escape(line)}</p>" for line in self.lines)
        link = f'<p><a href="{html.escape(self.url)}">Batch ledger of {html.escape(self.pipeline)}</a></p>'
        return body + (link if self.url else "")

    def masked(self) -> Alert:
        """The alert as notifiers see it: every line and the subject through ``scrub``."""
        return dataclasses.replace(self, subject=scrub(self.subject), lines=tuple(scrub(x) for x in self.lines),
                                   run_id=None if self.run_id is None else scrub(self.run_id))

    def template_value(self) -> dict[str, Any]:
        return {"kind": self.kind, "pipeline": self.pipeline, "subject": self.subject, "text": self.text,
                "html": self.html, "url": self.url, "run_id": self.run_id}


def ledger_url(pipeline: str) -> str:
    """The pipeline's ledger page under Airflow's ``[api] base_url`` ("" when it is not set)."""
    try:
        base = conf.get("api", "base_url", fallback="") or ""
    except Exception:  # noqa: BLE001 - a link is a nicety
        base = ""
    return f"{base.rstrip('/')}/eobatch/pipelines/{pipeline}" if base else ""


class EmailNotifier(BaseNotifier):
    """The product's e-mail notifier (``email:`` entries): the SMTP provider's hook, every field
    literal text. It has no templated field, so nothing a pipeline file or an alert says is ever
    rendered with the task context (which holds ``conn`` and ``var``); it attaches nothing, reads
    no template file and sets no header but the mail's own. ``smtp_conn_id`` must name an SMTP
    connection: another kind's host and password are never handed to an SMTP client."""

    template_fields: Sequence[str] = ()
    template_ext: Sequence[str] = ()

    def __init__(self, *, to: Sequence[str], subject: str, html_content: str, from_email: str | None = None,
                 smtp_conn_id: str | None = None):
        super().__init__()
        self.to, self.subject, self.html_content, self.from_email = list(to), subject, html_content, from_email
        self.smtp_conn_id = smtp_conn_id or conf.get("email", "email_conn_id", fallback="smtp_default")

    def notify(self, context: Any) -> None:
        # the SMTP provider: only when an e-mail is sent
        from airflow.providers.smtp.hooks.smtp import SmtpHook

        kind = BaseHook.get_connection(self.smtp_conn_id).conn_type
        if kind not in SMTP_CONN_TYPES:
            raise ValueError(f"connection {self.smtp_conn_id!r} is a {kind} connection, not an SMTP one")
        with SmtpHook(smtp_conn_id=self.smtp_conn_id) as hook:
            hook.send_email_smtp(to=self.to, from_email=self.from_email or hook.from_email, subject=self.subject,
                                 html_content=self.html_content)


SMTP_CONN_TYPES = ("smtp", "email")
# what a notifier is handed of the task's context: never the accessors of connections and variables
SECRET_CONTEXT_KEYS = ("conn", "var")


def _literal(cls: type) -> type:
    """``cls`` with no templated field and no template file: its arguments reach it as given."""
    return type(cls.__name__, (cls,), {"template_fields": (), "template_ext": (), "__module__": cls.__module__,
                                       "render_template_fields": lambda self, context, jinja_env=None: None})


def notifier(spec: Notifier, alert: Alert):
    """A fresh Airflow notifier of one ``alerts.notify`` entry for ``alert`` (raises when it cannot
    be built). A class is imported only when the platform allows it (``[eobatch] allowed_notifiers``)."""
    if spec.email:
        return EmailNotifier(to=spec.email, from_email=spec.from_email, smtp_conn_id=spec.smtp_conn_id,
                             subject=alert.subject, html_content=alert.html)
    path = str(spec.notifier)
    if path not in notifiers.allowed_notifiers():
        raise PermissionError(f"{path} is not a notifier class the platform allows "
                              f"([{notifiers.SECTION}] {notifiers.OPTION})")
    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, BaseNotifier)):
        raise TypeError(f"{spec.notifier} is not an Airflow notifier class (a BaseNotifier subclass)")
    given = alert.template_value()
    return _literal(cls)(**spec.args, **{k: given[field] for k, field in spec.alert_args.items()})


def check_notifiers(cfg: PipelineConfig) -> None:
    """At DAG parse time: every notifier of the pipeline can be built (raises ConfigError)."""
    sample = Alert("failure", cfg.name, f"{SUBJECT_PREFIX} {cfg.name}: check", ("check",))
    for i, spec in enumerate(cfg.alerts.notify):
        try:
            notifier(spec, sample)
        except Exception as e:  # noqa: BLE001 - named in the pipeline's import error
            raise ConfigError(cfg.file, f"alerts.notify[{i}]", f"cannot build the notifier: {type(e).__name__}: {e}") \
                from e


def send(cfg: PipelineConfig, alert: Alert, context: Any = None) -> int:
    """``alert`` to every notifier of ``cfg``, masked (``Alert.masked``); how many took it. Never raises."""
    alert = alert.masked()
    ctx = {k: v for k, v in dict(context or {}).items() if k not in SECRET_CONTEXT_KEYS}
    ctx["alert"] = alert.template_value()
    log.warning("alert %s: %s", alert.kind, alert.subject)
    sent = 0
    for spec in cfg.alerts.notify:  # each on its own: one that fails does not silence the others
        try:
            n = notifier(spec, alert)
            n(dict(ctx))
            sent += 1
        except Exception as e:  # noqa: BLE001 - alerts must not fail the task that sends them
            log.error("alert %s not sent by %s (%s: %s)", alert.kind, spec.notifier or "EmailNotifier",
                      type(e).__name__, scrub(str(e)))
    return sent


# -- failure: a task's on_failure_callback ---------------------------------------------------------

class OnFailure:
    """``on_failure_callback`` of every task of a pipeline with ``alerts.on_failure``."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg

    def __call__(self, context) -> None:
        send(self.cfg, failure_alert(self.cfg, context), context)


NEXT_STEP = {
    "recover": "Nothing new was planned. Fix the cause; the next run recovers the pending batch first.",
    "plan": "No batch was recorded by this run. Fix the cause; the next run plans again.",
    "stage": "Nothing was published: the attempt's staged files are removed by abort, and the next run "
             "re-stages the same source range.",
    "verify": "Nothing was published: the attempt's staged files are removed by abort, and the next run "
              "re-stages the same source range.",
    "commit": "The batch is PREPARED: the next run's recover finishes its commit (exactly once); nothing "
              "else is planned until it is.",
    "abort": "The staged files of the failed attempt may remain; the next run's recover sweeps them.",
}


def failure_alert(cfg: PipelineConfig, context) -> Alert:
    ti = context.get("ti")
    task_id = getattr(ti, "task_id", None) or "?"
    run_id = context.get("run_id") or getattr(ti, "run_id", None)
    error = context.get("exception")
    error_text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error or "unknown")
    if len(error_text) > 2000:
        error_text = error_text[:2000] + " …"
    lines = [f"Pipeline {cfg.name}: task {task_id} failed in run {run_id} "
             f"(try {getattr(ti, 'try_number', '?')}, its retries exhausted).",
             f"Error: {error_text}",
             NEXT_STEP.get(task_id, "")]
    log_url = getattr(ti, "log_url", None)
    if log_url:
        lines.append(f"Task log: {log_url}")
    return Alert("failure", cfg.name, f"{SUBJECT_PREFIX} {cfg.name}: {task_id} failed in run {run_id}",
                 tuple(x for x in lines if x), ledger_url(cfg.name), run_id)


# -- run deadline: Airflow's deadline alert --------------------------------------------------------

def deadline(cfg: PipelineConfig):
    """The DAG's ``deadline``: a run not finished ``run_deadline_minutes`` after it was queued
    calls ``run_deadline_missed`` in the executor; None without ``run_deadline_minutes``."""
    if cfg.alerts.run_deadline_minutes is None:
        return None
    return DeadlineAlert(reference=DeadlineReference.DAGRUN_QUEUED_AT,
                         interval=dt.timedelta(minutes=cfg.alerts.run_deadline_minutes),
                         callback=SyncCallback(run_deadline_missed, kwargs={"pipeline_file": cfg.file}),
                         name=f"{cfg.name}_run_deadline")


def run_deadline_missed(pipeline_file: str, context: dict | None = None, **_: Any) -> None:
    """The deadline alert's callback (``context``: the run as Airflow's REST API shows it)."""
    cfg = load_pipeline(pipeline_file)
    send(cfg, deadline_alert(cfg, context or {}))


def deadline_alert(cfg: PipelineConfig, context: dict) -> Alert:
    run = context.get("dag_run") or {}
    run_id = run.get("dag_run_id") or run.get("run_id")
    minutes = cfg.alerts.run_deadline_minutes
    lines = (f"Pipeline {cfg.name}: run {run_id} has not finished {minutes:g} min after it was queued "
             f"(queued {run.get('queued_at')}, started {run.get('start_date')}, state {run.get('state')}).",
             "Its batch is not lost: a run that is stopped or fails is finished or re-staged by the next run. "
             "The ledger page shows the batch's phase and the seconds of each.")
    return Alert("run_deadline", cfg.name, f"{SUBJECT_PREFIX} {cfg.name}: run {run_id} not finished after "
                 f"{minutes:g} min", lines, ledger_url(cfg.name), run_id)


# -- skipped landing inputs: sent by the plan task --------------------------------------------------

def check_skipped(cfg: PipelineConfig, skipped: list[dict], context: Any = None, state: Any = None) -> bool:
    """After a plan: alert on the landing inputs it skipped that no earlier alert named (``state``,
    Airflow Variables by default, keeps the ones named while they stay skipped); True when it alerted."""
    if not cfg.alerts.notify:
        return False
    state = AirflowVariables() if state is None else state
    key = f"eobatch.{cfg.name}.skipped_alerted"
    now = sorted({s["path"] for s in skipped})
    try:
        before = set(json.loads(state.get(key) or "[]"))
    except Exception as e:  # noqa: BLE001 - rather one alert too many than none
        log.warning("skipped-input alert state not read (%s: %s)", type(e).__name__, e)
        before = set()
    new = [s for s in skipped if s["path"] not in before]
    if now != sorted(before):
        _keep(state.set, key, json.dumps(now)) if now else _keep(state.delete, key)
    if not new:
        return False
    send(cfg, skipped_alert(cfg, new), context)
    return True


def skipped_alert(cfg: PipelineConfig, skipped: list[dict]) -> Alert:
    n = skipped_count(skipped)  # files not taken: each counted, named in one bounded note
    lines = (f"Pipeline {cfg.name}: the plan skipped {n} landing input(s); the rest was planned.",
             *[s["note"] for s in skipped[:20]],
             *([f"... and {len(skipped) - 20} more (the plan task's log names each)"] if len(skipped) > 20 else []))
    return Alert("skipped_input", cfg.name, f"{SUBJECT_PREFIX} {cfg.name}: {n} landing input(s) skipped",
                 lines, ledger_url(cfg.name))


# -- backlog age: sent by the plan task ------------------------------------------------------------

class AirflowVariables:
    """Where the backlog alert remembers when it was last sent: Airflow Variables."""

    def get(self, key: str) -> str | None:
        return Variable.get(key, default=None)

    def set(self, key: str, value: str) -> None:
        Variable.set(key, value, description="eobatch: when this pipeline's backlog age alert was last sent")

    def delete(self, key: str) -> None:
        Variable.delete(key)


def check_backlog(cfg: PipelineConfig, backlog: dict, context: Any = None, now: float | None = None,
                  state: Any = None) -> bool:
    """After a plan: alert when the oldest unpublished landing file is older than
    ``backlog_max_age_minutes``, at most once per that many minutes while it stays so (``state``,
    Airflow Variables by default, keeps when it was sent); True when it alerted."""
    limit = cfg.alerts.backlog_max_age_minutes
    if limit is None or backlog.get("error"):
        return False
    state = AirflowVariables() if state is None else state
    key, now = f"eobatch.{cfg.name}.backlog_age_alerted_at", time.time() if now is None else now
    age = backlog.get("oldest_unpublished_age_s")
    try:
        last = state.get(key)
    except Exception as e:  # noqa: BLE001 - rather one alert too many than none
        log.warning("backlog alert state not read (%s: %s)", type(e).__name__, e)
        last = None
    if age is None or age <= limit * 60:
        if last is not None:  # recovered: the next time it ages past the limit is told at once
            _keep(state.delete, key)
        return False
    if last is not None and now - float(last) < limit * 60:
        log.info("backlog older than %g min: alerted %.0f s ago, not again yet", limit, now - float(last))
        return False
    send(cfg, backlog_alert(cfg, backlog), context)
    _keep(state.set, key, str(now))
    return True


def _keep(fn, *args) -> None:
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - the alert itself is out; its state is best effort
        log.warning("backlog alert state not kept (%s: %s)", type(e).__name__, e)


def backlog_alert(cfg: PipelineConfig, backlog: dict) -> Alert:
    age_min = backlog["oldest_unpublished_age_s"] / 60
    limit = cfg.alerts.backlog_max_age_minutes
    waiting = ", ".join(f"{backlog[k]} {k}" for k in ("files", "bytes", "records") if backlog.get(k) is not None)
    lines = (f"Pipeline {cfg.name}: the oldest unpublished landing file is {age_min:.1f} min old "
             f"(limit {limit:g} min; since {backlog.get('oldest_unpublished_at')}).",
             f"Not planned yet: {waiting or 'nothing'}. The pipeline is falling behind its sources: run it more "
             f"often, raise source.max_records_per_batch, or look for failed runs.")
    return Alert("backlog_age", cfg.name, f"{SUBJECT_PREFIX} {cfg.name}: backlog {age_min:.0f} min old "
                 f"(limit {limit:g} min)", lines, ledger_url(cfg.name))


# -- a stuck batch: sent by the recover task -------------------------------------------------------

STUCK_REMIND_S = 24 * 3600  # a batch that stays stuck is told again once a day


def check_stuck(cfg: PipelineConfig, found: Any, context: Any = None, now: float | None = None,
                state: Any = None) -> bool:
    """After a recover: alert on ``found`` (``eobatch.core.stuck.Stuck``, or None: nothing is stuck)
    once per batch and cause, again after ``STUCK_REMIND_S`` while it stays so, at once again after
    it recovered (``state``, Airflow Variables by default, keeps what was told and when); True when
    it alerted."""
    if not cfg.alerts.notify:
        return False
    state = AirflowVariables() if state is None else state
    key, now = f"eobatch.{cfg.name}.stuck_alerted", time.time() if now is None else now
    try:
        last = json.loads(state.get(key) or "null")
    except Exception as e:  # noqa: BLE001 - rather one alert too many than none
        log.warning("stuck alert state not read (%s: %s)", type(e).__name__, e)
        last = None
    if found is None:
        if last is not None:  # recovered: the next stuck batch is told at once
            _keep(state.delete, key)
        return False
    what = f"{found.batch_id}:{found.cause}:{found.repair.name}"
    if isinstance(last, dict) and last.get("what") == what and now - float(last.get("at", 0)) < STUCK_REMIND_S:
        log.info("batch %s stuck: alerted %.0f s ago, not again yet", found.batch_id, now - float(last["at"]))
        return False
    send(cfg, stuck_alert(cfg, found), context)
    _keep(state.set, key, json.dumps({"what": what, "at": now}))
    return True


def stuck_alert(cfg: PipelineConfig, found: Any) -> Alert:
    return Alert("stuck", cfg.name, f"{SUBJECT_PREFIX} {cfg.name}: batch {found.batch_id} stuck ({found.state}, "
                 f"{found.runs} runs): {found.repair.name}", tuple(found.lines()), ledger_url(cfg.name))
