"""Each batch's lineage for OpenLineage (``eobatch.protocol.lineage``, ``eobatch.airflow.lineage``): the
datasets each source kind names, a committed run's inputs and tables from a real ledger and real
delta-rs tables (no Spark: the pyarrow stager), the provider's objects built from them, and the
operators without the provider installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

from deltalake import DeltaTable
from openlineage.client.serde import Serde

from eobatch.airflow import lineage as ol
from eobatch.protocol import Protocol, lineage
from eobatch.sources import kind_for
from eobatch.storage.lineage import MAX_FILES_LISTED, dataset_at
from support.harness import REPO
from support.protocol_runs import land_and_run, run_next
from support.pyarrow_stager import stage


def test_locations_are_named_as_openlineage_names_files_and_s3_objects(tmp_path):
    assert dataset_at(str(tmp_path / "lake" / "orders") + "/") == ("file", str(tmp_path / "lake" / "orders"))
    assert dataset_at("s3a://bucket/lake/orders/") == ("s3://bucket", "lake/orders")
    assert dataset_at("s3://bucket") == ("s3://bucket", "")


def test_each_source_kind_names_what_a_range_read_bounded_whatever_its_size(tmp_path):
    files = [{"path": f"{tmp_path}/landing/f{i:03d}.jsonl", "size": 10, "mtime_ms": 1, "records": 2} for i in range(150)]
    files.append({"path": f"{tmp_path}/landing/empty.jsonl", "size": 0, "mtime_ms": 1, "records": 0, "skipped": "empty"})
    (landing,) = kind_for("files").lineage_inputs(SimpleNamespace(path=str(tmp_path / "landing")), {"files": files})
    assert (landing.namespace, landing.name) == ("file", str(tmp_path / "landing"))  # the folder, not 150 datasets
    assert (landing.rows, landing.bytes, landing.files) == (300, 1500, 150)
    assert landing.detail["file_count"] == 150 and len(landing.detail["files"]) == MAX_FILES_LISTED
    assert landing.detail["truncated"] is True and landing.detail["skipped"] == [f"{tmp_path}/landing/empty.jsonl"]

    (topic,) = kind_for("kafka").lineage_inputs(SimpleNamespace(conn_id=None, bootstrap_servers="b1:9092,b2:9092"),
                                                {"topic": "orders", "partitions": {"0": [5, 9], "1": [0, 3]}})
    assert (topic.namespace, topic.name) == ("kafka://b1:9092", "orders")
    assert topic.detail["partitions"] == {"0": [5, 9], "1": [0, 3]}

    (upstream,) = kind_for("delta").lineage_inputs(None, {
        "table": "s3a://lake/up", "versions": [3, 7], "upstream": {"up": [4, 5]},
        "files": [{"path": "s3a://lake/up/a.parquet", "size": 5, "mtime_ms": 1, "records": 4, "version": 3}]})
    assert (upstream.namespace, upstream.name, upstream.version) == ("s3://lake", "up", "6")  # the newest version read
    assert upstream.detail["versions"] == [3, 7] and upstream.detail["upstream"] == {"up": [4, 5]}


def test_a_run_s_committed_batches_name_their_landing_folder_once_and_each_table_at_its_version(make_cfg):
    proto = Protocol(make_cfg())
    b1, _ = land_and_run(proto, range(0, 5), "a.jsonl")
    with open(f"{proto.cfg.source.path}/b.jsonl", "w") as f:
        f.write('{"order_id": "o9", "amount": 1.0}\nnot json\n')
    plan, _ = proto.plan()
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    proto.commit(plan.batch_id)

    run = lineage.committed(proto, [b1, plan.batch_id], attempts={}, by_this_task={plan.batch_id})
    (landing,) = run.inputs
    assert (landing.namespace, landing.name) == dataset_at(proto.cfg.source.path)
    assert sorted(landing.detail["batches"]) == ["1", "2"] and landing.rows == 7
    tables = {ds.name: ds for ds in run.outputs}
    sink, bad = tables[proto.cfg.sink_table], tables[proto.cfg.quarantine_table]
    assert sink.version == str(DeltaTable(proto.cfg.sink_table).version())
    assert bad.version == str(DeltaTable(proto.cfg.quarantine_table).version())
    assert sink.detail["batches"]["2"]["delta_version"] == DeltaTable(proto.cfg.sink_table).version()
    assert (sink.rows, bad.rows) == (6, 1)  # both batches' published rows, the one quarantined line
    assert [(b["batch_id"], b["committed_by_this_task"], b["rows_quarantined"]) for b in run.batches] == [
        (1, False, 0), (2, True, 1)]
    assert all(b["attempt"] for b in run.batches)  # from the PREPARED records when the task did not name it

    got = ol.operator_lineage(run)  # the provider's objects, serialised as its transports do
    inputs = [json.loads(Serde.to_json(d)) for d in got.inputs]
    outputs = {d.name: json.loads(Serde.to_json(d)) for d in got.outputs}
    assert inputs[0]["inputFacets"]["eobatch_range"]["batches"]["2"]["files"] == [f"{proto.cfg.source.path}/b.jsonl"]
    assert outputs[proto.cfg.sink_table]["facets"]["version"]["datasetVersion"] == sink.version
    assert outputs[proto.cfg.sink_table]["facets"]["storage"]["storageLayer"] == "delta"
    run_facet = json.loads(Serde.to_json(got.run_facets[ol.RUN_FACET]))
    assert run_facet["batch_ids"] == [1, 2] and run_facet["_schemaURL"].endswith("RunFacet")


# a process where OpenLineage is not installed: its modules not found, its distributions not listed
# (Airflow's provider discovery reads the installed distributions' entry points)
NOT_INSTALLED = """
import importlib.machinery, re, sys
import importlib_metadata  # its finder of distributions joins sys.meta_path: wrapped below with the others
BLOCKED = ("openlineage", "airflow.providers.openlineage")

class NotInstalled:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            return None
        find = getattr(self.finder, "find_spec", None)
        return find(name, path, target) if find else None

    def find_distributions(self, *args, **kwargs):
        find = getattr(self.finder, "find_distributions", None)
        for d in find(*args, **kwargs) if find else ():
            if "openlineage" not in re.sub(r"[-_.]+", "-", (d.metadata["Name"] or "").lower()):
                yield d

    def __getattr__(self, name):
        return getattr(self.finder, name)

sys.meta_path[:] = [NotInstalled(f) for f in sys.meta_path]
"""


def test_a_merge_sink_s_own_tables_are_outputs_at_the_version_holding_the_batch(make_cfg, tmp_path):
    cfg = make_cfg(schema="order_id STRING NOT NULL, seq BIGINT NOT NULL, op STRING",
                   sink={"table": str(tmp_path / "lake" / "orders"), "mode": "merge",
                         "merge": {"keys": ["order_id"], "sequence_by": "seq", "delete_when": "op = 'd'"}})
    proto = Protocol(cfg)
    assert "tombstones" in proto.names
    (tmp_path / "landing" / "a.jsonl").write_text('{"order_id": "k1", "seq": 1, "op": "u"}\n'
                                                  '{"order_id": "k2", "seq": 2, "op": "d"}\n')
    batch = run_next(proto)
    run = lineage.committed(proto, [batch])
    versions = proto.ledger.committed(batch).delta_versions
    got = {ds.name: (ds.version, ds.detail["batches"][str(batch)]["participant"]) for ds in run.outputs}
    assert got == {proto.layout.table(p): (str(versions[p]), p) for p in proto.names}
    for p in proto.names:  # the version named is the table's commit of the batch (its log says so)
        assert proto.participants[p].find_batch_commit(proto.app_id, batch)[0] == versions[p]


def test_the_operators_import_and_report_nothing_without_the_openlineage_provider():
    code = NOT_INSTALLED + (
        "from eobatch.airflow import dag_factory, lineage, operators\n"
        "from eobatch.protocol.lineage import RunLineage\n"
        "try:\n"
        "    import airflow.providers.openlineage\n"
        "    raise AssertionError('the provider is importable')\n"
        "except ImportError:\n"
        "    pass\n"
        "assert lineage.wanted() is False\n"
        "task = operators.CommitOperator(task_id='commit', pipeline_file='/nowhere.yaml')\n"
        "task._lineage = RunLineage('orders', batches=[{'batch_id': 1}])\n"
        "assert task.get_openlineage_facets_on_complete(None) is None\n"
        "assert lineage.collect('commit', lambda: 1 / 0) is None\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO / "plugins")})
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_the_wheel_s_openlineage_extra_admits_the_locked_provider():
    import tomllib

    from packaging.requirements import Requirement

    (extra,) = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["openlineage"]
    req = Requirement(extra)
    pins = [line.split("==")[1].split()[0] for line in (REPO / "requirements.txt").read_text().splitlines()
            if line.startswith(f"{req.name}==")]
    assert pins and req.specifier.contains(pins[0]), (extra, pins)
