"""An Airflow of many workers: a files pipeline run by the real scheduler through Airflow's Celery
executor (Redis from Debian as the broker, PostgreSQL as the metadata database and Celery's result
backend) on two ``airflow celery worker`` processes, each as if on a machine of its own: its own
name (the hostname its task instances report), one task slot, and its own local caches, a jars
folder (``EOBATCH_JARS_DIR``) and a cache folder (``EOBATCH_CACHE_DIR``: the code zip, the class-data
archive, the digests of what it checked). What the workers share is what any two machines would:
Airflow's database, the pipelines folder, the landing zone and the tables (one path here, a shared
mount or S3 in a deployment).

The tasks of one run land on different workers, deterministically: a cluster policy of the
platform (``task_instance_mutation_hook`` in ``airflow_local_settings.py``) routes each task to one
worker's Celery queue, alternating along the run's chain (recover, plan, stage, verify, commit),
the next run starting on the other worker: every hop between two tasks of a run crosses machines,
and each worker runs a stage job from its own caches. Runs are triggered through the REST API.

Outcomes are read independently: the tables with delta-rs and the raw _delta_log (each landed
record published once, each bad line quarantined once), the ledger (every batch COMMITTED), the
task instances' ``hostname`` and ``queue`` from Airflow's REST API, each worker's cache folder
(its code zip, its class-data archive, the digests of the jars and archive it checked, all under
its own folder), and the spark-submit command each stage task logged.

``EOBATCH_MANY_WORKERS_RUNS`` (default 2; `make workers-check RUNS=<n>`) runs more of them.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import re
import shutil
import time
import urllib.parse
from pathlib import Path

import pytest

from eobatch import paths
from eobatch.job import driver_jvm, jars, launch
from support.airflow_stack import AirflowStack, CeleryWorker
from support.checks import assert_exactly_once
from support.harness import airflow_env, orders, write_pipeline

pytestmark = pytest.mark.integration

WORKERS = ("w1", "w2")
CHAIN = ("recover", "plan", "stage", "verify", "commit")  # the tasks a run executes, in order (abort: skipped)
RUNS = int(os.environ.get("EOBATCH_MANY_WORKERS_RUNS", "2"))
RUN_PREFIX = "many-workers-"

# The platform's cluster policy: task k of run n goes to the queue of worker (k + n) mod 2. Runs not
# named by the test, and tasks not of the chain, keep the default queue (both workers consume it).
POLICY = f'''\
# tests/integration/test_many_workers.py: route the tasks of a run to alternating workers
import re

CHAIN = {CHAIN!r}
QUEUES = {WORKERS!r}


def task_instance_mutation_hook(task_instance, dag_run=None):
    m = re.fullmatch(r"{RUN_PREFIX}(\\d+)", task_instance.run_id or "")
    if m and task_instance.task_id in CHAIN:
        task_instance.queue = QUEUES[(CHAIN.index(task_instance.task_id) + int(m.group(1))) % len(QUEUES)]
'''


# a line of an `airflow celery worker` log for each task it runs
EXECUTED = re.compile(r"Executing workload in Celery: .*?log_path='dag_id=orders/run_id=([^/']+)/task_id=([^/']+)/")


def routed(run: int, task_id: str) -> str:
    """The worker the policy sends ``task_id`` of run ``run`` to."""
    return WORKERS[(CHAIN.index(task_id) + run) % len(WORKERS)]


def provision(folder: Path) -> dict[str, str]:
    """A worker's own local caches as its image or first boot provides them, before any task: the
    core jars (what `eobatch jars` resolves; in a checkout with the stage job's JVM jar that `make
    jars` builds there) and the class-data archive for its Java and pyspark (`eobatch class-archive`),
    each a copy of its own; its code zip is built by its first stage task. Returns the environment
    that names them."""
    jars_dir, cache = folder / "jars", folder / "cache"
    jars_dir.mkdir(parents=True, mode=0o700)
    cache.mkdir(mode=0o700)
    source = Path(paths.jars_dir())
    for name in [*jars.listed(sets=("core",)), paths.JVM_EXTENSION]:
        shutil.copy2(source / name, jars_dir / name)
    archive = driver_jvm.archive_path()
    assert archive is not None, "no java or no pyspark: no class-data archive"
    if driver_jvm.archive_problem(archive) is not None:  # not built yet here (`make setup` builds it)
        archive = launch.build_class_archive(cache_dir=str(folder.parent / "class-archive"), log=lambda m: None)
    for suffix in ("", driver_jvm.DIGEST_SUFFIX):
        shutil.copy2(archive + suffix, cache / (os.path.basename(archive) + suffix))
    return {"EOBATCH_JARS_DIR": str(jars_dir), "EOBATCH_CACHE_DIR": str(cache)}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    root = tmp_path_factory.mktemp("many-workers")
    # one landing file per batch, one batch per run
    p = write_pipeline(root, name="orders", max_records=5, extra="max_batches_per_run: 1\n")
    workers = [CeleryWorker(name, env=provision(root / "machines" / name), queues=("default", name))
               for name in WORKERS]
    s = AirflowStack(root, airflow_env(root / "airflow", p.yaml_path.parent), executor="celery", workers=workers)
    (s.home / "config").mkdir(parents=True, exist_ok=True)
    (s.home / "config" / "airflow_local_settings.py").write_text(POLICY)
    try:
        s.start(["orders"])
        s.pipelines = {"orders": p}
        yield s
    finally:
        s.stop()


def task_instances(stack: AirflowStack, dag_id: str, run_id: str) -> dict[str, dict]:
    status, body = stack.rest("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
                                     f"/taskInstances")
    assert status == 200, body
    return {t["task_id"]: t for t in body["task_instances"]}


def test_the_tasks_of_each_run_alternate_between_two_celery_workers_each_with_its_own_caches(stack):
    assert RUNS >= 2, "two runs at least: each worker runs a stage job"
    p = stack.pipelines["orders"]
    machines = {w.name: w.env for w in stack.workers}
    for n in range(1, RUNS + 1):
        p.land(f"part-{n:03d}.jsonl", orders(f"r{n}", 5), bad=[f'{{"order_id": "bad-{n}", "amount": "many"}}'])

    t0 = time.time()
    run_ids = [f"{RUN_PREFIX}{n}" for n in range(1, RUNS + 1)]
    for run_id in run_ids:  # queued at once: one active run of the pipeline at a time, each its batch
        status, body = stack.trigger("orders", {}, run_id=run_id)
        assert status == 200 and body["dag_run_id"] == run_id, body
    stack.wait_success("orders", run_ids, timeout=300 + 120 * RUNS)
    print(f"{RUNS} runs on two Celery workers in {time.time() - t0:.1f}s")

    # each landed record published once, each bad line quarantined once, one commit per batch
    assert_exactly_once(p, RUNS)
    proto = p.protocol()
    assert {plan.batch_id: proto.state(plan.batch_id) for plan in proto.ledger.plans()} == \
        {n: "COMMITTED" for n in range(1, RUNS + 1)}

    # every task of a run on the worker the policy routed it to: each hop crosses workers
    stages, stage_starts = {}, collections.defaultdict(list)
    for n, run_id in enumerate(run_ids, start=1):
        tis = task_instances(stack, "orders", run_id)
        assert tis["abort"]["state"] == "skipped", tis["abort"]
        got = {t: (tis[t]["state"], tis[t]["queue"], tis[t]["hostname"]) for t in CHAIN}
        assert got == {t: ("success", routed(n, t), routed(n, t)) for t in CHAIN}, got
        assert {tis[t]["hostname"] for t in CHAIN} == set(WORKERS)
        stages[tis["stage"]["hostname"]] = run_id
        stage_starts[tis["stage"]["hostname"]].append(dt.datetime.fromisoformat(tis["stage"]["start_date"]))
    assert set(stages) == set(WORKERS), f"each worker ran a stage job: {stages}"

    # each worker ran its stage job from its own caches only: built, checked and named on its command line
    for name, env in machines.items():
        others = [f"{Path(e['EOBATCH_CACHE_DIR']).parent}/" for k, e in machines.items() if k != name]
        cache, jars_dir = Path(env["EOBATCH_CACHE_DIR"]), Path(env["EOBATCH_JARS_DIR"])
        zips = sorted(cache.glob("eobatch-*.zip"))
        assert len(zips) == 1, f"{name}: its stage task built one code zip in its cache: {sorted(os.listdir(cache))}"
        if len(stage_starts[name]) > 1:  # `make workers-check`: its later stage tasks checked and reused it
            assert zips[0].stat().st_mtime < max(stage_starts[name]).timestamp(), (name, stage_starts[name])
        archive = cache / os.path.basename(str(driver_jvm.archive_path()))
        digests = json.loads((cache / "file-digests.json").read_text())
        checked = {str(jars_dir / j) for j in jars.listed(sets=("core",))} | {str(archive)}
        assert checked <= set(digests), f"{name}: the jars and the archive it checked: {sorted(digests)}"
        assert not [k for k in digests if any(k.startswith(o) for o in others)], digests

        log = stack.task_log("orders", stages[name], "stage")
        [cmd] = [line for line in log.splitlines() if "Spark-Submit cmd" in line]
        assert f"--py-files {zips[0]}" in cmd, cmd
        assert f"-XX:SharedArchiveFile={archive}" in cmd, cmd
        assert f"{jars_dir}/delta-spark_" in cmd and f"{jars_dir}/{paths.JVM_EXTENSION}" in cmd, cmd
        assert not [o for o in others if o in cmd], cmd

    # and Celery says so too: each worker's log names the tasks it executed, exactly those routed to it
    for name in WORKERS:
        executed = set(EXECUTED.findall(stack.log_tail(f"worker-{name}", 1 << 24)))
        assert executed == {(r, t) for n, r in enumerate(run_ids, start=1) for t in CHAIN if routed(n, t) == name}, \
            (name, sorted(executed))
