"""Pipelines driven the way users drive them: a real Airflow scheduler, dag-processor and
api-server on loopback; runs triggered through the REST API and the CLI, with good and bad
params; backfills with reprocessing in interval mode. Outcomes are read from the tables
(delta-rs, raw _delta_log) and the ledger."""

from __future__ import annotations

import collections
import datetime as dt

import pytest

from support.airflow_stack import AirflowStack
from support.checks import delta_log_commits, read_rows, txn_version
from support.harness import REPO, airflow_env, orders, write_pipeline

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    root = tmp_path_factory.mktemp("scheduler")
    orders_p = write_pipeline(root, name="orders")
    hourly = write_pipeline(root, name="hourly", mode="interval", schedule="@hourly",
                            interval_prefix="dt={ds}/hour={hh}")
    drain = write_pipeline(root, name="drain", max_records=40)
    s = AirflowStack(root, airflow_env(root / "airflow", orders_p.yaml_path.parent))
    try:
        s.start(["orders", "hourly", "drain"])
        s.pipelines = {"orders": orders_p, "hourly": hourly, "drain": drain}
        yield s
    finally:
        s.stop()


def ids(table) -> collections.Counter:
    return collections.Counter(r["order_id"] for r in read_rows(table))


def ledger(p):
    proto = p.protocol()
    return {plan.batch_id: proto.state(plan.batch_id) for plan in proto.ledger.plans()}


def test_a_triggered_run_carries_a_backlog_of_batches_and_the_bench_times_it(stack):
    """Under the running scheduler, a run triggered through the REST API with max_batches_per_run
    drains three batches (one landing file of 40 records each) in one DAG run, each its own Delta
    commit; the bench's timing of scheduled runs (eo_scheduler_seconds) reads it from Airflow."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "bench"))
    import run_bench

    p = stack.pipelines["drain"]
    for name in "abc":
        p.land(f"{name}.jsonl", orders(name, 40))
    [took] = run_bench.time_scheduled_runs(stack, "drain", 1, conf={"max_batches_per_run": 5})
    assert took > 0
    assert ledger(p) == {1: "COMMITTED", 2: "COMMITTED", 3: "COMMITTED"}
    assert len({plan.run_id for plan in p.protocol().ledger.plans()}) == 1, "one DAG run carried them"
    assert txn_version(p.sink, "drain") == 3 and ids(p.sink) == collections.Counter(
        r["order_id"] for r in p.landed)
    assert [c["txns"][0]["version"] for c in delta_log_commits(p.sink) if c["txns"]] == [1, 2, 3]


def test_triggers_with_good_and_bad_params(stack):
    p = stack.pipelines["orders"]

    # Wrong types and negative numbers are refused by the API itself (the params' JSON schema).
    for conf, text in (({"max_records_per_batch": -3}, "less than the minimum"),
                       ({"max_records_per_batch": "many"}, "is not of type"),
                       ({"dry_run": "yes"}, "is not of type")):
        status, body = stack.trigger("orders", conf)
        assert status in (400, 422) and text in str(body), (status, body)

    # Unknown keys and an unknown batch pass the API but are refused by the first task,
    # before anything is planned or staged.
    # A rewind that would change the tables needs its confirmation (after a dry run's report).
    refused = {}
    cases = {"colour": {"colour": "red"}, "unconfirmed": {"rewind_to_batch": 1},
             "no batch": {"rewind_to_batch": 7, "confirm_rewind": True}}
    for name, conf in cases.items():
        status, body = stack.trigger("orders", conf)
        assert status == 200, body
        refused[body["dag_run_id"]] = name
    got = stack.wait_runs("orders", list(refused))
    assert {r["state"] for r in got.values()} == {"failed"}
    logs = {name: stack.task_log("orders", r, "recover") for r, name in refused.items()}
    assert "params refused: unknown param(s) ['colour']" in logs["colour"]
    assert "first with dry_run=true" in logs["unconfirmed"] and "confirm_rewind=true" in logs["unconfirmed"]
    assert "cannot rewind to batch 7" in logs["no batch"]
    assert ledger(p) == {}

    # A REST trigger and a CLI trigger at once: the second waits for the first (one active run)
    # and finds nothing new; the records are published once.
    a = orders("a", 5)
    p.land("a.jsonl", a, bad=["{not json"])
    status, r1 = stack.trigger("orders", {})
    assert status == 200, r1
    cli = stack.cli("dags", "trigger", "orders", "-c", '{"max_records_per_batch": 1000}', "-o", "json")
    assert cli.returncode == 0, cli.stderr[-3000:]
    runs = [r for r in stack.runs("orders") if r["dag_run_id"] not in refused]
    assert len(runs) == 2 and {r["triggered_by"] for r in runs} == {"rest_api", "cli"}, runs
    done = stack.wait_success("orders", [r["dag_run_id"] for r in runs])
    first, second = sorted(done.values(), key=lambda r: r["start_date"])
    assert second["start_date"] >= first["end_date"], "two runs of one pipeline overlapped"
    assert "nothing new" in stack.task_log("orders", second["dag_run_id"], "plan")
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a)
    assert ledger(p) == {1: "COMMITTED"}

    # dry_run: staged and verified, reported, aborted; nothing published.
    b = orders("b", 4)
    p.land("b.jsonl", b)
    status, dry = stack.trigger("orders", {"dry_run": True})
    stack.wait_success("orders", [dry["dag_run_id"]])
    log = stack.task_log("orders", dry["dag_run_id"], "commit")
    assert "DRY RUN of batch 2: would publish 4 rows" in log, log[-3000:]
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a)
    assert ledger(p) == {1: "COMMITTED", 2: "PLANNED"}

    # The next run re-stages the recorded range and publishes it.
    status, r3 = stack.trigger("orders", {})
    stack.wait_success("orders", [r3["dag_run_id"]])
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a + b)

    # Rewind to batch 2 from the trigger form: the tables go back, batch 3 reads b again.
    status, rw = stack.trigger("orders", {"rewind_to_batch": 2, "confirm_rewind": True})
    stack.wait_success("orders", [rw["dag_run_id"]])
    assert "rewind to before batch 2" in stack.task_log("orders", rw["dag_run_id"], "recover")
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in a + b)
    assert [x["raw"] for x in read_rows(p.quarantine)] == ["{not json"]
    assert ledger(p) == {1: "COMMITTED", 2: "REWOUND", 3: "COMMITTED"}
    assert txn_version(p.sink, "orders") == 3


def test_backfill_in_interval_mode_publishes_each_interval_once(stack):
    p = stack.pipelines["hourly"]
    h0, h1 = orders("h0", 3), orders("h1", 4)
    p.land("dt=2026-01-01/hour=00/a.jsonl", h0)
    p.land("dt=2026-01-01/hour=01/a.jsonl", h1, bad=["{bad h1"])
    window = ("--from-date", "2026-01-01T00:00:00+00:00", "--to-date", "2026-01-01T01:00:00+00:00")

    r = stack.cli("backfill", "create", "--dag-id", "hourly", *window, "--max-active-runs", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    backfill = [x for x in stack.runs("hourly") if x["run_type"] == "backfill"]
    assert len(backfill) == 2, backfill
    stack.wait_success("hourly", [x["dag_run_id"] for x in backfill])
    assert ids(p.sink) == collections.Counter(x["order_id"] for x in h0 + h1)
    stack.wait_backfills_done("hourly")

    # More data lands for hour 01; the same window is backfilled again with reprocessing.
    h1b = orders("h1b", 2)
    p.land("dt=2026-01-01/hour=01/b.jsonl", h1b)
    r = stack.cli("backfill", "create", "--dag-id", "hourly", *window, "--reprocess-behavior", "completed",
                  "--max-active-runs", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    # Airflow refuses a second backfill of the same DAG while one runs (overlap is impossible).
    again = stack.cli("backfill", "create", "--dag-id", "hourly", "--from-date", "2026-01-01T01:00:00+00:00",
                      "--to-date", "2026-01-01T01:00:00+00:00", "--reprocess-behavior", "completed")
    assert again.returncode != 0 and "Another backfill is running" in again.stdout + again.stderr
    stack.wait_success("hourly", [x["dag_run_id"] for x in backfill])

    assert ids(p.sink) == collections.Counter(x["order_id"] for x in h0 + h1 + h1b)
    assert [x["raw"] for x in read_rows(p.quarantine)] == ["{bad h1"]
    proto = p.protocol()
    plans = [x for x in proto.ledger.plans()]
    by_interval = collections.defaultdict(list)
    for plan in plans:
        by_interval[plan.interval["start"]].append(plan.batch_id)
    start0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).isoformat()
    assert len(by_interval[start0]) == 2, by_interval
    assert all(proto.state(b) == "COMMITTED" for bs in by_interval.values() for b in bs)
    # each reprocessing commit replaced the interval's earlier files in the same transaction
    replacing = [c for c in delta_log_commits(p.sink) if c["removes"]]
    assert len(replacing) == 2 and all(c["adds"] and c["txns"] for c in replacing)
