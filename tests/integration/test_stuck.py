"""The stuck detector in the real DAG (`airflow dags test`): a batch that two runs failed, then a
third run whose recover is refused (a configuration edit while the batch is pending). No Spark:
the failed runs are driven through the real protocol in this process (``BatchRun``)."""

from __future__ import annotations

import pytest

from support.harness import orders
from support.protocol_runs import failing_run

pytestmark = pytest.mark.integration


def test_a_run_refused_on_a_stuck_batch_says_so_in_its_recover_log(pipeline, airflow):
    p = pipeline
    p.land("a.jsonl", orders("a", 10))
    for i in (1, 2):
        assert failing_run(p.protocol(), f"manual__failed{i}") == 1
    p.yaml_path.write_text(p.yaml_path.read_text().replace("ts TIMESTAMP", "ts TIMESTAMP, note STRING"))
    r = airflow(p)
    assert r.state == "failed", r.log[-4000:]
    assert "ConfigChanged" in r.log and "changed schema" in r.log, r.log[-4000:]
    assert f"stuck: pipeline {p.name} is STUCK: batch 1 is PLANNED since" in r.log, r.log[-4000:]
    assert "3 runs tried it and none committed it (limit 3 runs)" in r.log
    assert "repair (configuration edit refused while the batch is pending)" in r.log
    # the refusal's first repair command: a run that plans the pending batch again under the edit
    assert f"command: make run PIPELINE={p.name} CONF='{{\"replan_pending\": true}}'" in r.log, r.log[-4000:]
