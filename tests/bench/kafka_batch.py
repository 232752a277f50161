"""One exactly-once batch of N small records from a real Kafka broker, timed per phase, and the
raw consume floor of the same records (part of `make bench`).

    .venv/bin/python tests/bench/kafka_batch.py [N] [--partitions P] [--master M]   (default 1,000,000, 3)

Starts its own broker in a temporary folder (``support.services.KafkaBroker``, the broker of
`make up`), produces N records into a topic of P partitions, then:

* plans, stages (the stage task's own spark-submit; ``stage_s`` is the wall time of that whole
  process, as the file peers of `make bench` are timed), verifies and commits one batch;
* ``consume_floor_s``: one confluent-kafka consumer per partition, all at once, each in its own
  process, reading its partition from the start to the end offset (message values touched):
  the span from the first consumer's creation to the last one's end (process start-up and
  imports excluded). The physical floor of a design that reads Kafka with that client.

``stage_over_consume_floor`` = stage_s / consume_floor_s. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests"))

from eobatch.job import launch  # noqa: E402
from support.harness import base_env, write_kafka_pipeline  # noqa: E402
from support.services import KafkaBroker  # noqa: E402

TOPIC = "bench"
STEP = re.compile(r"^\[eobatch\] .* attempt \S+ (\+[0-9.]+s: .*)$")  # the stage job's timeline lines
# one line per read task of the stage job (eobatch.sources.kafka.read)
READ = re.compile(r"\[eobatch\] kafka read \S+/(\d+) \[\d+, \d+\): (\d+) records, ([0-9.]+)s in the consumer, "
                  r"from ([0-9.]+) to ([0-9.]+)")


def _produce(bootstrap: str, n: int, partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 2000000, "compression.type": "lz4"})
    for i in range(n):
        p.produce(TOPIC, value=b'{"order_id":"o%d","customer":"c%d","amount":%d.5,"ts":"2026-01-01T00:00:00Z"}'
                  % (i, i % 97, i % 1000), partition=i % partitions)
        if i % 100000 == 0:
            p.poll(0)
    left = p.flush(300)
    if left:
        raise RuntimeError(f"{left} records not delivered to the bench topic")


def _consume_partition(bootstrap: str, partition: int, out) -> None:
    """Child process: read one partition from its low to its high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    t0 = time.time()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-floor-{partition}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    low, high = c.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=30)
    c.assign([TopicPartition(TOPIC, partition, low)])
    n, nbytes, pos = 0, 0, low
    deadline = t0 + 1800
    while pos < high and time.time() < deadline:
        for m in c.consume(num_messages=min(10000, high - pos), timeout=5):
            if m.error():
                continue
            nbytes += len(m.value() or b"")
            n += 1
            pos = (m.offset() or pos) + 1
    c.close()
    out.put({"partition": partition, "records": n, "bytes": nbytes, "start": t0, "end": time.time()})


def consume_floor(bootstrap: str, partitions: int) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_consume_partition, args=(bootstrap, p, q)) for p in range(partitions)]
    for pr in procs:
        pr.start()
    res = [q.get(timeout=1800) for _ in procs]
    for pr in procs:
        pr.join()
    span = max(r["end"] for r in res) - min(r["start"] for r in res)
    return {"consume_floor_s": round(span, 3), "consume_records": sum(r["records"] for r in res),
            "consume_partition_s": [round(r["end"] - r["start"], 3) for r in sorted(res, key=lambda r: r["partition"])]}


def read_phase(tasks: list[tuple[str, ...]], floor_partition_s: list[float]) -> dict:
    """The stage job's read phase from its read tasks' lines: ``read_span_s`` (first task's start to
    the last one's end, Spark's parallelism included), ``read_consumer_s`` per partition (time
    inside the consumer, summed over the partition's tasks) and ``read_over_consume_floor``: all
    of that time over all of the floor consumers' (both reading every record once)."""
    if not tasks:
        return {"read_over_consume_floor": None}
    per: dict[int, float] = {}
    for part, _n, busy, _start, _end in tasks:
        per[int(part)] = per.get(int(part), 0.0) + float(busy)
    span = max(float(t[4]) for t in tasks) - min(float(t[3]) for t in tasks)
    return {"read_tasks": len(tasks), "read_records": sum(int(t[1]) for t in tasks), "read_span_s": round(span, 3),
            "read_consumer_s": [round(per[p], 3) for p in sorted(per)],
            "read_over_consume_floor": round(sum(per.values()) / sum(floor_partition_s), 3)}


def measure(n: int, partitions: int = 3, master: str = "local[*]") -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    root = Path(tempfile.mkdtemp(prefix="eobatch-bench-kafka-"))
    t = time.time()
    broker = KafkaBroker(str(root / "kafka")).start()
    out: dict = {"records": n, "partitions": partitions, "broker_start_s": round(time.time() - t, 2)}
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)]).values():
            f.result()
        del admin  # no client of this process is left to complain when the broker stops
        t = time.time()
        _produce(broker.bootstrap, n, partitions)
        out["produce_s"] = round(time.time() - t, 2)
        pl = write_kafka_pipeline(root, broker.bootstrap, TOPIC, max_records=n)
        proto = pl.protocol()
        t = time.time()
        plan, _ = proto.plan()
        assert plan is not None, "nothing to plan in the bench topic"
        out["plan_s"] = round(time.time() - t, 2)
        attempt = launch.new_attempt_id(1)
        t = time.time()
        r = subprocess.run(launch.spark_submit_argv(pl.cfg, plan.batch_id, attempt, master=master), env=base_env(),
                           capture_output=True, text=True)
        out["stage_s"] = round(time.time() - t, 2)
        out["stage_steps"] = [m.group(1) for m in map(STEP.search, r.stdout.splitlines()) if m]  # "+seconds: step"
        if r.returncode != 0:
            raise RuntimeError(f"Kafka stage job failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
        t = time.time()
        prepared = proto.verify(plan.batch_id, attempt)
        out["verify_s"] = round(time.time() - t, 2)
        t = time.time()
        proto.commit(plan.batch_id)
        out["commit_s"] = round(time.time() - t, 2)
        out["rows_published"] = prepared.rows_published
        out["files"] = prepared.files
        out["stage_job_internal_s"] = prepared.stage_seconds
        out.update(consume_floor(broker.bootstrap, partitions))
        out["stage_over_consume_floor"] = round(out["stage_s"] / out["consume_floor_s"], 3)
        out.update(read_phase([m.groups() for m in map(READ.search, (r.stdout + r.stderr).splitlines()) if m],
                              out["consume_partition_s"]))
    finally:
        broker.stop(kill=True)
        shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="?", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.records, args.partitions, args.master)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
