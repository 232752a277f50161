"""One DAG per pipeline YAML: recover -> plan -> stage -> verify -> commit, abort on failure.

A YAML that does not load becomes an import error naming the file and the key (visible in
the Airflow UI and in `airflow dags list-import-errors`); every other pipeline still loads.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param

from .airflow_ops import (
    AbortOperator, CommitOperator, PlanOperator, RecoverOperator, StageOperator, VerifySensor,
)
from .config import PipelineConfig, load_all

DOC = """
### Exactly-once pipeline `{name}`

`{source}` → Delta table `{sink}` (quarantine: `{quarantine}`), transform `{transform}`.

Each run is one micro-batch under a two-phase commit:
**recover** (commit a PREPARED batch, re-stage a PLANNED one, sweep orphans) →
**plan** (record the exact source range) → **stage** (spark-submit, staged files invisible to
readers) → **verify** (every partition's manifest, files, sizes, counts, schema ⇒ PREPARED) →
**commit** (one Delta transaction per table with `txn(appId={name}, version=batch)`).
A failure before PREPARED runs **abort** (the attempt's files are removed; the batch keeps its
range and is re-staged by the next run).

Params: `max_records_per_batch` caps the size of a *new* batch (a pending batch keeps its range).
"""


def build_dag(cfg: PipelineConfig) -> DAG:
    default_args = {
        "owner": "eobatch",
        "retries": 0,
        "retry_delay": dt.timedelta(seconds=cfg.retry_delay_seconds),
    }
    with DAG(
        dag_id=cfg.name,
        description=cfg.description or f"exactly-once {cfg.source.kind} -> Delta: {cfg.sink_table}",
        schedule=cfg.schedule,
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=1,  # one committer per pipeline at a time; correctness does not rely on it
        default_args=default_args,
        params={
            "max_records_per_batch": Param(
                None, type=["null", "integer"], minimum=1,
                description="Upper bound of records for a new batch (default: the YAML's value)"),
        },
        tags=["eobatch", cfg.source.kind],
        doc_md=DOC.format(name=cfg.name, source=cfg.source.describe(), sink=cfg.sink_table,
                          quarantine=cfg.quarantine_table, transform=cfg.transform),
    ) as dag:
        f = cfg.file
        recover = RecoverOperator(task_id="recover", pipeline_file=f)
        plan = PlanOperator(task_id="plan", pipeline_file=f, retries=cfg.plan_retries)
        stage = StageOperator(task_id="stage", pipeline_file=f, conn_id=cfg.spark.conn_id,
                              retries=cfg.stage_retries)
        verify = VerifySensor(task_id="verify", pipeline_file=f, timeout=cfg.verify_timeout_seconds)
        commit = CommitOperator(task_id="commit", pipeline_file=f, retries=cfg.commit_retries,
                                retry_exponential_backoff=True,
                                max_retry_delay=dt.timedelta(minutes=10))
        abort = AbortOperator(task_id="abort", pipeline_file=f)
        recover >> plan >> stage >> verify >> commit
        [stage, verify] >> abort
    return dag


def build_all(directory: str | None = None) -> tuple[dict[str, DAG], dict[str, str]]:
    configs, errors = load_all(directory)
    return {name: build_dag(cfg) for name, cfg in configs.items()}, errors


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
