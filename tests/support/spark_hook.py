"""The Spark provider's hook in unit tests: its module, the masters whose credentials may travel as
spark-submit's environment, and throw-away secret values (tests/unit/conftest.py: ``spark_conn``)."""

from __future__ import annotations

import uuid

HOOK_MODULE = "airflow.providers.apache.spark.hooks.spark_submit"


MASTERS = [
    ("local[*]", True),
    ("spark://127.0.0.1:7077", True),
    ("spark://yarn-gw.example:7077", False),  # a standalone master whose name contains "yarn"
    ("yarn", False),
    ("k8s://https://k8s.example:6443", False),
]


def fake_secret(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex}"
