"""eobatch.airflow.provider: the provider info Airflow validates, and the DAG file of two lines."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import yaml

import eobatch
from eobatch.airflow import pipeline_dags, pipelines_dir
from eobatch.airflow.provider import get_provider_info


def test_the_provider_info_is_what_airflows_schema_accepts_and_names_the_package():
    schema = json.loads(resources.files("airflow").joinpath("provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "eobatch" and info["versions"] == [eobatch.__version__]
    assert info["plugins"] == [{"name": "eobatch_ledger", "plugin-class": "eobatch.ui.plugin.EobatchLedgerPlugin"}]


def test_pipeline_dags_builds_a_dag_per_file_and_turns_a_bad_file_into_an_import_error(tmp_path, monkeypatch):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "orders.yaml").write_text(yaml.safe_dump({
        "name": "orders", "source": {"kind": "files", "path": str(tmp_path / "landing")},
        "schema": "order_id STRING NOT NULL", "sink": {"table": str(tmp_path / "lake" / "orders")},
        "quarantine": {"table": str(tmp_path / "lake" / "orders_bad")}}))
    (folder / "broken.yaml").write_text("name: broken\nsource: {kind: nosuch}\n")
    namespace: dict = {}
    dags = pipeline_dags(namespace, str(folder))
    assert set(dags) == {"orders", "orders_maintenance"}
    assert namespace["dag_orders"] is dags["orders"]
    assert "broken.yaml" in namespace["dag_invalid_pipelines"].doc_md
    monkeypatch.delenv("PIPELINES_DIR", raising=False)
    monkeypatch.setenv("AIRFLOW__EOBATCH__PIPELINES_DIR", str(folder))
    assert pipelines_dir() == str(folder)  # the Airflow option, as the ledger page reads it
    monkeypatch.setenv("PIPELINES_DIR", str(tmp_path))
    assert pipelines_dir() == str(tmp_path)
