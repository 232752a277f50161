"""eobatch.protocol.verify: each task's manifest checked against storage (``verify_attempt``)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from eobatch.errors import EobatchError
from eobatch.protocol import Protocol
from support.checks import delta_log_commits
from support.protocol_runs import land_and_run
from support.pyarrow_stager import stage

# -- schema evolution: a column added mid-stream, and the changes a table cannot take ----------------
# (real delta-rs tables, the protocol's own verify and commit)

SCHEMA_BEFORE = "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"


def _land(cfg, name: str, records: list[dict]) -> None:
    (Path(cfg.source.path) / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def _stage_and_verify(proto: Protocol):
    plan, _ = proto.plan()
    assert plan is not None, "nothing to plan"
    return plan.batch_id, proto.verify(plan.batch_id, stage(proto, plan.batch_id))


def test_a_column_added_mid_stream_arrives_with_the_batch_that_writes_it(make_cfg):
    before = make_cfg()
    land_and_run(Protocol(before), range(3), "a.jsonl")
    after = make_cfg(schema=SCHEMA_BEFORE + ", coupon STRING")
    proto = Protocol(after)
    _land(after, "b.jsonl", [{"order_id": "n1", "amount": 1.0, "coupon": "SPRING"}, {"order_id": "n2"}])
    batch_id, prepared = _stage_and_verify(proto)
    proto.commit(batch_id)

    from deltalake import DeltaTable

    table = DeltaTable(after.sink_table)
    assert [f.name for f in pa.schema(table.schema().to_arrow())] == ["order_id", "customer", "amount", "ts", "coupon"]
    rows = {r["order_id"]: r["coupon"] for r in table.to_pyarrow_table().to_pylist()}
    assert rows == {"o0": None, "o1": None, "o2": None, "n1": "SPRING", "n2": None}
    commits = delta_log_commits(Path(after.sink_table))
    data = [c for c in commits if c["txns"]]
    assert [c["txns"][0]["version"] for c in data] == [1, 2]
    (added,) = [c for c in commits if c["version"] == data[-1]["version"] - 1]
    assert not added["txns"] and not added["adds"]  # the columns, just before the batch that writes them
    assert added["commitInfo"]["operation"] == "ADD COLUMN", added["commitInfo"]
    # a retried commit adds nothing twice and publishes nothing twice
    proto.commit(batch_id)
    assert len(delta_log_commits(Path(after.sink_table))) == len(commits)


@pytest.mark.parametrize("schema, evolution, words", [
    (SCHEMA_BEFORE + ", coupon STRING", "fail", "new column(s) coupon are not in the table and schema_evolution is 'fail'"),
    ("order_id STRING NOT NULL, customer STRING, amount STRING, ts TIMESTAMP", "add_columns",
     "column 'amount' is double in the table and string in this batch"),
    ("order_id STRING NOT NULL, customer STRING, ts TIMESTAMP", "add_columns",
     "the table's column(s) amount are not in this batch's schema"),
])
def test_a_schema_change_the_table_cannot_take_is_refused_before_prepared(make_cfg, schema, evolution, words):
    land_and_run(Protocol(make_cfg()), range(2), "a.jsonl")
    proto = Protocol(make_cfg(schema=schema, schema_evolution=evolution))
    _land(proto.cfg, "b.jsonl", [{"order_id": "n1", "amount": 1.0}])
    with pytest.raises(EobatchError) as e:
        _stage_and_verify(proto)
    assert words in str(e.value)
    assert proto.ledger.prepared(2) is None


# -- manifests: what each Spark task says it wrote, checked against storage before PREPARED -------------
# The stage job's tasks each write one manifest per participant (``formats.PartitionManifest``, at
# ``Layout.manifest``); the driver collects them into the stage summary. An attempt is staged here by
# the pyarrow stager (two partitions, files in the layout the job writes), then one thing is changed.


def _manifest_edit(proto: Protocol, batch_id: int, attempt: str, participant: str, pid: int, edit,
                   storage: bool = True, driver: bool = True) -> None:
    """``edit(manifest dict)`` on the manifest on storage and/or the driver's copy in the stage summary."""
    path = Path(proto.layout.manifest(batch_id, attempt, participant, pid))
    if storage:
        m = json.loads(path.read_text())
        edit(m)
        path.write_text(json.dumps(m))
    if driver:
        _summary_edit(proto, batch_id, attempt, lambda s: edit(s["manifests"][participant][pid]))


def _summary_edit(proto: Protocol, batch_id: int, attempt: str, edit) -> None:
    spath = Path(proto.layout.stage_summary(batch_id, attempt))
    summary = json.loads(spath.read_text())
    edit(summary)
    spath.write_text(json.dumps(summary))


def _file(m: dict, i: int = 0) -> dict:
    return m["files"][i]


def _staged_path(proto: Protocol, participant: str, rel: str) -> Path:
    return Path(proto.layout.table(participant)) / rel


def _other_attempt(m):
    m["attempt"] = "t9-other"


def _outside(m):
    _file(m)["path"] = "eo_batches/elsewhere/" + _file(m)["path"].rsplit("/", 1)[1]


def _dotdot(m):
    _file(m)["path"] = _file(m)["path"].rsplit("/", 1)[0] + "/../" + _file(m)["path"].rsplit("/", 1)[1]


def _one_row_more(m):
    _file(m)["rows"] += 1
    m["rows"] += 1


MANIFESTS = [
    # what changes after the stage (proto, batch, attempt -> None), the problem verify names (regex), why
    (lambda p, b, a: None, None, "as the tasks wrote it: PREPARED"),
    (lambda p, b, a: Path(p.layout.manifest(b, a, "sink", 1)).unlink(),
     r"sink: manifest of Spark partition 1 of 2 is missing \(.*/manifests/sink/part-00001\.json\)",
     "a task's manifest never written (the task died after its files)"),
    (lambda p, b, a: _manifest_edit(p, b, a, "sink", 0, _other_attempt),
     r"sink: manifest 0 belongs to batch 1 attempt t9-other", "a manifest of another attempt in this one's folder"),
    (lambda p, b, a: _manifest_edit(p, b, a, "quarantine", 0, lambda m: m.update(rows=m["rows"] + 1), driver=False),
     r"quarantine: manifest 0 on storage differs from what the driver collected",
     "a manifest's count rewritten after the driver collected it (a zombie task attempt)"),
    (lambda p, b, a: _manifest_edit(p, b, a, "sink", 1, lambda m: _file(m).update(size=1), driver=False),
     r"sink: manifest 1 on storage differs from what the driver collected",
     "a manifest's files rewritten after the driver collected it"),
    (lambda p, b, a: _manifest_edit(p, b, a, "sink", 0, _outside),
     r"sink: manifest 0 lists 'eo_batches/elsewhere/part-.*' outside its attempt folder", "a file of another folder"),
    (lambda p, b, a: _manifest_edit(p, b, a, "sink", 0, _dotdot), r"sink: manifest 0 lists '.*/\.\./part-.*' outside",
     "a path that climbs out of the attempt folder"),
    (lambda p, b, a: _manifest_edit(p, b, a, "sink", 1, lambda m: m["files"].append(dict(
        json.loads(Path(p.layout.manifest(b, a, "sink", 0)).read_text())["files"][0]))),
     r"sink: manifest 1 lists '.*' outside its attempt folder or twice", "one file listed by two manifests"),
    (lambda p, b, a: _staged_path(p, "sink", _file(json.loads(Path(p.layout.manifest(b, a, "sink", 0)).read_text()))
                                  ["path"]).unlink(),
     r"sink: eo_batches/.*\.parquet is listed in manifest 0 but missing", "a listed file removed"),
    (lambda p, b, a: _staged_path(p, "sink", _file(json.loads(Path(p.layout.manifest(b, a, "sink", 0)).read_text()))
                                  ["path"]).open("ab").write(b"x"),
     r"sink: eo_batches/.*\.parquet has \d+ bytes, manifest 0 says \d+", "a listed file changed size"),
    (lambda p, b, a: _manifest_edit(p, b, a, "sink", 0, _one_row_more),
     r"sink: eo_batches/.*\.parquet holds 2 rows, manifest 0 says 3", "a manifest counting rows its file does not hold"),
    (lambda p, b, a: _manifest_edit(p, b, a, "sink", 0, lambda m: m.update(rows=m["rows"] + 1)),
     r"sink: manifest 0 says 3 rows, its files hold 2", "a manifest's total that its files do not add up to"),
    (lambda p, b, a: _manifest_edit(p, b, a, "sink", 0, lambda m: _file(m).update(partition_values={"customer": "c"})),
     r"sink: eo_batches/.*\.parquet partition values \{'customer': 'c'\} do not match \[\]",
     "partition values of columns the table is not partitioned by"),
    (lambda p, b, a: _summary_edit(p, b, a, lambda s: s["partitions"].update(sink=1)),
     r"sink files hold 2 rows, the row-preserving transform had 4 valid rows",
     "a summary that counts one task of two: the counts miss the other's rows"),
]


@pytest.mark.parametrize("change, problem, why", MANIFESTS, ids=[r[-1] for r in MANIFESTS])
def test_every_manifest_is_checked_against_storage_before_prepared(make_cfg, change, problem, why):
    from eobatch.protocol.verify import VerifyFailed

    cfg = make_cfg()
    lines = [{"order_id": f"o{i}", "amount": float(i)} for i in range(4)] + [{"amount": 1.0}, {"amount": 2.0}]
    _land(cfg, "a.jsonl", lines)  # 4 valid, 2 to quarantine: two rows of each per partition, one file each
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    assert plan is not None
    attempt = stage(proto, plan.batch_id, partitions=2)
    change(proto, plan.batch_id, attempt)
    if problem is None:
        prepared = proto.verify(plan.batch_id, attempt, dry_run=True)
        assert (prepared.rows_published, prepared.rows_quarantined, prepared.files) == (4, 2, 4), why
        assert sorted(f.path for f in prepared.adds["sink"]) == sorted(
            f["path"] for pid in (0, 1) for f in proto.ledger.manifest(plan.batch_id, attempt, "sink", pid).files)
        return
    with pytest.raises(VerifyFailed, match=problem):
        proto.verify(plan.batch_id, attempt, dry_run=True)
    assert proto.ledger.prepared(plan.batch_id) is None, why
