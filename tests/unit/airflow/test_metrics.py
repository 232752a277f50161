"""eobatch.airflow.metrics: the metrics of a committed batch (from its ledger records), of a backlog and
of late files, and their way out through Airflow's own StatsD client to a real UDP socket."""

from __future__ import annotations

from eobatch.airflow import metrics
from eobatch.airflow.metrics import Metric
from eobatch.protocol import Protocol
from support.protocol_runs import land_and_run
from support.statsd_sink import received_by_statsd


def test_a_committed_batch_gives_its_counts_and_phase_times_from_the_ledger(make_cfg):
    proto = Protocol(make_cfg())
    batch_id, prepared = land_and_run(proto, range(7), "a.jsonl")
    led = proto.ledger
    got = metrics.batch_metrics("orders", led.plan(batch_id), led.prepared(batch_id), led.committed(batch_id))
    by_name = {m.name: m for m in got}
    assert by_name["eobatch.orders.batches_committed"] == Metric("incr", "eobatch.orders.batches_committed", 1)
    assert by_name["eobatch.orders.rows_published"].value == prepared.rows_published == 7
    assert by_name["eobatch.orders.rows_in"].value == 7
    assert by_name["eobatch.orders.rows_quarantined"].value == 0
    assert by_name["eobatch.orders.bytes_published"].value == prepared.bytes > 0
    for phase in metrics.PHASES:  # StatsD timers are milliseconds
        m = by_name[f"eobatch.orders.{phase}_seconds"]
        assert m.kind == "timing" and m.value >= 0
    assert by_name["eobatch.orders.commit_seconds"].value == round(1000 * led.committed(batch_id).commit_seconds, 1)


def test_backlog_gauges_send_what_is_known_and_nothing_on_error():
    b = {"files": 3, "bytes": 1200, "records": None, "oldest_unpublished_age_s": 42.5, "unpublished": True,
         "error": None}
    assert metrics.backlog_metrics("p", b) == [
        Metric("gauge", "eobatch.p.backlog_files", 3), Metric("gauge", "eobatch.p.backlog_bytes", 1200),
        Metric("gauge", "eobatch.p.oldest_unpublished_age_s", 42.5)]
    idle = {"files": 0, "bytes": 0, "records": 0, "oldest_unpublished_age_s": None, "unpublished": False}
    assert Metric("gauge", "eobatch.p.oldest_unpublished_age_s", 0) in metrics.backlog_metrics("p", idle)
    assert metrics.backlog_metrics("p", {"error": "KafkaException: down"}) == []


def test_late_files_count_by_action():
    late = [{"interval": "i0", "files": ["a", "b"], "action": "republish"}, {"interval": "i1", "files": ["c"],
                                                                            "action": "ignore"}]
    assert metrics.late_file_metrics("p", late) == [
        Metric("incr", "eobatch.p.late_files", 2), Metric("incr", "eobatch.p.late_files_republish", 2),
        Metric("incr", "eobatch.p.late_files", 1), Metric("incr", "eobatch.p.late_files_ignore", 1)]


def test_send_goes_through_airflows_statsd_client(tmp_path):
    code = ("from eobatch.airflow.metrics import Metric, send; "
            "send([Metric('incr', 'eobatch.orders.rows_published', 7), "
            "Metric('gauge', 'eobatch.orders.backlog_files', 3), "
            "Metric('timing', 'eobatch.orders.commit_seconds', 12.5)])")
    want = {"airflow.eobatch.orders.rows_published:7|c", "airflow.eobatch.orders.backlog_files:3|g",
            "airflow.eobatch.orders.commit_seconds:12.500000|ms"}
    assert want <= received_by_statsd(tmp_path, code, want)


def test_a_metrics_backend_that_fails_never_fails_the_caller(monkeypatch, caplog, capsys):
    from airflow.sdk.observability import stats

    def boom(*a, **k):
        raise OSError("no route")

    monkeypatch.setattr(stats, "incr", boom)
    metrics.send([Metric("incr", "eobatch.p.batches_committed", 1)])
    out = capsys.readouterr()
    assert "metrics not sent (OSError: no route)" in caplog.text + out.out + out.err
