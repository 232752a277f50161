"""One exactly-once batch of N small records from a real Kafka broker, timed per phase.

    .venv/bin/python tests/bench/kafka_batch.py [N]      (default 1,000,000)

Starts its own broker in a temporary folder; prints JSON with broker start seconds and the
plan / stage / verify / commit seconds of the batch.
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests"))

from eobatch import launch  # noqa: E402
from support.harness import base_env, write_kafka_pipeline  # noqa: E402
from support.services import KafkaBroker  # noqa: E402


def main(n: int) -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    root = Path(tempfile.mkdtemp(prefix="eobatch-bench-"))
    t = time.time()
    broker = KafkaBroker(str(root / "kafka")).start()
    out = {"records": n, "broker_start_s": round(time.time() - t, 2)}
    try:
        a = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in a.create_topics([NewTopic("bench", num_partitions=3, replication_factor=1)]).values():
            f.result()
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                      "queue.buffering.max.messages": 2000000, "compression.type": "lz4"})
        t = time.time()
        for i in range(n):
            p.produce("bench", value=b'{"order_id":"o%d","customer":"c%d","amount":%d.5,"ts":"2026-01-01T00:00:00Z"}'
                      % (i, i % 97, i % 1000), partition=i % 3)
            if i % 100000 == 0:
                p.poll(0)
        p.flush(120)
        out["produce_s"] = round(time.time() - t, 2)
        pl = write_kafka_pipeline(root, broker.bootstrap, "bench", max_records=n)
        proto = pl.protocol()
        t = time.time()
        plan, _ = proto.plan()
        out["plan_s"] = round(time.time() - t, 2)
        attempt = launch.new_attempt_id(1)
        t = time.time()
        r = subprocess.run(launch.spark_submit_argv(pl.cfg, plan.batch_id, attempt), env=base_env(),
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        out["stage_s"] = round(time.time() - t, 2)
        t = time.time()
        prepared = proto.verify(plan.batch_id, attempt)
        out["verify_s"] = round(time.time() - t, 2)
        t = time.time()
        proto.commit(plan.batch_id)
        out["commit_s"] = round(time.time() - t, 2)
        out["rows_published"] = prepared.rows_published
        out["files"] = prepared.files
        out["stage_job_internal_s"] = prepared.stage_seconds
    finally:
        broker.stop(kill=True)
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)))
