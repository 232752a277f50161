"""eobatch.replay on real delta-rs tables (the pyarrow stager): a batch's quarantined records
written back as one landing file with their lineage, published once by the next batch after the
rule that refused them changed; a second replay of the same selection is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eobatch import cli
from eobatch.errors import UsageError
from eobatch.protocol import Protocol
from eobatch.replay import replay
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
    lineage = json.loads(Path(str(landed) + ".lineage.json").read_text())
    assert lineage["records"] == [{"line": 1, "batch_id": 1, "source": str(Path(fixed.source.path) / "a.jsonl"),
                                   "position": 2, "reason": "missing required field 'customer'"}]

    assert run_next(proto) == 2
    assert published_ids(proto) == ["anon", "o1", "o2"]
    assert run_next(proto) is None  # nothing else: the lineage file is not data
    with pytest.raises(UsageError, match="already replayed .* and published by a later batch"):
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
