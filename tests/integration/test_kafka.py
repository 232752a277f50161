"""The Kafka source against a real Apache Kafka broker (KRaft, started from Maven jars)."""

from __future__ import annotations

import collections
import json
import time

import pytest

from eobatch.core.formats import slice_name
from eobatch.job import launch
from eobatch.sources.kafka import DataLossError, partition_offsets
from eobatch.sources.kafka.offsets import KafkaAuthFailed
from support.checks import delta_log_commits, orphans, read_rows, txn_version
from support.harness import orders, run_batch, stage, wait_for, write_kafka_pipeline
from support.services import KafkaBroker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = KafkaBroker(str(tmp_path_factory.mktemp("kafka")), sasl=True).start()
    yield b
    b.stop(kill=True)


def admin(b):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": b.bootstrap})


def create_topic(b, topic: str, partitions: int = 3, config: dict | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    a = admin(b)  # keep the client alive until its futures resolve
    for f in a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                       config=config or {})]).values():
        f.result()


def produce(b, topic: str, values: list[tuple[int, bytes]], txn: str | None = None, commit: bool = True,
            **settings):
    """Produce (partition, value) pairs; in one transaction when txn names a transactional id."""
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": b.bootstrap, "linger.ms": 5, **settings}
    if txn:
        conf["transactional.id"] = txn
    p = Producer(conf)
    if txn:
        p.init_transactions(30)
        p.begin_transaction()
    for part, v in values:
        p.produce(topic, value=v, partition=part, key=f"k{part}".encode())
        p.poll(0)
    p.flush(30)
    if txn:
        (p.commit_transaction if commit else p.abort_transaction)(30)


def as_values(records: list[dict], partitions: int) -> list[tuple[int, bytes]]:
    return [(i % partitions, json.dumps(r).encode()) for i, r in enumerate(records)]


def ranges(p) -> list[dict]:
    return [plan.range["partitions"] for plan in p.protocol().ledger.plans()]


def assert_contiguous(p, ends: dict[str, int]) -> None:
    """Each batch starts each partition where the previous one ended; the last reaches ``ends``;
    the Delta history carries the same ranges."""
    rs = ranges(p)
    for prev, cur in zip(rs, rs[1:]):
        for part, (f, _t) in cur.items():
            assert f == prev.get(part, [0, 0])[1], f"partition {part}: gap or overlap {prev} -> {cur}"
    assert {k: v[1] for k, v in rs[-1].items()} == ends
    commits = [c for c in delta_log_commits(p.sink) if c["txns"]]
    assert [json.loads(c["commitInfo"]["eo.offsets"])["partitions"] for c in commits] == rs


def published_ids(p) -> collections.Counter:
    return collections.Counter(r["order_id"] for r in read_rows(p.sink))


def test_thousands_of_records_with_committed_and_aborted_transactions(tmp_path, broker, airflow):
    topic = "orders_tx"
    create_topic(broker, topic, 3)
    plain = orders("plain", 3000)
    committed = orders("txc", 600)
    aborted = orders("txa", 400)
    produce(broker, topic, as_values(plain[:1500], 3))
    produce(broker, topic, as_values(committed, 3), txn="tx-commit")
    produce(broker, topic, as_values(aborted, 3), txn="tx-abort", commit=False)
    bad = [b'{"order_id": "bad-1", "amount": "many"}', b"not json", b"\xff\xfe invalid utf8"]
    produce(broker, topic, [(i, v) for i, v in enumerate(bad)] + as_values(plain[1500:], 3))
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, topic, max_records=2500)

    first = airflow(p)  # the first batch through the real DAG
    assert first.rc == 0 and first.state == "success", first.log[-5000:]
    assert "plan: batch 1 PLANNED: orders_tx: 2500 offsets" in first.log
    while run_batch(p) is not None:
        pass
    ids = published_ids(p)
    assert not [k for k, v in ids.items() if v > 1], "duplicates"
    assert set(ids) == {r["order_id"] for r in plain + committed}, "published != committed records"
    assert not any(k.startswith("txa") for k in ids), "records of an aborted transaction were published"
    q = read_rows(p.quarantine)
    assert sorted(r["reason"] for r in q) == sorted(["field 'amount': expected DOUBLE, got many",
                                                      "malformed JSON: not a JSON object", "invalid UTF-8"])
    assert {r["source"].split("/")[0] for r in q} == {topic}
    n = len(ranges(p))
    assert txn_version(p.sink, p.name) == n == txn_version(p.quarantine, p.name)
    ends = {str(part): hi for part, (_lo, hi) in partition_offsets(broker.bootstrap, topic).items()}
    assert_contiguous(p, ends)
    # the aborted transaction's records (and the markers) occupy offsets inside the ranges read
    assert sum(ends.values()) >= len(plain) + len(committed) + len(bad) + len(aborted) + 2 * 3
    assert orphans(p.sink) == [] and orphans(p.quarantine) == []
    assert run_batch(p) is None  # idle now: nothing planned, nothing published


def test_a_sasl_broker_through_an_airflow_kafka_connection_and_its_password_never_logged(tmp_path, broker, airflow):
    """The YAML names a connection (``source.conn_id``), never a broker or a secret; the Kafka
    connection's extra (the confluent-kafka config: SASL_PLAINTEXT, PLAIN, user, password) serves
    the plan's admin client and the stage job's consumers, to which it travels as spark-submit's
    environment. The real DAG publishes every record once, and the password is in no log."""
    topic = "orders_sasl"
    create_topic(broker, topic, 2)
    records = orders("sasl", 300)
    produce(broker, topic, as_values(records, 2))
    bad = dict(broker.sasl_client, **{"sasl.password": "wrong"})
    with pytest.raises(KafkaAuthFailed, match="authentication failed: .*Invalid username or password"):
        partition_offsets(bad, topic, timeout=5)  # the listener checks the password, the plan says so
    p = write_kafka_pipeline(tmp_path, "", topic, conn_id="kafka_sasl")
    conn = json.dumps({"conn_type": "kafka", "extra": broker.sasl_client})
    run = airflow(p, extra_env={"AIRFLOW_CONN_KAFKA_SASL": conn})
    assert run.rc == 0 and run.state == "success", run.log[-5000:]
    assert "plan: batch 1 PLANNED: orders_sasl: 300 offsets" in run.log, run.log[-3000:]
    assert published_ids(p) == collections.Counter(r["order_id"] for r in records)
    assert ranges(p) == [{"0": [0, 150], "1": [0, 150]}]
    assert broker.sasl_password not in run.log
    # nowhere under the test's folder: task logs, Airflow's database (rendered fields), tables, ledger
    leaks = [str(f) for f in tmp_path.rglob("*") if f.is_file() and broker.sasl_password.encode() in f.read_bytes()]
    assert leaks == []


def test_one_dag_run_drains_a_kafka_backlog_in_batches_of_contiguous_ranges(tmp_path, broker, airflow):
    """max_batches_per_run: 5 over a backlog of three batches' worth (max_records 300 over 3
    partitions): one DAG run, one Spark application, three batches, each its own range per
    partition starting where the one before ends, each its own Delta commit."""
    topic = "backlog"
    create_topic(broker, topic, 3)
    records = orders("bk", 900)
    produce(broker, topic, as_values(records, 3))
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, topic, max_records=300)
    p.yaml_path.write_text(p.yaml_path.read_text() + "max_batches_per_run: 5\n")
    r = airflow(p)
    assert r.rc == 0 and r.state == "success", r.log[-5000:]
    assert "this run carries batches 1..3" in r.log, r.log[-5000:]
    assert [len(s) for s in ranges(p)] == [3, 3, 3] and sum(hi - lo for rs in ranges(p) for lo, hi in rs.values()) == 900
    assert txn_version(p.sink, p.name) == 3 == txn_version(p.quarantine, p.name)
    assert_contiguous(p, {"0": 300, "1": 300, "2": 300})
    ids = published_ids(p)
    assert set(ids) == {x["order_id"] for x in records} and max(ids.values()) == 1
    assert orphans(p.sink) == [] and orphans(p.quarantine) == []


def test_idle_topic_publishes_nothing(tmp_path, broker):
    create_topic(broker, "idle", 2)
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, "idle")
    assert run_batch(p) is None
    assert not (p.sink / "_delta_log").exists()


def test_new_partition_is_read_from_its_first_offset(tmp_path, broker):
    from confluent_kafka.admin import NewPartitions

    create_topic(broker, "grow", 2)
    produce(broker, "grow", as_values(orders("a", 40), 2))
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, "grow")
    assert run_batch(p) == 1
    a = admin(broker)
    for f in a.create_partitions([NewPartitions("grow", 3)]).values():
        f.result()
    wait_for(lambda: len(admin(broker).list_topics("grow").topics["grow"].partitions) == 3, what="3 partitions")
    produce(broker, "grow", [(2, json.dumps(r).encode()) for r in orders("new", 7)] +
            [(0, json.dumps(r).encode()) for r in orders("b", 3)])
    assert run_batch(p) == 2
    assert ranges(p)[1]["2"] == [0, 7]
    assert set(published_ids(p)) == {r["order_id"] for r in orders("a", 40) + orders("new", 7) + orders("b", 3)}
    assert_contiguous(p, {"0": 23, "1": 20, "2": 7})


def test_records_deleted_by_retention_before_they_were_read(tmp_path, broker):
    from confluent_kafka import TopicPartition

    create_topic(broker, "short", 1)
    produce(broker, "short", as_values(orders("a", 100), 1))
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, "short")
    assert run_batch(p) == 1
    produce(broker, "short", as_values(orders("b", 50), 1))
    a = admin(broker)
    for f in a.delete_records([TopicPartition("short", 0, 120)]).values():  # what retention does
        f.result()
    with pytest.raises(DataLossError, match=r"topic 'short' partition 0: offsets \[100, 120\) were deleted"):
        p.protocol().plan()
    assert p.protocol().ledger.latest_batch_id() == 1  # nothing planned

    # an explicit, documented setting accepts the loss and records it
    text = p.yaml_path.read_text().replace("consumer_timeout_seconds: 15", "consumer_timeout_seconds: 15\n  on_data_loss: accept")
    p.yaml_path.write_text(text)
    assert run_batch(p) == 2
    plan2 = p.protocol().ledger.plan(2)
    assert plan2.range["lost"] == {"0": [100, 120]} and "data loss" in plan2.notes[0]
    assert plan2.range["partitions"] == {"0": [120, 150]}
    assert set(published_ids(p)) == {r["order_id"] for r in orders("a", 100) + orders("b", 50)[20:]}
    lost = json.loads([c for c in delta_log_commits(p.sink) if c["txns"]][-1]["commitInfo"]["eo.offsets"])["lost"]
    assert lost == {"0": [100, 120]}


def test_broker_restarted_between_stage_and_commit_and_killed_mid_stage(tmp_path, broker):
    create_topic(broker, "bounce", 3)
    produce(broker, "bounce", as_values(orders("a", 900), 3))
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, "bounce", max_records=600)
    proto = p.protocol()
    plan, _ = proto.plan()
    attempt = launch.new_attempt_id(1)
    r = stage(p, plan.batch_id, attempt)
    assert r.returncode == 0, r.stderr[-3000:]
    broker.restart()  # between stage and commit
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)

    # killed mid-stage: the read fails (no progress), the attempt is aborted, the range re-read
    plan2, _ = proto.plan()
    attempt2 = launch.new_attempt_id(1)
    proc = stage(p, plan2.batch_id, attempt2, wait=False)
    wait_for(lambda: proc.poll() is not None or "reading bounce" in (_peek(proc) or ""), timeout=120,
             what="the stage job to start reading")
    broker.stop(kill=True)
    out, _ = proc.communicate(timeout=600)
    out = _buf.pop(proc.pid, "") + out
    assert proc.returncode != 0, out[-3000:]
    assert "no progress reading bounce" in out or "cannot read the offsets" in out, out[-3000:]
    proto.abort(plan2.batch_id, attempt2, "stage failed: broker down")
    broker.start()
    assert run_batch(p) == 2  # recover hands back batch 2 with its recorded range
    assert proto.ledger.plan(2).range == plan2.range
    while run_batch(p) is not None:
        pass
    ids = published_ids(p)
    assert set(ids) == {r["order_id"] for r in orders("a", 900)} and max(ids.values()) == 1
    assert_contiguous(p, {"0": 300, "1": 300, "2": 300})


_buf: dict = {}


def _peek(proc) -> str:
    """Non-blocking read of what a Popen has printed so far."""
    import os
    import select

    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    chunks = []
    while select.select([fd], [], [], 0)[0]:
        data = os.read(fd, 65536)
        if not data:
            break
        chunks.append(data.decode(errors="replace"))
    os.set_blocking(fd, True)
    _buf[proc.pid] = _buf.get(proc.pid, "") + "".join(chunks)
    return _buf[proc.pid]


def test_interval_plan_is_the_covering_offsets_of_the_interval_records(broker, tmp_path):
    """Interval mode plans, per partition, offsets covering the records whose own timestamps fall
    in the run's data interval, read from the records (no Spark needed to check the plan itself)."""
    from confluent_kafka import Producer

    from eobatch.protocol import IntervalNotSettled, Protocol
    from eobatch.sources.kafka import IntervalTooLarge

    topic = "interval_events"
    create_topic(broker, topic, partitions=2)
    hour = 3_600_000
    # recent timestamps: the test broker checks retention (7 days by record time) every second
    base = (int(time.time() * 1000) // hour - 4) * hour
    prod = Producer({"bootstrap.servers": broker.bootstrap})
    # partition 0: 2 records in hour 0, 3 in hour 1; partition 1: 1 in hour 1, 1 in hour 2
    for part, ts in ((0, base + 1), (0, base + 2), (0, base + hour), (0, base + hour + 5), (0, base + 2 * hour - 1),
                     (1, base + hour + 10), (1, base + 2 * hour)):
        prod.produce(topic, value=b'{"order_id": "x"}', partition=part, timestamp=ts)
    prod.flush(30)
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, topic, name="iv_kafka", max_records=4)
    p.yaml_path.write_text(p.yaml_path.read_text().replace("name: iv_kafka\n",
                                                           "name: iv_kafka\nmode: interval\nschedule: '@hourly'\n"))
    proto = Protocol(p.cfg)
    h1 = {"start": _iso(base + hour), "end": _iso(base + 2 * hour)}
    plan, new = proto.plan(interval=h1, run_id="h1")
    assert new and plan.range["partitions"] == {"0": [2, 5], "1": [0, 1]} and plan.rows_in == 4
    assert list(plan.range["slices"]) == [slice_name(base + hour)]  # hour 0 is before the first interval,
    assert len(plan.range["pending"]) == 2  # hour 2 has not run: both kept for their runs
    assert plan.range["scan"] == {"0": [0, 5], "1": [0, 2]}
    proto.abandon(plan.batch_id, "test: only the plan is checked")
    plan, _ = proto.plan(interval={"start": _iso(base), "end": _iso(base + hour)}, run_id="h0")
    assert plan.batch_id == 2 and plan.range["partitions"] == {"0": [0, 2], "1": [2, 2]}  # the abandoned scan again
    proto.abandon(2, "test")
    with pytest.raises(IntervalNotSettled):  # an interval that has not ended (+ settle_seconds) waits
        proto.plan(interval={"start": _iso(base + 5 * hour), "end": _iso(base + 6 * hour)}, run_id="h5")
    with pytest.raises(IntervalTooLarge, match="max_records_per_batch=3"):
        proto.plan(3, interval=h1, run_id="h1-small")


def test_latest_start_is_recorded_and_a_rewind_to_the_first_batch_restarts_there(broker, tmp_path):
    topic = "rewind_events"
    create_topic(broker, topic, partitions=2)
    produce(broker, topic, as_values(orders("old", 3), 2))  # before the pipeline: never read
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, topic, name="rw_kafka",
                             extra_source="starting_offsets: latest\n")
    assert run_batch(p) == 1  # an empty batch that records the starting offsets
    first = p.protocol().ledger.plan(1)
    assert sum(t - f for f, t in first.range["partitions"].values()) == 0
    assert sum(f for f, _t in first.range["partitions"].values()) == 3
    new = orders("new", 4)
    produce(broker, topic, as_values(new, 2))
    assert run_batch(p) == 2
    assert sorted(r["order_id"] for r in read_rows(p.sink)) == sorted(r["order_id"] for r in new)

    proto = p.protocol()
    proto.rewind(1)
    assert read_rows(p.sink) == []
    plan3, is_new = proto.plan()
    assert not is_new and plan3.batch_id == 3 and plan3.rewind["to_batch"] == 1  # reserved by the rewind
    # back at batch 1's start (not at the topic's start, nor at its end)
    assert plan3.range["partitions"] == {k: [f, t] for k, (f, t) in
                                         proto.ledger.plan(2).range["partitions"].items()}


def test_a_rewind_racing_a_scheduled_plan_loses_no_record(broker, tmp_path, monkeypatch):
    """The rewind checks that nothing is pending; before it records anything, a scheduled run plans
    batch 2 from the old position. The rewind must then do nothing (it lost the reservation of
    batch 2), never restore the tables under a batch read from the old position: that dropped the
    restart marker and the offsets of batch 1 were never read again (8 of 10 records lost)."""
    from eobatch.protocol import ConcurrentPlan

    topic = "rewind_race"
    create_topic(broker, topic, partitions=2)
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, topic, name="rw_race")
    first = orders("r", 8)
    produce(broker, topic, as_values(first, 2))
    assert run_batch(p) == 1
    late = orders("late", 2)
    produce(broker, topic, as_values(late, 2))
    proto, scheduled = p.protocol(), p.protocol()
    real, raced = proto.ledger.fs.put_if_absent, []

    def a_plan_gets_in_between(path, data):  # after the rewind's checks, before its first ledger write
        if not raced:
            raced.append(scheduled.plan(run_id="scheduled")[0].batch_id)
        return real(path, data)

    monkeypatch.setattr(proto.ledger.fs, "put_if_absent", a_plan_gets_in_between)
    try:
        proto.rewind(1, run_id="ui")
    except ConcurrentPlan:
        pass
    monkeypatch.undo()
    assert raced == [2]
    while run_batch(p) is not None:
        pass
    if not p.protocol().ledger.rewinds():  # refused: asked again once batch 2 is committed
        p.protocol().rewind(1, run_id="ui-again")
        while run_batch(p) is not None:
            pass
    assert published_ids(p) == collections.Counter(r["order_id"] for r in first + late)


def test_interval_loss_is_judged_against_the_previous_interval_not_the_low_watermark(broker, tmp_path):
    """An idle partition whose records all expired (earliest = end > 0) and the first record after
    a long idle time are no loss: the previous interval's batch recorded that it read up to the
    low watermark. Records deleted after what the ledger says was read still fail loudly."""
    import datetime as dt

    from confluent_kafka import Producer, TopicPartition

    topic = "idle_events"
    create_topic(broker, topic, partitions=2)
    hour = 3_600_000
    base = (int(time.time() * 1000) // hour - 4) * hour  # recent: the broker's retention keeps them
    prod = Producer({"bootstrap.servers": broker.bootstrap})

    def put(part: int, ts: int, oid: str) -> None:
        prod.produce(topic, value=json.dumps({"order_id": oid}).encode(), partition=part, timestamp=ts)
        prod.flush(30)

    def hour_of(i: int) -> tuple[str, str]:
        start, end = (dt.datetime.fromtimestamp((base + k * hour) / 1000, dt.timezone.utc).isoformat()
                      for k in (i, i + 1))
        return start, end

    def delete_below(part: int, offset: int) -> None:
        a = admin(broker)
        for f in a.delete_records([TopicPartition(topic, part, offset)]).values():
            f.result()

    put(0, base + 1, "h0-a"), put(0, base + 2, "h0-b"), put(1, base + 3, "h0-c")
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, topic, name="idle_kafka")
    p.yaml_path.write_text(p.yaml_path.read_text().replace(
        "name: idle_kafka\n", "name: idle_kafka\nmode: interval\nschedule: '@hourly'\n"))
    assert run_batch(p, interval=hour_of(0), run_id="h0") == 1
    delete_below(1, 1)  # partition 1 goes idle and all its records expire: earliest = end = 1
    put(0, base + hour + 1, "h1-a")
    assert run_batch(p, interval=hour_of(1), run_id="h1") == 2  # no false data-loss error
    put(1, base + 2 * hour + 1, "h2-a")  # the first record after the idle time: offset 1 = earliest
    assert run_batch(p, interval=hour_of(2), run_id="h2") == 3
    assert sorted(r["order_id"] for r in read_rows(p.sink)) == ["h0-a", "h0-b", "h0-c", "h1-a", "h2-a"]
    # records of hour 3 deleted before hour 3 ran: the ledger says partition 0 was read up to 3
    put(0, base + 3 * hour + 1, "h3-a"), put(0, base + 3 * hour + 2, "h3-b")
    delete_below(0, 5)
    with pytest.raises(DataLossError, match=r"partition 0: offsets \[3, 5\) were deleted .*read up to 3"):
        p.protocol().plan(interval=dict(zip(("start", "end"), hour_of(3))), run_id="h3")


def test_a_rerun_of_a_kafka_interval_replaces_it_and_publishes_each_record_once(broker, tmp_path):
    """A backfill with reprocessing (or a manual run) of an interval already published from Kafka
    replaces that interval's files: the same offsets read again are published once, and the
    other intervals are left alone."""
    import datetime as dt

    from confluent_kafka import Producer

    topic = "rerun_events"
    create_topic(broker, topic, partitions=2)
    hour = 3_600_000
    base = (int(time.time() * 1000) // hour - 4) * hour
    prod = Producer({"bootstrap.servers": broker.bootstrap})
    for part, ts, oid in ((0, base + 1, "h0-a"), (1, base + 2, "h0-b"), (0, base + hour + 1, "h1-a")):
        prod.produce(topic, value=json.dumps({"order_id": oid}).encode(), partition=part, timestamp=ts)
    prod.flush(30)

    def hour_of(i: int) -> tuple[str, str]:
        start, end = (dt.datetime.fromtimestamp((base + k * hour) / 1000, dt.timezone.utc).isoformat()
                      for k in (i, i + 1))
        return start, end

    p = write_kafka_pipeline(tmp_path, broker.bootstrap, topic, name="rerun_kafka")
    p.yaml_path.write_text(p.yaml_path.read_text().replace(
        "name: rerun_kafka\n", "name: rerun_kafka\nmode: interval\nschedule: '@hourly'\n"))
    assert run_batch(p, interval=hour_of(0), run_id="h0") == 1
    assert run_batch(p, interval=hour_of(1), run_id="h1") == 2
    assert run_batch(p, interval=hour_of(0), run_id="h0-again") == 3
    assert sorted(r["order_id"] for r in read_rows(p.sink)) == ["h0-a", "h0-b", "h1-a"]
    assert run_batch(p, interval=hour_of(1), run_id="h1-again") == 4
    assert sorted(r["order_id"] for r in read_rows(p.sink)) == ["h0-a", "h0-b", "h1-a"]


# -- interval mode: records assigned to intervals by their own timestamps --------------------------
HOUR = 3_600_000


def _iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()


def _interval_pipeline(tmp_path, broker, topic: str, name: str, extra_source: str = "settle_seconds: 0\n"):
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, topic, name=name, extra_source=extra_source)
    p.yaml_path.write_text(p.yaml_path.read_text().replace(f"name: {name}\n",
                                                           f"name: {name}\nmode: interval\nschedule: '@hourly'\n"))
    return p


def _txn_producer(b, txn: str):
    from confluent_kafka import Producer

    prod = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": txn, "linger.ms": 5})
    prod.init_transactions(30)
    return prod


def _put(prod, topic: str, part: int, ts: int, oid: str) -> None:
    prod.produce(topic, value=json.dumps({"order_id": oid}).encode(), partition=part, timestamp=ts)


def test_kafka_interval_backfill_with_create_time_publishes_every_record_once(broker, tmp_path):
    """The reported case: a backfilling producer writes hours 0 and 1 in committed transactions with
    its records' own (past) CreateTime timestamps. Each commit marker carries the broker's time, and
    the time index answered the marker's offset for both hour ends: hour 0 published 10 of 15 and
    hour 1 nothing. Now every record is published once by the hour its timestamp falls in, re-runs
    included."""
    topic = "iv_backfill"
    create_topic(broker, topic, partitions=1)
    base = (int(time.time() * 1000) // HOUR - 4) * HOUR
    prod = _txn_producer(broker, "backfill-1")
    prod.begin_transaction()
    for i in range(10):
        _put(prod, topic, 0, base + 60_000 * i, f"h0-{i}")
    prod.commit_transaction(30)  # marker at offset 10, broker time (hours after both intervals)
    prod.begin_transaction()
    for i in range(10):
        _put(prod, topic, 0, base + HOUR + 60_000 * i, f"h1-{i}")
    for i in range(10, 15):  # out of order: more of hour 0 after hour 1's records
        _put(prod, topic, 0, base + 60_000 * i, f"h0-{i}")
    prod.commit_transaction(30)
    p = _interval_pipeline(tmp_path, broker, topic, "iv_backfill")

    def hour(i: int) -> tuple[str, str]:
        return _iso(base + i * HOUR), _iso(base + (i + 1) * HOUR)

    expected = collections.Counter([f"h0-{i}" for i in range(15)] + [f"h1-{i}" for i in range(10)])
    assert run_batch(p, interval=hour(0), run_id="h0") == 1
    assert published_ids(p) == collections.Counter(f"h0-{i}" for i in range(15))
    assert run_batch(p, interval=hour(1), run_id="h1") == 2
    assert published_ids(p) == expected
    for h in (0, 1):  # a re-run replaces its hour whole (the stage job's rule without Spark: shorter)
        plan = _run_without_spark(p.protocol(), broker, base + h * HOUR, f"h{h}-again")
        assert plan.batch_id == 3 + h and list(plan.range["slices"]) == [slice_name(base + h * HOUR)]
        assert published_ids(p) == expected


def test_kafka_interval_open_transaction_across_the_interval_end_waits_then_publishes(broker, tmp_path):
    """A transaction opened inside the interval and still open at its end: the plan waits (the
    sensor reschedules) instead of cutting the range at the last stable offset; past the bound it
    fails naming the partition and the transaction's first offset; once committed, every record
    of the interval is published."""
    from eobatch.errors import TerminalError
    from eobatch.protocol import IntervalNotSettled

    topic = "iv_open_txn"
    create_topic(broker, topic, partitions=2)
    base = (int(time.time() * 1000) // HOUR - 1) * HOUR  # the hour that ended last: within the wait
    plain = _txn_producer(broker, "plain-1")
    plain.begin_transaction()
    _put(plain, topic, 0, base + 1, "h0-a")
    plain.commit_transaction(30)
    slow = _txn_producer(broker, "slow-1")  # a Flink-like sink that commits at its next checkpoint
    slow.begin_transaction()
    _put(slow, topic, 1, base + 10, "h0-b"), _put(slow, topic, 1, base + HOUR - 1, "h0-c")
    slow.flush(30)
    p = _interval_pipeline(tmp_path, broker, topic, "iv_open_txn")
    h0 = {"start": _iso(base), "end": _iso(base + HOUR)}
    with pytest.raises(IntervalNotSettled, match=r"partition 1: .*open transaction .*offset 0"):
        p.protocol().plan(interval=h0, run_id="h0")
    bounded = _interval_pipeline(tmp_path / "bounded", broker, topic, "iv_open_txn",
                                 extra_source="settle_seconds: 0\nopen_transaction_wait_seconds: 1\n")
    with pytest.raises(TerminalError, match=r"partition 1: .*open transaction .*first offset 0"):
        bounded.protocol().plan(interval=h0, run_id="h0")
    slow.commit_transaction(30)
    assert _run_without_spark(p.protocol(), broker, base, "h0").batch_id == 1
    assert published_ids(p) == collections.Counter(["h0-a", "h0-b", "h0-c"])


def _stage_from_broker(proto, bootstrap: str, batch_id: int) -> str:
    """The stage job's rule without Spark: the planned hull read from the broker, each record kept
    by the slice ``intervals.owner`` gives it (the Spark job's own path: the tests above)."""
    from eobatch.sources.kafka.read import read_range
    from support.kafka_model import stage_records

    plan = proto.ledger.plan(batch_id)
    return stage_records(proto, batch_id, (
        (int(p), off, ts, raw)
        for p, (lo, hi) in plan.range["partitions"].items()
        for cols in read_range(bootstrap, plan.range["topic"], int(p), lo, hi, "read_committed", timeout=15)
        for off, ts, raw in zip(cols.offsets, cols.timestamps, cols.values)))


def _run_without_spark(proto, b, start: int, rid: str):
    """The run of the hour from ``start``: recover, plan, stage (``_stage_from_broker``), verify,
    commit; its plan, None when nothing was planned."""
    proto.recover(run_id=rid)
    plan, _ = proto.plan(interval={"start": _iso(start), "end": _iso(start + HOUR)}, run_id=rid)
    if plan is None:
        return None
    proto.verify(plan.batch_id, _stage_from_broker(proto, b.bootstrap, plan.batch_id))
    proto.commit(plan.batch_id)
    return plan


def test_kafka_interval_interleaved_producers_markers_and_an_empty_hour_publish_each_record_once(broker, tmp_path):
    """Interleaved producers with out-of-order CreateTime timestamps, commit markers (broker
    time) between records of the same hours, records on the last and first millisecond of an
    hour, an aborted transaction, an empty hour between two full ones, a late record, and a re-run
    of every hour: each committed record is published once, in the slice of its own hour."""
    from confluent_kafka import Producer

    topic = "iv_interleaved"
    create_topic(broker, topic, partitions=2)
    base = (int(time.time() * 1000) // HOUR - 5) * HOUR
    want: dict[int, set] = {0: set(), 1: set(), 2: set()}

    def put(prod, part: int, h: int, ms: int, oid: str, keep: bool = True) -> None:
        _put(prod, topic, part, base + h * HOUR + ms, oid)
        if keep:
            want[h].add(oid)

    a, b, d = _txn_producer(broker, "il-a"), _txn_producer(broker, "il-b"), _txn_producer(broker, "il-d")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    a.begin_transaction(), b.begin_transaction(), d.begin_transaction()
    put(a, 0, 0, 600_000, "a1"), put(b, 0, 0, 300_000, "b1"), put(a, 0, 0, 1_200_000, "a2")
    put(b, 0, 2, 0, "b2-first-ms"), put(b, 1, 2, 60_000, "b3"), put(d, 0, 0, 400_000, "d1", keep=False)
    put(a, 1, 0, HOUR - 1, "a3-last-ms")
    a.commit_transaction(30)  # markers: broker time, hours after the records' own
    put(plain, 1, 0, 3_000_000, "p1"), put(plain, 0, 2, 3_599_000, "p2")
    plain.flush(30)
    b.commit_transaction(30), d.abort_transaction(30)
    p = _interval_pipeline(tmp_path, broker, topic, "iv_interleaved")
    proto = p.protocol()

    def run(h: int, rid: str):
        return _run_without_spark(proto, broker, base + h * HOUR, rid)

    def by_hour() -> dict[int, collections.Counter]:
        import deltalake
        import pyarrow.parquet as pq

        out: dict[int, collections.Counter] = {h: collections.Counter() for h in want}
        for uri in deltalake.DeltaTable(str(p.sink)).file_uris():
            h = next(h for h in want if f"/{slice_name(base + h * HOUR)}/" in uri)
            out[h].update(pq.read_table(uri.removeprefix("file://")).column("order_id").to_pylist())
        return out

    expected = {h: collections.Counter(ids) for h, ids in want.items()}
    assert run(0, "h0").batch_id == 1
    assert run(1, "h1") is None  # empty, and nothing new: skipped
    assert run(2, "h2").batch_id == 2
    assert by_hour() == expected
    late = _txn_producer(broker, "il-late")
    late.begin_transaction()
    put(late, 1, 0, 1, "late-h0")
    late.commit_transaction(30)
    plan = run(2, "h2-again")  # a re-run of hour 2 scans the late record: hour 0 is published again, whole
    assert sorted(plan.range["slices"]) == sorted([slice_name(base), slice_name(base + 2 * HOUR)])
    assert any("late records" in n for n in plan.notes)
    expected = {h: collections.Counter(ids) for h, ids in want.items()}
    assert by_hour() == expected
    for h in (0, 1, 2):
        run(h, f"h{h}-rerun")
        assert by_hour() == expected


# A consumer that takes at most about 1 MB per response (what a pipeline's connection may set):
# a record batch larger than that can never be received by it.
SMALL_RECEIVE = {"receive.message.max.bytes": 1_000_000, "fetch.max.bytes": 500_000,
                 "max.partition.fetch.bytes": 500_000, "message.max.bytes": 500_000}


def _wait_decided(b, topic: str, end: int) -> None:
    """Until the transactions' markers are written: the last stable offset reaches ``end``."""
    wait_for(lambda: partition_offsets(b.bootstrap, topic)[0][1] == end, what=f"{topic} decided up to {end}")


def test_a_read_accounts_for_every_offset_and_an_unreadable_record_is_never_retried_forever(broker):
    """Issue 27: the reader skipped errored messages and asked again forever for a record it could
    never receive. Now a read of [0, end) accounts for every offset: records delivered, records of an
    aborted transaction (a read_uncommitted view delivers them), transaction markers, and a
    record larger than the consumer's receive.message.max.bytes: a row of its own with the reason,
    after a few tries, and the records after it are read. Its Arrow batches are bounded by bytes."""
    from eobatch.sources.kafka.account import Account
    from eobatch.sources.kafka.read import read_range

    topic = "acct_read"
    create_topic(broker, topic, 1, config={"max.message.bytes": "3000000"})
    produce(broker, topic, [(0, b"a%d" % i) for i in range(3)])  # 0..2
    produce(broker, topic, [(0, b"c%d" % i) for i in range(4)], txn="acct-c")  # 3..6, marker 7
    produce(broker, topic, [(0, b"x%d" % i) for i in range(3)], txn="acct-x", commit=False)  # 8..10, marker 11
    produce(broker, topic, [(0, b"B" * 1_500_000)], **{"message.max.bytes": 3_000_000})  # 12: too large to receive
    produce(broker, topic, [(0, b"L" * 60_000) for _ in range(10)])  # 13..22: 600 kB of large records
    _wait_decided(broker, topic, 23)

    acct = Account(0, 23)
    started = time.monotonic()
    batches = list(read_range({"bootstrap.servers": broker.bootstrap, **SMALL_RECEIVE}, topic, 0, 0, 23,
                              "read_committed", timeout=15, max_bytes=130_000, account=acct))
    took = time.monotonic() - started
    assert (acct.delivered, acct.aborted, acct.control, acct.unreadable) == (17, 3, 2, 1)
    rows = [r for b in batches for r in b.to_arrow().to_pylist()]
    assert [r["_kafka_offset"] for r in rows] == [0, 1, 2, 3, 4, 5, 6, *range(12, 23)]
    big = rows[7]
    assert big["raw"] is None and "receive.message.max.bytes" in big["_eo_unreadable"]
    assert big["_eo_unreadable"].startswith(f"unreadable: {topic}/0 offset 12 ")
    assert sorted(r["raw"] for r in rows if r["raw"] and not r["raw"].startswith(b"L")) == [
        b"a0", b"a1", b"a2", b"c0", b"c1", b"c2", b"c3"]
    # a batch ends once it holds 130 kB: 3 large records (a count bound of 5,000 takes all 23 at once)
    assert [len(b.offsets) for b in batches] == [11, 3, 3, 1]
    assert max(b.nbytes for b in batches) < 130_000 + 60_000
    assert took < 15, took  # a few tries at offset 12, not the progress timeout (15 s)


class _LaggingPosition:
    """A consumer whose position() reports where it was assigned until it delivers a record: the
    client's own report can lag behind its fetches past markers and aborted records (seen on a
    loaded CI machine), while its prefetch of a record too large fails with an error that names no
    offset."""

    def __init__(self, c):
        self.c, self.at = c, None

    def assign(self, tps):
        self.at = tps[0].offset
        return self.c.assign(tps)

    def consume(self, *a, **kw):
        msgs = self.c.consume(*a, **kw)
        for m in msgs:
            if m.error() is None:
                self.at = m.offset() + 1
        return msgs

    def position(self, tps):
        from confluent_kafka import TopicPartition

        return [TopicPartition(tps[0].topic, tps[0].partition, self.at)]

    def __getattr__(self, name):
        return getattr(self.c, name)


def test_a_response_too_large_past_markers_and_aborted_records_makes_none_of_them_unreadable(broker):
    """A read whose range holds only markers and aborted records before a record too large to
    receive: the client's error says nothing of the offset it fetched, and its position may lag.
    The offsets of the range are never rows of their own (before: each became an 'unreadable'
    quarantine row, committed records among them would have been too); a probe that can receive
    any record tells where the client really is."""
    from eobatch.sources.kafka.account import Account
    from eobatch.sources.kafka.read import _View, read_range

    topic = "acct_lag"
    create_topic(broker, topic, 1, config={"max.message.bytes": "3000000"})
    produce(broker, topic, [(0, b"a%d" % i) for i in range(3)])  # 0..2
    produce(broker, topic, [(0, b"x%d" % i) for i in range(3)], txn="acct-lag-x", commit=False)  # 3..5, marker 6
    produce(broker, topic, [(0, b"B" * 1_500_000)], **{"message.max.bytes": 3_000_000})  # 7: too large to receive
    produce(broker, topic, [(0, b"z")])  # 8
    _wait_decided(broker, topic, 9)
    client = {"bootstrap.servers": broker.bootstrap, **SMALL_RECEIVE}

    for level, first_at_3, first_at_6 in (("read_committed", 7, 7), ("read_uncommitted", 3, 7)):
        view = _View(client, topic, 0, level, timeout=15, batch=100)
        try:
            assert view.first_delivered(3) == first_at_3
            assert view.first_delivered(6) == first_at_6
            assert view.first_delivered(7) == 7  # the probe receives what this client cannot
            view.c = _LaggingPosition(view.c)
            walked = [(off, m if isinstance(m, str) else m.offset()) for off, m in view.walk(3, 7)]
        finally:
            view.close()
        assert walked == ([] if level == "read_committed" else [(3, 3), (4, 4), (5, 5)]), walked

    acct = Account(0, 9)
    rows = [r for b in read_range(client, topic, 0, 0, 9, "read_committed", timeout=15, account=acct)
            for r in b.to_arrow().to_pylist()]
    assert (acct.delivered, acct.aborted, acct.control, acct.unreadable) == (4, 3, 1, 1)
    assert [(r["_kafka_offset"], r["_eo_unreadable"] is not None) for r in rows] == [
        (0, False), (1, False), (2, False), (7, True), (8, False)]


def test_transactions_and_a_record_too_large_to_receive_publish_with_every_offset_accounted(tmp_path, broker):
    """Through the stage job (Spark), verify and commit: committed records published once, the
    aborted transaction not, the record the consumer cannot receive quarantined at its offset,
    and the stage summary's account of partition 0 adds up to its planned offsets."""
    from eobatch.sources.kafka.client import CLIENT_ENV

    topic = "acct_stage"
    create_topic(broker, topic, 1, config={"max.message.bytes": "3000000"})
    plain, committed, aborted = orders("p", 3), orders("c", 4), orders("x", 3)
    produce(broker, topic, as_values(plain, 1))
    produce(broker, topic, as_values(committed, 1), txn="acct-stage-c")
    produce(broker, topic, as_values(aborted, 1), txn="acct-stage-x", commit=False)
    produce(broker, topic, [(0, b'{"order_id": "big", "pad": "' + b"B" * 1_500_000 + b'"}')],
            **{"message.max.bytes": 3_000_000})
    produce(broker, topic, as_values(orders("q", 2), 1))
    _wait_decided(broker, topic, 15)
    p = write_kafka_pipeline(tmp_path, broker.bootstrap, topic, name="acct", extra_source="read_batch_bytes: 1000\n")
    proto = p.protocol()
    plan, _ = proto.plan()
    assert plan.range["partitions"] == {"0": [0, 15]}
    attempt = launch.new_attempt_id(1)
    # the settings a pipeline's connection carries to the job (client.job_env)
    r = stage(p, plan.batch_id, attempt, env={CLIENT_ENV: json.dumps(SMALL_RECEIVE)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    assert published_ids(p) == collections.Counter(r["order_id"] for r in plain + committed + orders("q", 2))
    q = read_rows(p.quarantine)
    assert [(r["source"], r["position"], r["raw"]) for r in q] == [(f"{topic}/0", 12, None)]
    assert q[0]["reason"].startswith(f"unreadable: {topic}/0 offset 12 ") and "receive.message.max.bytes" in q[0]["reason"]
    entry = proto.ledger.stage_summary(plan.batch_id, attempt).source_positions["0"]
    assert {k: entry[k] for k in ("records", "delivered", "aborted", "control", "unreadable", "slices")} == {
        "records": 10, "delivered": 9, "aborted": 3, "control": 2, "unreadable": 1, "slices": [[0, 15]]}


def test_doctor_says_a_topics_partitions_or_that_it_is_not_there(tmp_path, broker):
    """Issue 43: doctor checked landing folders only; a Kafka pipeline's check is the plan's own
    read of the topic's offsets: its partitions and what they hold, or the topic named as missing."""
    from eobatch import doctor

    create_topic(broker, "doctor_t", 2)
    produce(broker, "doctor_t", [(0, b"a"), (1, b"b"), (1, b"c")])
    there = write_kafka_pipeline(tmp_path / "a", broker.bootstrap, "doctor_t", name="doctor_there")
    missing = write_kafka_pipeline(tmp_path / "b", broker.bootstrap, "doctor_no_such_topic", name="doctor_missing")
    checks = {c.name: c for c in doctor._sources({"there": there.cfg, "missing": missing.cfg})}
    assert (checks["source there"].ok, checks["source there"].text) == (
        True, f"kafka {broker.bootstrap}: topic 'doctor_t', 2 partition(s), 3 offset(s) held (read_committed)")
    assert not checks["source missing"].ok and "'doctor_no_such_topic' is not available" in checks["source missing"].text, \
        checks["source missing"].text
