"""One run's batch (``BatchRun``) is what the Airflow tasks and the CLI verbs both drive, and
the product's errors are translated in one place each: the Airflow outcome by kind
(``airflow_ops._step``), the CLI exit status by ``errors.exit_code``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_late_files import iv, land

import eobatch
from eobatch import errors
from eobatch.batch_run import BatchRun, Report
from eobatch.params import RunParams
from eobatch.protocol import Protocol
from support.pyarrow_stager import stage


def _cli(cfg, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eobatch.cli", *args],
                          env={"PIPELINES_DIR": str(Path(cfg.file).parent),
                               "PYTHONPATH": str(Path(eobatch.__file__).parents[1]), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def _interval_cfg(make_cfg):
    return make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "interval_prefix": "dt={ds}/hour={hh}",
        "settle_seconds": 0})


def test_cli_abort_of_an_interval_batch_abandons_it_as_the_abort_task_does(make_cfg):
    cfg = _interval_cfg(make_cfg)
    proto = Protocol(cfg)
    land(cfg, "dt=2026-01-01/hour=00/a.jsonl", ["a1", "a2"])
    plan, _ = proto.plan(interval=iv(0), run_id="h0")
    attempt = stage(proto, plan.batch_id)
    staged = [f for t in (cfg.sink_table, cfg.quarantine_table) for f in Path(t).rglob("*")
              if f.is_file() and "eo_batches" in f.parts]
    assert any(f.suffix == ".parquet" for f in staged)

    r = _cli(cfg, "abort", cfg.name, str(plan.batch_id), attempt)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"removed": len(staged)}
    assert "ABANDONED" in r.stderr
    assert proto.ledger.abandoned(plan.batch_id) is not None  # the next interval can go ahead
    assert not list(Path(cfg.sink_table).rglob("*.parquet"))
    # and the interval can simply run again: a new batch of the same interval
    plan2, new = proto.plan(interval=iv(0), run_id="h0-again")
    assert new and plan2.batch_id == plan.batch_id + 1 and plan2.rows_in == 2


def test_cli_abort_of_a_prepared_attempt_is_refused_with_the_protocols_exit_status(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    land(cfg, "a.jsonl", ["a1"])
    plan, _ = proto.plan()
    attempt = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, attempt)
    r = _cli(cfg, "abort", cfg.name, str(plan.batch_id), attempt)
    assert r.returncode == 5 and "PREPARED" in r.stderr, (r.returncode, r.stderr)
    assert proto.ledger.prepared(plan.batch_id).attempt == attempt


def test_cli_exit_status_by_kind(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    land(cfg, "a.jsonl", ["a1"])
    plan, _ = proto.plan()
    r = _cli(cfg, "verify", cfg.name, str(plan.batch_id), "t1-notstagedyet")  # wait: no stage summary
    assert r.returncode == 3 and r.stderr.startswith("not ready:"), (r.returncode, r.stderr)
    r = _cli(cfg, "verify", cfg.name, str(plan.batch_id), "../x")  # usage: a forged attempt id
    assert r.returncode == 2, r.stderr
    r = _cli(cfg, "commit", cfg.name, str(plan.batch_id))  # terminal: not PREPARED
    assert r.returncode == 5 and "not PREPARED" in r.stderr, r.stderr
    r = _cli(cfg, "plan", cfg.name)  # the batch is pending: handed back, not planned past
    assert r.returncode == 0 and json.loads(r.stdout) == {"batch_id": 1, "new": False,
                                                          "range": plan.range_summary()}, r.stdout


@pytest.mark.parametrize("kind,code", [("wait", 3), ("terminal", 5), ("retry", 7)])
def test_every_kind_has_one_exit_status(kind, code):
    cls = {"wait": errors.WaitError, "terminal": errors.TerminalError, "retry": errors.RetryableError}[kind]
    assert errors.exit_code(cls("x")) == code
    assert errors.exit_code(errors.UsageError("x")) == 2
    assert errors.exit_code(RuntimeError("a bug")) == 1


@pytest.mark.parametrize("sensor", [True, False])
def test_airflow_translates_each_kind_in_one_place(sensor):
    from airflow.sdk import BaseOperator, BaseSensorOperator
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from eobatch.airflow_ops import _step

    task = (BaseSensorOperator(task_id="s") if sensor else BaseOperator(task_id="t"))

    def raises(e):
        def fn():
            raise e
        return fn

    wait = errors.BatchInFlight("batch 3 of run r is not decided yet")
    if sensor:
        assert _step(task, "plan", raises(wait)) is None  # the sensor pokes again
    else:
        with pytest.raises(errors.BatchInFlight):  # any other task: Airflow's retry
            _step(task, "recover", raises(wait))
    with pytest.raises(AirflowFailException, match="cannot be committed"):
        _step(task, "commit", raises(errors.CommitBlocked("PREPARED batch 1 cannot be committed")))
    with pytest.raises(errors.RetryableError):  # a retryable error is raised as it is: Airflow's retries
        _step(task, "commit", raises(errors.RetryableError("S3 is down")))
    with pytest.raises(AirflowSkipException, match="nothing new"):
        _step(task, "plan", lambda: Report(lines=["x"], skip="nothing new"))
    r = _step(task, "verify", lambda: Report(lines=["PREPARED"], warnings=["late"], value=7))
    assert r.value == 7


def test_dry_run_ends_with_the_attempt_aborted_and_nothing_published(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    land(cfg, "a.jsonl", ["a1", "a2"])
    run = BatchRun(proto, run_id="r1", params=RunParams(dry_run=True))
    assert run.recover().skip is None
    batch = run.plan().value
    attempt = stage(proto, batch)
    verified = run.verify(batch, attempt).value
    assert verified["rows_published"] == 2 and proto.ledger.prepared(batch) is None
    r = run.commit(batch, verified=verified)
    assert r.value["dry_run"] and "Nothing was published" in r.lines[0]
    assert proto.committed_versions() == {"sink": 0, "quarantine": 0}
    assert not list(Path(cfg.sink_table).rglob("*.parquet"))
