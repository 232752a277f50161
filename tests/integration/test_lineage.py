"""Each batch's lineage as OpenLineage events: a real `airflow dags test` run with the OpenLineage
provider's own FileTransport (configured through Airflow's config, as a deployment does), the events
read back from its file, the versions compared with delta-rs."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from support.harness import orders

pytestmark = pytest.mark.integration


def _events(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _by_name(datasets: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["namespace"], d["name"]): d for d in datasets}


def test_the_commit_task_reports_each_batch_s_inputs_and_tables_to_openlineage(pipeline, airflow, tmp_path):
    p = pipeline
    p.land("day1/a.jsonl", orders("a", 20), bad=["not json"])
    p.land("day1/b.jsonl", orders("b", 10))
    events_file = tmp_path / "ol" / "events.jsonl"
    events_file.parent.mkdir()
    env = {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events_file),
                                                         "append": True}),
           "AIRFLOW__OPENLINEAGE__DISABLED": "False", "AIRFLOW__OPENLINEAGE__NAMESPACE": "eobatch-tests"}
    r = airflow(p, extra_env=env)
    assert r.rc == 0 and r.state == "success", r.log[-6000:]
    events = _events(events_file)

    done = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"{p.name}.commit"]
    assert len(done) == 1, [(e["eventType"], e["job"]["name"]) for e in events]
    commit = done[0]
    # input: the landing folder (one dataset, not one per file), the batch's files in its facet
    inputs = _by_name(commit["inputs"])
    assert list(inputs) == [("file", str(p.landing))], inputs
    landing = inputs[("file", str(p.landing))]
    files = landing["inputFacets"]["eobatch_range"]["batches"]["1"]
    assert files["kind"] == "files" and files["file_count"] == 2
    assert sorted(files["files"]) == sorted(str(p.landing / "day1" / n) for n in ("a.jsonl", "b.jsonl"))
    assert landing["inputFacets"]["inputStatistics"]["rowCount"] == 31
    assert landing["inputFacets"]["inputStatistics"]["fileCount"] == 2

    # outputs: the sink and the quarantine, each at the Delta version this batch committed (delta-rs's)
    outputs = _by_name(commit["outputs"])
    assert set(outputs) == {("file", str(p.sink)), ("file", str(p.quarantine))}, outputs
    for table, rows in ((p.sink, 30), (p.quarantine, 1)):
        out = outputs[("file", str(table))]
        version = DeltaTable(str(table)).version()
        assert out["facets"]["version"]["datasetVersion"] == str(version)
        assert out["facets"]["storage"]["storageLayer"] == "delta"
        assert out["outputFacets"]["eobatch_commit"]["batches"]["1"]["delta_version"] == version
        assert out["outputFacets"]["outputStatistics"]["rowCount"] == rows
        newest = DeltaTable(str(table)).history(1)[0]  # the version named is the commit carrying batch 1
        assert (newest["version"], newest["eo.pipeline"], str(newest["eo.batchId"])) == (version, p.name, "1")

    # the run facet: which batch, which attempt, its counts
    batch = commit["run"]["facets"]["eobatch_batch"]
    assert batch["pipeline"] == p.name and batch["batch_ids"] == [1]
    b1 = batch["batches"][0]
    assert b1["batch_id"] == 1 and b1["attempt"] and b1["committed_by_this_task"] is True
    assert (b1["rows_in"], b1["rows_published"], b1["rows_quarantined"]) == (31, 30, 1)
    assert b1["delta_versions"] == {"sink": DeltaTable(str(p.sink)).version(),
                                    "quarantine": DeltaTable(str(p.quarantine)).version()}

    # the plan task names the same input (what the batch will read), no output
    planned = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"{p.name}.plan"]
    assert len(planned) == 1
    assert list(_by_name(planned[0]["inputs"])) == [("file", str(p.landing))] and planned[0]["outputs"] == []
    assert planned[0]["run"]["facets"]["eobatch_batch"]["batch_ids"] == [1]
