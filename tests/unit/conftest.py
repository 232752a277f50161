"""Fixtures of the fast unit tests (no Spark, no Airflow, no network)."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest
import yaml

from support.s3env import ENV as S3_ENV
from support.spark_hook import HOOK_MODULE


def base_pipeline(root: Path) -> dict:
    """A valid pipeline definition whose folders all live under ``root``."""
    return {
        "name": "orders",
        "description": "unit test pipeline",
        "mode": "continuous",
        "schedule": None,
        "source": {"kind": "files", "path": str(root / "landing"), "max_records_per_batch": 100},
        "schema": "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP",
        "transform": "passthrough",
        "sink": {"table": str(root / "lake" / "orders"), "partition_by": []},
        "quarantine": {"table": str(root / "lake" / "orders_quarantine")},
    }


@pytest.fixture
def base_cfg(tmp_path) -> dict:
    return base_pipeline(tmp_path)


@pytest.fixture
def write_yaml(tmp_path):
    """write_yaml(doc_or_text, name="pipeline.yaml", directory=None) -> path (str)."""

    def _write(doc, name: str = "pipeline.yaml", directory: Path | None = None) -> str:
        d = directory or (tmp_path / "pipelines")
        d.mkdir(parents=True, exist_ok=True)
        p = d / name
        text = doc if isinstance(doc, str) else yaml.safe_dump(copy.deepcopy(doc), sort_keys=False)
        p.write_text(text, encoding="utf-8")
        return str(p)

    return _write


@pytest.fixture
def make_cfg(tmp_path, write_yaml):
    """A real PipelineConfig (via load_pipeline) whose landing folder is tmp_path/landing."""
    from eobatch.pipelines.loader import load_pipeline

    def _make(**overrides):
        doc = base_pipeline(tmp_path)
        doc.update(overrides)
        (tmp_path / "landing").mkdir(parents=True, exist_ok=True)
        return load_pipeline(write_yaml(doc))

    return _make


@pytest.fixture
def by_prefix(make_cfg):
    """An hourly interval-mode pipeline whose intervals are folders dt=<day>/hour=<hh>, settled at once."""
    return make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "max_records_per_batch": 100,
        "interval_prefix": "dt={ds}/hour={hh}", "settle_seconds": 0})


@pytest.fixture
def small(monkeypatch):
    """Ledger checkpoints every 2 batches, index chunks of about 2 entries: every code path runs."""
    from eobatch.core import checkpoint as ckpt

    monkeypatch.setattr(ckpt, "INTERVAL", 2)
    monkeypatch.setattr(ckpt, "CHUNK", 2)
    monkeypatch.setattr(ckpt, "GC_MIN_AGE_S", 0.0)


@pytest.fixture
def s3env(monkeypatch):
    """The made-up S3 settings of ``support.s3env`` in the environment, and no other S3 variable."""
    from eobatch.storage import s3conf

    for k in (*s3conf.ENV_KEYS, "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", s3conf.BUCKETS_ENV):
        monkeypatch.delenv(k, raising=False)
    for k, v in S3_ENV.items():
        monkeypatch.setenv(k, v)
    return S3_ENV


@pytest.fixture
def spark_conn(monkeypatch):
    """spark_conn(host) -> conn_id: a spark connection given via AIRFLOW_CONN_<ID> (JSON)."""
    import importlib

    hook_module = importlib.import_module(HOOK_MODULE)

    def _conn(host: str | None) -> str:
        conn_id = f"eo_spark_{uuid.uuid4().hex[:8]}"
        if host is not None:
            monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "spark", "host": host}))
        if host and "k8s" in host and getattr(hook_module, "kube_client", None) is None:
            # the hook refuses a k8s master without the cncf.kubernetes provider; nothing here talks to k8s
            monkeypatch.setattr(hook_module, "kube_client", object(), raising=False)
        return conn_id

    return _conn
