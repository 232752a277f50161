"""eobatch.airflow.dag_factory: the tasks that can commit a batch declare the pipeline's asset alias; a
pipeline's tasks as a TaskGroup of a user's DAG (``pipeline_tasks``), the graph of the generated DAGs too."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from eobatch.airflow.assets import asset_uri
from eobatch.airflow.dag_factory import build_dag, pipeline_tasks


def test_recover_and_commit_declare_the_alias_and_no_other_task_an_outlet(make_cfg):
    from airflow.sdk import Asset, AssetAlias

    cfg = make_cfg()
    dag = build_dag(cfg)
    outlets = {t.task_id: t.outlets for t in dag.tasks if t.outlets}
    assert set(outlets) == {"recover", "commit"}
    for declared in outlets.values():
        assert declared == [AssetAlias("eobatch-orders")]
        assert not any(isinstance(o, Asset) for o in declared)  # a static Asset emits on every success
    assert asset_uri(cfg.sink_table) in (dag.doc_md or "")


def test_recover_retries_as_the_commit_does(make_cfg):
    """Recover finishes a PREPARED batch's commit: a lost race with maintenance or a store that is
    down is retried there as in the commit task, not a failed run."""
    dag = build_dag(make_cfg())
    recover, commit = dag.get_task("recover"), dag.get_task("commit")
    assert recover.retries == commit.retries == 8
    for attr in ("retry_exponential_backoff", "max_retry_delay", "retry_delay"):
        assert getattr(recover, attr) == getattr(commit, attr), attr
    assert dag.get_task("verify").retries == 0 and dag.get_task("abort").retries == 0


def test_every_task_that_waits_has_a_bound(make_cfg):
    """Issue 41: a wait without a bound is a stuck pipeline. The stage task's try ends at
    ``retries.stage_timeout_seconds`` (Airflow kills its spark-submit; the try fails like any other),
    verify and an interval run's plan are sensors with a timeout."""
    import datetime as dt

    dag = build_dag(make_cfg())
    assert dag.get_task("stage").execution_timeout == dt.timedelta(seconds=21600)
    assert dag.get_task("verify").timeout == 900 and dag.get_task("plan").timeout == 3600
    for task in ("recover", "commit", "abort"):
        assert dag.get_task(task).execution_timeout == dt.timedelta(hours=1), task
    short = build_dag(make_cfg(retries={"stage_timeout_seconds": 90}))
    assert short.get_task("stage").execution_timeout == dt.timedelta(seconds=90)


def test_the_trigger_form_has_titled_fields_in_sections_and_no_rewind_in_interval_mode(make_cfg, by_prefix):
    cont = build_dag(make_cfg()).params
    assert list(cont.keys()) == ["max_records_per_batch", "max_batches_per_run", "dry_run", "rewind_to_batch",
                                 "confirm_rewind", "accept_loss", "replan_pending"]
    assert cont.get_param("max_batches_per_run").schema["maximum"] == 1000
    for key in cont.keys():
        schema = cont.get_param(key).schema
        assert schema.get("title") and schema.get("section") and cont.get_param(key).description, key
    assert cont.get_param("confirm_rewind").schema["section"] == cont.get_param("rewind_to_batch").schema["section"]
    assert cont["confirm_rewind"] is False and cont["rewind_to_batch"] is None
    interval = build_dag(by_prefix).params
    assert list(interval.keys()) == ["max_records_per_batch", "dry_run"]


def test_a_pipeline_scheduled_on_a_tables_asset_runs_on_its_events(make_cfg, tmp_path):
    """``schedule: {asset: <table>}``: the DAG is scheduled on the same Asset the upstream's commit
    emits events for (one definition of a table's asset, ``assets.table_asset``)."""
    from eobatch.airflow.assets import table_asset

    upstream = make_cfg()
    cfg = make_cfg(schedule={"asset": upstream.sink_table})
    dag = build_dag(cfg)
    assert dag.timetable.asset_condition == table_asset(upstream.sink_table)
    assert f"runs on the asset events of `{upstream.sink_table}`" in (dag.doc_md or "")


def test_a_schedule_may_name_another_pipeline_of_the_folder_and_an_unknown_name_is_that_files_error(make_cfg, tmp_path):
    from eobatch.airflow.assets import table_asset
    from eobatch.airflow.dag_factory import build_all

    upstream = make_cfg()  # "orders", in the folder of the pipeline files
    folder = Path(upstream.file).parent
    doc = yaml.safe_load(Path(upstream.file).read_text())
    doc.update(name="silver", schedule={"asset": "orders"}, source={"kind": "delta", "table": upstream.sink_table},
               sink={"table": str(tmp_path / "lake" / "silver")}, quarantine={"table": str(tmp_path / "lake" / "silver_q")})
    (folder / "silver.yaml").write_text(yaml.safe_dump(doc))
    doc.update(name="gold", schedule={"asset": "platinum"}, sink={"table": str(tmp_path / "lake" / "gold")},
               quarantine={"table": str(tmp_path / "lake" / "gold_q")})
    (folder / "gold.yaml").write_text(yaml.safe_dump(doc))
    dags, errors = build_all(str(folder))
    assert dags["silver"].timetable.asset_condition == table_asset(upstream.sink_table)
    assert "gold" not in dags and any("schedule.asset: names pipeline 'platinum', which is not a pipeline of this "
                                      "folder" in e for e in errors.values()), errors


# -- a pipeline's tasks in a user's own DAG (pipeline_tasks): each task finds its siblings through its group,
# never by fixed ids; a task that cannot find them fails, never "nothing to do" (runs: tests/integration/test_compose.py)

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
LABELS = {"recover", "plan", "stage", "verify", "commit", "abort"}


def _edges(dag, prefix: str = "") -> set[tuple[str, str]]:
    return {(t.task_id.removeprefix(prefix), d.removeprefix(prefix)) for t in dag.tasks
            for d in t.downstream_task_ids if t.task_id.startswith(prefix)}


def test_the_group_nested_in_a_users_group_names_each_tasks_siblings_by_the_groups_ids(make_cfg):
    from airflow.sdk import DAG, TaskGroup, task

    cfg = make_cfg()
    with DAG("my_etl", schedule=None, start_date=START, default_args={"retries": 5, "do_xcom_push": False}) as dag:
        @task
        def extract():
            return None

        @task
        def report():
            return None

        with TaskGroup("ingest") as ingest:
            group = pipeline_tasks(cfg.file)
        extract() >> ingest >> report()

    assert group.group_id == "ingest.orders"
    mine = {t.task_id for t in dag.tasks if t.task_id.startswith("ingest.orders.")}
    assert mine == {f"ingest.orders.{label}" for label in LABELS}
    for task_id in mine:
        t = dag.get_task(task_id)
        if task_id != "ingest.orders.recover":
            assert t.siblings == {s: f"ingest.orders.{s}" for s in ("plan", "stage", "verify", "commit")}
            t.check_wiring()  # wired as it must be: no error
        assert t.do_xcom_push, "the siblings' XComs are the group's, whatever the DAG's default_args say"
    # the group's settings are the pipeline's, not the DAG's default_args
    assert dag.get_task("ingest.orders.verify").retries == 0 and dag.get_task("ingest.orders.commit").retries == 8
    # one definition of the graph: the generated DAG's, with the group's prefix
    assert _edges(dag, "ingest.orders.") >= _edges(build_dag(cfg))
    # the group's one first task and one last task, in the user's group too: the user's task after it
    # waits for the commit, and is not skipped with the abort of a run that succeeded
    for g in (group, ingest):
        assert [t.task_id for t in g.get_roots()] == ["ingest.orders.recover"]
        assert [t.task_id for t in g.get_leaves()] == ["ingest.orders.commit"]
    assert dag.get_task("report").upstream_task_ids == {"ingest.orders.commit"}
    assert "ingest.orders.recover" in dag.get_task("extract").get_flat_relative_ids()
    assert {"ingest.orders.commit", "ingest.orders.abort"} <= dag.get_task("report").get_flat_relative_ids(
        upstream=True)


def test_the_generated_dag_keeps_its_task_ids_and_its_tasks_their_labels_as_siblings(make_cfg):
    dag = build_dag(make_cfg())
    assert {t.task_id for t in dag.tasks} == LABELS
    assert dag.get_task("commit").siblings == {s: s for s in ("plan", "stage", "verify", "commit")}
    assert not dag.task_group.children.keys() - LABELS  # no group in a generated DAG


def test_a_group_without_the_prefix_and_one_found_by_the_pipelines_name(make_cfg, tmp_path):
    from airflow.sdk import DAG

    from eobatch.errors import ConfigError

    cfg = make_cfg()
    with DAG("bare", schedule=None, start_date=START) as dag:
        pipeline_tasks("orders", "loader", directory=str(tmp_path / "pipelines"), prefix_group_id=False)
    assert {t.task_id for t in dag.tasks} == LABELS
    assert dag.get_task("stage").siblings["plan"] == "plan"
    assert dag.get_task("plan").pipeline_file == cfg.file
    with DAG("unknown", schedule=None, start_date=START), pytest.raises(ConfigError, match=r"no pipeline named "
                                                                         r"'order' in this folder \(it has orders\)"):
        pipeline_tasks("order", directory=str(tmp_path / "pipelines"))


@pytest.mark.parametrize("alone", ["stage", "plan", "commit", "abort"])
def test_an_operator_alone_in_a_dag_refuses_to_run_and_names_the_group(make_cfg, alone):
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowFailException

    from eobatch.airflow import operators

    cls = {"stage": operators.StageOperator, "plan": operators.PlanOperator, "commit": operators.CommitOperator,
           "abort": operators.AbortOperator}[alone]
    with DAG("lonely", schedule=None, start_date=START):
        op = cls(task_id=alone, pipeline_file=make_cfg().file)
    with pytest.raises(AirflowFailException, match=r"task '%s' of DAG 'lonely': its pipeline's .*not in the DAG.*"
                                                   r"eobatch\.airflow\.pipeline_tasks" % alone):
        op.check_wiring()


def test_a_stage_not_after_its_plan_refuses_to_run(make_cfg):
    """All the steps are in the DAG, but the user's wiring lost the plan >> stage edge."""
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowFailException

    cfg = make_cfg()
    with DAG("rewired", schedule=None, start_date=START) as dag:
        pipeline_tasks(cfg.file)
    plan, stage = dag.get_task("orders.plan"), dag.get_task("orders.stage")
    plan.downstream_task_ids.discard(stage.task_id)
    stage.upstream_task_ids.discard(plan.task_id)
    with pytest.raises(AirflowFailException, match="plan task 'orders.plan' is not upstream of its stage task"):
        dag.get_task("orders.commit").check_wiring()


def test_a_missing_xcom_of_a_sibling_fails_the_task_and_a_stage_that_chose_nothing_is_no_error(make_cfg):
    """None where a value must exist is an error; {} (every batch PREPARED already) is a value."""
    from airflow.sdk.exceptions import AirflowFailException

    from eobatch.airflow.operators import CommitOperator, StageOperator, run_attempts, run_batches

    class TI:
        def __init__(self, xcoms):
            self.xcoms = xcoms

        def xcom_pull(self, task_ids=None, key="return_value"):
            return self.xcoms.get((task_ids, key))

    cfg = make_cfg()
    stage = StageOperator(task_id="stage", pipeline_file=cfg.file)
    with pytest.raises(AirflowFailException, match=r"no XCom 'return_value' of its pipeline's plan task 'plan'"):
        stage.execute({"ti": TI({}), "params": {}, "dag_run": None, "run_id": "r1"})
    commit = CommitOperator(task_id="commit", pipeline_file=cfg.file)
    assert run_attempts(commit, TI({("stage", "attempts"): {}})) == {}
    with pytest.raises(AirflowFailException, match="no XCom 'attempts' of its pipeline's stage task 'stage'"):
        run_attempts(commit, TI({("plan", "return_value"): [1]}))
    assert run_batches(commit, TI({}), required=False) == [] and run_attempts(commit, TI({}), required=False) == {}


def test_a_users_dag_gets_the_schedule_and_the_trigger_form_of_the_generated_dag(by_prefix):
    from eobatch.airflow import pipeline_params, pipeline_schedule

    dag = build_dag(by_prefix)
    assert pipeline_schedule(by_prefix.file).serialize() == dag.timetable.serialize()  # data intervals
    assert list(pipeline_params(by_prefix.file)) == list(dag.params.keys()) == ["max_records_per_batch", "dry_run"]
