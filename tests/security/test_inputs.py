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

import pytest
import unit.conftest as _unit

from eobatch.core import replay as replay_mod
from eobatch.core.protocol import Protocol
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
