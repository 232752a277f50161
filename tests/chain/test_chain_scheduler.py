"""Three pipelines chained by their tables under a real Airflow scheduler (`make chain-check`):
bronze (landing files into an append table), silver (bronze's versions, upserted by order_id,
deletes by op, writing the Change Data Feed; scheduled on bronze's asset) and gold (totals per
customer over silver's changes; scheduled on silver's asset).

Bronze runs are triggered through the REST API while the downstream DAGs run on the asset events;
between rounds bronze is compacted and VACUUMed by its maintenance DAG, and one silver run's
stage is killed with SIGKILL (its spark-submit process group) while it writes. At the end, after
the last events: independent readers (delta-rs) find silver equal to the latest record per key
of everything landed (deletes applied), and gold equal to the totals of silver's rows, so each
landed record affected gold exactly once.

Then a headless browser (Debian's chromium) opens silver's graph in the Airflow UI with all DAG
dependencies shown and finds the chain there: bronze, its table's asset, silver, silver's asset, gold
(``EOBATCH_CHAIN_SCREENSHOT=<path.png>`` saves it: docs/site/chain-assets.png, in the README, is one).

Not in `make test` (it takes several minutes of a scheduler's runs): `tests/integration/
test_delta_source.py` runs the three hops with real Spark through the library, the model test
and the delta chaos backend cover the upstream's faults.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import textwrap
import time

import pytest

from support import browser
from support.airflow_stack import AirflowStack
from support.checks import read_rows
from support.harness import Pipeline, airflow_env, write_delta_pipeline, write_pipeline

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not os.environ.get("EOBATCH_CHAIN_CHECK"), reason="a long run: make chain-check")]

SCHEMA = "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP NOT NULL, op STRING"


def _delta_pipeline(root, name: str, upstream: str, table, extra_source: str = "", rest: str = "",
                    sink_extra: str = "") -> Pipeline:
    """A delta pipeline reading ``table``, scheduled on pipeline ``upstream``'s asset."""
    return write_delta_pipeline(root, name, table, extra_source, SCHEMA, f"schedule: {{asset: {upstream}}}\n" + rest,
                                sink_extra, retries="stage: 1\ncommit: 3\ndelay_seconds: 2\n")


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("chain")
    bronze = write_pipeline(root, name="bronze", schema=SCHEMA,
                            extra="maintenance: {vacuum_retention_hours: 0}\n")
    silver = _delta_pipeline(root, "silver", "bronze", bronze.sink, sink_extra=textwrap.dedent("""\
        mode: merge
        merge: {keys: [order_id], sequence_by: ts, delete_when: "op = 'd'", change_data_feed: true}
        """))
    gold = _delta_pipeline(root, "gold", "silver", silver.sink, extra_source="change_feed: true\n",
                           rest="transform: {name: change_totals, options: {key: customer, value: amount}}\n",
                           sink_extra="mode: merge\nmerge: {keys: [customer], accumulate: {rows: sum, total: sum}}\n")
    s = AirflowStack(root, airflow_env(root / "airflow", bronze.yaml_path.parent))
    try:
        s.start(["bronze", "silver", "gold", "bronze_maintenance"])
        s.pipelines = {"bronze": bronze, "silver": silver, "gold": gold}
        yield s
    finally:
        s.stop()


def rec(i: int, customer: str, amount: float, minute: int, op: str = "u") -> dict:
    return {"order_id": f"o{i}", "customer": customer, "amount": amount, "ts": f"2026-01-01T00:{minute:02d}:00Z",
            "op": op}


def _trigger(stack, dag_id: str) -> str:
    status, body = stack.trigger(dag_id)
    assert status == 200, body
    return body["dag_run_id"]


def _wait_caught_up(stack, timeout: float = 900) -> None:
    """Until no run is active and neither downstream pipeline has anything left to read."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        busy = [d for d in ("bronze", "silver", "gold") if any(r["state"] in ("queued", "running")
                                                                for r in stack.runs(d))]
        if not busy and all(_nothing_to_read(stack.pipelines[n]) for n in ("silver", "gold")):
            return
        time.sleep(3)
    raise TimeoutError(f"the chain did not catch up in {timeout}s:\n{stack.log_tail('scheduler')}")


def _nothing_to_read(p: Pipeline) -> bool:
    """Every batch of ``p`` decided, and its source has nothing after them (what its next plan would find)."""
    from eobatch.sources import source_for

    proto = p.protocol()
    if any(proto.state(plan.batch_id) in ("PLANNED", "STAGED", "PREPARED") for plan in proto.ledger.plans()):
        return False
    rng, _, _ = source_for(p.cfg).next_range(proto.read_so_far(), p.cfg.source.max_records_per_batch)
    return rng is None


def _expected(landed: list[dict]) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for r in landed:
        if r["order_id"] not in latest or r["ts"] > latest[r["order_id"]]["ts"]:
            latest[r["order_id"]] = r
    return {k: r for k, r in latest.items() if r["op"] != "d"}


def test_three_hops_under_the_scheduler_with_maintenance_and_a_killed_run(chain):
    bronze, silver, gold = (chain.pipelines[n] for n in ("bronze", "silver", "gold"))
    bronze.land("1.jsonl", [rec(1, "ann", 10.0, 5), rec(2, "ann", 5.0, 0), rec(3, "bob", 7.0, 0),
                            rec(4, "cy", 1.0, 0)])
    chain.wait_success("bronze", [_trigger(chain, "bronze")])
    _wait_caught_up(chain)

    # upstream maintenance: compaction and VACUUM of bronze; nothing is read again downstream
    chain.wait_success("bronze_maintenance", [_trigger(chain, "bronze_maintenance")])
    # a round whose silver run is killed while it writes: the next one finishes the batch
    bronze.land("2.jsonl", [rec(2, "ann", 50.0, 1), rec(3, "bob", 7.0, 2, op="d"), rec(5, "bob", 2.0, 1),
                            rec(1, "ann", 99.0, 3)])  # an older version of o1 arriving late: not applied
    chain.wait_success("bronze", [_trigger(chain, "bronze")])
    killed = _kill_a_silver_stage(chain, timeout=300)
    bronze.land("3.jsonl", [rec(6, "dee", 3.0, 0), rec(4, "cy", 4.0, 9)])
    chain.wait_success("bronze", [_trigger(chain, "bronze")])
    _wait_caught_up(chain)
    if not killed:
        pytest.fail("no silver stage was seen running to kill")

    want = _expected(bronze.landed)
    got = {r["order_id"]: r for r in read_rows(silver.sink)}
    assert {k: (r["customer"], r["amount"]) for k, r in got.items()} == {
        k: (r["customer"], r["amount"]) for k, r in want.items()}
    totals = collections.defaultdict(lambda: [0, 0.0])
    for r in got.values():
        totals[r["customer"]][0] += 1
        totals[r["customer"]][1] += r["amount"]
    assert {r["customer"]: [r["rows"], r["total"]] for r in read_rows(gold.sink) if r["rows"]} == dict(totals)
    _see_the_chain_in_the_ui(chain, os.environ.get("EOBATCH_CHAIN_SCREENSHOT"))


def _see_the_chain_in_the_ui(stack, shot: str | None) -> None:
    """silver's graph with all DAG dependencies (Airflow keeps the view, that choice and the panels'
    sizes in the browser's local storage: ``default_dag_view``, ``dependencies-<dag_id>``): the three
    DAGs and the tables' assets between them (known to Airflow once their aliases carried events)."""
    if browser.missing():
        pytest.skip(browser.missing())
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser.chrome(2600, 800)
    try:
        d.get(stack.url + "/")
        d.execute_script("window.localStorage.setItem('dependencies-silver', JSON.stringify('all'));"
                         "window.localStorage.setItem('default_dag_view', JSON.stringify('graph'));"
                         "window.localStorage.setItem('react-resizable-panels:graph-ltr', JSON.stringify("
                         "{'details-panel,main-panel': {'expandToSizes': {}, 'layout': [80, 20]}}))")
        d.get(stack.url + "/dags/silver")
        def shown(drv) -> bool:  # the three DAGs, and asset nodes (each table's, named by its URI) between them
            texts = [e.text for e in drv.find_elements("css selector", ".react-flow__node")]
            return {"bronze", "gold"} <= {t.strip() for t in texts} and \
                sum("/lake/" in t for t in texts) >= 2

        WebDriverWait(d, 90).until(shown)
        if shot:  # the graph alone
            time.sleep(2)  # the layout and the fonts settle
            d.find_element("css selector", ".react-flow").screenshot(shot)
    finally:
        d.quit()


def _kill_a_silver_stage(stack, timeout: float) -> bool:
    """SIGKILL the process group of a silver stage job's spark-submit once it runs."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run(["pgrep", "-f", "SparkSubmit.*eobatch-silver-"], capture_output=True, text=True).stdout.split()
        if out:
            time.sleep(4)  # into its write
            for pid in out:
                try:
                    os.killpg(os.getpgid(int(pid)), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            return True
        time.sleep(0.5)
    return False
