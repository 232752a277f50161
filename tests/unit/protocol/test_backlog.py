"""eobatch.protocol.backlog: what a pipeline has not published yet, read like the planner reads it."""

from __future__ import annotations

import json
import os

from eobatch.protocol import Protocol
from eobatch.protocol.backlog import backlog
from support.pyarrow_stager import stage

T = 1_700_000_000  # seconds


def land(cfg, name: str, n: int, mtime: int) -> None:
    path = os.path.join(cfg.source.path, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps({"order_id": f"{name}-{i}"}) + "\n" for i in range(n))
    os.utime(path, (mtime, mtime))


def commit_next(proto: Protocol) -> None:
    proto.recover()
    plan, _ = proto.plan()
    assert plan is not None
    attempt = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)


def test_files_not_yet_planned_and_the_oldest_unpublished(make_cfg, tmp_path):
    cfg = make_cfg(source={"kind": "files", "path": str(tmp_path / "landing"), "max_records_per_batch": 5})
    proto = Protocol(cfg)
    b = backlog(proto, now_ms=T * 1000)
    assert (b["files"], b["bytes"], b["records"], b["unpublished"], b["error"]) == (0, 0, 0, False, None)
    land(cfg, "a.jsonl", 5, T - 600)
    land(cfg, "sub/b.jsonl", 3, T - 60)
    land(cfg, "_c.jsonl.tmp", 9, T - 6000)  # not renamed into place: never read, not backlog
    b = backlog(proto, now_ms=T * 1000)
    assert (b["files"], b["records"], b["unpublished"]) == (2, 8, True)
    assert b["bytes"] == sum(os.path.getsize(os.path.join(cfg.source.path, n)) for n in ("a.jsonl", "sub/b.jsonl"))
    assert b["oldest_unpublished_age_s"] == 600.0
    # a planned batch not yet committed is still unpublished: its files count for the age
    proto.recover()
    plan, _ = proto.plan()
    assert plan is not None and [f["path"].rsplit("/", 1)[-1] for f in plan.range["files"]] == ["a.jsonl"]
    b = backlog(proto, now_ms=T * 1000)
    assert (b["files"], b["records"], b["oldest_unpublished_age_s"]) == (1, 3, 600.0)
    attempt = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    b = backlog(proto, now_ms=T * 1000)
    assert (b["files"], b["oldest_unpublished_age_s"]) == (1, 60.0)
    commit_next(proto)
    b = backlog(proto, now_ms=T * 1000)
    assert (b["files"], b["records"], b["unpublished"], b["oldest_unpublished_age_s"]) == (0, 0, False, None)


def test_the_oldest_unpublished_file_of_a_run_of_several_batches_is_its_first_batchs(make_cfg, tmp_path):
    """A run planned batches 1..3 (one file each, oldest first); none is committed yet: the age is
    batch 1's file's, not the newest batch's."""
    cfg = make_cfg(source={"kind": "files", "path": str(tmp_path / "landing"), "max_records_per_batch": 2})
    for i, age in enumerate((900, 600, 300)):
        land(cfg, f"f{i}.jsonl", 2, T - age)
    proto = Protocol(cfg)
    plans, _ = proto.plan_batches(max_batches=3)
    assert [p.batch_id for p in plans] == [1, 2, 3]
    b = backlog(proto, now_ms=T * 1000)
    assert (b["files"], b["unpublished"], b["oldest_unpublished_age_s"]) == (0, True, 900.0)
    for p in plans[:1]:
        proto.verify(p.batch_id, stage(proto, p.batch_id))
        proto.commit(p.batch_id)
    assert backlog(proto, now_ms=T * 1000)["oldest_unpublished_age_s"] == 600.0


def test_records_are_not_counted_past_the_byte_budget(make_cfg, tmp_path):
    cfg = make_cfg(source={"kind": "files", "path": str(tmp_path / "landing")})
    land(cfg, "a.jsonl", 50, T)
    b = backlog(Protocol(cfg), count_bytes_limit=100)
    assert b["files"] == 1 and b["records"] is None
    assert any("records not counted" in n for n in b["notes"])


def test_an_unreadable_source_is_reported_not_raised(make_cfg, tmp_path):
    cfg = make_cfg(source={"kind": "kafka", "bootstrap_servers": "127.0.0.1:1", "topic": "t",
                           "max_records_per_batch": 10})
    b = backlog(Protocol(cfg), kafka_timeout=0.5)
    assert b["kind"] == "kafka" and b["error"] and "KafkaUnavailable" in b["error"]


def test_the_plan_tasks_backlog_lists_only_and_reads_no_pending_file(make_cfg, tmp_path):
    """What the plan task sends as metrics after every plan: files and bytes from the listing; a
    pending Parquet file's footer is not read (it would be, for each pending file, on every plan)."""
    cfg = make_cfg(source={"kind": "parquet", "path": str(tmp_path / "landing")})
    os.makedirs(cfg.source.path, exist_ok=True)
    with open(os.path.join(cfg.source.path, "a.parquet"), "wb") as f:
        f.write(b"not parquet at all")  # reading its footer fails: only a read would notice
    counted = backlog(Protocol(cfg))
    assert counted["records"] is None and any("records not counted: " in n for n in counted["notes"])
    listed = backlog(Protocol(cfg), count_records=False)
    assert (listed["files"], listed["bytes"], listed["records"], listed["error"]) == (1, 18, None, None)
    assert listed["notes"][0] == "records not counted (not asked)"


def test_a_plan_and_the_backlog_after_it_list_the_landing_folder_once(make_cfg, tmp_path, monkeypatch):
    """Issue 44: the plan task listed the whole landing folder twice, the plan and then the backlog
    count (19.7 s of a plan task at 1M files). The backlog after a plan asks the plan's own planner
    (``Protocol.last_planner``), which answers from the run's one listing; a plan of one batch too."""
    from eobatch.core.ledger import Ledger
    from eobatch.sources.files.planner import FilesSource

    real_history = Ledger.history
    listings: list[str] = []
    real = FilesSource.list_landing
    monkeypatch.setattr(FilesSource, "list_landing", lambda self, *a, **kw: listings.append("x") or real(self, *a, **kw))
    for max_batches in (1, 2):
        own = tmp_path / f"p{max_batches}"
        cfg = make_cfg(name=f"p{max_batches}", source={"kind": "files", "path": str(own / "landing"),
                                                       "max_records_per_batch": 5},
                       sink={"table": str(own / "sink")}, quarantine={"table": str(own / "quarantine")})
        for i in range(3):
            land(cfg, f"f{i}.jsonl", 5, T - 600 + i)  # one file a batch
        proto = Protocol(cfg)
        proto.recover()
        listings.clear()
        plans, _ = proto.plan_batches(max_batches=max_batches)
        histories = []  # nor the ledger's history read again: the plan's own, with its plans
        monkeypatch.setattr(Ledger, "history",  # this iteration's list, bound now
                            lambda self, *a, seen=histories, **kw: seen.append("x") or real_history(self, *a, **kw))
        left = backlog(proto, count_records=False, planner=proto.last_planner, now_ms=T * 1000)
        assert len(listings) == 1 and len(plans) == max_batches and histories == [], (listings, plans, histories)
        assert (left["files"], left["unpublished"], left["oldest_unpublished_age_s"]) == (3 - max_batches, True, 600.0)
        listings.clear()
        fresh = backlog(proto, count_records=False, now_ms=T * 1000)  # the page's own: the same figures
        assert len(listings) == 1 and histories, (listings, histories)
        monkeypatch.setattr(Ledger, "history", real_history)
        assert fresh == left
