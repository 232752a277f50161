"""The stage driver's Java options: its JVM really starts from the class-data archive `make setup`
builds, with the throughput collector; its Python workers import the installed pyspark, not
Spark's source zip (``spark_jobs/worker_daemon.py``).

``-Xshare:on`` makes a JVM fail at start-up when it cannot map the archive (a wrong file, another
classpath or JVM), so a stage job that succeeds with it used the archive; ``-Xlog:gc`` has the JVM
name its collector. The batch is then verified and committed as any other.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from eobatch.job import driver_jvm, launch
from support.harness import base_env, orders, spark_read, write_pipeline

pytestmark = pytest.mark.integration


def test_built_archive_is_mapped_by_the_stage_job(tmp_path):
    said: list[str] = []
    os.makedirs(tmp_path / "cache")
    stale = tmp_path / "cache" / "stage-classes-000000000000.jsa"  # of another pyspark, Java or collector
    stale.write_bytes(b"old")
    path = launch.build_class_archive(cache_dir=str(tmp_path / "cache"), log=said.append, force=True)
    assert os.path.getsize(path) > 10 << 20 and not [p for p in os.listdir(tmp_path / "cache") if p.endswith(".tmp")]
    assert launch.build_class_archive(cache_dir=str(tmp_path / "cache"), log=said.append) == path
    assert not stale.exists()
    assert said[-1].endswith("is up to date")

    p = write_pipeline(tmp_path, name="cds")
    p.land("a.jsonl", orders("a", 40), bad=["{not json"])
    proto = p.protocol()
    proto.recover()
    plan, _ = proto.plan()
    attempt = launch.new_attempt_id(1)
    ours = driver_jvm.java_options({}, cache_dir=str(tmp_path / "cache"))[driver_jvm.JAVA_OPTIONS]
    assert f"-XX:SharedArchiveFile={path}" in ours
    on = {driver_jvm.JAVA_OPTIONS: f"{ours} -Xshare:on -Xlog:gc"}
    r = subprocess.run(launch.spark_submit_argv(p.cfg, plan.batch_id, attempt, conf=on), env=base_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "Using Parallel" in r.stdout, r.stdout[:2000]
    workers = [line for line in r.stderr.splitlines() if line.startswith("[eobatch] python workers: pyspark")]
    assert len(workers) == 1 and ".zip" not in workers[0], workers or r.stderr[-3000:]
    assert workers[0].endswith(os.path.dirname(__import__("pyspark").__file__)), workers
    prepared = proto.verify(plan.batch_id, attempt)
    assert (prepared.rows_published, prepared.rows_quarantined) == (40, 1)
    proto.commit(plan.batch_id)
    assert sorted(r["order_id"] for r in spark_read(p.sink)[str(p.sink)]["rows"]) == [o["order_id"] for o in orders("a", 40)]

    # the check is real: a JVM asked to start from an archive it cannot map does not start
    bad = {driver_jvm.JAVA_OPTIONS: f"-XX:SharedArchiveFile={tmp_path / 'missing.jsa'} -Xshare:on"}
    r = subprocess.run(launch.spark_submit_argv(p.cfg, plan.batch_id, launch.new_attempt_id(2), conf=bad),
                       env=base_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "shared archive" in (r.stdout + r.stderr).lower()
