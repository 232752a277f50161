"""The same exactly-once batch on local disk + Spark local[*] and on S3 + a standalone cluster,
timed per phase, side by side.

    .venv/bin/python tests/bench/s3_cluster_batch.py [records] [files] [repeats]   (20000 4 1)

Starts its own S3 server (S3Proxy) and a Spark standalone cluster (master + 2 workers, 1 core
each) in a temporary folder; the same landing files (same bytes) go to a local folder and to
S3. Prints JSON: per setup, the wall seconds of plan, stage (the whole spark-submit), verify
and commit, plus the stage job's own seconds (the ledger's stage_s, Spark session included).
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests"))

from eobatch.job import launch  # noqa: E402
from eobatch.pipelines.loader import load_pipeline  # noqa: E402
from eobatch.protocol import Protocol  # noqa: E402
from support.harness import base_env, orders  # noqa: E402
from support.services import S3Server, SparkCluster  # noqa: E402


def pipeline_yaml(folder: Path, name: str, landing: str, lake: str, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        source: {{kind: files, path: {landing}, max_records_per_batch: {n}}}
        schema: "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"
        sink: {{table: {lake}/{name}}}
        quarantine: {{table: {lake}/{name}_bad}}
        """))
    return path


def one_batch(yaml_path: Path, master: str, env: dict) -> dict:
    cfg = load_pipeline(str(yaml_path))
    proto = Protocol(cfg)
    out = {}
    t = time.time()
    plan, _ = proto.plan()
    out["plan_s"] = round(time.time() - t, 2)
    if plan is None:
        raise RuntimeError(f"{yaml_path}: plan() found nothing to read in the landing zone")
    attempt = launch.new_attempt_id(1)
    t = time.time()
    r = subprocess.run(launch.spark_submit_argv(cfg, plan.batch_id, attempt, master=master), env=base_env(env),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    out["stage_s"] = round(time.time() - t, 2)
    t = time.time()
    prepared = proto.verify(plan.batch_id, attempt)
    out["verify_s"] = round(time.time() - t, 2)
    t = time.time()
    proto.commit(plan.batch_id)
    out["commit_s"] = round(time.time() - t, 2)
    out.update(stage_job_s=prepared.stage_seconds, rows_published=prepared.rows_published, files=prepared.files)
    return out


def main(n: int, nfiles: int, repeats: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="eobatch-bench-s3-"))
    s3 = S3Server(str(root / "s3")).start()
    s3.create_bucket("bench")
    os.environ.update(s3.env())
    t = time.time()
    cluster = SparkCluster(str(root / "spark")).start()
    local_runs: list[dict] = []
    s3_runs: list[dict] = []
    s3_jars_on_nodes_runs: list[dict] = []
    res = {"records": n, "files": nfiles, "s3_server_start_s": round(s3.start_seconds, 2),
           "cluster_start_s": round(time.time() - t, 2), "local": local_runs, "s3_cluster": s3_runs,
           "s3_cluster_jars_on_nodes": s3_jars_on_nodes_runs}
    try:
        per = n // nfiles
        contents = [("\n".join(json.dumps(r) for r in orders(f"f{i}", per)) + "\n").encode() for i in range(nfiles)]
        for _rep in range(repeats):
            tag = uuid.uuid4().hex[:6]
            landing = root / f"landing-{tag}"
            landing.mkdir()
            for i, data in enumerate(contents):
                (landing / f"f{i}.jsonl").write_bytes(data)
                s3.client().put_object(Bucket="bench", Key=f"{tag}/landing/f{i}.jsonl", Body=data)
            local = pipeline_yaml(root / f"p-local-{tag}", "bench", str(landing), str(root / f"lake-{tag}"), n)
            remote = pipeline_yaml(root / f"p-s3-{tag}", "bench", f"s3a://bench/{tag}/landing",
                                   f"s3a://bench/{tag}/lake", n)
            local_runs.append(one_batch(local, "local[*]", {}))
            s3_runs.append(one_batch(remote, cluster.master_url, {}))
            # same again with the jars taken from the nodes' disk (EOBATCH_JARS_ON_NODES=1)
            for i, data in enumerate(contents):
                s3.client().put_object(Bucket="bench", Key=f"{tag}/landing2/f{i}.jsonl", Body=data)
            remote2 = pipeline_yaml(root / f"p-s3b-{tag}", "bench", f"s3a://bench/{tag}/landing2",
                                    f"s3a://bench/{tag}/lake2", n)
            os.environ["EOBATCH_JARS_ON_NODES"] = "1"
            try:
                s3_jars_on_nodes_runs.append(one_batch(remote2, cluster.master_url, {}))
            finally:
                os.environ.pop("EOBATCH_JARS_ON_NODES")
    finally:
        cluster.stop()
        s3.stop(kill=True)
    return res


if __name__ == "__main__":
    a = [int(x) for x in sys.argv[1:]]
    print(json.dumps(main(*(a + [20000, 4, 1][len(a):])), indent=1))
