"""eobatch.airflow.alerts: the ``alerts`` section of a pipeline, the DAG's failure callbacks and deadline
alert, the backlog age alert, and the mails they send through the SMTP provider's notifier to a
real SMTP server on loopback (aiosmtpd)."""

from __future__ import annotations

import os
from unittest import mock

import pytest

from eobatch.airflow import alerts, metrics
from eobatch.pipelines.loader import AlertsConfig, ConfigError, Notifier, load_pipeline
from support.smtp_sink import SmtpSink, body

CONN = "eobatch_test_smtp"


@pytest.fixture
def smtp():
    sink = SmtpSink()
    with mock.patch.dict(os.environ, sink.env(CONN)):
        yield sink
    sink.close()


@pytest.fixture
def allow(monkeypatch):
    """allow(*classes): the platform's [eobatch] allowed_notifiers, as its environment variable."""
    def _allow(*classes: str) -> None:
        monkeypatch.setenv("AIRFLOW__EOBATCH__ALLOWED_NOTIFIERS", ", ".join(classes))
    return _allow


SMTP_NOTIFIER = "airflow.providers.smtp.notifications.smtp.SmtpNotifier"


def _alerts(**section):
    return {"notify": [{"email": ["ops@example.com"], "smtp_conn_id": CONN}], **section}


# -- the YAML section ------------------------------------------------------------------------------


def test_alerts_load_with_defaults_and_both_kinds_of_notifier(make_cfg, allow):
    allow(SMTP_NOTIFIER)
    assert make_cfg().alerts == AlertsConfig()  # no section: no notifier, nothing on
    cfg = make_cfg(alerts={"notify": [
        {"email": "ops@example.com"},
        {"email": ["a@example.com", "b@example.com"], "smtp_conn_id": "smtp_ops", "from_email": "etl@example.com"},
        {"notifier": SMTP_NOTIFIER, "args": {"to": "c@example.com"}, "alert_args": {"subject": "subject"}}],
        "run_deadline_minutes": 30, "backlog_max_age_minutes": 0.5})
    a = cfg.alerts
    assert a.notify == (Notifier(email=("ops@example.com",)),
                        Notifier(email=("a@example.com", "b@example.com"), smtp_conn_id="smtp_ops",
                                 from_email="etl@example.com"),
                        Notifier(notifier=SMTP_NOTIFIER, args={"to": "c@example.com"},
                                 alert_args={"subject": "subject"}))
    assert a.on_failure is True and a.run_deadline_minutes == 30.0 and a.backlog_max_age_minutes == 0.5


@pytest.mark.parametrize("section, key, words", [
    ({"on_failure": True}, "alerts.notify", "at least one notifier"),
    ({"notify": []}, "alerts.notify", "at least one notifier"),
    ({"notify": [{"email": "not-an-address"}]}, "alerts.notify[0].email", "e-mail address"),
    ({"notify": [{"email": "a@b.c", "notifier": "x.Y"}]}, "alerts.notify[0]", "either 'email'"),
    ({"notify": [{"email": "a@b.c", "password": "s3cret"}]}, "alerts.notify[0].password", "unknown key"),
    ({"notify": [{"email": "a@b.c", "smtp_conn_id": "bad id"}]}, "alerts.notify[0].smtp_conn_id", "connection id"),
    ({"notify": [{"notifier": "SlackNotifier"}]}, "alerts.notify[0].notifier", "dotted path"),
    ({"notify": [{"notifier": "a.B"}]}, "alerts.notify[0].notifier", "not a notifier class the platform allows"),
    ({"notify": [{"notifier": SMTP_NOTIFIER, "args": ["x"]}]}, "alerts.notify[0].args", "keyword arguments"),
    ({"notify": [{"notifier": SMTP_NOTIFIER, "args": {"to": "a@b.c", "files": ["/proc/self/environ"]}}]},
     "alerts.notify[0].args.files", "attachments"),
    ({"notify": [{"notifier": SMTP_NOTIFIER, "args": {"to": "a@b.c", "template": "/etc/passwd"}}]},
     "alerts.notify[0].args.template", "template file"),
    ({"notify": [{"notifier": SMTP_NOTIFIER, "args": {"to": "a@b.c", "subject": "{{ var.value.x }}"}}]},
     "alerts.notify[0].args.subject", "the subject is the alert's"),
    ({"notify": [{"notifier": SMTP_NOTIFIER, "args": {"to": "a@b.c", "html_content": "<p>x</p>"}}]},
     "alerts.notify[0].args.html_content", "the body is the alert's"),
    ({"notify": [{"notifier": SMTP_NOTIFIER, "args": {"to": "a@b.c", "body_template_path": "x.html"}}]},
     "alerts.notify[0].args.body_template_path", "names a file"),
    ({"notify": [{"notifier": SMTP_NOTIFIER, "args": {"to": "a@b.c", "text": "{{ alert.text }}"}}]},
     "alerts.notify[0].args.text", "alert_args: {text: text}"),
    ({"notify": [{"notifier": SMTP_NOTIFIER, "alert_args": {"to": "password"}}]},
     "alerts.notify[0].alert_args.to", "field of the alert"),
    ({"notify": [{"notifier": SMTP_NOTIFIER, "alert_args": {"files": "text"}}]},
     "alerts.notify[0].alert_args.files", "names a file"),
    ({"notify": [{"notifier": SMTP_NOTIFIER, "args": {"to": "a@b.c"}, "alert_args": {"to": "text"}}]},
     "alerts.notify[0].args.to", "both in args and in alert_args"),
    (_alerts(on_failure="yes"), "alerts.on_failure", "true or false"),
    (_alerts(run_deadline_minutes=0), "alerts.run_deadline_minutes", "positive number"),
    (_alerts(backlog_max_age_minutes="1h"), "alerts.backlog_max_age_minutes", "positive number"),
    (_alerts(page_me=True), "alerts.page_me", "unknown key"),
])
def test_a_bad_alerts_section_names_the_key(make_cfg, allow, section, key, words):
    allow(SMTP_NOTIFIER)
    with pytest.raises(ConfigError) as ei:
        make_cfg(alerts=section)
    assert ei.value.key == key and words in str(ei.value), str(ei.value)


def test_a_kafka_backlog_age_alert_is_refused_with_the_reason(write_yaml, base_cfg):
    from support.pipeline_yaml import kafka_doc

    doc = kafka_doc(base_cfg)
    doc["alerts"] = _alerts(backlog_max_age_minutes=10)
    with pytest.raises(ConfigError) as ei:
        load_pipeline(write_yaml(doc))
    assert ei.value.key == "alerts.backlog_max_age_minutes" and "not known" in str(ei.value)


def test_the_allow_list_is_airflows_option_read_when_a_file_is_loaded(make_cfg, monkeypatch):
    """``[eobatch] allowed_notifiers`` as airflow.cfg gives it (not only its environment variable):
    read through Airflow's configuration each time a file is loaded."""
    from airflow.configuration import conf

    monkeypatch.delenv("AIRFLOW__EOBATCH__ALLOWED_NOTIFIERS", raising=False)
    section = {"notify": [{"notifier": SMTP_NOTIFIER, "args": {"to": "ops@example.com"}}]}
    with pytest.raises(ConfigError, match="none; only email: entries"):
        make_cfg(alerts=section)
    if not conf.has_section("eobatch"):
        conf.add_section("eobatch")
    conf.set("eobatch", "allowed_notifiers", f"some.other.Notifier,\n  {SMTP_NOTIFIER}")
    try:
        assert make_cfg(alerts=section).alerts.notify[0].notifier == SMTP_NOTIFIER
    finally:
        conf.remove_option("eobatch", "allowed_notifiers")
    with pytest.raises(ConfigError):
        make_cfg(alerts=section)


# -- the DAG ---------------------------------------------------------------------------------------


def test_the_dag_carries_failure_callbacks_and_a_deadline_alert(make_cfg):
    from airflow.sdk import DeadlineReference

    from eobatch.airflow.dag_factory import build_dag

    dag = build_dag(make_cfg(alerts=_alerts(run_deadline_minutes=45)))
    for task in dag.tasks:
        assert [type(c) for c in task.on_failure_callback] == [alerts.OnFailure], task.task_id
    (dl,) = dag.deadline if isinstance(dag.deadline, list) else [dag.deadline]
    assert dl.reference == DeadlineReference.DAGRUN_QUEUED_AT
    assert dl.interval.total_seconds() == 45 * 60
    assert dl.callback.path == "eobatch.airflow.alerts.run_deadline_missed"
    assert dl.callback.kwargs == {"pipeline_file": dag.tasks[0].pipeline_file}

    quiet = build_dag(make_cfg(alerts=_alerts(on_failure=False)))
    assert all(not t.on_failure_callback for t in quiet.tasks) and not quiet.deadline
    plain = build_dag(make_cfg())
    assert all(not t.on_failure_callback for t in plain.tasks) and not plain.deadline


def test_a_notifier_class_that_cannot_be_built_is_an_error_of_its_file_only(write_yaml, base_cfg, tmp_path, allow):
    from eobatch.airflow.dag_factory import build_all

    allow("eobatch.pipelines.loader.Column")  # allowed by the platform, yet not a notifier

    good = dict(base_cfg)
    write_yaml(good, "good.yaml")
    bad = dict(base_cfg, name="bad", sink={"table": str(tmp_path / "lake" / "bad")},
               quarantine={"table": str(tmp_path / "lake" / "bad_q")},
               alerts={"notify": [{"notifier": "eobatch.pipelines.loader.Column"}]})
    write_yaml(bad, "bad.yaml")
    dags, errors = build_all(str(tmp_path / "pipelines"))
    assert set(dags) == {good["name"], good["name"] + "_maintenance"}
    (msg,) = errors.values()
    assert "bad.yaml: alerts.notify[0]: cannot build the notifier" in msg and "not an Airflow notifier" in msg


# -- the mails -------------------------------------------------------------------------------------


class _TI:
    task_id, run_id, try_number = "stage", "manual__2026-11-23T10:00:00", 2
    log_url = "http://airflow.example/dags/orders/runs/manual__2026/tasks/stage"


def test_a_failed_task_mails_the_error_the_next_step_and_never_evaluates_the_text(make_cfg, smtp):
    cfg = make_cfg(alerts=_alerts())
    error = RuntimeError("record {{ 7 * 7 }} <script>alert(1)</script> broke the job")
    alerts.OnFailure(cfg)({"ti": _TI(), "run_id": _TI.run_id, "exception": error})
    (mail,) = smtp.wait_for(lambda m: True, timeout=30)
    assert mail["Subject"] == f"[eobatch] orders: stage failed in run {_TI.run_id}"
    assert mail["X-Rcpt-To"] == "ops@example.com" and mail["From"] == "eobatch@localhost"
    text = body(mail)
    assert "RuntimeError: record {{ 7 * 7 }} &lt;script&gt;alert(1)&lt;/script&gt; broke the job" in text
    assert "49" not in text and "<script>" not in text
    assert "re-stages the same source range" in text and _TI.log_url in text


def test_a_missed_run_deadline_mails_the_run(make_cfg, smtp):
    cfg = make_cfg(alerts=_alerts(run_deadline_minutes=1.5))
    run = {"dag_run_id": "scheduled__2026-11-23T09:00:00", "queued_at": "2026-11-23T09:00:01Z",
           "start_date": "2026-11-23T09:00:03Z", "state": "running"}
    alerts.run_deadline_missed(cfg.file, context={"dag_run": run, "deadline": {"id": "x"}})
    (mail,) = smtp.wait_for(lambda m: True, timeout=30)
    assert mail["Subject"] == "[eobatch] orders: run scheduled__2026-11-23T09:00:00 not finished after 1.5 min"
    assert "queued 2026-11-23T09:00:01Z" in body(mail) and "state running" in body(mail)


class _State(dict):
    def set(self, key, value):
        self[key] = value

    def delete(self, key):
        del self[key]


def test_an_old_backlog_alerts_once_per_limit_and_again_after_it_recovered(make_cfg, smtp):
    cfg = make_cfg(alerts=_alerts(backlog_max_age_minutes=10))
    state = _State()
    old = {"files": 4, "bytes": 900, "records": None, "oldest_unpublished_age_s": 11 * 60,
           "oldest_unpublished_at": "2026-11-23T08:49:00Z"}
    young = dict(old, oldest_unpublished_age_s=9 * 60)
    t = 1_000_000.0
    assert not alerts.check_backlog(cfg, young, now=t, state=state)
    assert alerts.check_backlog(cfg, old, now=t, state=state)
    assert not alerts.check_backlog(cfg, old, now=t + 9 * 60, state=state)  # told 9 min ago
    assert alerts.check_backlog(cfg, old, now=t + 10 * 60, state=state)  # still old 10 min later: told again
    assert not alerts.check_backlog(cfg, young, now=t + 11 * 60, state=state)  # recovered
    assert state == {}
    assert alerts.check_backlog(cfg, old, now=t + 12 * 60, state=state)  # aged again: told at once
    assert not alerts.check_backlog(cfg, dict(old, error="OSError: gone"), now=t + 30 * 60, state=state)
    mails = smtp.wait_for(lambda m: len(smtp.mails) >= 3, timeout=30)
    assert len(mails) == 3
    assert mails[0]["Subject"] == "[eobatch] orders: backlog 11 min old (limit 10 min)"
    assert "Not planned yet: 4 files, 900 bytes" in body(mails[0])
    assert not alerts.check_backlog(make_cfg(alerts=_alerts()), old, now=t, state=state)  # no limit set


def test_a_notifier_that_fails_is_logged_and_the_others_still_send(make_cfg, smtp, caplog):
    cfg = make_cfg(alerts={"notify": [{"email": "a@example.com", "smtp_conn_id": "no_such_connection"},
                                      {"email": "b@example.com", "smtp_conn_id": CONN}]})
    sent = alerts.send(cfg, alerts.Alert("failure", "orders", "[eobatch] orders: x", ("line",)))
    assert sent == 1
    (mail,) = smtp.wait_for(lambda m: True, timeout=30)
    assert mail["X-Rcpt-To"] == "b@example.com"
    assert "not sent by EmailNotifier" in caplog.text


def test_a_plan_that_skips_a_forged_parquet_footer_mails_it_and_counts_it(make_cfg, smtp, tmp_path):
    """A real plan of a parquet pipeline over a pyarrow file whose footer row count was forged: the
    plan task's after-plan step mails the file and the reason, and the counter goes through
    Airflow's StatsD client."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from eobatch.airflow.operators import _after_plan
    from eobatch.protocol import Protocol
    from support.parquet_forge import forge_rows
    from support.statsd_sink import received_by_statsd

    cfg = make_cfg(alerts=_alerts(), source={"kind": "parquet", "path": str(tmp_path / "landing")})
    bad, good = tmp_path / "landing" / "a.parquet", tmp_path / "landing" / "b.parquet"
    for f in (bad, good):
        pq.write_table(pa.table({"order_id": ["x", "y"]}), f)
    forge_rows(bad, -1)
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    assert plan.rows_in == 2 and [f["path"] for f in proto.last_skipped] == [str(bad)]
    _after_plan(proto, {})
    (mail,) = smtp.wait_for(lambda m: True, timeout=30)
    assert mail["Subject"] == "[eobatch] orders: 1 landing input(s) skipped"
    assert f"skipped {bad}" in body(mail) and "negative row count (-1" in body(mail)
    code = f"from eobatch.airflow import metrics; metrics.send(metrics.skipped_metrics('orders', {proto.last_skipped!r}))"
    assert {"airflow.eobatch.orders.landing_skipped:1|g"} <= received_by_statsd(
        tmp_path, code, {"airflow.eobatch.orders.landing_skipped:1|g"})


def test_skipped_landing_inputs_alert_once_each_while_they_stay_skipped(make_cfg, smtp):
    from eobatch.sources.files import FilesSource

    cfg = make_cfg(alerts=_alerts())
    landing = cfg.source.path
    with open(os.path.join(os.fsencode(landing), b"bad-\xff.jsonl"), "wb") as f:
        f.write(b"{}\n")
    src = FilesSource(cfg)
    src.next_range([], 100)
    state = _State()
    assert alerts.check_skipped(cfg, src.skipped, state=state)
    assert not alerts.check_skipped(cfg, src.skipped, state=state)  # the same input: told once
    assert not alerts.check_skipped(cfg, [], state=state) and state == {}  # renamed: forgotten
    (mail,) = smtp.wait_for(lambda m: True, timeout=30)
    assert mail["Subject"] == "[eobatch] orders: 1 landing input(s) skipped"
    assert "bad-\\xff.jsonl" in body(mail) and "not UTF-8" in body(mail)
    assert metrics.skipped_metrics("orders", src.skipped)[0] == metrics.Metric("gauge", "eobatch.orders.landing_skipped", 1)


def test_a_mail_holds_no_secret_airflow_masks_nor_the_password_of_a_malformed_uri(make_cfg, smtp, caplog):
    """An error quoting a connection: a value registered with Airflow's secrets masker, and URIs
    whose passwords no parser registered (unencoded "/" and "@": Airflow could not read them)."""
    from airflow.sdk.log import mask_secret

    mask_secret("tok-9f8e7d6c5b4a")
    cfg = make_cfg(alerts=_alerts())
    error = RuntimeError("sasl token tok-9f8e7d6c5b4a refused by kafka://svc:pa/ss@w0rd@broker:9x/ "
                         "(fallback smtp://ops:hunter2!@mail:25)")
    alerts.OnFailure(cfg)({"ti": _TI(), "run_id": "run tok-9f8e7d6c5b4a", "exception": error})
    (mail,) = smtp.wait_for(lambda m: True, timeout=30)
    text = mail.as_string() + body(mail)
    for secret in ("tok-9f8e7d6c5b4a", "pa/ss", "w0rd", "hunter2"):
        assert secret not in text and secret not in caplog.text, secret
    assert "kafka://svc:***@broker:9x/" in body(mail) and "smtp://ops:***@mail:25" in body(mail)


def test_a_connection_that_cannot_be_read_never_quotes_its_password():
    from eobatch.errors import TerminalError
    from eobatch.storage import credentials as connections

    def reader(conn_id):
        raise ValueError(f"Invalid connection string: kafka://svc:pa/ss@w0rd@broker:9x/ ({conn_id})")

    connections.register(reader)
    try:
        with pytest.raises(TerminalError) as e:
            connections.extra("kafka_prod")
    finally:
        from eobatch.airflow import connections as airflow_conn

        connections.register(airflow_conn.connection_extra, airflow_conn.redact)
    assert "pa/ss" not in str(e.value) and "w0rd" not in str(e.value) and e.value.__cause__ is None
    assert "'kafka_prod' cannot be read" in str(e.value) and "kafka://svc:***@broker" in str(e.value)


def test_a_stuck_batch_mails_its_repair_once_again_a_day_and_at_once_after_it_recovered(make_cfg, smtp):
    from eobatch.core.stuck import find_stuck
    from eobatch.protocol import Protocol
    from support.protocol_runs import failing_run, land_ids, run_next

    cfg = make_cfg(alerts=_alerts())
    proto = Protocol(cfg)
    land_ids(cfg, "a.jsonl", range(4))
    for i in (1, 2, 3):
        failing_run(proto, f"scheduled__{i}")
    found = find_stuck(proto.ledger, cfg)
    state, t = _State(), 1_000_000.0
    assert alerts.check_stuck(cfg, found, now=t, state=state)
    assert not alerts.check_stuck(cfg, found, now=t + 3600, state=state)  # told an hour ago
    assert alerts.check_stuck(cfg, found, now=t + alerts.STUCK_REMIND_S, state=state)  # a day later: again
    run_next(proto, "scheduled__4")  # the cause went away: committed
    assert not alerts.check_stuck(cfg, find_stuck(proto.ledger, cfg), now=t + alerts.STUCK_REMIND_S + 1, state=state)
    assert state == {}
    assert not alerts.check_stuck(make_cfg(alerts={"stuck_after_runs": 2}), found, state=state)  # no notifier
    mails = smtp.wait_for(lambda m: len(smtp.mails) >= 2, timeout=30)
    assert len(mails) == 2
    assert mails[0]["Subject"] == ("[eobatch] orders: batch 1 stuck (PLANNED, 3 runs): a batch that fails the same "
                                   "way in every run")
    text = body(mails[0])
    assert "batch 1 is PLANNED since" in text and "3 runs tried it and none committed it (limit 3 runs)" in text
    assert "last error" in text and "run scheduled__3 failed" in text
    assert "command: make reset-batch PIPELINE=orders BATCH=1" in text


def test_the_recover_task_logs_alerts_and_gauges_a_stuck_batch_even_when_its_recover_is_refused(
        make_cfg, smtp, caplog, tmp_path):
    from eobatch.airflow.operators import _check_stuck
    from eobatch.core.stuck import find_stuck
    from eobatch.errors import ConfigChanged
    from eobatch.protocol import Protocol
    from eobatch.protocol.batch_run import BatchRun
    from support.protocol_runs import failing_run, land_ids
    from support.statsd_sink import received_by_statsd

    cfg = make_cfg(alerts=_alerts())
    land_ids(cfg, "a.jsonl", range(4))
    for i in (1, 2):
        failing_run(Protocol(cfg), f"scheduled__{i}")
    edited = Protocol(make_cfg(alerts=_alerts(), transform={"name": "passthrough", "options": {"x": 1}}))
    with pytest.raises(ConfigChanged):  # the third run: the edit is refused while batch 1 is pending
        BatchRun(edited, run_id="scheduled__3").recover()
    _check_stuck(edited, {})
    assert "stuck: pipeline orders is STUCK: batch 1 is PLANNED" in caplog.text
    (mail,) = smtp.wait_for(lambda m: True, timeout=30)
    assert mail["Subject"] == ("[eobatch] orders: batch 1 stuck (PLANNED, 3 runs): configuration edit refused while "
                               "the batch is pending")
    assert "ConfigChanged: " in body(mail) and "put the old value(s) back and let a run commit batch 1" in body(mail)
    found = find_stuck(edited.ledger, edited.cfg)
    code = "from eobatch.airflow import metrics; metrics.send(metrics.stuck_metrics('orders', None))"
    assert metrics.stuck_metrics("orders", found) == [metrics.Metric("gauge", "eobatch.orders.stuck_runs", 3)]
    assert {"airflow.eobatch.orders.stuck_runs:0|g"} <= received_by_statsd(
        tmp_path, code, {"airflow.eobatch.orders.stuck_runs:0|g"})
