"""Airflow operators and sensor: thin declarations over ``eobatch.protocol``.

No I/O at construction (DAG parse time): each task keeps only the pipeline file's path and
loads the config, the protocol and its clients when it runs. The batch id and the attempt
id travel between tasks by XCom; offsets never do (they live in the ledger and the table).
"""

from __future__ import annotations

import time

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator, BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from . import launch, s3conf
from .config import load_pipeline
from .delta_sink import FingerprintMismatch
from .formats import InvalidId
from .params import ParamsError, RunParams, check_params
from .protocol import (
    AttemptPrepared,
    BatchInFlight,
    CommitBlocked,
    ConcurrentPlan,
    LedgerMismatch,
    Protocol,
    ProtocolError,
    interval_of,
)
from .sources.files import FileTooLarge, LateFiles
from .sources.kafka import DataLossError, IntervalTooLarge
from .verify import NotReady, VerifyFailed

PLAN_TASK, STAGE_TASK, VERIFY_TASK, COMMIT_TASK = "plan", "stage", "verify", "commit"


AWS_CONN_ID = "aws_default"


def export_aws_connection(conn_id: str = AWS_CONN_ID) -> bool:
    """S3 credentials for this task process (and its spark-submit): the Airflow connection
    ``aws_default`` when it exists (login = access key id, password = secret, extra:
    ``endpoint_url``, ``region_name``, ``aws_session_token``), else the environment as it is.
    The values are registered with Airflow's secrets masker: they never appear in task logs."""
    import os

    from airflow.sdk import BaseHook
    from airflow.sdk.log import mask_secret

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # no such connection: credentials come from the environment (or nowhere)
        mask_credentials()
        return False
    extra = conn.extra_dejson or {}
    values = {"AWS_ACCESS_KEY_ID": conn.login, "AWS_SECRET_ACCESS_KEY": conn.password,
              "AWS_SESSION_TOKEN": extra.get("aws_session_token"),
              "S3_ENDPOINT": extra.get("endpoint_url") or (extra.get("service_config") or {}).get("s3", {}).get(
                  "endpoint_url"),
              "AWS_REGION": extra.get("region_name")}
    for k, v in values.items():
        if v:
            if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
                mask_secret(v)
            os.environ[k] = str(v)
    mask_credentials()
    return True


def mask_credentials() -> None:
    """Every S3 credential of this process's environment (access key id, secret, session
    token; after ``export_aws_connection`` also the connection's) registered with Airflow's
    secrets masker: whatever prints one (a command line, a child's output) shows ``***``."""
    from airflow.sdk.log import mask_secret

    for v in s3conf.settings().secrets():
        mask_secret(v)


def credentials_travel_as_env(conn_id: str, *, deploy_mode: str | None = None,
                              spark_binary: str | None = None) -> bool:
    """May S3 credentials travel as spark-submit's process environment? The Spark hook's own
    answer, from the hook itself built for the connection: SparkSubmitHook turns env_vars
    into ``--conf`` values on the command line (its "Spark-Submit cmd" log line masks only
    keys containing secret/password, and ``ps`` shows everything) whenever its master
    *contains* "yarn" or "k8s" (``_is_yarn``, ``_is_kubernetes``; a missing connection means
    yarn), refuses them in standalone cluster mode, and otherwise hands them to the process
    (Popen's env). Only that last case forwards; a hook that cannot be built forwards nothing.

    No I/O beyond the connection lookup: ``keytab=""`` keeps the hook from writing the
    connection's base64 keytab to disk (the stage's own hook still does when it runs)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    try:
        hook = SparkSubmitHook(conn_id=conn_id, deploy_mode=deploy_mode, spark_binary=spark_binary, keytab="")
    except Exception:  # e.g. a k8s master without the cncf.kubernetes provider: the stage fails anyway
        return False
    return not (hook._is_yarn or hook._is_kubernetes) and hook._connection["deploy_mode"] != "cluster"


def _protocol(pipeline_file: str) -> Protocol:
    cfg = load_pipeline(pipeline_file)
    if launch.uses_s3(cfg):
        export_aws_connection()
    return Protocol(cfg)


def _params(context, mode: str) -> RunParams:
    dag_run = context.get("dag_run")
    conf = getattr(dag_run, "conf", None) or {}
    try:
        return check_params(conf, dict(context.get("params") or {}), mode)
    except ParamsError as e:
        raise AirflowFailException(f"params refused: {e}") from e


def _interval(context) -> dict | None:
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        return None
    return interval_of(start, end)


def _count_late_files(proto: Protocol) -> None:
    """Metrics (StatsD/OpenTelemetry as Airflow is configured): eobatch.<pipeline>.late_files
    (files found late by this plan) and eobatch.<pipeline>.late_files_<action>."""
    from airflow.sdk.observability import stats

    for found in proto.last_late:
        stats.incr(f"eobatch.{proto.cfg.name}.late_files", count=len(found["files"]))
        stats.incr(f"eobatch.{proto.cfg.name}.late_files_{found['action']}", count=len(found["files"]))


class RecoverOperator(BaseOperator):
    """Start of every run: ledger and tables agree; PREPARED is committed; orphans are swept."""

    ui_color = "#f3e5f5"

    def __init__(self, *, pipeline_file: str, **kwargs):
        super().__init__(**kwargs)
        self.pipeline_file = pipeline_file

    def execute(self, context):
        t0 = time.time()
        proto = _protocol(self.pipeline_file)
        params = _params(context, proto.cfg.mode)  # refused here, before anything is planned or staged
        self.log.info("recover: run %s, params %s", context.get("run_id"), params)
        try:
            rec = proto.recover(run_id=context.get("run_id"), commit_prepared=not params.dry_run)
            rewind = (proto.rewind(params.rewind_to_batch, run_id=context.get("run_id"), dry_run=params.dry_run,
                                    max_records=params.max_records_per_batch)
                      if params.rewind_to_batch else [])
        except (LedgerMismatch, FingerprintMismatch, CommitBlocked, ProtocolError) as e:
            raise AirflowFailException(str(e)) from e
        for a in rec.actions + rewind:
            self.log.info("recover: %s", a)
        self.log.info("recover: ledger at batch %s, tables committed up to batch %s%s (%.2fs)",
                      rec.latest, rec.committed,
                      f", batch {rec.pending} pending" if rec.pending else "", time.time() - t0)
        if params.dry_run and (params.rewind_to_batch or (rec.pending and proto.ledger.prepared(rec.pending))):
            raise AirflowSkipException("dry run: " + "; ".join(rewind or rec.actions) + "; nothing was changed")
        return {"latest": rec.latest, "committed": rec.committed, "pending": rec.pending}


class PlanOperator(BaseSensorOperator):
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

    def poke(self, context):
        proto = _protocol(self.pipeline_file)
        params = _params(context, proto.cfg.mode)
        interval = _interval(context) if proto.cfg.mode == "interval" else None
        try:
            plan, new = proto.plan(max_records=params.max_records_per_batch, interval=interval,
                                   run_id=context.get("run_id"))
        except (BatchInFlight, ConcurrentPlan) as e:  # another run's batch first; then ours
            self.log.info("plan: %s; waiting", e)
            return False
        except (LedgerMismatch, ProtocolError, DataLossError, IntervalTooLarge, LateFiles, FileTooLarge) as e:
            # not cured by retrying: the message says what to change
            raise AirflowFailException(str(e)) from e
        _count_late_files(proto)
        if plan is None:
            what = (f"interval [{interval['start']}, {interval['end']})" if interval else "")
            raise AirflowSkipException(
                f"nothing new in {proto.cfg.source.describe()} {what}: no batch planned, the tables are unchanged")
        for note in plan.notes:
            self.log.warning("plan: %s", note)
        self.log.info("plan: batch %s %s: %s, %s records%s%s", plan.batch_id,
                      "PLANNED" if new else "re-staged with its recorded range",
                      plan.range_summary(), plan.rows_in,
                      f" (planned in {plan.plan_seconds:.2f}s)" if new else "",
                      " [dry run]" if params.dry_run else "")
        return PokeReturnValue(is_done=True, xcom_value=plan.batch_id)


class StageOperator(SparkSubmitOperator):
    """stage: spark-submit of spark_jobs/stage_batch.py for the planned batch, new attempt id.

    The attempt id is pushed to XCom *before* the job starts so that abort can find and
    remove this attempt's files whatever happens to the job.
    """

    ui_color = "#fff3e0"

    def __init__(self, *, pipeline_file: str, conn_id: str = "spark_default", **kwargs):
        super().__init__(application=launch.STAGE_APP, conn_id=conn_id, **kwargs)
        self.pipeline_file = pipeline_file

    def execute(self, context):
        cfg = load_pipeline(self.pipeline_file)
        if launch.uses_s3(cfg):
            export_aws_connection()
        ti = context["ti"]
        batch_id = int(ti.xcom_pull(task_ids=PLAN_TASK))
        attempt = launch.new_attempt_id(ti.try_number)
        ti.xcom_push(key="attempt", value=attempt)
        self.conf = {**launch.spark_conf(cfg), **(self.conf or {})}
        self.jars = ",".join(launch.jars(cfg))
        self.py_files = launch.pyfiles_zip()
        self.name = f"eobatch-{cfg.name}-b{batch_id}-{attempt}"
        self.application_args = ["--spec", launch.encode_spec(launch.job_spec(cfg, batch_id, attempt))]
        env = launch.spark_env()
        self.env_vars = {k: env[k] for k in ("PATH", "SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
                         if k in env} | dict(self.env_vars or {})
        if launch.uses_s3(cfg):
            if credentials_travel_as_env(self._conn_id, deploy_mode=self._deploy_mode,
                                         spark_binary=self._spark_binary):
                self.env_vars |= s3conf.credential_env()
            else:
                self.log.info("stage: spark connection %r would put spark-submit's environment on its command "
                              "line (YARN/Kubernetes) or cannot take it: S3 credentials are not forwarded; the "
                              "cluster's own identity (instance profile, IRSA, Kubernetes secrets) must serve",
                              self._conn_id)
        mask_credentials()
        if cfg.spark.driver_memory:
            self._driver_memory = cfg.spark.driver_memory
        if cfg.spark.executor_memory:
            self._executor_memory = cfg.spark.executor_memory
        self._hook = None
        self.log.info("stage: batch %s attempt %s via spark connection %r", batch_id, attempt, self._conn_id)
        t0 = time.time()
        super().execute(context)
        self.log.info("stage: batch %s attempt %s finished in %.1fs", batch_id, attempt, time.time() - t0)
        return attempt


class VerifySensor(BaseSensorOperator):
    """pre-commit: verify every partition of the staged attempt; success = PREPARED.

    Runs in reschedule mode: between pokes it holds no worker slot. A missing stage summary
    means "not yet" (poke again); anything wrong in what was staged fails at once.
    """

    ui_color = "#e8f5e9"

    def __init__(self, *, pipeline_file: str, **kwargs):
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 5)
        super().__init__(**kwargs)
        self.pipeline_file = pipeline_file

    def poke(self, context):
        ti = context["ti"]
        batch_id = int(ti.xcom_pull(task_ids=PLAN_TASK))
        attempt = ti.xcom_pull(task_ids=STAGE_TASK, key="attempt")
        proto = _protocol(self.pipeline_file)
        dry = _params(context, proto.cfg.mode).dry_run
        try:
            p = proto.verify(batch_id, attempt, dry_run=dry)
        except NotReady as e:
            self.log.info("verify: %s", e)
            return False
        except (VerifyFailed, ProtocolError, InvalidId) as e:
            raise AirflowFailException(str(e)) from e
        self.log.info("verify: batch %s %s from attempt %s in %.2fs: %d rows in = %d valid + %d "
                      "quarantined; %d rows to publish in %d files (%d bytes); fingerprint %s",
                      batch_id, "verified (dry run, not PREPARED)" if dry else "PREPARED", p.attempt,
                      p.verify_seconds, p.rows_in, p.rows_valid, p.rows_quarantined,
                      p.rows_published, p.files, p.bytes, p.fingerprint[:16])
        return PokeReturnValue(is_done=True, xcom_value={
            "attempt": p.attempt, "fingerprint": p.fingerprint, "dry_run": dry, "rows_in": p.rows_in,
            "rows_published": p.rows_published, "rows_quarantined": p.rows_quarantined, "files": p.files,
            "bytes": p.bytes})


class CommitOperator(BaseOperator):
    """commit: one Delta transaction per participant; retried until it succeeds (never aborted)."""

    ui_color = "#c8e6c9"

    def __init__(self, *, pipeline_file: str, **kwargs):
        super().__init__(**kwargs)
        self.pipeline_file = pipeline_file

    def execute(self, context):
        ti = context["ti"]
        batch_id = int(ti.xcom_pull(task_ids=PLAN_TASK))
        proto = _protocol(self.pipeline_file)
        if _params(context, proto.cfg.mode).dry_run:
            return self._dry_run_report(context, proto, batch_id)
        try:
            c = proto.commit(batch_id)
        except (FingerprintMismatch, ProtocolError) as e:
            # terminal: retrying cannot help (a repair is needed); fail now, say which one
            raise AirflowFailException(str(e)) from e
        p = proto.ledger.prepared(batch_id)
        self.log.info("commit: batch %s COMMITTED in %.2fs: Delta versions %s; %d rows published, %d "
                      "quarantined", batch_id, c.commit_seconds, c.delta_versions, p.rows_published,
                      p.rows_quarantined)
        return {"batch_id": batch_id, "delta_versions": c.delta_versions}

    def _dry_run_report(self, context, proto: Protocol, batch_id: int) -> dict:
        ti = context["ti"]
        report = dict(ti.xcom_pull(task_ids=VERIFY_TASK) or {})
        attempt = report.get("attempt") or ti.xcom_pull(task_ids=STAGE_TASK, key="attempt")
        removed = proto.abort(batch_id, attempt, reason=f"dry run {context.get('run_id')}")
        plan = proto.ledger.plan(batch_id)
        self.log.info("commit: DRY RUN of batch %s: would publish %s rows to %s and %s rows to %s in %s "
                      "files (%s bytes) from %s. Nothing was published; the attempt was aborted (%d staged "
                      "files removed).", batch_id, report.get("rows_published"), proto.cfg.sink_table,
                      report.get("rows_quarantined"), proto.cfg.quarantine_table, report.get("files"),
                      report.get("bytes"), plan.range_summary(), len(removed))
        if proto.cfg.mode == "interval":
            proto.abandon(batch_id, f"dry run {context.get('run_id')}")
            self.log.info("commit: dry run: interval batch %s abandoned", batch_id)
        else:
            self.log.info("commit: dry run: batch %s stays PLANNED; the next run re-stages this range",
                          batch_id)
        return {"dry_run": True, "batch_id": batch_id, "range": plan.range_summary(), **report}


class AbortOperator(BaseOperator):
    """abort: a failed attempt's staged files are removed (never those of a PREPARED batch)."""

    ui_color = "#ffebee"

    def __init__(self, *, pipeline_file: str, **kwargs):
        kwargs.setdefault("trigger_rule", "one_failed")
        super().__init__(**kwargs)
        self.pipeline_file = pipeline_file

    def execute(self, context):
        ti = context["ti"]
        batch_id = ti.xcom_pull(task_ids=PLAN_TASK)
        attempt = ti.xcom_pull(task_ids=STAGE_TASK, key="attempt")
        proto = _protocol(self.pipeline_file)
        if batch_id is None or attempt is None:
            if batch_id is not None and proto.cfg.mode == "interval" and proto.ledger.prepared(int(batch_id)) is None:
                proto.abandon(int(batch_id), f"run {context.get('run_id')} failed before staging")
                self.log.info("abort: no attempt was started; interval batch %s is ABANDONED", batch_id)
                return None
            self.log.info("abort: no attempt was started; nothing to remove")
            return None
        try:
            removed = proto.abort(int(batch_id), attempt, reason=f"run {context.get('run_id')} failed")
        except AttemptPrepared as e:  # verify won the attempt's decision: its files stay
            if proto.cfg.mode == "interval" and proto.abandon(int(batch_id), f"run {context.get('run_id')} failed"):
                self.log.warning("abort: %s; the interval batch %s is ABANDONED before it became PREPARED "
                                 "(nothing is published; the sweep removes its files)", e, batch_id)
            else:
                self.log.warning("abort: %s", e)
            return None
        if proto.cfg.mode == "interval" and proto.abandon(int(batch_id), f"run {context.get('run_id')} failed"):
            self.log.info("abort: batch %s attempt %s aborted, %d staged file(s) removed; the interval batch "
                          "is ABANDONED: run the interval again to publish it", batch_id, attempt, len(removed))
        else:
            self.log.info("abort: batch %s attempt %s aborted, %d staged file(s) removed; the batch stays "
                          "PLANNED and the next run re-stages the same range", batch_id, attempt, len(removed))
        return len(removed)

