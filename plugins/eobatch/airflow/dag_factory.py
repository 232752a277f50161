"""One DAG per pipeline YAML: recover -> plan -> stage -> verify -> commit, abort on failure.

A YAML that does not load becomes an import error naming the file and the key (visible in
the Airflow UI and in `airflow dags list-import-errors`); every other pipeline still loads.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG, BaseOperator, Param, TaskGroup

from ..config.model import NAME_RE
from ..config.pipeline import MAX_BATCHES_PER_RUN
from ..config.yamlfile import clip
from ..pipelines.loader import ConfigError, PipelineConfig, load_all, load_pipeline
from ..pipelines.loader import pipelines_dir as loader_pipelines_dir
from . import alerts, assets
from .operators import (
    ABORT_TASK,
    COMMIT_TASK,
    PLAN_TASK,
    RECOVER_TASK,
    STAGE_TASK,
    VERIFY_TASK,
    AbortOperator,
    CommitOperator,
    MaintainOperator,
    PlanOperator,
    RecoverOperator,
    StageOperator,
    VerifySensor,
)
from .params import PARAMS_DOC, PARAMS_FORM, params_for_mode


def scheduling_asset(cfg: PipelineConfig, pipelines: dict[str, PipelineConfig] | None = None):
    """The Asset whose events start ``cfg``'s runs (``schedule: {asset: ...}``): a table's, or the
    sink table's of the pipeline of that name among ``pipelines`` (the folder's); ConfigError for a
    name no pipeline of the folder has."""
    target = cfg.schedule_asset
    if target is None:
        return None
    if NAME_RE.fullmatch(target):
        upstream = (pipelines or {}).get(target)
        if upstream is None:
            raise ConfigError(cfg.file, "schedule.asset", f"names pipeline {target!r}, which is not a pipeline of "
                              f"this folder ({', '.join(sorted(pipelines or {})) or 'none loaded'}); name one of "
                              f"them, or give its sink.table")
        target = upstream.sink_table
    return assets.table_asset(target)


def timetable_for(cfg: PipelineConfig, pipelines: dict[str, PipelineConfig] | None = None):
    """Continuous mode: the schedule as given (each run takes what is there at plan time).

    Interval mode: a timetable whose runs cover the time between two cron ticks. Airflow 3's
    default for a cron string (CronTriggerTimetable) gives zero-length data intervals.
    """
    if cfg.schedule_asset is not None:  # runs on that table's asset events (continuous mode only)
        return scheduling_asset(cfg, pipelines)
    if cfg.mode != "interval":
        return cfg.schedule
    # Airflow's timetables: only an interval-mode pipeline's DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    return CronDataIntervalTimetable(cfg.require_interval_cron(), timezone="UTC")


# Every try of a task has a bound. recover, commit and abort do metadata work (ledger records, one
# Delta commit per table of already written files, deleting an attempt's files): a try that hangs
# (a store that accepts a connection and never answers) ends here and is retried; each is
# idempotent. The stage task's bound is the pipeline's (retries.stage_timeout_seconds); verify and
# plan are sensors with their own timeouts.
STEP_TIMEOUT = dt.timedelta(hours=1)


def run_params(mode: str = "continuous") -> dict:
    """The trigger form: titled fields in sections; no rewind fields, nor batches per run, in interval mode."""
    schema: dict[str, dict[str, Any]] = {
        "max_records_per_batch": dict(default=None, type=["null", "integer"], minimum=1),
        "max_batches_per_run": dict(default=None, type=["null", "integer"], minimum=1, maximum=MAX_BATCHES_PER_RUN),
        "dry_run": dict(default=False, type="boolean"),
        "rewind_to_batch": dict(default=None, type=["null", "integer"], minimum=1),
        "confirm_rewind": dict(default=False, type="boolean"),
        "accept_loss": dict(default=False, type="boolean"),
        "replan_pending": dict(default=False, type="boolean"),
    }
    out = {}
    for key in params_for_mode(mode):
        title, section = PARAMS_FORM[key]
        out[key] = Param(description=PARAMS_DOC[key], title=title, section=section, **schema[key])
    return out


DOC = """
### Exactly-once pipeline `{name}`

`{source}` → Delta table `{sink}` (quarantine: `{quarantine}`), transform `{transform}`.

Each run carries up to {batches} micro-batch(es) (`max_batches_per_run`), each under its own two-phase commit:
**recover** (commit a PREPARED batch, re-stage a PLANNED one, sweep orphans) →
**plan** (record the exact source range) → **stage** (spark-submit, staged files invisible to
readers; one Spark application for all the run's batches) → **verify** (every partition's manifest,
files, sizes, counts, schema ⇒ PREPARED, per batch) → **commit** (per batch, in order: one Delta
transaction per table with `txn(appId={name}, version=batch)`).
Each committed batch emits one event on the asset `{asset}` (alias `{alias}`), extra: batch id,
Delta version, rows, source range; none for a dry run, a skipped run or a recommit. A batch whose
committing task died before Airflow stored its events gets them from the retry or the next run's recover.
A failure before PREPARED runs **abort** (the attempt's files are removed; the batch keeps its
range and is re-staged by the next run).

Mode `{mode}`{schedule}. Params (trigger form): `max_records_per_batch` caps a *new* batch (a pending
batch keeps its range); `max_batches_per_run` (continuous mode) how many new batches the run plans; `dry_run` stages and verifies, then aborts and reports what would have
been published; `rewind_to_batch` (continuous mode) restores the tables to before that batch and
reads again from its start: run it with `dry_run` first (a report, nothing changed), then with
`confirm_rewind`. Unknown or invalid params are refused before anything is planned.
"""


def build_dag(cfg: PipelineConfig, pipelines: dict[str, PipelineConfig] | None = None) -> DAG:
    """The DAG of pipeline ``cfg``; ``pipelines``: the folder's, by name (a schedule on another
    pipeline's asset names one of them)."""
    default_args = {
        "owner": "eobatch",
        "retries": 0,
        "retry_delay": dt.timedelta(seconds=cfg.retry_delay_seconds),
    }
    if cfg.alerts.notify:
        alerts.check_notifiers(cfg)  # a notifier that cannot be built is an error of this pipeline's file
    with DAG(
        dag_id=cfg.name,
        description=cfg.description or cfg.shown(f"exactly-once {cfg.source.kind} -> Delta: {cfg.sink_table}"),
        schedule=timetable_for(cfg, pipelines),
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,  # no catch-up storm; past intervals are published with `airflow backfill create`
        max_active_runs=1,  # one committer per pipeline at a time; correctness does not rely on it
        default_args=default_args,
        params=run_params(cfg.mode),
        deadline=alerts.deadline(cfg),  # alerts.run_deadline_minutes: Airflow's deadline alert
        tags=["eobatch", cfg.source.kind, cfg.mode],
        doc_md=cfg.shown(DOC.format(name=cfg.name, source=cfg.source.describe(), sink=cfg.sink_table,
                          asset=assets.asset_uri(cfg.sink_table), alias=assets.alias_name(cfg.name),
                          quarantine=cfg.quarantine_table, transform=cfg.transform, mode=cfg.mode,
                          batches=cfg.max_batches_per_run,
                          schedule=f", schedule `{cfg.schedule}`" if cfg.schedule else
                          f", runs on the asset events of `{cfg.schedule_asset}`" if cfg.schedule_asset else
                          ", manual triggers only")),
    ) as dag:
        add_pipeline_tasks(cfg)  # in the DAG's root: the task ids are the labels ("plan", ...)
    return dag


def add_pipeline_tasks(cfg: PipelineConfig) -> dict[str, BaseOperator]:
    """The one definition of a pipeline's task graph, added to the DAG or TaskGroup being defined
    (``with DAG(...)``, ``with TaskGroup(...)``): recover >> plan >> stage >> verify >> commit, and
    abort after a failed stage or verify (then commit does not run). The first task is recover, the
    last one commit. Each task is labelled with its step (``operators.STEPS``;
    its id is the label with its group's prefix) and finds its siblings through its group. Every
    setting a task needs is its own (retries, delay, bounds, XCom push, failure alert): the same
    whatever the surrounding DAG's default_args say. Returns the tasks by label."""
    f = cfg.file
    # The published tables are Airflow Assets (eobatch.airflow.assets): events are added through the
    # pipeline's alias by the tasks that can commit a batch, once per committed batch.
    published = assets.batch_alias(cfg.name)
    own: dict[str, Any] = {"retry_delay": dt.timedelta(seconds=cfg.retry_delay_seconds), "do_xcom_push": True}
    if cfg.alerts.notify and cfg.alerts.on_failure:
        own["on_failure_callback"] = alerts.OnFailure(cfg)
    # recover may finish a commit (a PREPARED batch): it retries what the commit task retries
    # (a lost race with maintenance, a store that is down), rather than fail the run for it
    commit_retry = dict(retries=cfg.commit_retries, retry_exponential_backoff=True,
                        max_retry_delay=dt.timedelta(minutes=10), execution_timeout=STEP_TIMEOUT)
    # both read the alias's events too (inlet): a batch whose events a killed task lost is announced once
    recover = RecoverOperator(task_id=RECOVER_TASK, pipeline_file=f, outlets=[published], inlets=[published],
                              **commit_retry, **own)
    plan = PlanOperator(task_id=PLAN_TASK, pipeline_file=f, retries=cfg.plan_retries,
                        timeout=cfg.plan_wait_seconds, **own)
    # Backfills run with their own max_active_runs: commits of one table are serialised here
    # too (one commit task instance of this pipeline at a time), though correctness holds
    # without it (txn conflicts and strictly ordered batches).
    stage = StageOperator(task_id=STAGE_TASK, pipeline_file=f, conn_id=cfg.spark.conn_id,
                          retries=cfg.stage_retries,
                          execution_timeout=dt.timedelta(seconds=cfg.stage_timeout_seconds), **own)
    verify = VerifySensor(task_id=VERIFY_TASK, pipeline_file=f, timeout=cfg.verify_timeout_seconds, retries=0,
                          **own)
    # commit comes after abort too, which is skipped when nothing failed: commit is the graph's one last
    # task (a TaskGroup's leaves are its tasks without a downstream in it), so a task of the user's after
    # the group waits for the commit, and a run that succeeded never skips it for the skipped abort
    commit = CommitOperator(task_id=COMMIT_TASK, pipeline_file=f, outlets=[published], inlets=[published],
                            max_active_tis_per_dag=1, trigger_rule="none_failed_min_one_success",
                            **commit_retry, **pool_args(cfg), **own)
    abort = AbortOperator(task_id=ABORT_TASK, pipeline_file=f, execution_timeout=STEP_TIMEOUT, retries=0, **own)
    recover >> plan >> stage >> verify >> commit
    [stage, verify] >> abort >> commit  # commit: none of them failed (verify succeeded, abort skipped)
    return {RECOVER_TASK: recover, PLAN_TASK: plan, STAGE_TASK: stage, VERIFY_TASK: verify, COMMIT_TASK: commit,
            ABORT_TASK: abort}


def pipeline_schedule(pipeline: str | PipelineConfig, directory: str | None = None):
    """The schedule the pipeline's generated DAG has (``timetable_for``: its cron, an interval-mode
    pipeline's data-interval timetable, or the Asset it runs on), for a user's DAG that holds its tasks."""
    cfg = resolve_pipeline(pipeline, directory)
    folder = load_all(os.path.dirname(cfg.file))[0] if cfg.schedule_asset and NAME_RE.fullmatch(cfg.schedule_asset) \
        else None
    return timetable_for(cfg, folder)


def names_a_file(pipeline: str) -> bool:
    """Does ``pipeline`` (``pipeline_tasks``' argument) name a file (a path) rather than a pipeline's name?"""
    return os.sep in pipeline or "/" in pipeline or pipeline.endswith((".yaml", ".yml"))


def resolve_pipeline(pipeline: str | PipelineConfig, directory: str | None = None) -> PipelineConfig:
    """A pipeline given by its file (a path: it has a ``/`` or ends ``.yaml``/``.yml``) or by its name in
    ``directory`` (default: ``PIPELINES_DIR`` or a checkout's folder; ``eobatch.airflow``'s functions pass
    ``pipelines_dir()``, which reads Airflow's option too). ConfigError naming the file, or the
    folder and the names it holds."""
    if isinstance(pipeline, PipelineConfig):
        return pipeline
    text = str(pipeline)
    if names_a_file(text):
        return load_pipeline(text)
    directory = directory or loader_pipelines_dir()  # eobatch.airflow's functions give Airflow's option's folder
    configs, errors = load_all(directory)
    if text in configs:
        return configs[text]
    bad = "; ".join(errors[f] for f in sorted(errors))
    raise ConfigError(directory, "name", f"no pipeline named {text!r} in this folder (it has "
                      f"{', '.join(sorted(configs)) or 'none that loads'}){f'; errors: {bad}' if bad else ''}; "
                      f"give a pipeline's name or its file's path")


def pipeline_tasks(pipeline: str | PipelineConfig, group_id: str | None = None, *, directory: str | None = None,
                   **group_args: Any) -> TaskGroup:
    """A pipeline's tasks as a TaskGroup of the DAG (or group) being defined: recover >> plan >> stage
    >> verify >> commit, abort on failure (``add_pipeline_tasks``, the graph of the generated DAGs).
    ``pipeline``: its file's path or its name (``resolve_pipeline``); ``group_id``: default the
    pipeline's name; ``group_args``: more arguments of the TaskGroup (``tooltip``, ``prefix_group_id``...).

    Usable in any DAG and any (nested) group, upstream or downstream of the DAG's own tasks
    (``extract >> pipeline_tasks("orders") >> report``: the group's first task is recover, its
    last ones commit and abort). What the generated DAG sets on the DAG itself is the user's DAG's
    to choose: its schedule (``pipeline_schedule``), params (``pipeline_params``: the trigger form's
    fields), ``max_active_runs`` (1 is advised; correctness does not rely on it) and the run deadline."""
    cfg = resolve_pipeline(pipeline, directory)
    if cfg.alerts.notify:
        alerts.check_notifiers(cfg)  # a notifier that cannot be built is an error of this pipeline's file
    group_args.setdefault("tooltip", cfg.shown(f"eobatch pipeline {cfg.name}: {cfg.source.describe()} -> "
                                               f"{cfg.sink_table}"))
    with TaskGroup(group_id=group_id or cfg.name, **group_args) as group:
        add_pipeline_tasks(cfg)
    return group


MAINTENANCE_SUFFIX = "_maintenance"


def build_maintenance_dag(cfg: PipelineConfig) -> DAG:
    """``<name>_maintenance``: one maintenance pass per run, on ``maintenance.schedule`` (none:
    triggered from the UI or run with `make maintain PIPELINE=<name>`, the same work)."""
    m = cfg.maintenance
    with DAG(
        dag_id=cfg.name + MAINTENANCE_SUFFIX,
        description=cfg.shown(f"maintenance of {cfg.sink_table} and its quarantine: compaction, VACUUM, checkpoint"),
        schedule=m.schedule,
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=1,
        default_args={"owner": "eobatch", "retries": 2, "retry_delay": dt.timedelta(minutes=1)},
        tags=["eobatch", "maintenance"],
        doc_md=(f"### Maintenance of pipeline `{cfg.name}`\n\nCompaction of small files "
                f"({'on, to ' + str(m.target_file_bytes >> 20) + ' MiB files' if m.compact else 'off'}; interval "
                f"mode: one interval slice at a time), lite VACUUM of files removed more than {m.vacuum_retention_hours:g} h ago (never a "
                f"file no commit added: staged files of PREPARED batches are safe), Delta checkpoint and log "
                f"cleanup. A batch commit at the same time stays exactly once. The report is kept in the ledger "
                f"(`make ledger` shows the last one)."),
    ) as dag:
        MaintainOperator(task_id="maintain", pipeline_file=cfg.file, **pool_args(cfg))
    return dag


def pool_args(cfg: PipelineConfig) -> dict:
    """The pool shared by the commit and the maintenance tasks (``maintenance.pool``), if any."""
    return {"pool": cfg.maintenance.pool} if cfg.maintenance.pool else {}


def build_all(directory: str | None = None) -> tuple[dict[str, DAG], dict[str, str]]:
    """Every pipeline's DAG and maintenance DAG, and {file: error} of the files that do not load or
    whose DAG cannot be built: one file's error, whatever it is, never stops another file's DAGs."""
    configs, errors = load_all(directory)
    dags = {}
    for name, cfg in configs.items():
        try:
            built = {name: build_dag(cfg, configs)}
            if name + MAINTENANCE_SUFFIX not in configs:
                built[name + MAINTENANCE_SUFFIX] = build_maintenance_dag(cfg)
        except ConfigError as e:  # found when building (e.g. a notifier class): still one file's error
            errors[cfg.file] = clip(cfg.shown(str(e)))
            continue
        except Exception as e:  # noqa: BLE001 - Airflow refusing what the loader took: that file's error
            errors[cfg.file] = clip(cfg.shown(str(ConfigError(cfg.file, "", f"its DAG cannot be built: "
                                                                            f"{type(e).__name__}: {e}"))))
            continue
        dags.update(built)
    return dags, errors


class _InvalidPipelines(DAG):
    """Carries the errors of bad pipeline files to Airflow as an import error of the factory file.

    Airflow bags every DAG of a module separately; one whose validation fails is reported as
    an import error of the file while the module's other DAGs load normally. A module-level
    exception, by contrast, would drop every pipeline.
    """

    def validate(self):
        raise ValueError(self.doc_md)


def invalid_pipelines_dag(errors: dict[str, str]) -> DAG:
    message = "invalid pipeline file(s):\n" + "\n".join(errors[f] for f in sorted(errors))
    return _InvalidPipelines(dag_id="eobatch_invalid_pipelines", schedule=None, doc_md=message,
                             start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
