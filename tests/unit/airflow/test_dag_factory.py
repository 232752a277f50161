"""eobatch.airflow.dag_factory: the tasks that can commit a batch declare the pipeline's asset alias."""

from __future__ import annotations

from pathlib import Path

import yaml

from eobatch.airflow.assets import asset_uri
from eobatch.airflow.dag_factory import build_dag


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
