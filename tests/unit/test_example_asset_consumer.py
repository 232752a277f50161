"""dags/example_asset_consumer.py: one consumer DAG per pipeline, scheduled on its sink table's
asset, reading exactly the Delta version an event names (the rows that version's commit added)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture
def consumer(monkeypatch):
    monkeypatch.syspath_prepend(str(DAGS))
    sys.modules.pop("example_asset_consumer", None)
    import example_asset_consumer

    yield example_asset_consumer
    sys.modules.pop("example_asset_consumer", None)


def test_one_consumer_per_pipeline_that_opted_in_scheduled_on_its_sink_asset(consumer, make_cfg, monkeypatch):
    from eobatch.airflow.assets import asset_uri

    cfg = make_cfg()
    folder = str(Path(cfg.file).parent)
    monkeypatch.delenv(consumer.OPT_IN, raising=False)
    assert consumer.build_all(folder) == {}  # opt-in: a production Airflow gets no example DAGs
    assert consumer.build_all(folder, opt_in="other, colors") == {}
    assert list(consumer.build_all(folder, opt_in="*")) == ["orders_downstream_example"]
    monkeypatch.setenv(consumer.OPT_IN, "colors,orders")
    dags = consumer.build_all(folder)
    assert list(dags) == ["orders_downstream_example"]
    dag = dags["orders_downstream_example"]
    assert [(a.name, a.uri) for a in dag.timetable.asset_condition.objects] == [(asset_uri(cfg.sink_table),) * 2]


def test_reads_exactly_the_version_of_each_batch(consumer, make_cfg):
    from eobatch.protocol import Protocol
    from support.protocol_runs import land_and_run

    cfg = make_cfg()
    proto = Protocol(cfg)
    land_and_run(proto, range(0, 5), "a.jsonl")
    land_and_run(proto, range(5, 12), "b.jsonl")
    v1, v2 = (proto.ledger.committed(b).delta_versions["sink"] for b in (1, 2))
    first = consumer.summarize(cfg.sink_table, {"pipeline": "orders", "batch_id": 1, "delta_version": v1})
    second = consumer.summarize(cfg.sink_table, {"pipeline": "orders", "batch_id": 2, "delta_version": v2})
    assert (first["version_read"], first["new_rows"], first["table_rows"]) == (v1, 5, 5)
    assert (second["version_read"], second["new_rows"], second["table_rows"]) == (v2, 7, 12)
    _, rows = consumer.read_version(cfg.sink_table, v2)
    assert sorted(rows.column("order_id").to_pylist()) == sorted(f"o{i}" for i in range(5, 12))
