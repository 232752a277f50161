"""Hostile landing producers and upstream table writers (issue 42, "Safe in a shared Airflow"):
what they put where a pipeline reads is an input, bounded, never followed through a link, and it
never stops the pipeline from planning nor reaches another party's data.

Through the real path: real local files, links and FIFOs, real delta-rs tables and ledgers, the
real planners and protocol (the pyarrow stager in place of Spark), the real ledger page."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import unit.conftest as _unit

from eobatch.protocol import Protocol
from eobatch.protocol import replay as replay_mod
from eobatch.storage.fs import LocalStorage
from support.landing import T0, land_at
from support.protocol_runs import published_ids, run_next
from support.pyarrow_stager import stage

# the unit tests' fixtures: a real pipeline YAML loaded by the real loader, under tmp_path
base_cfg, write_yaml, make_cfg = _unit.base_cfg, _unit.write_yaml, _unit.make_cfg


@contextmanager
def _within(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a FIFO opened for reading blocks until a writer comes)."""
    def hangs(*_):
        raise AssertionError(f"no answer within {seconds} s (a plan that hangs)")

    old = signal.signal(signal.SIGALRM, hangs)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- replay lineage files after a rewind ---------------------------------------------------------

def _rewound(make_cfg) -> tuple[Protocol, Path]:
    """Batches 1 (a.jsonl) and 2 (b.jsonl) committed, then a rewind to before batch 2, published
    again: from now on every plan asks which replay files the rewind voided (their lineages)."""
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    proto = Protocol(cfg)
    land_at(landing / "a.jsonl", range(0, 2), T0)
    assert run_next(proto) == 1
    land_at(landing / "b.jsonl", range(2, 4), T0 + 1)
    assert run_next(proto) == 2
    proto.rewind(2, run_id="ui")
    while run_next(proto) is not None:
        pass
    assert published_ids(proto) == ["o0", "o1", "o2", "o3"]
    return proto, landing


def _replay_file(landing: Path, name: str, ids: range, lineage: bytes | None) -> tuple[Path, Path]:
    """A replay file of an earlier version (``replay/<name>.jsonl``) and its lineage beside it."""
    path = Path(land_at(landing / "replay" / f"{name}.jsonl", ids, T0 + 5))
    lin = Path(f"{path}.lineage.json")
    if lineage is not None:
        lin.write_bytes(lineage)
    return path, lin


def _lineage_of_batch(batch: int, landing: Path) -> bytes:
    return json.dumps({"records": [{"line": 1, "batch_id": batch, "source": str(landing / "b.jsonl"),
                                    "position": 1, "reason": "r"}]}).encode()


def _plan_with(proto: Protocol, landing: Path, ids: range, name: str = "c.jsonl"):
    """Land ``name`` and plan: the plan (it must not fail) and what it skipped."""
    land_at(landing / name, ids, T0 + 9)
    with _within(20):
        plan, _ = proto.plan()
    assert plan is not None
    return plan, {s["path"]: s for s in proto.last_skipped}


def test_a_lineage_of_40_kb_of_brackets_is_skipped_with_a_note_and_the_pipeline_plans_on(make_cfg):
    """Was: json.loads raised RecursionError, which the planner did not catch: no plan after any rewind."""
    proto, landing = _rewound(make_cfg)
    held, lineage = _replay_file(landing, "replay-b9-0123456789ab", range(50, 51), b"[" * 40_000)
    plan, skipped = _plan_with(proto, landing, range(10, 12))
    assert [Path(f["path"]).name for f in plan.range["files"]] == ["c.jsonl"]  # the held replay file is not read
    assert "RecursionError" in skipped[str(lineage)]["reason"] and skipped[str(lineage)]["retried"]
    assert str(held) in skipped  # held back: whether the rewind voided it is not known
    notes = [n for n in plan.notes if n.startswith(f"skipped {lineage}")]
    assert len(notes) == 1 and "held back" in notes[0]
    # the next plan skips it again (the gauge), without saying it again in its notes
    _commit(proto, plan.batch_id)
    plan2, skipped2 = _plan_with(proto, landing, range(12, 13), "d.jsonl")
    assert str(lineage) in skipped2 and not any(n.startswith(f"skipped {lineage}") for n in plan2.notes)
    _commit(proto, plan2.batch_id)
    # removed, its replay file is a landing file like any other: read once
    lineage.unlink()
    while run_next(proto) is not None:
        pass
    assert published_ids(proto) == ["o0", "o1", "o10", "o11", "o12", "o2", "o3", "o50"]


def _commit(proto: Protocol, batch_id: int) -> None:
    proto.verify(batch_id, stage(proto, batch_id))
    proto.commit(batch_id)


@pytest.mark.parametrize("content,why", [
    (b'{"records": [{"batch_id": 1, "source": "s"}]}', "KeyError"),
    (b'{"records": "x"}', "not a list"),
    (b'\xff\xfe\x00garbage', "Error"),
    (b'{"records": [{"batch_id": "1e999999", "source": "s", "position": 1}]}', "ValueError"),
    (b"[" * 200_000 + b"]" * 200_000, "RecursionError"),
])
def test_any_lineage_that_does_not_parse_is_skipped_never_a_failed_plan(make_cfg, content, why):
    proto, landing = _rewound(make_cfg)
    _held, lineage = _replay_file(landing, "replay-b9-0123456789ab", range(50, 51), content)
    plan, skipped = _plan_with(proto, landing, range(10, 11))
    assert [Path(f["path"]).name for f in plan.range["files"]] == ["c.jsonl"]
    assert why in skipped[str(lineage)]["reason"]


def test_a_lineage_larger_than_the_bound_is_not_read(make_cfg, monkeypatch):
    proto, landing = _rewound(make_cfg)
    monkeypatch.setattr(replay_mod, "LINEAGE_MAX_BYTES", 1000)
    big = json.loads(_lineage_of_batch(2, landing))
    big["padding"] = "x" * 5000
    _held, lineage = _replay_file(landing, "replay-b9-0123456789ab", range(50, 51), json.dumps(big).encode())
    _plan, skipped = _plan_with(proto, landing, range(10, 11))
    assert "more than a lineage holds (1000)" in skipped[str(lineage)]["reason"]


def test_a_lineage_that_is_a_link_is_never_followed(make_cfg, tmp_path):
    """The link points at a valid lineage elsewhere naming the rewound batch 2: followed, it would
    make replay-x.jsonl void (never read). Not followed: the link is noted, the file is a landing file."""
    proto, landing = _rewound(make_cfg)
    elsewhere = tmp_path / "another-team" / "lineage.json"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(_lineage_of_batch(2, landing))
    path, lineage = _replay_file(landing, "replay-x", range(50, 51), None)
    os.symlink(elsewhere, lineage)
    plan, skipped = _plan_with(proto, landing, range(10, 11))
    assert {Path(f["path"]).name for f in plan.range["files"]} == {"c.jsonl", "replay-x.jsonl"}
    assert any(n.startswith(f"ignored symbolic link {lineage}") for n in plan.notes)
    assert not skipped


def test_a_replay_folder_that_is_a_link_is_never_listed(make_cfg, tmp_path):
    proto, landing = _rewound(make_cfg)
    other = tmp_path / "another-team"
    other.mkdir()
    (other / "replay-y.jsonl.lineage.json").write_bytes(b"[" * 40_000)
    os.symlink(other, landing / "replay", target_is_directory=True)
    plan, skipped = _plan_with(proto, landing, range(10, 11))
    assert [Path(f["path"]).name for f in plan.range["files"]] == ["c.jsonl"] and not skipped


class _SwapToFifo(LocalStorage):
    """A lineage swapped for a FIFO between the listing and the open (a producer's race)."""

    def list_files(self, prefix, recursive=True, links=None, unreadable=None):
        for f in super().list_files(prefix, recursive, links=links, unreadable=unreadable):
            if f.path.endswith(".lineage.json"):
                os.remove(f.path)
                os.mkfifo(f.path)
            yield f


def test_a_lineage_swapped_for_a_fifo_after_the_listing_is_skipped_not_opened_for_ever(make_cfg, monkeypatch):
    proto, landing = _rewound(make_cfg)
    _held, lineage = _replay_file(landing, "replay-b9-0123456789ab", range(50, 51), _lineage_of_batch(2, landing))
    monkeypatch.setattr(replay_mod, "storage_for", lambda _uri: _SwapToFifo())
    _plan, skipped = _plan_with(proto, landing, range(10, 11))
    assert "not a regular file" in skipped[str(lineage)]["reason"]


# -- many empty landing files ----------------------------------------------------------------------

def test_thousands_of_empty_landing_files_never_make_one_batch(make_cfg):
    """Was: an empty file holds no record, so it never closed a batch: 20,000 of them were one batch
    with a 4.1 MB plan record (and a 7.7 s ledger page). Files count toward the batch bounds."""
    cfg = make_cfg()
    landing = Path(cfg.source.path)
    for i in range(2500):
        (landing / f"e{i:05d}.jsonl").touch()
    land_at(landing / "z.jsonl", range(3), T0 + 10**6)
    proto = Protocol(cfg)
    plans, _new = proto.plan_batches(max_batches=5)
    assert [len(p.range["files"]) for p in plans] == [1000, 1000, 501]
    assert sum(p.rows_in for p in plans) == 3
    assert max(os.path.getsize(proto.layout.plan(p.batch_id)) for p in plans) < 400_000


# -- a Delta upstream's log naming files outside its table -----------------------------------------

def _upstream(tmp_path: Path, versions: int = 1) -> str:
    """A real delta-rs table partitioned by day, ``versions`` appends of one record each."""
    import pyarrow as pa
    from deltalake import write_deltalake

    table = str(tmp_path / "upstream")
    for i in range(versions):
        write_deltalake(table, pa.table({"order_id": [f"u{i}"], "amount": [float(i)], "day": ["2026-01-01"]}),
                        mode="append", partition_by=["day"])
    return table


def _another_teams_file(tmp_path: Path) -> Path:
    """A Parquet file of another team, which the downstream's workers can read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "other_team" / "payroll.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"order_id": ["SECRET-salary"], "amount": [250000.0]}), path)
    return path


def _forge(table: str, version: int, path_in_log: str, file: Path) -> None:
    """Append an ``add`` action naming ``path_in_log`` to the upstream's commit ``version`` (a writer
    of its _delta_log)."""
    add = {"add": {"path": path_in_log, "partitionValues": {"day": "2026-01-01"}, "size": file.stat().st_size,
                   "modificationTime": 1_767_225_600_000, "dataChange": True}}
    commit = Path(table) / "_delta_log" / f"{version:020d}.json"
    text = commit.read_text()
    commit.write_text(text + ("" if text.endswith("\n") else "\n") + json.dumps(add) + "\n")


@pytest.fixture
def footers_read(monkeypatch) -> list[str]:
    """The paths whose Parquet footer the delta planner opens."""
    from eobatch.sources.delta import planner

    seen: list[str] = []
    real = planner.footer_rows
    def counted(fs, path, root=None):
        seen.append(path)
        return real(fs, path, root)

    monkeypatch.setattr(planner, "footer_rows", counted)
    return seen


FORGED = {
    "absolute path": lambda secret: str(secret),
    "file URI": lambda secret: f"file://{secret}",
    "file URI of localhost": lambda secret: f"file://localhost{secret}",
    "file: without slashes": lambda secret: f"file:{secret}",
    "../ relative path": lambda secret: "../other_team/payroll.parquet",
    "../ below a partition folder": lambda secret: "day=2026-01-01/../../other_team/payroll.parquet",
    "percent-encoded ../": lambda secret: "%2E%2E/other_team/payroll.parquet",
    "percent-encoded slashes": lambda secret: "..%2Fother_team%2Fpayroll.parquet",
    "another bucket": lambda secret: "s3a://other-team-bucket/payroll.parquet",
    "another bucket, s3:": lambda secret: "S3://other-team-bucket/payroll.parquet",
}


@pytest.mark.parametrize("how", sorted(FORGED))
def test_a_forged_add_outside_the_upstream_table_is_refused_at_plan_never_read(make_cfg, tmp_path, how, footers_read):
    from eobatch.sources import source_for
    from eobatch.sources.delta import UpstreamOutside

    table = _upstream(tmp_path, 2)
    secret = _another_teams_file(tmp_path)
    forged = FORGED[how](secret)
    _forge(table, 1, forged, secret)
    src = source_for(make_cfg(source={"kind": "delta", "table": table}))
    first, n, _notes = src.next_range([], 100)  # the versions before it are a batch
    assert first["versions"] == [0, 1] and n == 1
    read_before = list(footers_read)
    with pytest.raises(UpstreamOutside) as e:
        src.next_range([SimpleNamespace(range=first, notes=[], batch_id=1, source_kind="delta")], 100)
    assert f"upstream version 1 (WRITE) of {table} names the file {forged!r}" in str(e.value)
    assert "outside the table's root" in str(e.value) and "was not read" in str(e.value)
    assert footers_read == read_before  # nothing of version 1 opened: not the good file, not the forged one
    assert str(secret) not in footers_read


def test_the_plan_of_a_pipeline_is_refused_and_records_nothing(make_cfg, tmp_path):
    from eobatch.sources.delta import UpstreamOutside

    table = _upstream(tmp_path, 1)
    secret = _another_teams_file(tmp_path)
    _forge(table, 0, "../other_team/payroll.parquet", secret)
    proto = Protocol(make_cfg(source={"kind": "delta", "table": table}))
    with pytest.raises(UpstreamOutside, match="upstream version 0 .* names the file '../other_team/payroll.parquet'"):
        proto.plan()
    assert proto.ledger.latest_batch_id() == 0


def test_a_location_the_platform_allows_is_read(make_cfg, tmp_path, monkeypatch, footers_read):
    """A shallow clone names its source table's files by absolute paths: the platform (the workers'
    environment, never the YAML) may allow that location."""
    from eobatch.sources import source_for

    table = _upstream(tmp_path, 2)
    secret = _another_teams_file(tmp_path)
    _forge(table, 0, str(secret), secret)
    monkeypatch.setenv("EOBATCH_ALLOW_DELTA_LOCATIONS", f"s3a://elsewhere/x, {secret.parent}")
    rng, n, _notes = source_for(make_cfg(source={"kind": "delta", "table": table})).next_range([], 100)
    assert n == 3 and str(secret) in {f["path"] for f in rng["files"]} and str(secret) in footers_read
    monkeypatch.setenv("EOBATCH_ALLOW_DELTA_LOCATIONS", f"{secret.parent}-not")  # a prefix of the name is not a folder
    with pytest.raises(Exception, match="outside the table's root"):
        source_for(make_cfg(source={"kind": "delta", "table": table})).next_range([], 100)
