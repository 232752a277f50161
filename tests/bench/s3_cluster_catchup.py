"""The catch-up case of `make bench` on S3 and a Spark standalone cluster: a backlog of landing
files on S3, one batch each, drained by this product (one DAG run carrying every batch: one Spark
application, each batch its own two-phase commit; and, for comparison, one batch per DAG run and
the whole backlog as one batch) and by Spark Structured Streaming with ``maxFilesPerTrigger=1``
on the same cluster, reading the same S3 files into a Delta table on S3 (checkpoint on S3 too).

    .venv/bin/python tests/bench/s3_cluster_catchup.py [--batches 10] [--records 500000]
        [--one-per-run 1] [--jars-on-nodes 1] [--out .bench/s3_cluster_catchup.json]

Starts its own S3 server (S3Proxy) and standalone cluster (a master and 2 workers of 1 core and
2 GiB each, what `make cluster-up` starts) in a temporary folder. ``--jars-on-nodes 1`` (the
default): every contender takes the jars from the nodes' disk (``local:`` URIs, as a cluster with
Delta and hadoop-aws installed does) instead of each executor fetching the ~690 MB AWS SDK bundle
from the driver at every application's start. Prints and writes the figures as JSON
(``measure_catchup`` of run_bench.py: seconds, seconds per batch, ``catchup_over_sss``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "tests"), str(HERE)]

from bench_data import backlog  # noqa: E402
from run_bench import airflow_home, measure_catchup  # noqa: E402

from support.services import S3Server, SparkCluster  # noqa: E402

BUCKET = "bench"


def upload(s3: S3Server, ds: dict, prefix: str) -> dict:
    """The data set's files put under ``s3a://bench/<prefix>/``: the same bytes, the same names."""
    client = s3.client()
    for name in ds["names"]:
        client.upload_file(str(Path(ds["path"]) / name), BUCKET, f"{prefix}/{name}")
    return {**ds, "path": f"s3a://{BUCKET}/{prefix}"}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--records", type=int, default=500_000, help="records per batch (one landing file each)")
    ap.add_argument("--one-per-run", type=int, default=1, help="also one batch per DAG run (the slowest)")
    ap.add_argument("--jars-on-nodes", type=int, default=1)
    ap.add_argument("--data-dir", default=str(REPO / ".bench" / "data"))
    ap.add_argument("--out", default=str(REPO / ".bench" / "s3_cluster_catchup.json"))
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="eobatch-bench-s3-catchup-"))
    ds = backlog(Path(args.data_dir), args.batches, args.records)
    s3 = S3Server(str(root / "s3")).start()
    s3.create_bucket(BUCKET)
    os.environ.update(s3.env())  # before the cluster: its workers (and so their executors) inherit them
    if args.jars_on_nodes:
        os.environ["EOBATCH_JARS_ON_NODES"] = "1"
    cluster = SparkCluster(str(root / "spark")).start()
    try:
        tag = uuid.uuid4().hex[:6]
        t = time.time()
        on_s3 = upload(s3, ds, f"{tag}/landing")
        uploaded = round(time.time() - t, 1)
        home = airflow_home(root / "work")
        res = measure_catchup(on_s3, cluster.master_url, None, root / "work", home, one_per_run=bool(args.one_per_run),
                              lake=f"s3a://{BUCKET}/{tag}/lake")
        res.update(master=cluster.master_url, workers=2, cores_per_worker=1, upload_seconds=uploaded,
                   jars_on_nodes=bool(args.jars_on_nodes))
    finally:
        cluster.stop()
        s3.stop(kill=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
