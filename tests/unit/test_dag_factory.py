"""eobatch.dag_factory: the tasks that can commit a batch declare the pipeline's asset alias."""

from __future__ import annotations

from eobatch.assets import asset_uri
from eobatch.dag_factory import build_dag


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
