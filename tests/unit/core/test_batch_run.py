"""eobatch.core.batch_run: one run's batch (``BatchRun``), which the Airflow tasks and the CLI verbs both
drive (how each translates its outcome: airflow/test_operators.py, test_cli.py)."""

from __future__ import annotations

from pathlib import Path

from eobatch.core.batch_run import BatchRun, RunParams
from eobatch.core.protocol import Protocol
from support.protocol_runs import land
from support.pyarrow_stager import stage


def test_dry_run_ends_with_the_attempt_aborted_and_nothing_published(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    land(cfg, "a.jsonl", ["a1", "a2"])
    run = BatchRun(proto, run_id="r1", params=RunParams(dry_run=True))
    assert run.recover().skip is None
    [batch] = run.plan().value
    attempt = stage(proto, batch)
    verified = run.verify(batch, attempt).value
    assert verified["rows_published"] == 2 and proto.ledger.prepared(batch) is None
    r = run.commit(batch, verified=verified)
    assert r.value["dry_run"] and "Nothing was published" in r.lines[0]
    assert proto.committed_versions() == {"sink": 0, "quarantine": 0}
    assert not list(Path(cfg.sink_table).rglob("*.parquet"))
