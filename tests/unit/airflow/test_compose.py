"""A pipeline's tasks in a user's own DAG: ``eobatch.airflow.pipeline_tasks`` (one TaskGroup, the
graph of the generated DAGs too); each task finds its siblings through its group, never by fixed ids,
and a task that cannot find them fails, never "nothing to do". The real runs: tests/integration/test_compose.py."""

from __future__ import annotations

import datetime as dt

import pytest

from eobatch.airflow.dag_factory import build_dag, pipeline_tasks

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
