"""spark_jobs/stage_batch.py without Spark: what the job decides before its session starts, the S3
settings it hands its executors (``executor_env``), the transform it loads (``load_transform``) and
its command line. ``run`` itself (read, classify, transform, stage, summary) is the job: the
integration tests run it through spark-submit."""

from __future__ import annotations

import base64
import json
import sys
import types

import pytest

from eobatch.core.formats import BatchPlan
from spark_jobs import stage_batch as job
from support.s3env import ENV as S3_ENV


def _plan(kind: str, rng: dict) -> BatchPlan:
    return BatchPlan(pipeline="orders", batch_id=1, source_kind=kind, range=rng, rows_in=1, config_fingerprint="f",
                     planned_at="t")


def _files(*paths: str) -> dict:
    return {"files": [{"path": p, "size": 1, "mtime_ms": 0} for p in paths]}


KAFKA = {"topic": "orders", "partitions": {"0": [0, 5]}}
ENVS = [
    # sink table, quarantine table, source kind, range, executors get the S3 settings, why
    ("/lake/o", "/lake/q", "files", _files("/landing/a.jsonl"), False, "all local: nothing to hand on"),
    ("s3a://lake/o", "/lake/q", "files", _files("/landing/a.jsonl"), True, "the sink on S3"),
    ("/lake/o", "s3://lake/q", "files", _files("/landing/a.jsonl"), True, "the quarantine on S3"),
    ("/lake/o", "/lake/q", "files", _files("/landing/a.jsonl", "s3a://landing/b.jsonl"), True,
     "one planned landing file on S3"),
    ("/lake/o", "/lake/q", "parquet", _files("s3a://landing/p.parquet"), True, "a planned Parquet file on S3"),
    ("/lake/o", "/lake/q", "kafka", KAFKA, False, "a Kafka range reads no storage"),
    ("s3a://lake/o", "s3a://lake/q", "kafka", KAFKA, True, "Kafka into tables on S3"),
]


@pytest.mark.parametrize("sink, quarantine, kind, rng, given, why", ENVS, ids=[r[-1] for r in ENVS])
def test_executor_env(monkeypatch, sink, quarantine, kind, rng, given, why):
    for k in ("S3_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    for k, v in S3_ENV.items():
        monkeypatch.setenv(k, v)
    got = job.executor_env({"sink_table": sink, "quarantine_table": quarantine}, _plan(kind, rng))
    assert got == (S3_ENV if given else {}), why


def test_the_transforms_are_loaded_by_name_and_say_whether_they_keep_rows():
    """``ROW_PRESERVING`` is what verify checks published rows against (rows published == valid)."""
    assert job.load_transform({"transform": "passthrough"}).ROW_PRESERVING is True
    assert job.load_transform({"transform": "color_counts"}).ROW_PRESERVING is False
    assert job.load_transform({"transform": "running_totals",
                               "transform_module": "spark_jobs.transforms.running_totals"}).ROW_PRESERVING is False
    with pytest.raises(ModuleNotFoundError):
        job.load_transform({"transform": "no_such_transform"})


def test_a_transform_module_without_transform_stops_the_job_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "spark_jobs.transforms.empty", types.ModuleType("spark_jobs.transforms.empty"))
    with pytest.raises(SystemExit, match=r"the transform empty \(.*\) defines no transform\(df, ctx\)"):
        job.load_transform({"transform": "empty"})


def test_the_job_imports_a_transform_only_from_the_two_transform_packages():
    """The spec names the module (a pipeline folder's own transform is ``pipeline_transforms.<name>``
    in the code zip): any other module is refused before it is imported."""
    for module in ("os", "eobatch.cli", "pipeline_transforms_x.t", "spark_jobs.stage_write"):
        with pytest.raises(SystemExit, match="is not in spark_jobs.transforms or pipeline_transforms"):
            job.load_transform({"transform": "t", "transform_module": module})


def test_the_spec_travels_as_one_base64_argument():
    spec = {"pipeline": "orders", "batch_id": 3, "attempt": "t1-abc", "schema": "a STRING, b DOUBLE"}
    args = job._parse_args(["--spec", base64.b64encode(json.dumps(spec).encode()).decode()])
    assert json.loads(base64.b64decode(args.spec)) == spec
    with pytest.raises(SystemExit):
        job._parse_args([])
