"""formats (records, layout, fingerprints), ledger over LocalStorage, cli.render_table, faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eobatch import faults
from eobatch.cli import TABLE_COLS, render_table
from eobatch.formats import (
    BatchPlan,
    CommittedBatch,
    Layout,
    PartitionManifest,
    PreparedBatch,
    StagedFile,
    StageSummary,
    bid,
    commit_metadata,
    compact_offsets,
    fingerprint_of,
)
from eobatch.ledger import Ledger
from eobatch.storage import LocalStorage

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def _plan(batch_id=1, files=None, notes=None) -> BatchPlan:
    files = files if files is not None else [
        {"path": "/landing/a.jsonl", "size": 10, "mtime_ms": 1000, "records": 2},
        {"path": "/landing/b.jsonl", "size": 20, "mtime_ms": 2000, "records": 3},
    ]
    return BatchPlan(pipeline="orders", batch_id=batch_id, source_kind="files", range={"files": files},
                     rows_in=sum(f["records"] for f in files), config_fingerprint="0123456789abcdef",
                     planned_at="2024-01-01T00:00:00Z", plan_seconds=0.25, notes=list(notes or []))


def _prepared(batch_id=1) -> PreparedBatch:
    adds = {"sink": [{"path": "eo_batches/b0000000001/a1/part-0.parquet", "size": 123,
                      "partition_values": {}, "modification_time": 5, "stats": "{}"}],
            "quarantine": []}
    return PreparedBatch(pipeline="orders", batch_id=batch_id, attempt="a1", adds=adds,
                         arrow_schema={"sink": "QUJD", "quarantine": "REVG"}, partition_by={"sink": []},
                         fingerprint=fingerprint_of(adds), rows_in=5, rows_valid=4, rows_quarantined=1,
                         rows_published=4, bytes=123, files=1, prepared_at="2024-01-01T00:00:01Z",
                         verify_seconds=0.5, stage_seconds=12.0)


# -- records ---------------------------------------------------------------------------------


def test_batch_plan_roundtrip():
    plan = _plan(notes=["changed /landing/x.jsonl after ..."])
    data = plan.to_json()
    assert isinstance(data, bytes)
    d = json.loads(data)
    assert d["format"] == 1 and d["batch_id"] == 1 and d["range"]["files"][0]["path"] == "/landing/a.jsonl"
    assert BatchPlan.from_json(data) == plan
    assert BatchPlan.from_json(data.decode()) == plan


def test_prepared_batch_roundtrip():
    p = _prepared()
    assert PreparedBatch.from_json(p.to_json()) == p


@pytest.mark.parametrize("record", [
    CommittedBatch(pipeline="orders", batch_id=3, fingerprint="ab", delta_versions={"sink": 4, "quarantine": 2},
                   committed_at="t", commit_seconds=0.1, recovered=True),
    StagedFile(path="eo_batches/b1/a/x.parquet", size=1, rows=1, partition_values={"day": "2024-01-01"}),
    PartitionManifest(batch_id=1, attempt="a", participant="sink", partition=0, task_attempt=0, rows=1,
                      files=[{"path": "p", "size": 1, "rows": 1}]),
    StageSummary(batch_id=1, attempt="a", rows_in=2, rows_valid=1, rows_quarantined=1, row_preserving=True,
                 partitions={"sink": 1, "quarantine": 1}, manifests={"sink": [], "quarantine": []},
                 arrow_schema={}, partition_by={}, stage_seconds=1.0),
])
def test_other_records_roundtrip(record):
    assert type(record).from_json(record.to_json()) == record


def test_from_json_ignores_unknown_keys():
    d = json.loads(_plan().to_json())
    d["added_in_format_2"] = {"x": 1}
    d["another"] = None
    assert BatchPlan.from_json(json.dumps(d)) == _plan()
    d = json.loads(_prepared().to_json())
    d["zzz"] = 1
    assert PreparedBatch.from_json(json.dumps(d).encode()) == _prepared()


def test_from_json_of_older_record_uses_defaults():
    d = json.loads(_plan().to_json())
    for k in ("notes", "plan_seconds", "format"):
        d.pop(k)
    p = BatchPlan.from_json(json.dumps(d))
    assert p.notes == [] and p.plan_seconds == 0.0 and p.format == 1


def test_range_summary():
    assert _plan().range_summary() == "2 files [a.jsonl, b.jsonl]"
    many = [{"path": f"/l/f{i}.jsonl", "size": 1, "mtime_ms": i, "records": 1} for i in range(5)]
    assert _plan(files=many).range_summary() == "5 files [f0.jsonl, f1.jsonl, f2.jsonl, +2]"
    assert _plan(files=[]).range_summary() == "0 files"


def test_compact_offsets_and_commit_metadata():
    plan, prepared = _plan(), _prepared()
    assert compact_offsets(plan) == [["/landing/a.jsonl", 10, 1000], ["/landing/b.jsonl", 20, 2000]]
    md = commit_metadata(plan, prepared, "sink")
    assert md["eo.pipeline"] == "orders" and md["eo.batchId"] == "1" and md["eo.attempt"] == "a1"
    assert md["eo.participant"] == "sink" and md["eo.fingerprint"] == prepared.fingerprint
    assert json.loads(md["eo.offsets"]) == compact_offsets(plan)
    assert json.loads(md["eo.rows"]) == {"in": 5, "published": 4, "quarantined": 1}
    assert all(isinstance(v, str) for v in md.values())


# -- fingerprint_of ------------------------------------------------------------------------------


def test_fingerprint_of_is_order_independent():
    a = {"path": "eo_batches/b1/t/a.parquet", "size": 10, "stats": "x"}
    b = {"path": "eo_batches/b1/t/b.parquet", "size": 20}
    q = {"path": "eo_batches/b1/t/q.parquet", "size": 5}
    fp = fingerprint_of({"sink": [a, b], "quarantine": [q]})
    assert fingerprint_of({"quarantine": [q], "sink": [b, a]}) == fp
    assert len(fp) == 64
    # only participant, path and size count
    assert fingerprint_of({"sink": [dict(a, stats="other", modification_time=9), b], "quarantine": [q]}) == fp


def test_fingerprint_of_changes_with_size_path_or_participant():
    a = {"path": "x/a.parquet", "size": 10}
    fp = fingerprint_of({"sink": [a]})
    assert fingerprint_of({"sink": [dict(a, size=11)]}) != fp
    assert fingerprint_of({"sink": [dict(a, path="x/b.parquet")]}) != fp
    assert fingerprint_of({"quarantine": [a]}) != fp
    assert fingerprint_of({"sink": [a, {"path": "x/c.parquet", "size": 1}]}) != fp
    assert fingerprint_of({"sink": []}) == fingerprint_of({})


# -- layout ------------------------------------------------------------------------------------


def test_layout_paths():
    lay = Layout("/lake/orders", "/lake/orders_q")
    assert bid(7) == "0000000007"
    assert lay.ledger == "/lake/orders/_eo_ledger"
    assert lay.plan(7) == "/lake/orders/_eo_ledger/plans/0000000007.json"
    assert lay.plans_dir() == "/lake/orders/_eo_ledger/plans"
    assert lay.prepared(7) == "/lake/orders/_eo_ledger/prepared/0000000007.json"
    assert lay.committed(7) == "/lake/orders/_eo_ledger/committed/0000000007.json"
    assert lay.attempts_dir(7) == "/lake/orders/_eo_ledger/attempts/0000000007"
    assert lay.attempt_dir(7, "t1-abc") == "/lake/orders/_eo_ledger/attempts/0000000007/t1-abc"
    assert lay.stage_summary(7, "t1-abc") == "/lake/orders/_eo_ledger/attempts/0000000007/t1-abc/stage.json"
    assert lay.aborted(7, "t1-abc") == "/lake/orders/_eo_ledger/attempts/0000000007/t1-abc/aborted.json"
    assert lay.manifest(7, "t1-abc", "sink", 3) == \
        "/lake/orders/_eo_ledger/attempts/0000000007/t1-abc/manifests/sink/part-00003.json"
    assert lay.attempt_staging_rel(7, "t1-abc") == "eo_batches/b0000000007/t1-abc"
    assert lay.batch_staging_rel(7) == "eo_batches/b0000000007"
    assert lay.staging_root("sink") == "/lake/orders/eo_batches"
    assert lay.staging_root("quarantine") == "/lake/orders_q/eo_batches"
    assert lay.table("sink") == "/lake/orders" and lay.table("quarantine") == "/lake/orders_q"


def test_layout_of_s3_tables_and_trailing_slash():
    lay = Layout("s3a://bucket/lake/orders/", "s3a://bucket/lake/q")
    assert lay.plan(1) == "s3a://bucket/lake/orders/_eo_ledger/plans/0000000001.json"


# -- ledger over LocalStorage ---------------------------------------------------------------------


@pytest.fixture
def ledger(tmp_path):
    return Ledger(Layout(str(tmp_path / "lake" / "orders"), str(tmp_path / "lake" / "q")), LocalStorage())


def test_empty_ledger(ledger):
    assert ledger.batch_ids() == []
    assert ledger.latest_batch_id() == 0
    assert ledger.plans() == []
    assert ledger.plan(1) is None and ledger.prepared(1) is None and ledger.committed(1) is None
    assert ledger.stage_summary(1, "a") is None and ledger.manifest(1, "a", "sink", 0) is None
    assert ledger.attempts(1) == [] and ledger.aborted_info(1, "a") is None


def test_put_plan_is_put_if_absent(ledger):
    first = _plan(1)
    assert ledger.put_plan(first) is True
    assert ledger.put_plan(_plan(1, files=[])) is False
    assert ledger.plan(1) == first


def test_batch_ids_sorted_and_latest(ledger, tmp_path):
    for b in (3, 1, 12, 2):
        assert ledger.put_plan(_plan(b))
    plans_dir = Path(ledger.layout.plans_dir())
    (plans_dir / "README.txt").write_text("not a batch")
    (plans_dir / "12.json").write_text("{}")  # not a 10-digit batch file
    (plans_dir / ".0000000099.json.abc.tmp").write_text("{}")  # a put in progress
    assert ledger.batch_ids() == [1, 2, 3, 12]
    assert ledger.latest_batch_id() == 12
    assert [p.batch_id for p in ledger.plans()] == [1, 2, 3, 12]


def test_prepared_committed_aborted(ledger):
    p = _prepared(1)
    assert ledger.put_prepared(p) is True
    other = _prepared(1)
    other.attempt = "a2"
    assert ledger.put_prepared(other) is False
    assert ledger.prepared(1) == p
    c = CommittedBatch(pipeline="orders", batch_id=1, fingerprint=p.fingerprint,
                       delta_versions={"sink": 1, "quarantine": 1}, committed_at="t", commit_seconds=0.2)
    assert ledger.put_committed(c) is True
    assert ledger.put_committed(c) is False
    assert ledger.committed(1) == c
    first = ledger.decide(1, "a0", "abort", {"reason": "verify failed"})
    assert ledger.decide(1, "a0", "abort", {"reason": "a second abort does not replace it"}) == first
    assert ledger.decide(1, "a0", "prepare", {}) == first  # decided once: a late verify loses
    assert ledger.aborted_info(1, "a0")["reason"] == "verify failed"
    assert ledger.decide(1, "a1", "prepare", {})["decision"] == "prepare"
    assert ledger.decide(1, "a1", "abort", {})["decision"] == "prepare"  # an abort after verify loses
    assert ledger.aborted_info(1, "a1") is None
    assert ledger.attempts(1) == ["a0", "a1"]
    assert ledger.latest_batch_id() == 0  # only plans define batches


def test_ledger_defaults_to_storage_of_the_sink(tmp_path):
    led = Ledger(Layout(str(tmp_path / "t"), str(tmp_path / "q")))
    assert isinstance(led.fs, LocalStorage)
    assert led.put_plan(_plan(1)) is True
    assert (tmp_path / "t" / "_eo_ledger" / "plans" / "0000000001.json").is_file()
    assert led.describe(1).startswith("batch 1 (")


# -- cli.render_table ----------------------------------------------------------------------------------


def _row(batch_id, **kw):
    row = {k: None for k, _ in TABLE_COLS}
    row.update(batch_id=batch_id, state="COMMITTED", source_range="1 files [a.jsonl]", rows_in=5,
               attempts=1, plan_s=0.123, notes=[])
    row.update(kw)
    return row


def test_render_table_header_rows_and_notes():
    rows = [
        _row(1, rows_published=4, rows_quarantined=1, files=1, bytes=1234, delta_version=1, stage_s=12.0,
             verify_s=0.456, commit_s=1.0),
        _row(2, state="PLANNED", source_range="3 files [b.jsonl, c.jsonl, d.jsonl]",
             notes=["changed /l/a.jsonl after it was consumed", "second note"]),
    ]
    out = render_table(rows)
    lines = out.split("\n")
    header, sep, r1, r2 = lines[:4]
    widths = [len(x) for x in sep.split("  ")]
    assert set(sep.replace(" ", "")) == {"-"} and len(widths) == len(TABLE_COLS)

    def cells(line):
        out, pos = [], 0
        for w in widths:
            out.append(line[pos:pos + w])
            assert line[pos + w:pos + w + 2] in ("  ", "")  # aligned under the dashes
            pos += w + 2
        return [c.strip() for c in out]

    assert cells(header) == [h for _, h in TABLE_COLS]
    assert cells(r1) == ["1", "COMMITTED", "1 files [a.jsonl]", "5", "4", "1", "1", "1234", "1", "1",
                         "0.12", "12.00", "0.46", "1.00"]
    assert cells(r2) == ["2", "PLANNED", "3 files [b.jsonl, c.jsonl, d.jsonl]", "5", "-", "-", "-", "-", "-",
                         "1", "0.12", "-", "-", "-"]
    assert widths[2] == len("3 files [b.jsonl, c.jsonl, d.jsonl]")  # widest cell sets the width
    assert lines[4:] == ["", "notes:", "  batch 2: changed /l/a.jsonl after it was consumed",
                         "  batch 2: second note"]


def test_render_table_without_notes_and_without_rows():
    out = render_table([_row(1)])
    assert "notes:" not in out and len(out.split("\n")) == 3
    empty = render_table([])
    assert empty.split("\n")[0].split()[:2] == ["batch", "state"]
    assert len(empty.split("\n")) == 2


# -- faults.crash_point ------------------------------------------------------------------------------

POINT = "commit.after_delta_commit"
SCRIPT = ("import sys; from eobatch.faults import crash_point; "
          f"crash_point({POINT!r}); print('survived'); sys.exit(0)")


def _run(env_extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOBATCH_")}
    env["PYTHONPATH"] = str(PLUGINS) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)


def test_crash_point_does_nothing_without_env(monkeypatch):
    monkeypatch.delenv("EOBATCH_CRASH", raising=False)
    monkeypatch.delenv("EOBATCH_PAUSE", raising=False)
    for p in faults.POINTS:
        assert faults.crash_point(p) is None


def test_crash_point_ignores_other_points(monkeypatch):
    monkeypatch.delenv("EOBATCH_PAUSE", raising=False)
    monkeypatch.setenv("EOBATCH_CRASH", "plan.after_record,verify.after_prepared")
    assert faults.crash_point(POINT) is None
    monkeypatch.setenv("EOBATCH_CRASH", "commit.after_delta")  # a prefix is not the point
    assert faults.crash_point(POINT) is None


def test_crash_point_kills_the_process_with_137():
    r = _run({"EOBATCH_CRASH": f"plan.after_record,{POINT}"})
    assert r.returncode == 137, r.stderr
    assert "survived" not in r.stdout
    assert f"injected crash at {POINT}" in r.stderr


def test_crash_point_without_env_survives_in_subprocess():
    r = _run({})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "survived"


def test_crash_point_once_dir_fires_once(tmp_path):
    once = tmp_path / "once"
    env = {"EOBATCH_CRASH": POINT, "EOBATCH_CRASH_ONCE_DIR": str(once)}
    first = _run(env)
    assert first.returncode == 137, first.stderr
    assert (once / POINT).is_file()
    second = _run(env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "survived"


def test_partition_values_are_spelled_one_way_for_adds_and_removes():
    """The stage job's adds and the commit's removes use one spelling (the Delta protocol's)."""
    import datetime as dt

    from eobatch.formats import partition_text

    assert partition_text(None) is None
    assert [partition_text(True), partition_text(False)] == ["true", "false"]
    assert partition_text(dt.date(2026, 1, 2)) == "2026-01-02"
    assert partition_text(dt.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02 03:04:05.000000"
    assert partition_text(dt.datetime(2026, 1, 2, 4, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=1)))) == \
        "2026-01-02 03:04:05.000000"
    assert [partition_text(7), partition_text("a/b")] == ["7", "a/b"]
