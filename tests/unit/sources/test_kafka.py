"""eobatch.sources.kafka: its config, spreading the record limit, slicing ranges for Spark tasks,
the range against the stage summary, the broker errors a plan asks again after."""

from __future__ import annotations

import pytest

from eobatch.pipelines.loader import ConfigError
from eobatch.sources import kind_for
from eobatch.sources.kafka import range_summary, spread
from eobatch.sources.kafka.read import FIELDS, Columns, slices
from support.pipeline_yaml import kafka_doc as _kafka
from support.pipeline_yaml import load_doc as _load
from support.records import stage_summary as _summary

# -- config ----------------------------------------------------------------------------------


def test_kafka_source_loads_with_defaults(write_yaml, base_cfg):
    c = _load(write_yaml, _kafka(base_cfg))
    assert (c.source.kind, c.source.topic, c.source.bootstrap_servers) == ("kafka", "orders", "127.0.0.1:9092")
    assert (c.source.starting_offsets, c.source.isolation_level, c.source.on_data_loss) == (
        "earliest", "read_committed", "fail")
    assert c.source.path is None and "kafka topic orders" in c.source.describe()


@pytest.mark.parametrize("source,key,msg", [
    ({"bootstrap_servers": None}, "source.bootstrap_servers", "is required"),
    ({"bootstrap_servers": "no-port"}, "source.bootstrap_servers", "host:port"),
    ({"topic": "bad topic!"}, "source.topic", "not a valid Kafka topic"),
    ({"isolation_level": "dirty"}, "source.isolation_level", "read_committed"),
    ({"on_data_loss": "ignore"}, "source.on_data_loss", "fail, accept"),
    ({"starting_offsets": "middle"}, "source.starting_offsets", "earliest, latest"),
    ({"consumer_timeout_seconds": 0}, "source.consumer_timeout_seconds", "positive integer"),
    ({"read_batch_bytes": "big"}, "source.read_batch_bytes", "positive integer"),
    ({"conn_id": "kafka_prod"}, "source.bootstrap_servers", "not both"),
    ({"bootstrap_servers": None, "conn_id": "bad id"}, "source.conn_id", "Airflow connection id"),
    ({"open_transaction_wait_seconds": 60}, "source.open_transaction_wait_seconds", "only used in interval mode"),
])
def test_kafka_source_errors_name_the_key(write_yaml, base_cfg, source, key, msg):
    cfg = _kafka(base_cfg, **source)
    cfg["source"] = {k: v for k, v in cfg["source"].items() if v is not None}
    with pytest.raises(ConfigError) as e:
        _load(write_yaml, cfg)
    assert e.value.key == key and msg in str(e.value)


# -- a connection: the confluent-kafka config as its extra --------------------------------------


def test_the_read_buffer_bound_reaches_the_job_and_changes_no_fingerprint(write_yaml, base_cfg):
    from eobatch.job.launch import job_spec

    plain = _load(write_yaml, _kafka(base_cfg))
    small = _load(write_yaml, _kafka(base_cfg, read_batch_bytes=1000))
    assert small.fingerprint() == plain.fingerprint()
    assert job_spec(small, 1, "a1")["source"]["read_batch_bytes"] == 1000
    assert job_spec(plain, 1, "a1")["source"]["read_batch_bytes"] == 16 << 20


def test_a_connection_replaces_the_servers_and_keeps_other_pipelines_fingerprints(write_yaml, base_cfg):
    plain = _load(write_yaml, _kafka(base_cfg))
    doc = _kafka(base_cfg, conn_id="kafka_prod")
    doc["source"].pop("bootstrap_servers")
    with_conn = _load(write_yaml, doc)
    assert (with_conn.source.conn_id, with_conn.source.bootstrap_servers) == ("kafka_prod", None)
    assert with_conn.source.describe() == "kafka topic orders at connection kafka_prod"
    assert plain.source.fingerprint_dict().keys() == with_conn.source.fingerprint_dict().keys() - {"conn_id"}
    assert with_conn.fingerprint() != plain.fingerprint()


def test_the_connections_settings_reach_the_job_apart_from_its_spec(write_yaml, base_cfg, monkeypatch):
    """Through Airflow's connection reader: the job spec holds the servers only; every other
    setting travels in the job's environment (``job_env``) and comes back whole in the job
    (``for_job``); the product's reader settings win over the connection's; its secrets are masked."""
    import json

    from airflow.sdk.log import redact

    from eobatch.airflow import connections as airflow_conn  # noqa: F401 - registers Airflow's reader
    from eobatch.job import launch
    from eobatch.sources.kafka import client

    secret = "pw-" + "x9" * 8
    extra = {"bootstrap.servers": "b1:9093,b2:9093", "security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
             "sasl.username": "etl", "sasl.password": secret, "enable.auto.commit": True, "fetch.max.bytes": 1024}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROD", json.dumps({"conn_type": "kafka", "extra": extra}))
    doc = _kafka(base_cfg, conn_id="kafka_prod")
    doc["source"].pop("bootstrap_servers")
    cfg = _load(write_yaml, doc)
    assert client.settings(cfg.source) == extra
    spec = launch.job_spec(cfg, 1, "a1")
    assert spec["source"]["bootstrap_servers"] == "b1:9093,b2:9093" and secret not in json.dumps(spec)
    env = launch.job_env(cfg)
    assert list(env) == [client.CLIENT_ENV] and secret in env[client.CLIENT_ENV]
    assert redact(f"<{secret}>") == "<***>"
    in_job = client.for_job(spec["source"]["bootstrap_servers"], environ=env)
    assert in_job == extra
    consumer = client.consumer_settings(in_job, **{"fetch.max.bytes": 52428800, "group.id": "g"})
    assert consumer["fetch.max.bytes"] == 1024 and consumer["group.id"] == "g"  # tuning: the connection's
    assert consumer["enable.auto.commit"] is False  # the product's own: never the connection's
    assert launch.job_env(_load(write_yaml, _kafka(base_cfg))) == {}  # no connection: nothing travels


def test_a_missing_connection_is_an_operators_error_naming_it(write_yaml, base_cfg):
    from eobatch.airflow import connections as airflow_conn  # noqa: F401
    from eobatch.errors import TerminalError
    from eobatch.sources.kafka import client

    doc = _kafka(base_cfg, conn_id="kafka_nowhere")
    doc["source"].pop("bootstrap_servers")
    with pytest.raises(TerminalError, match="kafka_nowhere"):
        client.settings(_load(write_yaml, doc).source)


# -- planning: the record limit spread over the partitions ---------------------------------------


def test_spread_takes_everything_when_it_fits():
    assert spread(100, {0: 10, 1: 0, 2: 50}) == {0: 10, 1: 0, 2: 50}


@pytest.mark.parametrize("limit,backlog", [
    (100, {0: 1000, 1: 1000, 2: 1000}), (7, {0: 5, 1: 5}), (1, {0: 3, 1: 900}), (1000, {0: 999, 1: 2, 2: 0}),
])
def test_spread_never_exceeds_limit_or_backlog_and_uses_the_limit(limit, backlog):
    take = spread(limit, backlog)
    assert sum(take.values()) == min(limit, sum(backlog.values()))
    assert all(0 <= take[p] <= backlog[p] for p in backlog)


def test_spread_is_proportional():
    take = spread(300, {0: 1000, 1: 2000})
    assert take == {0: 100, 1: 200}


# -- reading: slices of a range for Spark tasks ---------------------------------------------------


def test_slices_cover_each_range_exactly_once():
    parts = {"0": [0, 10], "1": [5, 5], "2": [100, 125]}
    pieces = slices(parts, 10)
    assert pieces == [(0, 0, 10), (2, 100, 110), (2, 110, 120), (2, 120, 125)]
    covered = sorted((p, o) for p, s, e in pieces for o in range(s, e))
    assert covered == sorted([(0, o) for o in range(10)] + [(2, o) for o in range(100, 125)])


class _Msg:
    """The three accessors of a confluent-kafka Message that the reader uses."""

    def __init__(self, value, key, ts):
        self._v, self._k, self._ts = value, key, ts

    def value(self):
        return self._v

    def key(self):
        return self._k

    def timestamp(self):
        return self._ts


def test_columns_give_spark_one_arrow_batch_per_read_with_the_record_fields():
    import datetime as dt

    cols = Columns(3)
    cols.add(_Msg(b'{"a":1}', b"k1", (1, 1_700_000_000_123)), 10)
    cols.add(_Msg(None, None, (0, None)), 11)  # a tombstone without a timestamp
    cols.add(_Msg(b"\xff", b"", (2, -1)), 12)  # a negative timestamp is none
    b = cols.to_arrow()
    assert b.schema.names == list(FIELDS)
    rows = b.to_pylist()
    assert [r["_kafka_partition"] for r in rows] == [3, 3, 3]
    assert [r["_kafka_offset"] for r in rows] == [10, 11, 12]
    assert [r["raw"] for r in rows] == [b'{"a":1}', None, b"\xff"]
    assert [r["_kafka_key"] for r in rows] == [b"k1", None, b""]
    assert rows[0]["_kafka_timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.timezone.utc)
    assert rows[1]["_kafka_timestamp"] is None and rows[2]["_kafka_timestamp"] is None
    assert Columns(0).to_arrow().num_rows == 0


# -- the range: its summary, and against the stage summary ----------------------------------------


def test_range_summary_shows_offsets_and_loss():
    s = range_summary({"topic": "t", "partitions": {"0": [0, 3], "1": [4, 4]}, "lost": {"1": [2, 4]}})
    assert s.startswith("t: 3 offsets p0[0,3)") and "LOST" in s


def _entry(records, lo, hi, slices, **acct):
    return {"records": records, "lo": lo, "hi": hi, "slices": slices,
            **{c: acct.get(c, 0) for c in ("delivered", "aborted", "control", "unreadable")}}


def test_the_kafka_check_against_the_stage_summary():
    rng = kind_for("kafka").range({"topic": "t", "partitions": {"0": [0, 3], "1": [4, 6], "2": [7, 7]}})
    ok = {"0": _entry(3, 0, 2, [[0, 3]], delivered=3), "1": _entry(2, 4, 5, [[4, 6]], delivered=2)}
    assert rng.check_stage(_summary(5, ok)) == []
    outside = dict(ok, **{"1": _entry(2, 5, 6, [[4, 6]], delivered=2)})
    assert rng.check_stage(_summary(5, outside)) == ["partition 1: read offsets 5..6, outside the planned [4, 6)"]
    assert rng.check_stage(_summary(1, {"3": _entry(1, 0, 0, [[0, 1]], delivered=1)}))[:3] == [
        "read partition 3, which is not in the plan", "partition 0: offsets [0, 3) were not read (no account of them)",
        "partition 1: offsets [4, 6) were not read (no account of them)"]


def test_verify_refuses_a_partition_read_with_fewer_records_than_its_offsets_hold():
    """Issue 27: verify accepted fewer records than the range holds (a record skipped after an
    error looked like a transaction marker). Every offset must be delivered, aborted, a marker
    or unreadable (quarantined), by the reader's own account."""
    rng = kind_for("kafka").range({"topic": "t", "partitions": {"0": [0, 10]}})
    assert rng.check_stage(_summary(8, {"0": [8, 0, 9]})) != []  # an older job's summary: no account
    assert rng.check_stage(_summary(8, {"0": _entry(8, 0, 9, [[0, 10]], delivered=8)})) == [
        "partition 0: offsets [0, 10) hold 10 offsets, the read accounts for 8 (8 delivered, 0 aborted, 0 control, "
        "0 unreadable)"]
    # two aborted records and their marker, one unreadable record (quarantined: a row of its own)
    good = _entry(8, 0, 9, [[0, 6], [6, 10]], delivered=7, aborted=1, control=1, unreadable=1)
    assert rng.check_stage(_summary(8, {"0": good})) == []
    assert rng.check_stage(_summary(8, {"0": dict(good, slices=[[0, 6], [7, 10]])}))[0].startswith(
        "partition 0: the read slices do not cover the planned [0, 10) once")
    assert rng.check_stage(_summary(8, {"0": dict(good, records=7)})) == [
        "partition 0: 7 records reached the job, the reader delivered 7 and 1 unreadable",
        "records per partition add up to 7, the job counted 8"]


def test_a_slice_read_twice_must_account_the_same_way():
    from eobatch.sources.kafka.account import Account
    from eobatch.sources.kafka.read import SliceAccounts

    acc = SliceAccounts()
    a = Account(0, 5, delivered=5).to_json()
    total = acc.addInPlace(acc.zero({}), {"0:0:5": a})
    assert acc.addInPlace(total, {"0:0:5": a}) == {"0:0:5": a}  # a task run again: the same account
    total = acc.addInPlace(total, {"0:0:5": Account(0, 5, delivered=4, control=1).to_json()})
    assert list(total["conflicts"]) == ["0:0:5"]


def test_an_unreadable_record_is_a_row_without_value_with_its_reason_and_bytes_are_counted():
    cols = Columns(0)
    cols.add(_Msg(b"x" * 10, b"kk", (1, 5)), 0)
    cols.add_unreadable(1, "unreadable: too large")
    cols.add(_Msg(b"y", None, (1, 6)), 2)
    assert cols.nbytes == 13
    rows = cols.to_arrow().to_pylist()
    assert [(r["_kafka_offset"], r["raw"], r["_eo_unreadable"]) for r in rows] == [
        (0, b"x" * 10, None), (1, None, "unreadable: too large"), (2, b"y", None)]


# -- the broker's answers --------------------------------------------------------------------


def test_offsets_are_asked_again_after_errors_a_restarting_broker_answers():
    """A broker that just restarted answers UNKNOWN_LEADER_EPOCH for a moment (seen in the suite
    right after a restart): plan asks again instead of failing; other errors fail at once."""
    from confluent_kafka import KafkaError, KafkaException

    from eobatch.sources.kafka.offsets import _retriable

    for code in (KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._TRANSPORT):
        assert _retriable(KafkaException(KafkaError(code)))
    assert not _retriable(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert not _retriable(KafkaException("no KafkaError inside"))


# -- interval mode: records by their own timestamps (sources/kafka/intervals.py) ------------------------


def test_interval_wait_for_open_transactions_is_a_key_of_interval_mode(write_yaml, base_cfg):
    doc = {**_kafka(base_cfg), "mode": "interval", "schedule": "@hourly"}
    assert _load(write_yaml, doc).source.transaction_wait_seconds == 3600
    fp = _load(write_yaml, doc).fingerprint()
    doc["source"]["open_transaction_wait_seconds"] = 0
    assert _load(write_yaml, doc).source.transaction_wait_seconds == 0 and _load(write_yaml, doc).fingerprint() != fp
    doc["source"]["open_transaction_wait_seconds"] = -1
    with pytest.raises(ConfigError) as e:
        _load(write_yaml, doc)
    assert e.value.key == "source.open_transaction_wait_seconds"


def test_a_record_belongs_to_the_interval_of_its_own_timestamp():
    from eobatch.core.formats import slice_name
    from eobatch.sources.kafka.intervals import Schedule, owner

    h = 3_600_000
    sched = Schedule("0 * * * *")
    assert [sched.interval(t) for t in (h, 2 * h - 1, 2 * h)] == [(h, 2 * h), (h, 2 * h), (2 * h, 3 * h)]
    rng = {"slices": {slice_name(h): {"start": h, "end": 2 * h, "records": 2, "partitions": {"0": [5, 9]}},
                      slice_name(0): {"start": 0, "end": h, "records": 1, "partitions": {"0": [3, 8]}}}}
    assert owner(rng, 0, 5, h) == slice_name(h) and owner(rng, 0, 5, h - 1) == slice_name(0)
    assert owner(rng, 0, 9, h) is None  # outside the slice's offsets: published by another batch
    assert owner(rng, 0, 4, None) == slice_name(0)  # no timestamp: the epoch's interval
    assert owner(rng, 1, 5, h) is None and owner(rng, 0, 6, 2 * h) is None


def test_the_reported_backfill_is_published_by_record_time(tmp_path):
    """Issue 32's case on a topic model: 10 records of 10:00 in one committed transaction, then 10 of
    11:00 and 5 more of 10:00 in another; each commit marker carries the broker's (later) time. Both
    hours and their re-runs publish all 25, each once, each by its own hour."""
    import collections

    import yaml

    from eobatch.pipelines.loader import load_pipeline
    from eobatch.protocol import Protocol
    from support.kafka_model import Log, model_broker, stage_kafka
    from support.protocol_runs import T0, H, iv, published

    doc = {"name": "orders", "mode": "interval", "schedule": "@hourly", "schema": "order_id STRING NOT NULL",
           "source": {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9", "topic": "orders", "settle_seconds": 0},
           "sink": {"table": str(tmp_path / "sink")}, "quarantine": {"table": str(tmp_path / "bad")}}
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(doc))
    proto = Protocol(load_pipeline(str(tmp_path / "orders.yaml")))
    log = Log(partitions=1, broker_now=(T0 + 50 * H) * 1000)
    for i in range(10):
        log.append(0, (T0 + 60 * i) * 1000, f"a{i}", txn=1)
    log.decide(1, "committed")
    for i in range(10):
        log.append(0, (T0 + H + 60 * i) * 1000, f"b{i}", txn=2)
    for i in range(10, 15):
        log.append(0, (T0 + 60 * i) * 1000, f"a{i}", txn=2)
    log.decide(2, "committed")
    for h, rid in ((0, "h0"), (1, "h1"), (0, "h0-again"), (1, "h1-again")):
        with model_broker(log):
            plan, _ = proto.plan(interval=iv(h), run_id=rid)
        assert plan.rows_in == (15 if h == 0 else 10)
        proto.verify(plan.batch_id, stage_kafka(proto, log, plan.batch_id))
        proto.commit(plan.batch_id)
    assert published(proto) == collections.Counter(log.published_once()) and len(log.published_once()) == 25
