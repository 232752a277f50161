"""Airflow operators and sensor: thin declarations over ``eobatch.protocol``.

No I/O at construction (DAG parse time): each task keeps only the pipeline file's path and
loads the config, the protocol and its clients when it runs. The batch id and the attempt
id travel between tasks by XCom; offsets never do (they live in the ledger and the table).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import time

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator, BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from .. import preflight
from ..config.access import Use, check_access
from ..core import faults
from ..core.stuck import find_stuck
from ..errors import ConfigError, EobatchError, TerminalError
from ..job import driver_jvm, launch
from ..pipelines.loader import PipelineConfig, load_pipeline
from ..protocol import Protocol, interval_of
from ..protocol import lineage as batch_lineage
from ..protocol.backlog import backlog
from ..protocol.batch_run import BatchRun, Report
from ..protocol.maintenance import maintain, summary_line
from ..sources.base import LandingUnreadable
from ..storage import s3conf
from . import alerts, assets, lineage, metrics
from . import connections as airflow_conn  # noqa: F401 - registers Airflow's reader of connections
from .hooks import StageSubmitHook, credentials_travel_as_env, mask_credentials, pipeline_store
from .params import ParamsError, check_params

# The labels of a pipeline's tasks within their group (``dag_factory.add_pipeline_tasks``): a task's id
# is its group's prefix and its label (``orders.plan`` in group ``orders``; ``plan`` in a generated DAG)
RECOVER_TASK, PLAN_TASK, STAGE_TASK, VERIFY_TASK, COMMIT_TASK, ABORT_TASK = (
    "recover", "plan", "stage", "verify", "commit", "abort")
STEPS = (PLAN_TASK, STAGE_TASK, VERIFY_TASK, COMMIT_TASK)  # each upstream of the next, in one group
HOW_TO_COMPOSE = ("a pipeline's tasks work only together, as `eobatch.airflow.pipeline_tasks(<pipeline file or "
                  "name>)` builds them: a TaskGroup to put in your DAG, beside and between your own tasks "
                  "(e.g. `extract >> pipeline_tasks(\"orders\") >> report`); see the page \"Pipelines in your own "
                  "DAG\" of the docs (docs/site/compose.md)")
log = logging.getLogger(__name__)


def sibling_ids(task_group) -> dict[str, str]:
    """The task ids of the pipeline's steps in ``task_group`` (a task's own group; None: a task of no
    DAG): each step's label with the group's prefix, as Airflow names the group's tasks (``TaskGroup.
    child_id``: ``outer.orders.plan`` in group ``orders`` of group ``outer``, ``plan`` in a DAG's root)."""
    return {step: task_group.child_id(step) if task_group is not None else step for step in STEPS}


class PipelineStep:
    """What the tasks of one pipeline share: each knows its siblings' task ids (``siblings``, taken
    from its own group when it is built, never fixed ids), reads their XComs through them
    (``sibling_xcom``), and refuses to run when they are not wired as ``pipeline_tasks`` wires them
    (``check_wiring``): a task that cannot find its siblings fails, it never reports "nothing to do"."""

    siblings: dict[str, str]
    needs: tuple[str, ...] = ()  # the steps that must be upstream of this task (their XComs it reads)

    def _find_siblings(self) -> None:
        self.siblings = sibling_ids(getattr(self, "task_group", None))

    def misuse(self, what: str) -> AirflowFailException:
        dag = f" of DAG {self.dag_id!r}" if self.has_dag() else ""  # type: ignore[attr-defined]
        return AirflowFailException(f"task {self.task_id!r}{dag}: {what}; {HOW_TO_COMPOSE}")  # type: ignore[attr-defined]

    def check_wiring(self) -> None:
        """The pipeline's plan, stage, verify and commit tasks beside this one are in its DAG, each
        upstream of the next, and the steps this task reads are upstream of it; else the task fails
        (AirflowFailException, no retries) saying how to use ``pipeline_tasks``. Not checked for a
        task of no DAG (called directly, not by Airflow)."""
        if not self.has_dag():  # type: ignore[attr-defined]
            return
        dag, ids = self.dag, self.siblings  # type: ignore[attr-defined]
        absent = [f"{step} task {ids[step]!r}" for step in STEPS if not dag.has_task(ids[step])]
        if absent:
            raise self.misuse(f"its pipeline's {', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not in "
                              f"the DAG")
        for before, after in zip(STEPS, STEPS[1:]):
            if ids[before] not in dag.get_task(ids[after]).get_flat_relative_ids(upstream=True):
                raise self.misuse(f"its pipeline's {before} task {ids[before]!r} is not upstream of its {after} "
                                  f"task {ids[after]!r}")
        mine = self.get_flat_relative_ids(upstream=True)  # type: ignore[attr-defined]
        for step in self.needs:
            if ids[step] not in mine:
                raise self.misuse(f"its pipeline's {step} task {ids[step]!r} is not upstream of it")

    def sibling_xcom(self, ti, step: str, key: str = "return_value", required: bool = True):
        """The XCom ``key`` of this run's ``step`` task; a None where a value must exist (``required``)
        fails the task: a step that ran leaves its value, and a plan that found nothing new skips
        the run's remaining tasks, which then never run."""
        value = ti.xcom_pull(task_ids=self.siblings[step], key=key)
        if value is None and required:
            raise self.misuse(f"no XCom {key!r} of its pipeline's {step} task {self.siblings[step]!r} in this run "
                              f"(that task did not run before it, or did not succeed, or pushes no XComs)")
        return value


_task_cfg: contextvars.ContextVar[PipelineConfig | None] = contextvars.ContextVar("eobatch_task_cfg", default=None)


def _load(task: BaseOperator) -> PipelineConfig:
    """The task's pipeline file as it is now, checked against the platform's access policy again
    (``config.access``), with the task's own Spark connection: a file edited after the DAG was
    parsed, or a connection named through a variable of this worker's environment, that the
    policy does not allow fails the task without retries, naming the file and the key."""
    spark = getattr(task, "spark_conn_id", None)
    try:
        cfg = load_pipeline(task.pipeline_file)  # type: ignore[attr-defined]
        check_access(cfg, extra=[Use("spark.conn_id", "connection", spark)] if spark else [])
    except ConfigError as e:
        raise AirflowFailException(f"refused: {e}") from e
    return cfg


def pipeline_task(method):
    """An ``execute`` or ``poke`` of a pipeline's task: runs with the pipeline's file read and
    checked once (``_load``) and its S3 settings as the settings of the calls it makes
    (``hooks.pipeline_s3``: never this process's environment, which the next task of another
    pipeline, e.g. in ``airflow dags test`` or a DAG holding two pipelines' tasks, would inherit)."""
    @functools.wraps(method)
    def run(self, context):
        if isinstance(self, PipelineStep):  # its siblings first: a task wired wrong fails before it reads anything
            self.check_wiring()
        cfg = _load(self)
        try:
            store = pipeline_store(cfg) if launch.uses_s3(cfg) else None
        except TerminalError as e:  # a connection the YAML names and Airflow does not have
            raise AirflowFailException(str(e)) from e
        token = _task_cfg.set(cfg)
        try:
            with s3conf.using(store) if store else contextlib.nullcontext():
                return method(self, context)
        finally:
            _task_cfg.reset(token)
    return run


def _protocol(pipeline_file: str) -> Protocol:
    """The protocol of the pipeline the running task loaded (``pipeline_task``), else of the file read now."""
    cfg = _task_cfg.get()
    if cfg is None or cfg.file != os.path.abspath(pipeline_file):
        try:
            cfg = load_pipeline(pipeline_file)
        except ConfigError as e:
            raise AirflowFailException(f"refused: {e}") from e
    return Protocol(cfg)


def _run(pipeline_file: str, context) -> BatchRun:
    """This DAG run's batch: the pipeline's protocol, the run id and the run's checked params
    (refused params fail the task at once, before anything is planned or staged)."""
    proto = _protocol(pipeline_file)
    dag_run = context.get("dag_run")
    conf = getattr(dag_run, "conf", None) or {}
    declared = getattr(context.get("dag"), "params", None) or {}  # a user's DAG may declare its own
    try:
        params = check_params(conf, dict(context.get("params") or {}), proto.cfg.mode, declared=list(declared))
    except ParamsError as e:
        raise AirflowFailException(f"params refused: {e}") from e
    return BatchRun(proto, run_id=context.get("run_id"), params=params)


def _step(task: BaseOperator, step: str, fn, *args, on_done=None, **kwargs) -> Report | None:
    """Run one step of the batch and translate the product's errors, in this one place:

    * wait (another run's batch first, not staged yet, interval not settled): None; a sensor
      returns False and pokes again, any other task raises it for Airflow to retry;
    * terminal (a person must act; the message says how): the task fails without retries;
    * retry (a broker or a store that is down, a lost commit race): Airflow's retries.

    The report's lines go to the task log; ``skip`` ends the run's remaining tasks as skipped."""
    try:
        report = fn(*args, **kwargs)
    except EobatchError as e:
        if e.kind == "terminal":
            raise AirflowFailException(str(e)) from e
        if e.kind == "wait" and isinstance(task, BaseSensorOperator):
            task.log.info("%s: %s; waiting", step, e)
            return None
        task.log.warning("%s: %s; the task is retried", step, e)
        raise
    if on_done is not None:
        on_done()
    for line in report.warnings:
        task.log.warning("%s: %s", step, line)
    for line in report.lines:
        task.log.info("%s: %s", step, line)
    if report.skip:
        raise AirflowSkipException(report.skip)
    return report


def run_batches(task: PipelineStep, ti, required: bool = True) -> list[int]:
    """The run's batch ids, in order, from the plan task's XCom (a list; one id from a run of an
    earlier version). ``required=False``: [] when the plan left none (the abort of a failed plan)."""
    planned = task.sibling_xcom(ti, PLAN_TASK, required=required)
    if planned is None:
        return []
    return [int(b) for b in planned] if isinstance(planned, list) else [int(planned)]


def run_attempts(task: PipelineStep, ti, required: bool = True) -> dict[int, str]:
    """{batch: attempt} the stage task chose (XCom ``attempts``, {} when every batch was PREPARED
    already; ``attempt``: one batch of an earlier version's run). ``required=False``: {} when the
    stage task left none (the abort of a stage that failed before it chose)."""
    chosen = task.sibling_xcom(ti, STAGE_TASK, key="attempts", required=False)
    if chosen is not None:
        return {int(b): a for b, a in chosen.items()}
    one = task.sibling_xcom(ti, STAGE_TASK, key="attempt", required=False)
    if one is None:
        task.sibling_xcom(ti, STAGE_TASK, key="attempts", required=required)  # fails when required
        return {}
    batches = run_batches(task, ti, required=required)
    return {batches[0]: one} if batches else {}


def run_verified(task: PipelineStep, ti, batches: list[int]) -> dict[int, dict]:
    """{batch: what verify reported} from the verify sensor's XCom (one batch's report from a run
    of an earlier version)."""
    got = task.sibling_xcom(ti, VERIFY_TASK)
    if "attempt" in got:
        return {batches[0]: got} if batches else {}
    return {int(b): v for b, v in got.items()}


def _interval(context) -> dict | None:
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        return None
    return interval_of(start, end)


def _after_plan(proto: Protocol, context) -> None:
    """After a plan recorded its range: metrics of the files it found late, of the landing inputs it
    skipped and of the backlog it left (``metrics``), the skipped-input and backlog age alerts (``alerts``)."""
    sent = metrics.late_file_metrics(proto.cfg.name, proto.last_late)
    sent += metrics.skipped_metrics(proto.cfg.name, proto.last_skipped)
    try:
        alerts.check_skipped(proto.cfg, proto.last_skipped, context)
    except Exception as e:  # noqa: BLE001 - an alert is never a reason to fail the plan
        log.warning("skipped-input alert not sent (%s: %s)", type(e).__name__, e)
    try:
        # the listing only: counting records would read every pending file (or footer) on each plan; the
        # plan's own listing (its planner's), not a second one
        left = backlog(proto, count_records=False, planner=proto.last_planner)
        sent += metrics.backlog_metrics(proto.cfg.name, left)
        alerts.check_backlog(proto.cfg, left, context)
    except Exception as e:  # noqa: BLE001 - the backlog is a metric, never a reason to fail the plan
        log.warning("backlog not computed (%s: %s)", type(e).__name__, e)
    metrics.send(sent)


def _check_stuck(proto: Protocol, context) -> None:
    """After recover (refused or not): the stuck detector (``eobatch.core.stuck``) in the task log at
    warning level, its gauge, and the pipeline's alert (``alerts.check_stuck``). Never fails the task."""
    try:
        found = find_stuck(proto.ledger, proto.cfg)
        for line in found.lines() if found else []:
            log.warning("stuck: %s", line)
        metrics.send(metrics.stuck_metrics(proto.cfg.name, found))
        alerts.check_stuck(proto.cfg, found, context)
    except Exception as e:  # noqa: BLE001 - the detector must not stop a run that can move
        log.warning("stuck detector not run (%s: %s)", type(e).__name__, e)


def _published(task: BaseOperator, context, proto: Protocol, batch_id: int) -> None:
    """This task's call committed ``batch_id`` (wrote its COMMITTED record): its metrics, and its
    asset events when the task declares the pipeline's alias. The ledger's records are read once."""
    led = proto.ledger
    plan, prepared, committed = led.plan(batch_id), led.prepared(batch_id), led.committed(batch_id)
    if committed is None or plan is None:  # the caller saw the batch committed: a ledger that lost it is a bug
        raise RuntimeError(f"batch {batch_id} of {proto.cfg.name} has no COMMITTED record or plan after its commit")
    if prepared is not None:
        metrics.send(metrics.batch_metrics(proto.cfg.name, plan, prepared, committed))
    if task.outlets:
        emit_batch_events(task, context, proto.cfg, plan, prepared, committed)


def _uncommitted(proto: Protocol, batch_id: int | None) -> bool:
    """Has ``batch_id`` no COMMITTED ledger record yet? (Read before a step that may commit it.)"""
    return batch_id is not None and batch_id > 0 and proto.ledger.committed(batch_id) is None


def emit_batch_events(task: BaseOperator, context, cfg, plan, prepared, committed,
                      only: set[str] | None = None, late: bool = False) -> list[dict]:
    """One asset event per published table of a committed batch (its ledger records), added through
    the pipeline's alias (``assets``): the sink table's asset (the contract's) and the quarantine's,
    each with its table's Delta version. Airflow records them when this task instance succeeds.
    ``only``: those tables only; ``late``: the batch was committed by an earlier task that died
    before Airflow stored its events (``emit_missing_events``), said in the extra. Returns the
    extras (the sink's first)."""
    batch_id = plan.batch_id
    tables = {"sink": cfg.sink_table, "quarantine": cfg.quarantine_table}
    extras = assets.batch_extras(cfg.name, tables, plan, prepared, committed)
    alias = assets.batch_alias(cfg.name)
    events = context["outlet_events"][alias]
    out = []
    for participant, extra in extras.items():
        if only is not None and participant not in only:
            continue
        if late:
            extra["emitted_late"] = True
        events.add(assets.table_asset(tables[participant]), extra=extra)
        task.log.info("asset event%s: batch %s of %s, %s table %s at Delta version %s",
                      " (late: its committing task died before Airflow stored its events)" if late else "",
                      batch_id, cfg.name, participant, extra["table_uri"], extra["delta_version"])
        out.append(extra)
    return out


EVENTS_LOOKED_AT = 16  # the pipeline's newest asset events read, per batch from the newest one on


def emitted_tables(context, pipeline: str, batch_id: int, uris: dict[str, str], fingerprint: str,
                   newer: int = 0) -> set[str] | None:
    """The tables whose asset event for ``batch_id`` Airflow holds, read from Airflow's own asset
    events (its metadata database, through the Task SDK's ``inlet_events``: the task declares the
    pipeline's alias as an inlet too): the newest ``EVENTS_LOOKED_AT`` events added through the
    alias for each batch from ``batch_id`` to the newest (``newer`` batches after it). Only called
    for the batches of the pipeline's newest run, whose events, when stored, are the newest
    (batches commit one after another). An event is this batch's when it names its table
    (``uris``: table -> asset URI) and its committed file set (``fingerprint``), not only the
    pipeline and the batch id: an earlier pipeline of the same name (created again, its tables
    elsewhere) had a batch of that id too. None when this task cannot read them."""
    try:
        accessor = context["inlet_events"][assets.batch_alias(pipeline)]
    except (KeyError, TypeError):
        return None
    found = set()
    for event in accessor.ascending(False).limit(EVENTS_LOOKED_AT * (1 + newer)):
        extra = event.extra or {}
        table = str(extra.get("table"))
        if (extra.get("pipeline") == pipeline and extra.get("batch_id") == batch_id
                and extra.get("table_uri") == uris.get(table) and extra.get("fingerprint") == fingerprint):
            found.add(table)
    return found


def _run_is_here(context, dag_id: str, run_id: str | None) -> bool:
    """Does this Airflow hold DAG run ``run_id`` (Task SDK ``get_dr_count``)?"""
    if not run_id:
        return False
    return context["ti"].get_dr_count(dag_id=dag_id, run_ids=[run_id]) > 0


def emit_missing_events(task: BaseOperator, context, proto: Protocol, batch_id: int, newer: int = 0) -> list[dict]:
    """``batch_id`` is COMMITTED, its record written by an earlier call: a commit (or recover) task
    killed after that write and before Airflow stored its success lost the batch's events (Airflow
    stores a task's events with its success). Emitted here, once: only the tables whose event
    Airflow does not hold (``emitted_tables``), and only for a batch planned by a DAG run of this
    Airflow (the batches of another Airflow, `make demo`'s say, are that Airflow's to announce).
    A task that dies before its own success stores nothing either, so its retry (or the next run's
    recover) decides again from what Airflow holds."""
    if not task.outlets:
        return []
    cfg, led = proto.cfg, proto.ledger
    plan, prepared, committed = led.plan(batch_id), led.prepared(batch_id), led.committed(batch_id)
    if plan is None or committed is None:
        return []
    uris = {"sink": assets.asset_uri(cfg.sink_table), "quarantine": assets.asset_uri(cfg.quarantine_table)}
    have = emitted_tables(context, cfg.name, batch_id, uris, committed.fingerprint, newer)
    if have is None:
        task.log.warning("asset events: this task cannot read Airflow's asset events (no inlet_events); "
                         "batch %s is not announced again", batch_id)
        return []
    missing = {p for p in committed.delta_versions if p not in have}
    if not missing:
        task.log.info("asset events: Airflow holds those of batch %s already: none emitted again", batch_id)
        return []
    if not _run_is_here(context, task.dag_id, plan.run_id):
        task.log.info("asset events: batch %s was planned by run %s, which this Airflow does not hold: its "
                      "events are that Airflow's to emit", batch_id, plan.run_id)
        return []
    return emit_batch_events(task, context, cfg, plan, prepared, committed, only=missing, late=True)


class ReportsLineage:
    """A task that reports its batches' lineage to OpenLineage (``eobatch.airflow.lineage``): what its
    run collected (``_lineage``, set while it runs) as the provider's ``OperatorLineage``, for the
    provider's listener after the task (on failure too: the batches it committed before failing).
    None when nothing was collected (no batch, or the provider not installed or disabled)."""

    _lineage = None

    def get_openlineage_facets_on_complete(self, task_instance):
        return lineage.operator_lineage(self._lineage)


def _ids(value) -> list[int]:
    """The batch ids of a step's XCom value (a list, or one id)."""
    if value is None:
        return []
    return [int(b) for b in value] if isinstance(value, list) else [int(value)]


class RecoverOperator(ReportsLineage, BaseOperator):
    """Start of every run: ledger and tables agree; PREPARED is committed; orphans are swept.

    A batch whose commit this task completes (PREPARED by an earlier run that did not commit it, or
    committed in every table by a commit that died before the ledger's COMMITTED record) gets its
    metrics and asset events here, through the outlet ``AssetAlias`` the DAG factory gives this task;
    so does a newest batch COMMITTED whose events Airflow does not hold (``emit_missing_events``)."""

    ui_color = "#f3e5f5"

    def __init__(self, *, pipeline_file: str, **kwargs):
        super().__init__(**kwargs)
        self.pipeline_file = pipeline_file

    @pipeline_task
    def execute(self, context):
        run = _run(self.pipeline_file, context)
        try:
            return self._recover(run, context)
        finally:  # refused or not: a pipeline that cannot move says so
            _check_stuck(run.proto, context)

    def _recover(self, run, context):
        latest = run.proto.ledger.latest_batch_id()
        # the batches still to decide (several when the last run carried several), oldest first: at most
        # the newest run's (a table behind them is a gap, which recover refuses)
        first = run.proto.ledger.require_plan(latest).first_of_run if latest else 1
        held = min(run.proto.committed_versions().values()) if latest else 0
        open_before = [b for b in range(max(held + 1, first), latest + 1) if _uncommitted(run.proto, b)]
        report = _step(self, "recover", run.recover)
        done = [b for b in open_before if not _uncommitted(run.proto, b)]
        for b in done:
            _published(self, context, run.proto, b)
        if done:  # the batches this call committed: their lineage is this task's
            self._lineage = lineage.collect("recover", batch_lineage.committed, run.proto, done, by_this_task=set(done))
        if (not open_before and latest and not run.params.dry_run and run.params.rewind_to_batch is None
                and run.proto.ledger.committed(latest)):
            # every batch of the newest run (a commit task that died after its commits lost the events of all)
            first = run.proto.ledger.require_plan(latest).first_of_run
            for b in range(first, latest + 1):
                if run.proto.ledger.committed(b):
                    emit_missing_events(self, context, run.proto, b, newer=latest - b)
        faults.crash_point("recover.before_task_success")
        return report.value


class PlanOperator(ReportsLineage, BaseSensorOperator, PipelineStep):
    """begin: record the next batch's exact source range before any data is written.

    A sensor in reschedule mode: in interval mode, while another run's batch is being staged
    (batches are strictly ordered), it waits without holding a worker slot.
    """

    ui_color = "#e3f2fd"

    def __init__(self, *, pipeline_file: str, **kwargs):
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 10)
        kwargs.setdefault("timeout", 3600)
        super().__init__(**kwargs)
        self.pipeline_file = pipeline_file
        self._find_siblings()

    @pipeline_task
    def poke(self, context):
        run = _run(self.pipeline_file, context)
        try:
            report = _step(self, "plan", run.plan, _interval(context), on_done=lambda: _after_plan(run.proto, context))
        except AirflowFailException as e:
            if isinstance(e.__cause__, LandingUnreadable):  # the task's failure says it; a dashboard too
                metrics.send(metrics.unreadable_metrics(run.proto.cfg.name))
            raise
        if report is None:
            return False
        self._lineage = lineage.collect("plan", batch_lineage.planned, run.proto, _ids(report.value))
        return PokeReturnValue(is_done=True, xcom_value=report.value)


class StageOperator(SparkSubmitOperator, PipelineStep):
    """stage: spark-submit of spark_jobs/stage_batch.py for the planned batch, new attempt id.

    The attempt id is pushed to XCom *before* the job starts so that abort can find and
    remove this attempt's files whatever happens to the job. The job's description (conf,
    jars, py-files, name, arguments, environment) is set on the Spark operator's own templated
    fields when the task runs: the pipeline file is read then, never at DAG parse time.

    ``durable=False``: a retry is a new attempt with its own id and staging folder, so it must
    submit a new job. (The provider's default would reconnect a retry to the previous try's
    job, whose output is that try's attempt, which this retry's verify never looks at.)
    """

    ui_color = "#fff3e0"
    needs = (PLAN_TASK,)

    def __init__(self, *, pipeline_file: str, conn_id: str = "spark_default", **kwargs):
        kwargs["durable"] = False
        super().__init__(application=launch.STAGE_APP, conn_id=conn_id, **kwargs)
        self.pipeline_file = pipeline_file
        self.spark_conn_id = conn_id
        self.spark_deploy_mode = kwargs.get("deploy_mode")
        self.spark_binary_name = kwargs.get("spark_binary")
        self._find_siblings()

    @pipeline_task
    def execute(self, context):
        run = _run(self.pipeline_file, context)
        cfg = run.proto.cfg
        ti = context["ti"]
        # the job is built from the file read now: only when it says what each batch's plan recorded
        chosen = _step(self, "stage", run.stage_attempts, run_batches(self, ti),
                       lambda: launch.new_attempt_id(ti.try_number))
        attempts, todo = chosen.value, chosen.detail["stage"]
        ti.xcom_push(key="attempts", value={str(b): a for b, a in attempts.items()})
        if not todo:
            self.log.info("stage: every batch of the run is STAGED or PREPARED already: no job to run")
            return attempts
        # what `eobatch doctor` checks, before spark-submit starts: a setup error is said as such, no retries
        failed = preflight.stage_problems(launch.jar_sets(cfg), self.spark_conn_id,
                                          launch.spark_env(dict(self.env_vars or {})), self.spark_binary_name)
        if failed:
            raise AirflowFailException(f"stage: pipeline {cfg.name}: not launched, this worker cannot run its Spark "
                                       f"job: " + " | ".join(c.line() for c in failed)
                                       + " (`eobatch doctor` makes the same checks)")
        ti.xcom_push(key="attempt", value=todo[min(todo)])
        memory = {k: v for k, v in (("spark.driver.memory", cfg.spark.driver_memory),
                                    ("spark.executor.memory", cfg.spark.executor_memory)) if v}
        self.conf = driver_jvm.java_options({**launch.spark_conf(cfg), **memory, **(self.conf or {})},
                                            log_level=launch.log_level(cfg))
        self.py_files = launch.pyfiles_zip(cfg)
        self.name = launch.app_name(cfg, todo)
        try:  # the jars (checked) and a source's connection (e.g. Kafka's): a platform operator's to fix
            self.jars = ",".join(launch.jars(cfg))
            source_env = launch.job_env(cfg)
        except EobatchError as e:
            if e.kind == "terminal":
                raise AirflowFailException(str(e)) from e
            raise
        env = launch.spark_env()  # spark-submit's own environment: an allow-list (``_get_hook``)
        self.env_vars = {k: env[k] for k in ("PATH", "SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
                         if k in env} | dict(self.env_vars or {})
        travels = credentials_travel_as_env(self.spark_conn_id, deploy_mode=self.spark_deploy_mode,
                                            spark_binary=self.spark_binary_name)
        if source_env and not travels:  # e.g. a Kafka connection's security settings, masked already
            raise AirflowFailException(
                f"stage: source.conn_id {getattr(cfg.source, 'conn_id', None)!r}: the connection's client settings "
                f"reach the Spark job only as spark-submit's environment, which spark connection "
                f"{self.spark_conn_id!r} would put on a command line (YARN, Kubernetes) or not pass (standalone "
                f"cluster mode); use client deploy mode, or give source.bootstrap_servers and configure the "
                f"client where the job runs")
        self.env_vars |= source_env
        if launch.uses_s3(cfg):
            if travels:  # the pipeline's (pipeline_task); no session token of another identity
                self.env_vars |= {"AWS_SESSION_TOKEN": ""} | s3conf.credential_env()
            else:
                self.log.info("stage: spark connection %r would put spark-submit's environment on its command "
                              "line (YARN/Kubernetes) or cannot take it: S3 credentials are not forwarded; the "
                              "cluster's own identity (instance profile, IRSA, Kubernetes secrets) must serve",
                              self.spark_conn_id)
        mask_credentials()
        self._hook = None  # built by ``_get_hook`` with this try's environment
        self._stage_env = launch.spark_env(self.env_vars)
        self.application_args = launch.spec_args(cfg, todo)  # the spec: a file of the ledger, named with its hash
        what = ", ".join(f"batch {b} attempt {a}" for b, a in sorted(todo.items()))
        self.log.info("stage: %s via spark connection %r", what, self.spark_conn_id)
        t0 = time.time()
        super().execute(context)
        self.log.info("stage: %s finished in %.1fs", what, time.time() - t0)
        return attempts

    def _get_hook(self):
        """The provider's hook, its spark-submit started with the stage job's environment only
        (``launch.spark_env``: an allow-list, then ``env_vars``), never the task's whole environment."""
        return StageSubmitHook.adopt(super()._get_hook(), getattr(self, "_stage_env", None) or launch.spark_env())


class VerifySensor(BaseSensorOperator, PipelineStep):
    """pre-commit: verify every partition of the staged attempt; success = PREPARED.

    Runs in reschedule mode: between pokes it holds no worker slot. A missing stage summary
    means "not yet" (poke again); anything wrong in what was staged fails at once.
    """

    ui_color = "#e8f5e9"
    needs = (STAGE_TASK,)

    def __init__(self, *, pipeline_file: str, **kwargs):
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 5)
        super().__init__(**kwargs)
        self.pipeline_file = pipeline_file
        self._find_siblings()

    @pipeline_task
    def poke(self, context):
        report = _step(self, "verify", _run(self.pipeline_file, context).verify_run, run_attempts(self, context["ti"]))
        return False if report is None else PokeReturnValue(is_done=True, xcom_value=report.value)


class CommitOperator(ReportsLineage, BaseOperator, PipelineStep):
    """commit: one Delta transaction per participant; retried until it succeeds (never aborted).

    A commit that writes the batch's COMMITTED ledger record sends the batch's metrics
    (``metrics``) and, with the outlet ``AssetAlias("eobatch-<pipeline>")`` (the DAG factory
    declares it), adds one asset event per published table (``emit_batch_events``). None for a dry run (nothing is committed) nor for a recommit of a batch
    already COMMITTED (a cleared task, a batch the next run's recover committed first): the ledger's
    record is put-if-absent, so exactly one call per batch writes it. A commit task that dies after
    that write and before Airflow records its success loses the events (they are Airflow's, written on
    success): its retry, or the next run's recover, emits them then (``emit_missing_events``, decided from
    the asset events Airflow holds)."""

    ui_color = "#c8e6c9"
    needs = (VERIFY_TASK,)

    def __init__(self, *, pipeline_file: str, **kwargs):
        super().__init__(**kwargs)
        self.pipeline_file = pipeline_file
        self._find_siblings()

    @pipeline_task
    def execute(self, context):
        ti = context["ti"]
        run = _run(self.pipeline_file, context)
        batches, attempts = run_batches(self, ti), run_attempts(self, ti)
        verified = run_verified(self, ti, batches)
        values, mine, done = [], set(), []
        try:
            for batch_id in batches:  # strictly in order, each its own Delta commit
                open_before = _uncommitted(run.proto, batch_id)
                report = _step(self, "commit", run.commit, batch_id, verified=verified.get(batch_id),
                               attempt=attempts.get(batch_id))
                if open_before and not run.params.dry_run and not _uncommitted(run.proto, batch_id):
                    mine.add(batch_id)
                    _published(self, context, run.proto, batch_id)
                elif not open_before and not run.params.dry_run:
                    self.log.info("commit: batch %s was already COMMITTED before this task", batch_id)
                    emit_missing_events(self, context, run.proto, batch_id, newer=batches[-1] - batch_id)
                if not run.params.dry_run:
                    done.append(batch_id)
                values.append(report.value)
        finally:  # the run's batches committed (this call's or an earlier one's): on failure, those before it
            if done:
                self._lineage = lineage.collect("commit", batch_lineage.committed, run.proto, done, attempts, mine)
        faults.crash_point("commit.before_task_success")
        return values[0] if len(values) == 1 else values


class AbortOperator(BaseOperator, PipelineStep):
    """abort: a failed attempt's staged files are removed (never those of a PREPARED batch). Runs when
    stage or verify failed, also when an earlier task did (recover, plan): then no XCom of the plan
    or of the stage task is there, and nothing was started."""

    ui_color = "#ffebee"
    needs = (STAGE_TASK,)

    def __init__(self, *, pipeline_file: str, **kwargs):
        kwargs.setdefault("trigger_rule", "one_failed")
        super().__init__(**kwargs)
        self.pipeline_file = pipeline_file
        self._find_siblings()

    @pipeline_task
    def execute(self, context):
        ti = context["ti"]
        batches, attempts = run_batches(self, ti, required=False), run_attempts(self, ti, required=False)
        run = _run(self.pipeline_file, context)
        if len(batches) <= 1:
            return _step(self, "abort", run.fail, batches[0] if batches else None, attempts.get(batches[0])
                         if batches else None).value
        return _step(self, "abort", run.fail_run, batches, attempts).value


class MaintainOperator(BaseOperator):
    """The ``<name>_maintenance`` DAG's task: one maintenance pass (``eobatch.protocol.maintenance``) over
    the pipeline's tables: compaction (continuous mode), lite VACUUM, Delta checkpoint. A batch
    commit running at the same time stays correct (see the module); it is retried on a conflict."""

    ui_color = "#ede7f6"

    def __init__(self, *, pipeline_file: str, **kwargs):
        super().__init__(**kwargs)
        self.pipeline_file = pipeline_file

    @pipeline_task
    def execute(self, context):
        proto = _protocol(self.pipeline_file)
        report = maintain(proto)
        self.log.info("maintain: %s", summary_line(report, proto.names))
        return report
