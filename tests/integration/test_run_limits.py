"""Issue 41 (2): the resources one Spark application holds across the batches of a run.

The files kind opens every planned local file (checked against the plan's identity, read by Spark
through its descriptor). Those descriptors stayed open for the application's life and the open-file
limit was checked per batch only: a catch-up of many small files staged a few batches, then failed
with "Too many open files" in the same place on every run. A batch's descriptors are released once it
is staged: a run of any length holds one batch's files at a time."""

from __future__ import annotations

import resource
import subprocess

import pytest

from eobatch.job import launch
from eobatch.protocol.batch_run import BatchRun
from support.checks import assert_exactly_once
from support.harness import base_env, orders, write_pipeline

pytestmark = pytest.mark.integration

FILES_PER_BATCH, BATCHES, LIMIT = 600, 3, 1500


def _limited():
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def test_a_run_of_many_small_files_stays_under_the_open_file_limit(tmp_path):
    p = write_pipeline(tmp_path, max_records=FILES_PER_BATCH)
    for i in range(FILES_PER_BATCH * BATCHES):
        p.land(f"d{i // 200:02d}/f{i:05d}.jsonl", orders(f"f{i:05d}", 1))
    run = BatchRun(p.protocol(), run_id="r1")
    run.recover()
    batches = run.plan().value
    assert batches == list(range(1, BATCHES + 1))
    attempts = run.stage_attempts(batches, lambda: launch.new_attempt_id(1)).value
    first = min(attempts)
    argv = launch.spark_submit_argv(p.cfg, first, attempts[first], also={b: a for b, a in attempts.items() if b != first})
    r = subprocess.run(argv, env=base_env(), capture_output=True, text=True, timeout=900, preexec_fn=_limited)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    assert (r.stdout + r.stderr).count("STAGED in") == BATCHES
    run.verify_run(attempts)
    for b in batches:
        run.commit(b)
    assert_exactly_once(p, batches=BATCHES)
