"""The ledger page in a real Airflow, started by the code of `make ui-up` (tests/support/services.py
ui-up: api-server, scheduler, dag-processor, Airflow's own login), with real runs behind it:
triggered through the REST API, run by the scheduler. Read anonymously (refused), with a token
(the JSON against the raw _delta_log and `make ledger FORMAT=json`), and in a real headless
browser (Debian's chromium): log in on Airflow's login page, open the DAG, open its "Batch
ledger" tab, see the batch ids and states the independent reader sees.

EOBATCH_UI_SCREENSHOT=<path.png> makes the browser test save a screenshot of the ledger tab there
(docs/site/ledger-page.png, in the README and the docs, is one).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from unittest import mock

import pytest

from support import browser, services
from support.checks import delta_log_commits
from support.harness import airflow_env, orders, write_pipeline
from support.smtp_sink import SmtpSink
from support.statsd_sink import StatsdSink

pytestmark = pytest.mark.integration


class UI:
    def __init__(self, env: dict, pipeline, run_ids: list[str], statsd: StatsdSink, smtp: SmtpSink,
                 alerted_runs: dict[str, dict]):
        self.url, self.user, self.password = env["AIRFLOW_UI_URL"], env["AIRFLOW_UI_USER"], env["AIRFLOW_UI_PASSWORD"]
        self.p = pipeline
        self.run_ids = run_ids
        self.statsd = statsd
        self.smtp = smtp
        self.alerted_runs = alerted_runs  # {"ok": run, "refused": run} of pipeline ALERTED

    def get(self, path: str, token: str | None = None, headers: dict | None = None) -> tuple[int, str]:
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def token(self) -> str:
        return token(self.url, self.user, self.password)


def token(url: str, user: str, password: str) -> str:
    """Airflow's own ``POST /auth/token`` (the contract's way to a token)."""
    req = urllib.request.Request(url + "/auth/token", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"username": user, "password": password}).encode())
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["access_token"]


def rest(url: str, tok: str, method: str, path: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(url + path, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {tok}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def read_env_file(path: Path) -> dict:
    out = {}
    for line in path.read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        out[key] = shlex.split(value)[0]
    return out


ALERTED, SMTP_CONN = "alerted", "eobatch_test_smtp"
ALERTS_YAML = f"""\
alerts:
  notify:
    - email: [ops@example.com, oncall@example.com]
      smtp_conn_id: {SMTP_CONN}
  run_deadline_minutes: 0.1
  backlog_max_age_minutes: 0.01
"""


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """`make ui-up` (services.py ui-up) for pipeline ``orders``, three runs triggered through the
    REST API and run by the scheduler (a, b, c: one batch each), then one more file landed and
    not yet planned (the backlog). Airflow's StatsD metrics go to a UDP socket of the test.

    Beside it, pipeline ``alerted`` mails a real SMTP server (aiosmtpd, through the Airflow
    connection SMTP_CONN): one run that publishes a file older than its backlog age limit and
    takes longer than its run deadline, then one run whose params are refused."""
    root = tmp_path_factory.mktemp("ui")
    # one batch per run (max_batches_per_run: 1, the default is 10): the tests match each run to its batch
    p = write_pipeline(root, name="orders", max_records=60, extra="max_batches_per_run: 1\n")
    p.land("a.jsonl", orders("a", 50), bad=["{not json", '{"order_id": null, "amount": 1}'])
    p.land("b.jsonl", orders("b", 40))
    p.land("c.jsonl", orders("c", 30))
    write_pipeline(root, name=ALERTED, extra=ALERTS_YAML).land("x.jsonl", orders("x", 5))
    dot_services = root / ".services"
    statsd = StatsdSink()  # Airflow's StatsD metrics (its own and the pipeline's) go there
    smtp = SmtpSink()
    env = {**airflow_env(root / "airflow", p.yaml_path.parent), **statsd.env(), **smtp.env(SMTP_CONN)}
    with mock.patch.dict(os.environ, env):
        assert services.main(["ui-up", "--dir", str(dot_services)]) == 0
        try:
            env_file = dot_services / "ui-env"
            assert stat.S_IMODE(env_file.stat().st_mode) == 0o600  # it holds the password
            ui_env = read_env_file(env_file)
            assert set(ui_env) == {"AIRFLOW_UI_URL", "AIRFLOW_UI_USER", "AIRFLOW_UI_PASSWORD"}
            url = ui_env["AIRFLOW_UI_URL"]
            tok = token(url, ui_env["AIRFLOW_UI_USER"], ui_env["AIRFLOW_UI_PASSWORD"])
            wait_dag_listed(url, tok, CONSUMER)  # its asset schedule is known before the first batch commits
            wait_dag_listed(url, tok, ALERTED)

            def trigger(dag_id: str, conf: dict) -> str:
                return rest(url, tok, "POST", f"/api/v2/dags/{dag_id}/dagRuns",
                            {"logical_date": None, "conf": conf})["dag_run_id"]

            def wait_done(dag_id: str, run_ids: list[str]) -> list[dict]:
                deadline = time.time() + 600
                while time.time() < deadline:
                    got = [rest(url, tok, "GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(r, safe='')}")
                           for r in run_ids]
                    if all(g["state"] in ("success", "failed") for g in got):
                        return got
                    time.sleep(2)
                raise AssertionError((dag_id, (dot_services / "ui" / "scheduler.log").read_text()[-4000:]))

            runs = [trigger("orders", {}) for _ in range(3)]  # max_active_runs=1: one after the other
            alerted_ok = trigger(ALERTED, {})
            states = [r["state"] for r in wait_done("orders", runs)]
            assert states == ["success"] * 3, (states, (dot_services / "ui" / "scheduler.log").read_text()[-4000:])
            p.land("d.jsonl", orders("d", 20))  # not planned: the backlog
            ok = wait_done(ALERTED, [alerted_ok])[0]
            # queued only now, or its queue time would count against its own run deadline
            refused = wait_done(ALERTED, [trigger(ALERTED, {"rewind_to_batch": 1})])[0]
            yield UI(ui_env, p, runs, statsd, smtp, {"ok": ok, "refused": refused})
        finally:
            statsd.close()
            smtp.close()
            assert services.main(["ui-down", "--dir", str(dot_services)]) == 0
            assert not (dot_services / "ui-env").exists()


CONSUMER = "orders_downstream_example"  # dags/example_asset_consumer.py, scheduled on the sink table's asset


def wait_dag_listed(url: str, tok: str, dag_id: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if not rest(url, tok, "GET", f"/api/v2/dags/{dag_id}")["is_paused"]:
                return
        except urllib.error.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"{dag_id} not listed (unpaused) within {timeout}s")


def independent_batches(table: Path, app_id: str) -> dict[int, int]:
    """{batch id: Delta version} of the table's commits, from the raw _delta_log."""
    return {c["txns"][0]["version"]: c["version"] for c in delta_log_commits(table)
            if c["txns"] and c["txns"][0]["appId"] == app_id}


def test_anonymous_and_bad_tokens_get_nothing(ui):
    for path in ("/eobatch/pipelines/orders", "/eobatch/api/pipelines/orders/batches", "/eobatch/pipelines/nope",
                 "/eobatch/api/pipelines/nope/batches"):
        for headers in ({}, {"Authorization": "Bearer not-a-jwt"}, {"Cookie": "_token=forged"},
                        {"Authorization": f"Basic {ui.user}:{ui.password}"}):
            status, body = ui.get(path, headers=headers)
            assert status in (401, 403), (path, headers, status, body[:300])
            assert "batch_id" not in body and "a.jsonl" not in body and "COMMITTED" not in body
    status, body = ui.get("/eobatch/pipelines/orders")
    assert "Log in to Airflow" in body and "/auth/login?next=" in body


def test_json_is_what_the_delta_log_and_make_ledger_say(ui):
    tok = ui.token()
    status, body = ui.get("/eobatch/api/pipelines/orders/batches", tok)
    assert status == 200, body
    rows = json.loads(body)
    sink = independent_batches(ui.p.sink, "orders")
    bad = independent_batches(ui.p.quarantine, "orders")
    assert sorted(sink) == [1, 2, 3] and sorted(bad) == [1, 2, 3]
    assert [(r["batch_id"], r["state"]) for r in rows] == [(b, "COMMITTED") for b in sorted(sink)]
    assert {r["batch_id"]: r["delta_version"] for r in rows} == sink
    assert {r["batch_id"]: r["quarantine_delta_version"] for r in rows} == bad
    assert [(r["rows_published"], r["rows_quarantined"]) for r in rows] == [(50, 2), (40, 0), (30, 0)]
    assert [r["run_id"] for r in rows] == ui.run_ids  # each batch names the DAG run that planned it
    # the same objects as `make ledger FORMAT=json` (the CLI behind it, in the same environment)
    env = airflow_env(ui.p.root / "airflow", ui.p.yaml_path.parent)
    cli = subprocess.run([sys.executable, "-m", "eobatch.cli", "ledger", "orders", "--format", "json"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == rows
    status, body = ui.get("/eobatch/api/pipelines/nope/batches", tok)
    assert status == 404 and json.loads(body) == {"detail": "no pipeline named 'nope'"}  # no other pipeline named


def test_html_page_shows_batches_backlog_and_timeline(ui):
    tok = ui.token()
    status, page = ui.get("/eobatch/pipelines/orders", tok)
    assert status == 200, page
    for b in (1, 2, 3):
        assert f'data-batch="{b}" data-state="COMMITTED"' in page
    assert "<svg" in page and "seconds per phase" in page
    assert "files not yet planned</span><b>1</b>" in page  # d.jsonl
    run = urllib.parse.quote(ui.run_ids[1], safe="")
    assert f'href="/dags/orders/runs/{run}" target="_top"' in page
    status, page = ui.get(f"/eobatch/pipelines/orders?run_id={urllib.parse.quote(ui.run_ids[1])}", tok)
    assert '<tr id="batch-2" class="mark"' in page
    status, page = ui.get("/eobatch/pipelines/nope", tok)
    assert status == 404 and "is not an eobatch pipeline" in page


def test_browser_logs_in_opens_the_dag_and_its_ledger_tab(ui):
    """Chromium, headless: Airflow's login page, the DAG page, its "Batch ledger" tab (the plugin's
    external view, an iframe of /eobatch/pipelines/orders), the batches the _delta_log holds; then
    a DAG run's tab, with that run's batch marked."""
    assert browser.missing() is None, browser.missing()  # CI installs it: a missing browser fails
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    want = {str(b): "COMMITTED" for b in independent_batches(ui.p.sink, "orders")}
    d = browser.chrome()
    wait = WebDriverWait(d, 60)
    try:
        d.get(ui.url + "/dags/orders")  # not logged in: Airflow sends the browser to its login page
        for attempt in range(3):  # the login page may still redirect once after its form is shown
            try:
                wait.until(ec.url_contains("/auth/login"))
                wait.until(ec.presence_of_element_located((By.NAME, "username")))
                d.find_element(By.NAME, "username").send_keys(ui.user)
                d.find_element(By.NAME, "password").send_keys(ui.password)
                d.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
                break
            except (WebDriverException, StaleElementReferenceException):
                if attempt == 2:
                    raise
                time.sleep(1)
        tab = wait.until(ec.element_to_be_clickable((By.LINK_TEXT, "Batch ledger")))  # on the DAG page
        assert urllib.parse.urlparse(d.current_url).path == "/dags/orders"
        tab.click()
        frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[src*='/eobatch/pipelines/']")))
        assert frame.get_attribute("src") == ui.url + "/eobatch/pipelines/orders"
        d.switch_to.frame(frame)
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#batches tbody tr")))
        rows = d.find_elements(By.CSS_SELECTOR, "#batches tbody tr")
        assert {r.get_attribute("data-batch"): r.get_attribute("data-state") for r in rows} == want
        assert [r.get_attribute("data-batch") for r in rows] == sorted(want, key=int, reverse=True)
        assert "COMMITTED" in rows[0].text and d.find_elements(By.CSS_SELECTOR, "svg.timeline rect")
        run_link = rows[0].find_element(By.CSS_SELECTOR, "a[target=_top]")
        assert run_link.text == ui.run_ids[2]
        d.switch_to.default_content()
        shot = os.environ.get("EOBATCH_UI_SCREENSHOT")
        if shot:  # the whole ledger tab: a window tall enough for it
            d.set_window_size(1440, 1800)
            time.sleep(2)  # the layout, the chart and the fonts settle
            d.save_screenshot(shot)
            d.set_window_size(1440, 1000)
        # from a batch to its DAG run (the link leaves the iframe), then that run's ledger tab
        d.switch_to.frame(d.find_element(By.CSS_SELECTOR, "iframe[src*='/eobatch/pipelines/']"))
        d.find_element(By.CSS_SELECTOR, "#batch-3 a[target=_top]").click()
        d.switch_to.default_content()
        wait.until(lambda drv: "/runs/" in drv.current_url)
        assert urllib.parse.unquote(d.current_url).endswith(f"/dags/orders/runs/{ui.run_ids[2]}")
        wait.until(ec.element_to_be_clickable((By.LINK_TEXT, "Batch ledger"))).click()
        frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[src*='run_id=']")))
        d.switch_to.frame(frame)
        marked = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#batches tr.mark")))
        assert marked.get_attribute("data-batch") == "3"
    finally:
        d.quit()


def test_each_committed_batch_emits_one_asset_event_and_the_consumer_reads_its_version(ui):
    """GET /api/v2/assets/events: one event per committed batch on the sink table's asset
    (file://<path>), its extra the batch id and the Delta version the raw _delta_log holds it at,
    emitted by that batch's own commit task; and the example downstream DAG, scheduled on that
    asset by the real scheduler, ran once per event and read exactly that version."""
    tok = ui.token()
    uri = "file://" + str(ui.p.sink)
    sink = independent_batches(ui.p.sink, "orders")
    status, body = ui.get("/api/v2/assets/events?source_dag_id=orders&limit=100&order_by=timestamp", tok)
    assert status == 200, body
    events = [e for e in json.loads(body)["asset_events"] if e["uri"] == uri]
    assert sorted(e["extra"]["batch_id"] for e in events) == [1, 2, 3], events  # exactly one per batch
    for e in events:
        b = e["extra"]["batch_id"]
        assert (e["extra"]["pipeline"], e["extra"]["delta_version"], e["extra"]["table"]) == ("orders", sink[b], "sink")
        assert (e["source_task_id"], e["source_run_id"]) == ("commit", ui.run_ids[b - 1])
    assert [e["extra"]["rows_published"] for e in events] == [50, 40, 30]
    status, body = ui.get("/api/v2/assets/events?source_dag_id=orders&limit=100", tok)
    bad = [e for e in json.loads(body)["asset_events"] if e["uri"] == "file://" + str(ui.p.quarantine)]
    assert sorted((e["extra"]["batch_id"], e["extra"]["delta_version"]) for e in bad) == sorted(
        independent_batches(ui.p.quarantine, "orders").items())
    # the downstream DAG: one run per event (the event names the run it created), each run's task read
    # the event's version and found the batch's rows in the files that version added
    deadline = time.time() + 120
    while time.time() < deadline:
        status, body = ui.get(f"/api/v2/dags/{CONSUMER}/dagRuns?limit=100", tok)
        consumer_runs = json.loads(body)["dag_runs"]
        if len(consumer_runs) >= 3 and all(r["state"] in ("success", "failed") for r in consumer_runs):
            break
        time.sleep(2)
    assert [r["state"] for r in consumer_runs] == ["success"] * 3, consumer_runs
    status, body = ui.get("/api/v2/assets/events?source_dag_id=orders&limit=100", tok)
    created = {e["extra"]["batch_id"]: [d["run_id"] for d in e["created_dagruns"] if d["dag_id"] == CONSUMER]
               for e in json.loads(body)["asset_events"] if e["uri"] == uri}
    assert all(len(runs) == 1 for runs in created.values()) and len(created) == 3, created
    assert sorted(r for runs in created.values() for r in runs) == sorted(r["dag_run_id"] for r in consumer_runs)
    for batch_id, (run_id,) in created.items():
        status, body = ui.get(f"/api/v2/dags/{CONSUMER}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/"
                              "read_new_version/xcomEntries/return_value?deserialize=true", tok)
        assert status == 200, body
        value = json.loads(body)["value"]
        read = json.loads(value) if isinstance(value, str) else value
        assert [(r["batch_id"], r["version_read"], r["new_rows"]) for r in read] == [
            (batch_id, sink[batch_id], {1: 50, 2: 40, 3: 30}[batch_id])], read


def test_statsd_receives_each_committed_batch_once_and_the_backlog(ui):
    """The pipeline's metrics from the real task processes, through Airflow's StatsD client: one
    batches_committed per batch, the rows each published (50 good lines of a, two bad ones
    quarantined; 40 of b; 30 of c), the phase timers, and the backlog gauges of each plan."""
    pre = "airflow.eobatch.orders."
    deadline = time.time() + 30  # UDP lines of the last run's commit task may still be on their way
    while time.time() < deadline and len(ui.statsd.lines(pre + "batches_committed")) < 3:
        time.sleep(0.5)
    assert ui.statsd.lines(pre + "batches_committed") == [pre + "batches_committed:1|c"] * 3
    assert sorted(ui.statsd.lines(pre + "rows_published:")) == sorted(
        [f"{pre}rows_published:{n}|c" for n in (50, 40, 30)])
    assert sorted(ui.statsd.lines(pre + "rows_quarantined:")) == sorted(
        [f"{pre}rows_quarantined:{n}|c" for n in (2, 0, 0)])
    for phase in ("plan", "stage", "verify", "commit"):
        timers = ui.statsd.lines(f"{pre}{phase}_seconds:")
        assert len(timers) == 3 and all(t.endswith("|ms") for t in timers), (phase, timers)
    # each plan left the files after its own: b and c, then c, then none (d lands after the runs)
    files = [int(x.split(":")[1].split("|")[0]) for x in ui.statsd.lines(pre + "backlog_files:")]
    assert files == [2, 1, 0], ui.statsd.lines(pre)
    # Airflow's own metrics arrive too (the sink is what a StatsD server would see)
    assert ui.statsd.lines("airflow.ti.finish") or ui.statsd.lines("airflow.ti_successes"), ui.statsd.lines()[:20]


def test_alerts_mail_a_failure_a_missed_run_deadline_and_an_old_backlog(ui):
    """Pipeline ``alerted`` through a real SMTP server: its refused run's failure (from the task
    that failed, with the reason and what happens next), its first run's missed deadline (Airflow's
    deadline alert, called by the executor), the backlog age its plan found, each to both
    recipients; the alerts never failed the run that sent them."""
    from support.smtp_sink import body

    ok, refused = ui.alerted_runs["ok"], ui.alerted_runs["refused"]
    assert (ok["state"], refused["state"]) == ("success", "failed")
    assert independent_batches(ui.p.root / "lake" / ALERTED, ALERTED) == {1: 1}  # published as usual

    def subject(words: str):
        return lambda m: m["Subject"].startswith(f"[eobatch] {ALERTED}: {words}")

    (failure,) = ui.smtp.wait_for(subject("recover failed"), timeout=60)
    assert failure["Subject"] == f"[eobatch] {ALERTED}: recover failed in run {refused['dag_run_id']}"
    text = body(failure)
    assert "params refused" in text and "confirm_rewind" in text, text
    assert f"/dags/{ALERTED}/runs/" in text  # the task log's link
    (backlog,) = ui.smtp.wait_for(subject("backlog"), timeout=60)  # the refused run planned nothing
    assert "(limit 0.01 min)" in backlog["Subject"] and "Not planned yet: 0 files, 0 bytes" in body(backlog)
    late = ui.smtp.wait_for(subject(f"run {ok['dag_run_id']} not finished after 0.1 min"), timeout=120)
    assert len(late) == 1, [m["Subject"] for m in ui.smtp.mails]
    for mail in (failure, backlog, late[0]):
        assert mail["X-Rcpt-To"] == "ops@example.com, oncall@example.com"
        assert f"/eobatch/pipelines/{ALERTED}" in body(mail)  # the ledger page's link
    assert not [m for m in ui.smtp.mails if "orders" in m["Subject"]]  # no alerts section: no mail


# -- who may read a ledger, and what one request may cost: a real api-server of its own ----------
@pytest.fixture(scope="module")
def api(tmp_path_factory, airflow_template):
    """An api-server alone (the ledger needs no scheduler) with two users of Airflow's simple auth
    manager: ``admin``, and ``dagonly_viewer``, who may read the DAGs but not their runs (the
    test's ``RunBlindAuthManager``: the simple auth manager cannot express that role). Pipeline
    ``orders`` has three committed batches and one file not yet planned."""
    import shutil

    from support.airflow_stack import free_port
    from support.protocol_runs import land_ids, run_next

    root = tmp_path_factory.mktemp("api")
    home = root / "airflow"
    shutil.copytree(airflow_template, home)
    p = write_pipeline(root, name="orders")
    proto = p.protocol()
    for i in range(3):
        land_ids(proto.cfg, f"{i}.jsonl", range(10 * i, 10 * i + 10))
        assert run_next(proto, run_id=f"manual__r{i}") == i + 1
    land_ids(proto.cfg, "3.jsonl", range(30, 35))
    users = {"admin": "admin-pw-1234", "dagonly_viewer": "viewer-pw-1234"}
    (home / "passwords.json").write_text(json.dumps(users))
    port = free_port()
    env = airflow_env(home, p.yaml_path.parent, {
        "PYTHONPATH": f"{Path(__file__).resolve().parents[2] / 'plugins'}:{Path(__file__).resolve().parents[1]}",
        "AIRFLOW__CORE__AUTH_MANAGER": "support.run_blind_auth.RunBlindAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,dagonly_viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(16).hex()})
    url = f"http://127.0.0.1:{port}"
    with open(root / "api-server.log", "wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "api-server"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 300
        while True:
            try:
                tokens = {u: token(url, u, pw) for u, pw in users.items()}
                break
            except (OSError, ValueError):
                assert proc.poll() is None and time.time() < deadline, (root / "api-server.log").read_text()[-3000:]
                time.sleep(1)
        yield url, tokens, p
    finally:
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _get(url: str, path: str, tok: str) -> tuple[int, str]:
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {tok}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def test_reading_a_dag_without_its_runs_reads_no_ledger(api):
    url, tokens, _p = api
    assert _get(url, "/api/v2/dags/orders", tokens["dagonly_viewer"])[0] != 403  # the DAG: yes (200, or 404 unparsed)
    assert _get(url, "/api/v2/dags/orders/dagRuns", tokens["dagonly_viewer"])[0] == 403  # its runs: no
    for path in ("/eobatch/pipelines/orders", "/eobatch/api/pipelines/orders/batches"):
        status, body = _get(url, path, tokens["dagonly_viewer"])
        assert status == 403, (path, status, body[:300])
        assert "batch_id" not in body and "COMMITTED" not in body and "0.jsonl" not in body
        assert _get(url, path, tokens["admin"])[0] == 200


def test_a_dag_that_is_no_pipeline_gets_a_404_naming_no_pipeline(api):
    url, tokens, _p = api
    status, body = _get(url, "/eobatch/api/pipelines/some_other_dag/batches", tokens["admin"])
    assert status == 404 and json.loads(body) == {"detail": "no pipeline named 'some_other_dag'"}
    status, page = _get(url, "/eobatch/pipelines/some_other_dag", tokens["admin"])
    assert status == 404 and "is not an eobatch pipeline" in page and "orders" not in page


def test_one_request_costs_a_bounded_amount(api):
    """The JSON's limit has a maximum; the backlog is not listed again within its TTL (a file
    landed between two loads is not seen by the second)."""
    url, tokens, p = api
    status, body = _get(url, "/eobatch/api/pipelines/orders/batches?limit=2", tokens["admin"])
    assert status == 200 and [r["batch_id"] for r in json.loads(body)] == [1, 2]
    assert _get(url, "/eobatch/api/pipelines/orders/batches?limit=10001", tokens["admin"])[0] == 422
    status, body = _get(url, "/eobatch/api/pipelines/orders/batches", tokens["admin"])
    assert status == 200 and [r["batch_id"] for r in json.loads(body)] == [1, 2, 3]
    status, page = _get(url, "/eobatch/pipelines/orders?run_id=manual__nope", tokens["admin"])
    assert status == 200 and "files not yet planned</span><b>1</b>" in page
    p.land("4.jsonl", orders("x", 3))
    status, page = _get(url, "/eobatch/pipelines/orders?run_id=manual__r1", tokens["admin"])
    assert status == 200 and "files not yet planned</span><b>1</b>" in page  # the cached figures
    assert '<tr id="batch-2" class="mark"' in page
