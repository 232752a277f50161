"""The Airflow operators translate protocol errors: a terminal one fails the task at once
(AirflowFailException: no retries), never after eight retries with backoff."""

from __future__ import annotations

import pytest

from eobatch.formats import BatchPlan, PreparedBatch, fingerprint_of


class _TI:
    """The two calls the commit task makes on its task instance."""

    def __init__(self, xcoms: dict):
        self.xcoms = xcoms

    def xcom_pull(self, task_ids=None, key="return_value"):
        return self.xcoms.get((task_ids, key))


def test_commit_of_a_prepared_batch_whose_files_are_gone_fails_without_retry(make_cfg, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from eobatch.airflow_ops import CommitOperator
    from eobatch.protocol import Protocol

    cfg = make_cfg()
    proto = Protocol(cfg)
    assert proto.ledger.put_plan(BatchPlan(pipeline="orders", batch_id=1, source_kind="files", range={"files": []},
                                           rows_in=1, config_fingerprint="f", planned_at="t"))
    adds = {"sink": [{"path": "eo_batches/b0000000001/a1/part-0.parquet", "size": 10, "partition_values": {},
                      "modification_time": 0, "stats": "{}"}], "quarantine": []}
    assert proto.ledger.put_prepared(PreparedBatch(
        pipeline="orders", batch_id=1, attempt="a1", adds=adds, arrow_schema={}, partition_by={},
        fingerprint=fingerprint_of(adds), rows_in=1, rows_valid=1, rows_quarantined=0, rows_published=1,
        bytes=10, files=1, prepared_at="t", verify_seconds=0.0, stage_seconds=0.0))
    op = CommitOperator(task_id="commit", pipeline_file=cfg.file)
    ctx = {"ti": _TI({("plan", "return_value"): 1}), "params": {}, "dag_run": None, "run_id": "r1"}
    with pytest.raises(AirflowFailException, match="PREPARED batch 1 cannot be committed.*is gone"):
        op.execute(ctx)
