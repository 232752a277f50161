"""The real DAG through real Airflow (`airflow dags test`), real spark-submit, real Delta."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from support.checks import assert_exactly_once, delta_log_commits, live_files, orphans, read_rows, txn_version
from support.harness import VENV_BIN, orders, write_pipeline

pytestmark = pytest.mark.integration


# a line of Spark's log4j layout at INFO ("26/11/28 16:19:01 INFO SparkContext: ...")
SPARK_INFO = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO \w+: .*")


def _ok(run):
    assert run.rc == 0 and run.state == "success", run.log[-6000:]


def test_three_batches_through_the_dag_exactly_once(pipeline, airflow):
    p = pipeline
    p.land("day1/a.jsonl", orders("a", 120), bad=['{"order_id": "x", "amount": "lots"}', "not json"])
    p.land("day1/b.jsonl", orders("b", 80))
    r1 = airflow(p)
    _ok(r1)
    assert any("plan: batch 1 PLANNED: 2 files" in line for line in r1.log.splitlines()), r1.log[-3000:]
    assert "verify: batch 1 PREPARED" in r1.log and "commit: batch 1 COMMITTED" in r1.log
    # a readable task log: the stage job's progress line per batch (batch, rows, seconds), and Spark
    # at WARN (a first run's log held ~140 Spark INFO lines around 5 of the product's)
    assert re.search(r"\[eobatch\] orders batch 1 attempt \S+ \+[\d.]+s: STAGED in [\d.]+s: 200 rows to publish, "
                     r"2 quarantined", r1.log), r1.log[-6000:]
    assert not SPARK_INFO.findall(r1.log), SPARK_INFO.findall(r1.log)[:5]

    # a file that lands late, with an older modification time than what was consumed; the
    # deployment's EOBATCH_SPARK_LOG_LEVEL brings Spark's INFO lines back
    p.land("day0/late.jsonl", orders("late", 30), mtime=time.time() - 86400)
    r2 = airflow(p, extra_env={"EOBATCH_SPARK_LOG_LEVEL": "INFO"})
    _ok(r2)
    assert "INFO SparkContext: Running Spark version" in r2.log, r2.log[-6000:]

    # nothing new: the run is skipped after plan and the tables do not change
    versions = [c["version"] for c in delta_log_commits(p.sink)]
    r3 = airflow(p)
    _ok(r3)
    assert "nothing new" in r3.log
    assert [c["version"] for c in delta_log_commits(p.sink)] == versions

    p.land("day2/c.jsonl", orders("c", 50), bad=["\x00garbage"])
    _ok(airflow(p))
    assert_exactly_once(p, batches=3)
    assert len(read_rows(p.sink)) == 280

    ledger = json.loads(subprocess.run(
        [str(VENV_BIN / "python"), "-m", "eobatch.cli", "ledger", p.name, "--format", "json"],
        env=airflow.env(p), capture_output=True, text=True, check=True).stdout)
    assert [(b["batch_id"], b["state"], b["rows_in"], b["rows_published"], b["rows_quarantined"])
            for b in ledger] == [(1, "COMMITTED", 202, 200, 2), (2, "COMMITTED", 30, 30, 0),
                                 (3, "COMMITTED", 51, 50, 1)]
    assert [b["delta_version"] for b in ledger] == [1, 2, 3]

    # the pipeline's maintenance DAG: compacted, the rows and the batches' exactly-once unchanged
    live = len(live_files(p.sink))
    m = airflow(p, dag_id=f"{p.name}_maintenance")
    _ok(m)
    assert "maintain: last maintenance" in m.log and f"sink {live} -> 1 files" in m.log, m.log[-3000:]
    assert len(live_files(p.sink)) == 1 and len(read_rows(p.sink)) == 280
    assert_exactly_once(p, batches=3)
    table = subprocess.run([str(VENV_BIN / "python"), "-m", "eobatch.cli", "ledger", p.name], env=airflow.env(p),
                           capture_output=True, text=True, check=True).stdout
    assert f"sink {live} -> 1 files" in table, table


def test_crash_after_delta_commit_before_ledger_update(pipeline, airflow, tmp_path):
    p = pipeline
    p.land("a.jsonl", orders("a", 40))
    crashed = airflow(p, extra_env={"EOBATCH_CRASH": "commit.after_delta_commit"})
    assert crashed.rc != 0 and crashed.state != "success"
    assert "injected crash at commit.after_delta_commit" in crashed.log
    # both tables hold batch 1, the ledger does not know it committed
    assert txn_version(p.sink, p.name) == 1 and txn_version(p.quarantine, p.name) == 1
    assert not (p.sink / "_eo_ledger" / "committed" / "0000000001.json").exists()

    p.land("b.jsonl", orders("b", 25))
    r = airflow(p)
    _ok(r)
    assert "ledger completed" in r.log
    assert "plan: batch 2 PLANNED: 1 files" in r.log
    assert_exactly_once(p, batches=2)


def test_crash_between_participant_commits_is_completed_by_recover(pipeline, airflow):
    p = pipeline
    p.land("a.jsonl", orders("a", 10), bad=["{oops"])
    crashed = airflow(p, extra_env={"EOBATCH_CRASH": "commit.after_first_participant"})
    assert crashed.rc != 0
    assert txn_version(p.sink, p.name) == 1
    assert not (p.quarantine / "_delta_log").exists() or txn_version(p.quarantine, p.name) in (None, 0)
    r = airflow(p)
    _ok(r)
    assert "was PREPARED but not committed everywhere" in r.log
    assert_exactly_once(p, batches=1)


def test_failed_stage_is_aborted_and_the_same_range_restaged(pipeline, airflow):
    p = pipeline
    p.land("a.jsonl", orders("a", 60))
    failed = airflow(p, extra_env={"EOBATCH_CRASH": "stage.after_first_file"})
    assert failed.state == "failed", failed.log[-4000:]
    assert "abort: batch 1 attempt" in failed.log
    assert orphans(p.sink) == []  # abort removed what the dead attempt wrote
    assert not (p.sink / "_delta_log").exists()

    p.land("b.jsonl", orders("b", 5))  # lands after the plan: belongs to the next batch
    r = airflow(p)
    _ok(r)
    assert "plan: batch 1 re-staged with its recorded range: 1 files" in r.log
    _ok(airflow(p))
    assert_exactly_once(p, batches=2)


def _stage_summaries(p, batch: int) -> dict[str, dict]:
    """attempt -> its stage summary (the raw ledger files of the batch)."""
    folder = p.sink / "_eo_ledger" / "attempts" / f"{batch:010d}"
    return {d.name: json.loads((d / "stage.json").read_text()) for d in sorted(folder.iterdir())
            if (d / "stage.json").exists()}


def test_one_run_carries_three_batches_and_its_stage_retry_keeps_what_was_staged(tmp_path, airflow):
    """max_batches_per_run: 3, one landing file per batch. The run's one Spark application dies
    after staging batch 1 (EOBATCH_CRASH stage.between_batches, once); the stage task's retry
    stages batches 2 and 3 in one application and keeps batch 1's attempt. Each batch is verified
    and committed on its own, in order: its own Delta commit, txn version and ledger records."""
    p = write_pipeline(tmp_path, max_records=60, extra="max_batches_per_run: 3\n")
    p.yaml_path.write_text(p.yaml_path.read_text().replace("  stage: 0", "  stage: 1"))
    for name in "abc":
        p.land(f"{name}.jsonl", orders(name, 60))
    r = airflow(p, extra_env={"EOBATCH_CRASH": "stage.between_batches", "EOBATCH_CRASH_ONCE_DIR": str(tmp_path / "once")})
    _ok(r)
    assert "this run carries batches 1..3" in r.log and "injected crash at stage.between_batches" in r.log, r.log[-6000:]
    assert "batch 1 is STAGED by attempt t1-" in r.log, r.log[-6000:]
    for b in (1, 2, 3):
        assert f"verify: batch {b} PREPARED" in r.log and f"commit: batch {b} COMMITTED" in r.log
    first, = _stage_summaries(p, 1).values()
    (a2, s2), = _stage_summaries(p, 2).items()
    (a3, s3), = _stage_summaries(p, 3).items()
    assert a2.startswith("t2-") and a3.startswith("t2-"), (a2, a3)
    assert s2["spark_app_id"] == s3["spark_app_id"] != first["spark_app_id"], "one application per try"
    for b, name in zip((1, 2, 3), "abc"):  # each batch its own file
        plan = json.loads((p.sink / "_eo_ledger" / "plans" / f"{b:010d}.json").read_text())
        assert [f["path"].rsplit("/", 1)[1] for f in plan["range"]["files"]] == [f"{name}.jsonl"]
        assert plan["run_first"] == 1
    assert_exactly_once(p, batches=3)
    assert len(read_rows(p.sink)) == 180

    p.land("d.jsonl", orders("d", 60))
    r2 = airflow(p)  # one more file: a run of one batch (the source has no more)
    _ok(r2)
    assert "plan: batch 4 PLANNED: 1 files" in r2.log and "this run carries" not in r2.log
    assert_exactly_once(p, batches=4)


def test_bad_pipeline_files_are_import_errors_and_the_others_load(tmp_path, airflow):
    good = write_pipeline(tmp_path, name="good_one")
    (good.yaml_path.parent / "broken.yaml").write_text("name: broken\nsource: [\n")
    (good.yaml_path.parent / "badkey.yaml").write_text(good.yaml_path.read_text().replace(
        "name: good_one", "name: other").replace("mode: continuous", "mode: continuous\ncolour: red"))
    env = airflow.env(good)
    listed = subprocess.run([str(VENV_BIN / "airflow"), "dags", "list", "--local", "-o", "json"], env=env,
                            capture_output=True, text=True)
    dag_ids = {d["dag_id"] for d in json.loads(listed.stdout[listed.stdout.index('[{"dag_id"'):])}
    assert "good_one" in dag_ids and "other" not in dag_ids
    errors = subprocess.run([str(VENV_BIN / "airflow"), "dags", "list-import-errors", "--local", "-o", "json"],
                            env=env, capture_output=True, text=True).stdout
    assert "broken.yaml: invalid YAML" in errors
    assert "badkey.yaml: colour: unknown key" in errors


def test_make_run_refuses_bad_params(pipeline, airflow):
    p = pipeline
    p.land("a.jsonl", orders("a", 3))
    r = airflow(p, conf={"max_records_per_batch": -5})
    assert r.rc != 0 or r.state != "success"
    assert "max_records_per_batch" in r.log and "-5" in r.log, r.log[-3000:]
    assert not (p.sink / "_eo_ledger" / "plans").exists() or not list((p.sink / "_eo_ledger" / "plans").iterdir())


def test_a_run_of_many_batches_of_a_wide_schema_stages_them_all(tmp_path, airflow):
    """Issue 41 (1): every batch spec of a run went into one ``--spec`` argument, and Linux refuses one
    argument of 128 KiB or more (E2BIG): 10 batches of a 400-column schema stuck the pipeline for good.
    The spec travels as a file of the ledger now: the command line is the same size for any run."""
    wide = [f"c{i:03d}_{'x' * 12} STRING" for i in range(400)]
    p = write_pipeline(tmp_path, schema=", ".join(["order_id STRING NOT NULL", "amount DOUBLE", *wide]), max_records=3)
    for i in range(6):  # 6 batches: about 176 KiB as one inline argument
        p.land(f"f{i:02d}.jsonl", [{**r, "c007_xxxxxxxxxxxx": f"w{i}"} for r in orders(f"f{i}", 3)])
    r = airflow(p)
    _ok(r)
    assert "this run carries batches 1..6" in r.log, r.log[-3000:]
    assert_exactly_once(p, batches=6)
    rows = read_rows(p.sink)
    assert len(rows) == 18 and {r["c007_xxxxxxxxxxxx"] for r in rows} == {f"w{i}" for i in range(6)}
    spec = p.sink / "_eo_ledger" / "attempts" / "0000000001"
    assert [f.name for f in spec.glob("*/job.json")] == ["job.json"], "the run's spec is a file of its first batch"


def test_a_stage_past_its_bound_is_killed_aborted_and_the_next_run_publishes(tmp_path, airflow):
    """Issue 41: every wait has a bound. A stage job that runs past ``retries.stage_timeout_seconds``
    is killed by Airflow, its try fails like any other, abort removes its files and the batch stays
    PLANNED; the next run stages it again and publishes it once."""
    p = write_pipeline(tmp_path, transform="slow_when_told", extra="""\
        retries:
          stage: 0
          stage_timeout_seconds: 25
        """.replace("        ", ""))
    p.yaml_path.write_text(p.yaml_path.read_text().replace("retries:\n  stage: 0\n  commit: 2\n  delay_seconds: 1\n", ""))
    slow = tmp_path / "slow"
    own = p.yaml_path.parent / "transforms"
    own.mkdir()
    (own / "slow_when_told.py").write_text(
        "import os, time\n\n\ndef transform(df, ctx):\n"
        f"    while os.path.exists({str(slow)!r}):  # the job waits here until the file is gone\n"
        "        time.sleep(1)\n"
        "    return df\n")
    slow.write_text("")
    p.land("a.jsonl", orders("a", 30))
    r1 = airflow(p)
    assert r1.rc != 0 and r1.state != "success", r1.log[-3000:]
    assert "Timeout" in r1.log or "timed out" in r1.log, r1.log[-3000:]
    assert "aborted" in r1.log and "stays PLANNED" in r1.log, r1.log[-3000:]
    assert not list(p.sink.glob("eo_batches/**/*.parquet")) and not list(p.sink.glob("_delta_log/*.json"))
    assert subprocess.run(["pgrep", "-f", f"eobatch-{p.name}-b1"], capture_output=True).returncode == 1, \
        "the stage job was killed with its try"
    slow.unlink()
    # the next run under a bound no loaded machine reaches (retries.* may change while a batch is pending)
    p.yaml_path.write_text(p.yaml_path.read_text().replace("stage_timeout_seconds: 25", "stage_timeout_seconds: 900"))
    _ok(airflow(p))
    assert_exactly_once(p, batches=1)


def test_eobatch_pools_create_creates_the_pools_the_pipelines_name_in_airflow(tmp_path, airflow):
    """`eobatch pools` printed the pools' names and left creating them to a checkout's `make pools`;
    `eobatch pools --create` creates them in the Airflow of its environment, one slot each."""
    p = write_pipeline(tmp_path, extra="maintenance:\n  pool: eo_commit_pool\n")
    env = airflow.env(p)
    listed = subprocess.run([str(VENV_BIN / "python"), "-m", "eobatch.cli", "pools"], env=env, capture_output=True,
                            text=True)
    assert listed.stdout == "eo_commit_pool orders\n", listed.stdout + listed.stderr
    made = subprocess.run([str(VENV_BIN / "python"), "-m", "eobatch.cli", "pools", "--create"], env=env,
                          capture_output=True, text=True)
    assert made.returncode == 0 and made.stdout == "pool eo_commit_pool: 1 slot (orders)\n", made.stdout + made.stderr
    got = subprocess.run([str(VENV_BIN / "airflow"), "pools", "get", "eo_commit_pool", "-o", "json"], env=env,
                         capture_output=True, text=True)
    pool, = json.loads(got.stdout[got.stdout.index("["):])
    assert (pool["pool"], int(pool["slots"])) == ("eo_commit_pool", 1), got.stdout
    assert "orders" in pool["description"]
