"""eobatch.protocol.replay on real delta-rs tables (the pyarrow stager): a batch's quarantined records
written back as one landing file with their lineage, published once by the next batch after the
rule that refused them changed; a second replay of the same selection is refused."""

from __future__ import annotations

import collections
import contextlib
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import eobatch
from eobatch import cli
from eobatch.errors import UsageError
from eobatch.protocol import Protocol
from eobatch.protocol.backlog import backlog
from eobatch.protocol.replay import replay
from eobatch.storage.fs import LocalStorage
from support.checks import read_rows
from support.protocol_runs import published_ids, run_next


def _land(cfg, name: str, lines: list[str]) -> None:
    (Path(cfg.source.path) / name).write_text("".join(line + "\n" for line in lines))


def test_fixed_records_are_replayed_once_with_their_lineage(make_cfg, monkeypatch, capsys):
    strict = "order_id STRING NOT NULL, customer STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"
    cfg = make_cfg(schema=strict)
    anonymous = json.dumps({"order_id": "anon", "amount": 2.5})
    _land(cfg, "a.jsonl", [json.dumps({"order_id": "o1", "customer": "c"}), anonymous, "{not json",
                           json.dumps({"order_id": "o2", "customer": "c"})])
    assert run_next(Protocol(cfg)) == 1
    bad = read_rows(Path(cfg.quarantine_table))
    assert sorted(r["reason"] for r in bad) == ["malformed JSON: not a JSON object",
                                                "missing required field 'customer'"]

    fixed = make_cfg()  # customer is optional now: the record fits
    proto = Protocol(fixed)
    monkeypatch.setenv("PIPELINES_DIR", str(Path(fixed.file).parent))
    assert cli.main(["replay", "orders", "1", "--reason", "customer"]) == 0
    out = capsys.readouterr().out
    assert "replayed 1 quarantined record(s) of batch 1" in out
    (landed,) = (Path(fixed.source.path) / "replay").glob("*.jsonl")
    assert landed.read_text() == anonymous + "\n"
    lineage = json.loads(Path(proto.layout.replay(1)).read_text())
    assert f"lineage: {proto.layout.replay(1)}" in out and lineage["file"] == str(landed)
    assert lineage["records"] == [{"line": 1, "batch_id": 1, "source": str(Path(fixed.source.path) / "a.jsonl"),
                                   "position": 2, "reason": "missing required field 'customer'"}]

    assert run_next(proto) == 2
    assert published_ids(proto) == ["anon", "o1", "o2"]
    assert run_next(proto) is None  # nothing else
    with pytest.raises(UsageError, match="already replayed .* published by a later batch"):
        replay(proto, 1, "customer")
    assert cli.main(["replay", "orders", "1", "--reason", "customer"]) == 2  # the same, as the CLI says it
    assert published_ids(proto) == ["anon", "o1", "o2"]


def test_replay_refuses_what_it_cannot_do_exactly(make_cfg, by_prefix):
    cfg = make_cfg()
    _land(cfg, "a.jsonl", [json.dumps({"order_id": "o1"})])
    run_next(Protocol(cfg))
    with pytest.raises(UsageError, match="batch 1 has no quarantined record to replay"):
        replay(Protocol(cfg), 1)
    with pytest.raises(UsageError, match="interval mode"):
        replay(Protocol(by_prefix), 1)
    json_only = make_cfg(source={"kind": "files", "path": cfg.source.path, "include": ["*.json"]})
    with pytest.raises(UsageError, match=r"does not take that name \(they would never be read\): add '\*.jsonl'"):
        replay(Protocol(json_only), 1)  # its landing file would never be read


# -- at most once, whatever the selections (issue 27) -------------------------------------------------
STRICT = "order_id STRING NOT NULL, customer STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"


def _quarantine_batch_1(make_cfg) -> tuple:
    """Batch 1 quarantines two records without a customer and one malformed line, then the rule
    is relaxed (customer optional): the pipeline that replays, its protocol and the raw lines."""
    cfg = make_cfg(schema=STRICT)
    anon = [json.dumps({"order_id": f"anon{i}", "amount": 1.0}) for i in (1, 2)]
    _land(cfg, "a.jsonl", [json.dumps({"order_id": "o1", "customer": "c"}), anon[0], "{not json", anon[1]])
    assert run_next(Protocol(cfg)) == 1
    fixed = make_cfg()
    return fixed, Protocol(fixed), anon


def _publish_all(proto) -> collections.Counter:
    """Run batches until nothing is left; the sink's order ids as an independent reader counts them."""
    while run_next(proto) is not None:
        pass
    return collections.Counter(r["order_id"] for r in read_rows(Path(proto.cfg.sink_table)))


def _cli(cfg, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eobatch.cli", "replay", "orders", *args],
                          env={"PIPELINES_DIR": str(Path(cfg.file).parent), "PATH": "/usr/bin:/bin",
                               "PYTHONPATH": str(Path(eobatch.__file__).parents[1]), **env},
                          capture_output=True, text=True, timeout=300)


def test_a_second_selection_replays_only_the_records_not_replayed_yet(make_cfg, monkeypatch, capsys):
    """Reproduced: REASON=customer, then no REASON, published the two records twice."""
    cfg, proto, _anon = _quarantine_batch_1(make_cfg)
    monkeypatch.setenv("PIPELINES_DIR", str(Path(cfg.file).parent))
    assert cli.main(["replay", "orders", "1", "--reason", "customer"]) == 0
    first = capsys.readouterr().out
    assert cli.main(["replay", "orders", "1"]) == 0  # overlaps the first: only the malformed line is new
    second = capsys.readouterr().out
    assert _publish_all(proto) == {"o1": 1, "anon1": 1, "anon2": 1}
    assert "replayed 2 quarantined record(s) of batch 1" in first
    assert "replayed 1 quarantined record(s) of batch 1" in second and "2 skipped: already replayed (replay 1)" in second
    assert cli.main(["replay", "orders", "1"]) == 2  # nothing left to replay: refused, nothing written
    assert "all 3 selected record(s) of batch 1 were already replayed" in capsys.readouterr().err
    assert _publish_all(proto) == {"o1": 1, "anon1": 1, "anon2": 1}
    # the malformed line was replayed once and quarantined again, from its replay file
    assert sorted(r["batch_id"] for r in read_rows(Path(cfg.quarantine_table)) if r["raw"] == "{not json") == [1, 2]


def _earlier_versions_replay(cfg, line: str) -> Path:
    """A replay file of batch 1's second line as a version before the ledger's records left it:
    the line, and its lineage beside it."""
    old = Path(cfg.source.path) / "replay" / "replay-b1-0123456789ab.jsonl"
    old.parent.mkdir()
    old.write_text(line + "\n")
    Path(f"{old}.lineage.json").write_text(json.dumps({"replay_of_batch": 1, "reason_filter": None, "records": [
        {"line": 1, "batch_id": 1, "source": str(Path(cfg.source.path) / "a.jsonl"), "position": 2,
         "reason": "missing required field 'customer'"}]}))
    return old


def test_records_an_earlier_version_replayed_are_not_replayed_again(make_cfg, monkeypatch, capsys):
    """That version kept no record in the ledger, only the lineage beside its replay file."""
    cfg, proto, anon = _quarantine_batch_1(make_cfg)
    _earlier_versions_replay(cfg, anon[0])
    monkeypatch.setenv("PIPELINES_DIR", str(Path(cfg.file).parent))
    assert cli.main(["replay", "orders", "1", "--reason", "customer"]) == 0
    assert "replayed 1 quarantined record(s) of batch 1" in capsys.readouterr().out
    assert _publish_all(proto) == {"o1": 1, "anon1": 1, "anon2": 1}


def test_two_replays_racing_with_overlapping_selections_replay_each_record_once(make_cfg, monkeypatch):
    """Both read the replays recorded so far (none) before either records its own: one wins
    the replay record, the other loses it, reads again and replays only what is left."""
    cfg, proto, _anon = _quarantine_batch_1(make_cfg)
    both_decided = threading.Barrier(2, timeout=5)
    put = LocalStorage.put_if_absent
    waited = {threading.get_ident()}  # this thread's (the runs after) do not wait
    decisions = []

    def put_together(self, path, data, **kw):
        if threading.get_ident() not in waited:  # each one's first put-if-absent: at the same time
            waited.add(threading.get_ident())
            with contextlib.suppress(threading.BrokenBarrierError):
                both_decided.wait()
            decisions.append((path.rsplit("/", 1)[-1], put(self, path, data, **kw)))
            return decisions[-1][1]
        return put(self, path, data, **kw)

    monkeypatch.setattr(LocalStorage, "put_if_absent", put_together)
    done = {}

    def run(selection):
        try:
            done[selection] = replay(Protocol(cfg), 1, selection)["records"]
        except UsageError as e:  # all of its selection taken by the other: refused, nothing written
            done[selection] = str(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in ("customer", None)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _publish_all(proto) == {"o1": 1, "anon1": 1, "anon2": 1}
    assert sorted(v if isinstance(v, int) else 0 for v in done.values()) in ([1, 2], [0, 3]), done
    assert all(isinstance(v, int) or "were already replayed (replay 1 as" in v for v in done.values()), done
    assert sorted(decisions) == [("0000000001.json", False), ("0000000001.json", True)]  # they raced


def test_crash_after_the_replay_record_before_the_landing_file(make_cfg, monkeypatch, capsys):
    """The records are recorded as replayed but not written yet: the next replay writes them
    (not lost), once (not doubled), also after their file was published and removed."""
    cfg, proto, _anon = _quarantine_batch_1(make_cfg)
    crashed = _cli(cfg, "1", "--reason", "customer", EOBATCH_CRASH="replay.after_record")
    assert crashed.returncode == 137, crashed.stderr
    assert not (Path(cfg.source.path) / "replay").exists()
    assert _publish_all(proto) == {"o1": 1}
    monkeypatch.setenv("PIPELINES_DIR", str(Path(cfg.file).parent))
    assert cli.main(["replay", "orders", "1", "--reason", "customer"]) == 0
    assert "finished replay 1 of batch 1 (2 record(s))" in capsys.readouterr().out
    assert _publish_all(proto) == {"o1": 1, "anon1": 1, "anon2": 1}
    (landed,) = (Path(cfg.source.path) / "replay").glob("*.jsonl")
    landed.unlink()  # published: a clean-up removes it
    assert cli.main(["replay", "orders", "1", "--reason", "customer"]) == 2
    assert not list((Path(cfg.source.path) / "replay").glob("*.jsonl"))
    assert _publish_all(proto) == {"o1": 1, "anon1": 1, "anon2": 1}


def test_replay_never_writes_through_a_planted_link(make_cfg, tmp_path, monkeypatch, capsys):
    cfg, proto, _anon = _quarantine_batch_1(make_cfg)
    monkeypatch.setenv("PIPELINES_DIR", str(Path(cfg.file).parent))
    other = tmp_path / "other_landing"  # another pipeline's landing zone
    other.mkdir()
    (Path(cfg.source.path) / "replay").symlink_to(other)
    status = cli.main(["replay", "orders", "1"])
    assert list(other.iterdir()) == []
    assert status == 5 and f"{Path(cfg.source.path) / 'replay'} is a symbolic link" in capsys.readouterr().err
    assert _publish_all(proto) == {"o1": 1}
    (Path(cfg.source.path) / "replay").unlink()
    assert cli.main(["replay", "orders", "1"]) == 0  # nothing was recorded as replayed: all of them now
    assert _publish_all(proto) == {"o1": 1, "anon1": 1, "anon2": 1}
    assert list(other.iterdir()) == []


# -- a replay meets a rewind: each incarnation of a record replayed once (issue 27) --------------------
def _quarantine(proto) -> collections.Counter:
    """The quarantine table's raw lines, counted."""
    return collections.Counter(r["raw"] for r in read_rows(Path(proto.cfg.quarantine_table)))


def test_a_rewind_to_before_the_replayed_batch_voids_its_replays_published_or_not(make_cfg, capsys, monkeypatch):
    """Was: replay 1's file published by batch 2, replay 2's not yet read; a rewind to batch 1 read
    a.jsonl (the fixed rule passes its records) and both replay files again: the two records were
    published twice, the malformed line quarantined twice (and replayable twice)."""
    cfg, proto, _anon = _quarantine_batch_1(make_cfg)
    one = replay(proto, 1, "customer")
    assert run_next(proto) == 2  # publishes replay 1's file
    two = replay(proto, 1)  # the malformed line: its file waits for a batch
    assert (one["records"], two["records"]) == (2, 1)
    Path(one["file"]).unlink()  # published: a clean-up removes it. Not a loss for the rewind: never read again
    proto.rewind(1, run_id="ui")
    assert _publish_all(proto) == {"o1": 1, "anon1": 1, "anon2": 1}
    assert _quarantine(proto) == {"{not json": 1}
    plan3 = proto.ledger.plan(3)  # reserved by the rewind: a.jsonl, neither replay file
    assert [f["path"].rsplit("/", 1)[-1] for f in plan3.range["files"]] == ["a.jsonl"]
    assert [n.split(": ", 1)[1].split(" is void")[0] for n in plan3.notes if "is void" in n] == ["replay 2"]
    assert Path(two["file"]).exists()  # left where it is, never read: the plans say so once
    assert backlog(proto)["files"] == 0  # nor waiting to be published
    assert sum("replay 2 is void" in n for b in (3, 4) if proto.ledger.plan(b) for n in proto.ledger.plan(b).notes) == 1

    with pytest.raises(UsageError, match="batch 1 was rewound .*after batch 2 to before batch 1"):
        replay(proto, 1)
    # the malformed line quarantined again by batch 3 is another incarnation: replayable once
    three = replay(proto, 3)
    assert not Path(one["file"]).exists()  # a void replay's file is never written again
    assert (three["replay"], three["records"], three["already"]) == (3, 1, 0)
    assert _publish_all(proto) == {"o1": 1, "anon1": 1, "anon2": 1}
    assert _quarantine(proto) == {"{not json": 2}  # from a.jsonl in batch 3, from replay 3's file
    with pytest.raises(UsageError, match=r"already replayed \(replay 3 as"):
        replay(proto, 3)


def test_a_rewind_to_between_the_quarantine_and_the_replays_batch_publishes_the_replay_once_again(make_cfg):
    """Batch 1 (quarantined) stays: replay 1 still counts, and its file, which only batch 2 had
    read, is read again once; its records cannot be replayed a second time."""
    cfg, proto, _anon = _quarantine_batch_1(make_cfg)
    replay(proto, 1, "customer")
    assert run_next(proto) == 2
    _land(cfg, "b.jsonl", [json.dumps({"order_id": "o2"})])
    assert run_next(proto) == 3
    proto.rewind(2, run_id="ui")
    assert _publish_all(proto) == {"o1": 1, "o2": 1, "anon1": 1, "anon2": 1}
    assert not any("void" in n for b in (4, 5) if proto.ledger.plan(b) for n in proto.ledger.plan(b).notes)
    with pytest.raises(UsageError, match="all 2 selected record.* already replayed"):
        replay(proto, 1, "customer")
    assert _publish_all(proto) == {"o1": 1, "o2": 1, "anon1": 1, "anon2": 1}


def test_a_rewind_that_died_after_its_reservation_already_voids_the_replays_it_undoes(make_cfg, monkeypatch):
    """Between the rewind's reservation (batch 3, planned without the replay file) and its record,
    the reservation is the decision: a replay of batch 1 is refused, and the replay file is never
    read; the next run's recover records the rewind and restores the tables."""
    cfg, proto, _anon = _quarantine_batch_1(make_cfg)
    one = replay(proto, 1, "customer")
    assert run_next(proto) == 2

    class Died(BaseException):
        pass

    def die(rec):
        raise Died

    monkeypatch.setattr(proto.ledger, "put_rewind", die)
    with pytest.raises(Died):
        proto.rewind(1, run_id="ui")
    monkeypatch.undo()
    fresh = Protocol(cfg)
    assert fresh.ledger.rewinds() == [] and fresh.ledger.plan(3).rewind is not None
    assert [f["path"] for f in fresh.ledger.plan(3).range["files"]] == [str(Path(cfg.source.path) / "a.jsonl")]
    assert Path(one["file"]).exists()
    with pytest.raises(UsageError, match="batch 1 was rewound"):
        replay(fresh, 1)
    assert _publish_all(fresh) == {"o1": 1, "anon1": 1, "anon2": 1}
    assert [r.key for r in fresh.ledger.rewinds()] == ["2-1"]


def test_a_replay_file_of_an_earlier_version_is_void_too_after_a_rewind_to_before_its_batch(make_cfg):
    """Its lineage names its origin batch: undone by the rewind, the file is not read again."""
    cfg, proto, anon = _quarantine_batch_1(make_cfg)
    old = _earlier_versions_replay(cfg, anon[0])
    assert _publish_all(proto) == {"o1": 1, "anon1": 1}
    proto.rewind(1, run_id="ui")
    assert _publish_all(proto) == {"o1": 1, "anon1": 1, "anon2": 1}
    assert any(n.startswith(f"skipped {old}: an earlier replay is void: batch 1") for n in proto.ledger.plan(3).notes)


def test_a_lineage_that_cannot_be_read_refuses_a_replay_whatever_its_bytes_raise(make_cfg):
    """`make replay` reads the lineages strictly: 40 kB of ``[`` (a RecursionError of the parser) is
    refused as a lineage naming its file, nothing replayed; a link is not one (never followed)."""
    cfg, proto, _anon = _quarantine_batch_1(make_cfg)
    folder = Path(cfg.source.path) / "replay"
    folder.mkdir()
    lineage = folder / "replay-b1-0123456789ab.jsonl.lineage.json"
    lineage.write_bytes(b"[" * 40_000)
    with pytest.raises(UsageError, match=r"replay-b1-0123456789ab.jsonl.lineage.json is not the lineage of a "
                                         r"replay \(RecursionError"):
        replay(proto, 1, "customer")
    lineage.unlink()
    outside = Path(cfg.source.path).parent / "elsewhere.json"
    outside.write_bytes(b"[" * 40_000)
    lineage.symlink_to(outside)
    assert replay(proto, 1, "customer")["records"] == 2  # the link is no lineage: never read
