"""Fixtures of the hostile-author tests: a pipelines folder of good pipelines beside which a test puts
one bad file, and Airflow's own DagBag over a DAG folder that builds them (the real parse path)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

GOOD = ("orders", "refunds")


def good_pipeline(root: Path, name: str, table_root: str | None = None) -> dict:
    """A valid pipeline ``name`` whose folders live under ``root`` (its tables under ``table_root``)."""
    lake = table_root or str(root / "lake")
    return {"name": name, "source": {"kind": "files", "path": str(root / "landing" / name)},
            "schema": "order_id STRING NOT NULL, amount DOUBLE",
            "sink": {"table": f"{lake}/{name}"}, "quarantine": {"table": f"{lake}/{name}_bad"}}


@pytest.fixture
def folder(tmp_path) -> Path:
    """A pipelines folder holding the good pipelines ``GOOD`` (a_orders.yaml, z_refunds.yaml: a bad file
    sorts between them)."""
    d = tmp_path / "pipelines"
    d.mkdir()
    for prefix, name in zip(("a", "z"), GOOD):
        (d / f"{prefix}_{name}.yaml").write_text(yaml.safe_dump(good_pipeline(tmp_path, name)), encoding="utf-8")
    return d


@pytest.fixture
def dagbag(tmp_path):
    """dagbag(folder) -> Airflow's DagBag of a DAG folder whose one file builds the pipelines of ``folder``
    (the two lines of an installed eobatch)."""
    def collect(pipelines: Path):
        from airflow.dag_processing.dagbag import DagBag

        dags = tmp_path / "dags"
        dags.mkdir(exist_ok=True)
        (dags / "eobatch_pipelines.py").write_text(
            "from eobatch.airflow import pipeline_dags\n"
            f"pipeline_dags(globals(), {str(pipelines)!r})\n")
        return DagBag(dag_folder=str(dags), safe_mode=False)

    return collect
