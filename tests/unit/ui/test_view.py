"""eobatch.ui.view: what the ledger page and its JSON read, from a real ledger (local files, real
delta-rs tables, the pyarrow stager in place of Spark)."""

from __future__ import annotations

import json
import os

import pytest

from eobatch import cli
from eobatch.protocol import Protocol
from eobatch.ui.view import UnknownPipeline, batches_json, find, page_view
from support.pyarrow_stager import stage


def land(cfg, name: str, ids: range, bad: int = 0) -> None:
    path = os.path.join(cfg.source.path, name)
    with open(path, "w") as f:
        f.writelines(json.dumps({"order_id": f"o{i}", "amount": float(i)}) + "\n" for i in ids)
        f.writelines("{not json\n" for _ in range(bad))


def run(proto: Protocol, run_id: str, commit: bool = True) -> int:
    proto.recover(run_id=run_id)
    plan, _ = proto.plan(run_id=run_id)
    assert plan is not None
    if commit:
        attempt = stage(proto, plan.batch_id)
        proto.verify(plan.batch_id, attempt)
        proto.commit(plan.batch_id)
    return plan.batch_id


@pytest.fixture
def three(make_cfg, monkeypatch, tmp_path):
    """Pipeline ``orders`` (PIPELINES_DIR set) with batches 1, 2 committed and 3 planned."""
    cfg = make_cfg(source={"kind": "files", "path": str(tmp_path / "landing"), "max_records_per_batch": 10})
    monkeypatch.setenv("PIPELINES_DIR", os.path.dirname(cfg.file))
    proto = Protocol(cfg)
    for i, name in enumerate(("a.jsonl", "b.jsonl", "c.jsonl")):
        land(cfg, name, range(10 * i, 10 * i + 10), bad=1 if i == 0 else 0)
        os.utime(os.path.join(cfg.source.path, name), (1_700_000_000 + i, 1_700_000_000 + i))
    for i in (1, 2, 3):
        run(proto, f"manual__run{i}", commit=i < 3)
    return cfg


def test_find_knows_the_pipelines_of_pipelines_dir(three):
    assert find("orders").name == "orders"
    for name in ("nope", "../orders", "Orders", ""):
        with pytest.raises(UnknownPipeline) as e:
            find(name)
        assert str(e.value) == f"no pipeline named {name!r}"


def test_page_newest_first_with_chart_and_backlog(three):
    v = page_view(three, page=1, per_page=2)
    assert [(r["batch_id"], r["state"]) for r in v.rows] == [(3, "PLANNED"), (2, "COMMITTED")]
    assert [r["batch_id"] for r in v.chart_rows] == [1, 2, 3]  # the chart: oldest left
    assert (v.pager.total, v.pager.pages) == (3, 2)
    assert [r["batch_id"] for r in page_view(three, page=2, per_page=2).rows] == [1]
    assert v.committed_versions == {"sink": 2, "quarantine": 2}
    assert v.backlog["files"] == 0 and v.backlog["unpublished"] is True  # c.jsonl: planned, not committed
    assert v.backlog["oldest_unpublished_at"].startswith("2023-11-14T22:13:22")


def test_page_of_a_dag_run_shows_its_batch(three):
    v = page_view(three, page=2, per_page=2, run_id="manual__run3")
    assert v.pager.page == 1 and v.run_id == "manual__run3"
    v = page_view(three, per_page=2, run_id="manual__run1")
    assert v.pager.page == 2 and [r["batch_id"] for r in v.rows] == [1]
    v = page_view(three, per_page=2, run_id="scheduled__no_batch")  # a run that planned nothing
    assert v.pager.page == 1


def test_json_is_make_ledger_format_json(three, capsys):
    assert cli.main(["ledger", "orders", "--format", "json"]) == 0
    printed = capsys.readouterr().out
    served = batches_json(three)
    assert json.loads(served) == json.loads(printed)
    rows = json.loads(served)
    assert [r["batch_id"] for r in rows] == [1, 2, 3]
    assert {"batch_id", "state", "rows_in", "rows_published", "rows_quarantined", "delta_version",
            "fingerprint"} <= set(rows[0])
    assert (rows[0]["rows_in"], rows[0]["rows_published"], rows[0]["rows_quarantined"]) == (11, 10, 1)
    assert [r["batch_id"] for r in json.loads(batches_json(three, limit=2))] == [1, 2]
    assert [r["batch_id"] for r in json.loads(batches_json(three, limit=2, offset=2))] == [3]
    assert [r["batch_id"] for r in json.loads(batches_json(three, offset=1))] == [2, 3]
    assert json.loads(batches_json(three, offset=9)) == []


def test_ledger_rows_of_chosen_batches_are_the_full_rows(three):
    proto = Protocol(three)
    every = {r["batch_id"]: r for r in cli.ledger_rows(proto)}
    assert cli.ledger_rows(proto, [3, 1, 7]) == [every[3], every[1]]


def test_a_rewind_is_shown_with_its_rewound_batches(make_cfg, monkeypatch, tmp_path):
    cfg = make_cfg(source={"kind": "files", "path": str(tmp_path / "landing"), "max_records_per_batch": 10})
    monkeypatch.setenv("PIPELINES_DIR", os.path.dirname(cfg.file))
    proto = Protocol(cfg)
    for i, name in enumerate(("a.jsonl", "b.jsonl")):
        land(cfg, name, range(10 * i, 10 * i + 10))
        run(proto, f"manual__run{i + 1}")
    proto.rewind(2, run_id="manual__rewind")
    v = page_view(cfg)
    # the rewind reserves batch 3 as its first replay, of b.jsonl again
    assert [(r["batch_id"], r["state"]) for r in v.rows] == [(3, "PLANNED"), (2, "REWOUND"), (1, "COMMITTED")]
    assert len(v.rewinds) == 1 and "run manual__rewind" in v.rewinds[0] and "before batch 2" in v.rewinds[0]
    assert (v.backlog["files"], v.backlog["unpublished"]) == (0, True)  # planned again, not yet published


def test_the_page_shows_the_last_maintenance_pass_and_make_ledger_too(three, capsys):
    from eobatch.protocol.maintenance import maintain

    assert page_view(three).maintenance is None
    maintain(Protocol(three), vacuum_retention_hours=0)  # batch 3 is planned, not staged: nothing of it touched
    line = page_view(three).maintenance
    assert line is not None and line.startswith("last maintenance ") and "sink 4 -> 1 files" in line, line
    assert line.index("sink") < line.index("quarantine")
    assert cli.main(["ledger", "orders"]) == 0
    assert line in capsys.readouterr().out


def test_a_landing_file_name_that_is_not_utf8_still_renders_the_page(make_cfg, monkeypatch):
    from eobatch.ui.page import render_page

    cfg = make_cfg()
    monkeypatch.setenv("PIPELINES_DIR", os.path.dirname(cfg.file))
    land(cfg, "a.jsonl", range(3))
    with open(os.path.join(os.fsencode(cfg.source.path), b"bad-\xff.jsonl"), "wb") as f:
        f.write(b'{"order_id": "x"}\n')
    run(Protocol(cfg), "manual__r1")
    html = render_page(page_view(cfg))
    html.encode("utf-8")
    assert "bad-\\xff.jsonl" in html  # the skip note, in the batch's notes
    json.loads(batches_json(cfg))
    assert cli.main(["ledger", "orders"]) == 0  # make ledger


# -- what one request may cost: bounded, whatever a signed-in user asks ---------------------------
def test_an_unknown_pipeline_names_no_other_one(three):
    from eobatch.ui.page import render_not_found

    with pytest.raises(UnknownPipeline) as e:
        find("not_a_pipeline")
    assert not hasattr(e.value, "known")
    page = render_not_found(e.value.name)
    assert "not_a_pipeline" in page and "orders" not in page


def test_the_json_returns_at_most_its_maximum(three, monkeypatch):
    from eobatch.ui import view

    monkeypatch.setattr(view, "JSON_LIMIT_MAX", 2)
    assert [r["batch_id"] for r in json.loads(batches_json(three, limit=10**9))] == [1, 2]
    assert [r["batch_id"] for r in json.loads(batches_json(three, limit=10**9, offset=1))] == [2, 3]


def test_looking_up_an_unknown_run_id_reads_no_plan(three):
    from eobatch.ui.view import batch_of_run
    from support.counting import Counting

    proto = Protocol(three)
    proto.ledger.fs = counted = Counting(proto.ledger.fs)
    assert batch_of_run(proto, "manual__run2", 3) == 2  # the index is built: each plan read once
    built = counted.reads
    for i in range(50):
        assert batch_of_run(proto, f"manual__unknown{i}", 3) is None
    assert counted.reads == built
    assert batch_of_run(proto, "manual__run1", 3) == 1 and counted.reads <= built + 2  # a hit: its plan, checked


def test_the_backlog_is_computed_once_per_ttl_and_not_while_another_request_computes_it(three, monkeypatch):
    import threading

    from eobatch.ui import view

    now = [0.0]
    monkeypatch.setattr(view, "BACKLOGS", view.Memo(30.0, clock=lambda: now[0]))
    assert page_view(three).backlog["files"] == 0
    land(three, "d.jsonl", range(100, 105))
    assert page_view(three).backlog["files"] == 0  # the figures of 0 s ago: the landing zone is not listed again
    now[0] = 31.0
    assert page_view(three).backlog["files"] == 1

    # while one request computes it, the others do not wait for it nor compute it themselves
    memo, started, release, calls = view.Memo(30.0), threading.Event(), threading.Event(), []

    def slow():
        calls.append(1)
        started.set()
        release.wait(10)
        return "figures"

    t = threading.Thread(target=memo.get, args=("k", slow))
    t.start()
    assert started.wait(10)
    assert [memo.get("k", slow, busy="busy") for _ in range(20)] == ["busy"] * 20
    release.set()
    t.join(10)
    assert memo.get("k", slow) == "figures" and calls == [1]


def test_records_are_counted_for_a_bounded_number_of_files(three, monkeypatch):
    from eobatch.ui import view

    monkeypatch.setattr(view, "BACKLOGS", view.Memo(0.0))
    monkeypatch.setattr(view, "BACKLOG_COUNT_FILES", 1)
    land(three, "d.jsonl", range(100, 105))
    assert page_view(three).backlog["records"] == 5
    land(three, "e.jsonl", range(200, 205))
    b = page_view(three).backlog
    assert b["files"] == 2 and b["records"] is None
    assert "records not counted: 2 files not yet planned" in " ".join(b["notes"])


def test_the_backlog_of_an_upstream_in_another_store_names_a_connection_airflow_lacks(make_cfg, monkeypatch, tmp_path):
    """A delta source with ``conn_id``: the page reads the upstream with that connection (resolved in
    the web server like in the tasks); one Airflow does not have is the backlog's error, and the page
    still shows the ledger."""
    from eobatch.storage import s3conf
    from eobatch.ui import view

    monkeypatch.setenv(s3conf.BUCKETS_ENV, "")  # restored (unset) after the test
    monkeypatch.setattr(view, "BACKLOGS", view.Memo(30.0))
    cfg = make_cfg(source={"kind": "delta", "table": "s3a://upstream/lake/orders", "conn_id": "upstream_s3"},
                   sink={"table": str(tmp_path / "lake" / "silver")}, quarantine={"table": str(tmp_path / "lake" / "bad")})
    v = page_view(cfg)
    assert v.rows == [] and "source.conn_id 'upstream_s3': there is no Airflow connection of that id" in \
        v.backlog["error"], v.backlog


def test_a_stuck_pipeline_shows_a_banner_with_its_repair_and_the_json_and_make_ledger_say_the_same(
        three, capsys):
    from eobatch.core.stuck import find_stuck
    from eobatch.ui.page import render_page
    from eobatch.ui.view import stuck_json
    from support.protocol_runs import failing_run

    assert page_view(three).stuck is None and json.loads(stuck_json(three)) == {"pipeline": "orders", "stuck": None}
    assert 'id="stuck"' not in render_page(page_view(three))
    proto = Protocol(three)
    for i in (4, 5):  # batch 3 was planned by manual__run3: with two failed runs, three runs tried it
        assert failing_run(proto, f"manual__run{i}") == 3
    found = find_stuck(proto.ledger, three)
    assert found is not None and found.runs == 3
    v = page_view(three)
    assert v.stuck == found.to_json() and v.stuck["repair"]["command"] == "make reset-batch PIPELINE=orders BATCH=3"
    page = render_page(v)
    banner = page[page.index('<div class="stuck" id="stuck"'):]
    banner = banner[:banner.index("</div>")]
    assert "Stuck: batch 3 is PLANNED since" in banner and "3 runs tried it and none committed it" in banner
    assert "Last error" in banner and "run manual__run5 failed" in banner
    assert "<code>make reset-batch PIPELINE=orders BATCH=3</code>" in banner
    assert json.loads(stuck_json(three))["stuck"] == json.loads(json.dumps(found.to_json()))
    assert cli.main(["ledger", "orders"]) == 0
    out = capsys.readouterr().out
    assert "stuck: pipeline orders is STUCK: batch 3 is PLANNED" in out
    assert "stuck: command: make reset-batch PIPELINE=orders BATCH=3" in out


def test_the_page_costs_the_same_whatever_a_batchs_file_count(make_cfg, monkeypatch, tmp_path):
    """Was: the page parsed every plan and listed every file of every batch at each load: a batch of
    20,000 empty files made a 4.1 MB plan record and a 7.7 s page. Now a batch shows PAGE_FILES of its
    files and its plan record is parsed once per process (by the record's identity)."""
    from eobatch.storage.fs import LocalStorage
    from eobatch.ui import view as view_mod
    from eobatch.ui.page import render_page

    cfg = make_cfg(source={"kind": "files", "path": str(tmp_path / "landing"), "max_records_per_batch": 10,
                           "max_files_per_batch": 3000})
    monkeypatch.setenv("PIPELINES_DIR", os.path.dirname(cfg.file))
    proto = Protocol(cfg)
    for i in range(3):
        land(cfg, f"s{i}.jsonl", range(i, i + 1))
    assert run(proto, "manual__small") == 1
    for i in range(1200):
        open(os.path.join(cfg.source.path, f"e{i:04d}.jsonl"), "w").close()
    assert run(proto, "manual__big", commit=False) == 2
    assert len(proto.ledger.plan(2).range["files"]) == 1200

    plan_2 = proto.layout.plan(2)
    reads = []
    real = LocalStorage.read_bytes
    monkeypatch.setattr(LocalStorage, "read_bytes", lambda self, p: reads.append(p) or real(self, p))
    page = render_page(page_view(cfg))
    small, big = page.split('<tr id="batch-1"')[1], page.split('<tr id="batch-2"')[1].split('<tr id="batch-1"')[0]
    assert big.count('<li><span class="mono">') == view_mod.PAGE_FILES
    assert "... and 1,180 more files (the JSON lists them all)" in big
    assert len(big) < len(small) + 2500  # a few more list items, not 1,200
    assert "1200 files" in big  # the summary counts them all
    reads.clear()
    render_page(page_view(cfg))
    assert plan_2 not in reads  # parsed once per process
    # a batch forgotten and planned again is another record: read again
    os.utime(plan_2, (1, 1))
    render_page(page_view(cfg))
    assert plan_2 in reads
    assert len(json.loads(batches_json(cfg))[1]["offsets"]["files"]) == 1200  # the JSON has every file
