"""A configuration edit is an event of the protocol (``config.CONTRACT``): a pending batch commits
under the configuration that planned it, or the edit is refused at plan, naming the key, the old
value and the new one. Real local files, real delta-rs tables, the pyarrow stager for the job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from eobatch.config import CONTRACT, HARMLESS, MERGE_KEYS, SINK_KEYS, TOP_KEYS, config_values
from eobatch.errors import ConfigChanged
from eobatch.protocol import Protocol
from eobatch.sources import kind_for, kind_names
from support.protocol_runs import land_ids, published_ids, run_next
from support.pyarrow_stager import stage

SCHEMA = "order_id STRING NOT NULL, seq BIGINT NOT NULL, seq2 BIGINT NOT NULL, status STRING, op STRING"


def test_every_key_of_a_pipeline_file_is_in_the_contract_or_declared_harmless():
    """A key added to the loader without a role here fails this test: a pending batch could not
    forget it."""
    from eobatch import config as c

    sections = {"source": {k for kind in kind_names() for k in kind_for(kind).config_keys},
                "sink": SINK_KEYS - {"merge"}, "sink.merge": MERGE_KEYS, "quarantine": c.QUARANTINE_KEYS,
                "spark": c.SPARK_KEYS, "retries": c.RETRY_KEYS, "alerts": c.ALERT_KEYS,
                "maintenance": c.MAINTENANCE_KEYS, "transform": {"options"}}
    keys = ({k for k in TOP_KEYS if k not in sections} | {f"{s}.{k}" for s, ks in sections.items() for k in ks}
            | {"transform"})  # transform: <name>, or {name, options}
    assert not (set(CONTRACT) & set(HARMLESS)), "a key is both in the contract and harmless"
    assert keys - set(CONTRACT) - set(HARMLESS) == set(), "keys with no role in config.CONTRACT / HARMLESS"
    assert set(CONTRACT) | set(HARMLESS) <= keys, "roles of keys the loader does not accept"


def merge_cfg(make_cfg, tmp_path, **merge):
    return make_cfg(schema=SCHEMA, sink={"table": str(tmp_path / "lake" / "orders"), "mode": "merge",
                                         "merge": {"keys": ["order_id"], "sequence_by": "seq",
                                                   "delete_when": "op = 'd'", **merge}})


def land(cfg, name: str, records: list[tuple]) -> None:
    lines = [json.dumps({"order_id": k, "seq": s, "seq2": s, "status": st, "op": "d" if st == "DELETE" else "u"})
             for k, s, st in records]
    (Path(cfg.source.path) / name).write_text("".join(x + "\n" for x in lines))


def test_a_changed_sequence_by_is_refused_at_plan_naming_the_key_the_old_and_the_new_value(make_cfg, tmp_path):
    """Was: sink.merge.sequence_by was not in the sink contract, the edit was accepted, and the
    next batch was PREPARED and never committed (ArrowInvalid: No match for FieldRef.Name(seq2):
    the tombstones table has the old sequence column), every retry and recover failing alike."""
    before = merge_cfg(make_cfg, tmp_path)
    land(before, "a.jsonl", [("o1", 1, "new"), ("o2", 1, "DELETE")])
    assert run_next(Protocol(before)) == 1
    after = merge_cfg(make_cfg, tmp_path, sequence_by="seq2")
    land(after, "b.jsonl", [("o1", 2, "paid")])
    proto = Protocol(after)
    for verb in (proto.recover, proto.plan):
        with pytest.raises(ConfigChanged, match=r"sink\.merge\.sequence_by was 'seq' when batch 1 was planned and "
                                                r"is now 'seq2'.*cannot change under an existing table"):
            verb()
    assert not Path(proto.layout.plan(2)).exists()
    assert run_next(Protocol(merge_cfg(make_cfg, tmp_path))) == 2  # put back: it goes on


def test_a_pending_batch_refuses_an_edit_of_a_key_it_depends_on_until_it_is_committed(make_cfg, tmp_path):
    """Batch 2 is PREPARED; then max_record_bytes changes: recover and plan refuse, naming the key,
    both values and the two ways on; with the old value back the batch commits, and then the edit
    is taken by the next batch."""
    cfg = make_cfg()
    land_ids(cfg, "a.jsonl", range(0, 3))
    assert run_next(Protocol(cfg)) == 1
    land_ids(cfg, "b.jsonl", range(3, 5))
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    edited = make_cfg(max_record_bytes=4096)
    for verb in (Protocol(edited).recover, Protocol(edited).plan, lambda: Protocol(edited).commit(2)):
        with pytest.raises(ConfigChanged) as e:
            verb()
        msg = str(e.value)
        assert "max_record_bytes was 1048576 when batch 2 was planned and is now 4096" in msg, msg
        assert "Batch 2 is PREPARED" in msg and "Repair: put the old value(s) back" in msg, msg
        assert "make reset-batch PIPELINE=orders BATCH=2" in msg, msg
    assert DeltaTable(cfg.sink_table).transaction_version("orders") == 1
    assert run_next(Protocol(cfg)) is None  # the old value back: recover commits batch 2
    assert published_ids(proto) == [f"o{i}" for i in range(5)]
    land_ids(cfg, "c.jsonl", range(5, 6))
    assert run_next(Protocol(edited)) == 3  # nothing pending: the edit is taken
    assert Protocol(edited).ledger.plan(3).config == config_values(edited)


def test_a_harmless_edit_does_not_stop_a_pending_batch(make_cfg):
    cfg = make_cfg()
    land_ids(cfg, "a.jsonl", range(0, 3))
    proto = Protocol(cfg)
    plan, _ = proto.plan()
    proto.verify(plan.batch_id, stage(proto, plan.batch_id))
    edited = make_cfg(description="edited", retries={"commit": 3},
                      source={**vars_source(cfg), "max_records_per_batch": 7})
    assert Protocol(edited).recover().actions  # commits batch 1
    assert published_ids(proto) == ["o0", "o1", "o2"]


def vars_source(cfg) -> dict:
    return {"kind": "files", "path": cfg.source.path}
