"""Interval mode: no file under a landing zone is ever skipped silently.

A file that lands in an interval after that interval was planned (a producer's rename keeps the
mtime; clock skew; an S3 multipart upload's LastModified is its start; a file dropped late into a
dt=/hour= folder; an interval that was empty when it ran) is found by the next run, which looks
back over the intervals already planned. By default that interval is published again, whole,
as another slice of the run's batch, and its commit replaces the slice: still exactly once.
Real local files and real delta-rs; the stage job is the pyarrow stager (it writes the same
per-slice folders the Spark job writes)."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest

from eobatch.protocol import IntervalNotSettled, Protocol
from eobatch.sources.files import LateFiles
from support.pyarrow_stager import stage

H = 3600
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


def iv(i: int) -> dict:
    import datetime as dt

    return {k: dt.datetime.fromtimestamp(T0 + (i + j) * H, dt.timezone.utc).isoformat()
            for k, j in (("start", 0), ("end", 1))}


def land(cfg, rel: str, ids: list[str], mtime: float | None = None) -> None:
    path = Path(cfg.source.path) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text("".join(json.dumps({"order_id": i}) + "\n" for i in ids))
    if mtime is not None:
        os.utime(tmp, (mtime, mtime))
    os.replace(tmp, path)  # rename into place: keeps the mtime


def run(proto: Protocol, i: int, run_id: str | None = None):
    proto.recover(run_id=run_id or f"h{i}")
    plan, _ = proto.plan(interval=iv(i), run_id=run_id or f"h{i}")
    if plan is None:
        return None
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    proto.commit(plan.batch_id)
    return plan


def published(proto: Protocol) -> collections.Counter:
    from deltalake import DeltaTable

    return collections.Counter(r["order_id"] for r in DeltaTable(proto.cfg.sink_table).to_pyarrow_table().to_pylist())


@pytest.fixture
def by_prefix(make_cfg):
    return make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "max_records_per_batch": 100,
        "interval_prefix": "dt={ds}/hour={hh}", "settle_seconds": 0})


@pytest.fixture
def by_mtime(make_cfg):
    return make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "max_records_per_batch": 100, "settle_seconds": 0})


def test_a_file_dropped_late_into_a_published_hour_folder_is_published_by_the_next_run(by_prefix):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1", "a2"])
    assert run(proto, 0).batch_id == 1
    land(by_prefix, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])  # after hour 00 was published
    land(by_prefix, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    plan = run(proto, 1)
    assert sorted(plan.slices()) == ["iv=20260101T000000Z", "iv=20260101T010000Z"]
    assert [n for n in plan.notes if "late files" in n and "late.jsonl" in n and "re-published whole" in n]
    assert published(proto) == collections.Counter(["a1", "a2", "late1", "b1"])  # hour 00 replaced, not added
    assert run(proto, 2) is None  # nothing late any more, nothing new: no batch


def test_a_file_renamed_into_place_after_the_plan_keeps_its_mtime_and_is_not_lost(by_mtime):
    proto = Protocol(by_mtime)
    land(by_mtime, "a.jsonl", ["a1"], mtime=T0 + 10)
    assert run(proto, 0).batch_id == 1
    land(by_mtime, "x.jsonl", ["x1"], mtime=T0 + H - 1)  # written at 00:59:59, renamed in at 01:00:05
    land(by_mtime, "b.jsonl", ["b1"], mtime=T0 + H + 10)
    run(proto, 1)
    assert published(proto) == collections.Counter(["a1", "x1", "b1"])


def test_an_interval_empty_when_it_ran_is_published_when_its_files_arrive(by_prefix):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    assert run(proto, 1) is None  # hour 01 is empty when it runs
    land(by_prefix, "dt=2026-01-01/hour=01/late.jsonl", ["late1"])
    land(by_prefix, "dt=2026-01-01/hour=02/c.jsonl", ["c1"])
    run(proto, 2)
    assert published(proto) == collections.Counter(["a1", "late1", "c1"])


def test_a_rerun_of_an_interval_after_its_republish_replaces_the_whole_slice(by_prefix):
    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    land(by_prefix, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])
    land(by_prefix, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    run(proto, 1)  # republishes hour 00 inside batch 2
    land(by_prefix, "dt=2026-01-01/hour=00/later.jsonl", ["later1"])
    run(proto, 0, run_id="h0-manual")  # a manual re-run of hour 00: replaces its slice everywhere
    run(proto, 1, run_id="h1-again")  # and hour 01 again: its own slice only
    assert published(proto) == collections.Counter(["a1", "late1", "later1", "b1"])


def test_late_files_policy_fail_names_the_files_and_plans_nothing(make_cfg):
    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "interval_prefix": "dt={ds}/hour={hh}",
        "settle_seconds": 0, "late_files": "fail"})
    proto = Protocol(cfg)
    land(cfg, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    land(cfg, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])
    with pytest.raises(LateFiles, match=r"late\.jsonl.*late_files: fail"):
        proto.plan(interval=iv(1), run_id="h1")
    assert proto.ledger.latest_batch_id() == 1


def test_late_files_policy_ignore_logs_them_every_time_and_publishes_nothing_of_them(make_cfg, caplog):
    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "interval_prefix": "dt={ds}/hour={hh}",
        "settle_seconds": 0, "late_files": "ignore"})
    proto = Protocol(cfg)
    land(cfg, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    land(cfg, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])
    land(cfg, "dt=2026-01-01/hour=01/b.jsonl", ["b1"])
    plan = run(proto, 1)
    assert [n for n in plan.notes if "late.jsonl" in n and "not published" in n]
    assert published(proto) == collections.Counter(["a1", "b1"])
    caplog.clear()
    assert run(proto, 2) is None
    assert "late.jsonl" in caplog.text and "NOT published" in caplog.text  # logged again, every run


def test_the_look_back_is_bounded_and_starts_at_the_pipelines_first_interval(make_cfg):
    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "interval_prefix": "dt={ds}/hour={hh}",
        "settle_seconds": 0, "late_lookback_intervals": 2})
    proto = Protocol(cfg)
    land(cfg, "dt=2025-12-31/hour=23/before.jsonl", ["before"])  # before the pipeline's first interval
    land(cfg, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    for i in (1, 2, 3):
        land(cfg, f"dt=2026-01-01/hour=0{i}/f.jsonl", [f"f{i}"])
        run(proto, i)
    land(cfg, "dt=2026-01-01/hour=00/too-late.jsonl", ["too-late"])  # 4 intervals back: beyond the look-back
    land(cfg, "dt=2026-01-01/hour=02/late.jsonl", ["late2"])  # 2 back: inside
    land(cfg, "dt=2026-01-01/hour=04/g.jsonl", ["g"])
    run(proto, 4)
    assert published(proto) == collections.Counter(["a1", "f1", "f2", "f3", "late2", "g"])
    assert proto._lookback(iv(4)["start"])[-1][0] == (T0 + 2 * H) * 1000


def test_an_interval_is_planned_only_settle_seconds_after_its_end(make_cfg):
    import time

    cfg = make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "settle_seconds": 120})
    now_hour = int(time.time()) // H * H
    import datetime as dt

    just_ended = {"start": dt.datetime.fromtimestamp(now_hour - H, dt.timezone.utc).isoformat(),
                  "end": dt.datetime.fromtimestamp(now_hour, dt.timezone.utc).isoformat()}
    if time.time() - now_hour < 110:  # the hour ended less than the settle delay ago
        with pytest.raises(IntervalNotSettled, match="settle_seconds"):
            Protocol(cfg).plan(interval=just_ended, run_id="r")
    future = {"start": just_ended["end"], "end": dt.datetime.fromtimestamp(now_hour + H, dt.timezone.utc).isoformat()}
    with pytest.raises(IntervalNotSettled, match="to go"):
        Protocol(cfg).plan(interval=future, run_id="r")
    assert Protocol(cfg).plan(interval=iv(0), run_id="past") == (None, False)  # long past: planned


def test_the_plan_records_what_was_late_and_a_statsd_metric_counts_it(by_prefix, tmp_path):
    import socket
    import subprocess
    import sys

    proto = Protocol(by_prefix)
    land(by_prefix, "dt=2026-01-01/hour=00/a.jsonl", ["a1"])
    run(proto, 0)
    land(by_prefix, "dt=2026-01-01/hour=00/late.jsonl", ["late1"])
    plan = run(proto, 1)
    assert [(x["interval"].split("/")[0], [p.rsplit("/", 1)[-1] for p in x["files"]], x["action"])
            for x in plan.late] == [("2026-01-01T00:00:00+00:00", ["late.jsonl"], "republish")]
    # the plan task's metric, through Airflow's own StatsD client, received by a real UDP socket
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(20)
    code = ("import types; from eobatch.airflow_ops import _count_late_files; "
            "_count_late_files(types.SimpleNamespace(cfg=types.SimpleNamespace(name='orders'), "
            f"last_late={plan.late!r}))")
    env = {**os.environ, "AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(sock.getsockname()[1]), "AIRFLOW_HOME": str(tmp_path / "af"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "plugins")}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    want, got = {"airflow.eobatch.orders.late_files:1|c", "airflow.eobatch.orders.late_files_republish:1|c"}, set()
    while not want <= got:  # Airflow sends metrics of its own too
        got |= set(sock.recv(65536).decode().splitlines())
