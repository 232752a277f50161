"""kind: delta: its config, its planning from a real Delta log (delta-rs writes the upstream:
appends, OPTIMIZE, DELETE, MERGE, RESTORE, VACUUM, log cleanup) and its range. No Spark here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from eobatch.pipelines.loader import ConfigError
from eobatch.sources import kind_for, range_summary, source_for
from eobatch.sources.delta import DeltaConfig, UpstreamChanged, UpstreamDataLoss, UpstreamRefused
from eobatch.sources.delta.log import DeltaLog, parse_commit
from support.records import stage_summary as _summary


class _Plan:
    """A previous batch plan as next_range sees it."""

    def __init__(self, rng, batch_id=1):
        self.range, self.notes, self.batch_id, self.source_kind = rng, [], batch_id, "delta"


def _up(tmp_path) -> str:
    return str(tmp_path / "upstream")


def _append(table: str, ids, day="2026-01-01", **kw) -> int:
    write_deltalake(table, pa.table({"order_id": [f"o{i}" for i in ids], "amount": [float(i) for i in ids],
                                     "day": [day] * len(ids)}), mode="append", partition_by=["day"], **kw)
    return DeltaTable(table).version()


def _cfg(make_cfg, tmp_path, **extra):
    return make_cfg(source={"kind": "delta", "table": _up(tmp_path), **extra})


def _plan_all(cfg, limit=None):
    """Every batch the planner gives from the start, as (range, records, notes)."""
    src, plans, out = source_for(cfg), [], []
    while True:
        rng, n, notes = src.next_range(plans, limit or cfg.source.max_records_per_batch)
        if rng is None:
            return out
        out.append((rng, n, notes))
        plans.append(_Plan(rng, len(plans) + 1))


def _ids(rng) -> list[int]:
    return sorted(f["version"] for f in rng["files"])


# -- config ----------------------------------------------------------------------------------


def test_config_keys_defaults_and_refusals(make_cfg, tmp_path):
    cfg = _cfg(make_cfg, tmp_path)
    assert isinstance(cfg.source, DeltaConfig)
    assert (cfg.source.table, cfg.source.starting_version, cfg.source.max_versions_per_batch,
            cfg.source.on_change_commit, cfg.source.on_data_loss) == (_up(tmp_path), 0, 100, "fail", "fail")
    assert cfg.source.path == _up(tmp_path) and kind_for("delta").position_based
    with pytest.raises(ConfigError, match=r"source.on_change_commit: 'merge' must be one of fail, skip"):
        _cfg(make_cfg, tmp_path, on_change_commit="merge")
    with pytest.raises(ConfigError, match=r"source.table: is required"):
        make_cfg(source={"kind": "delta"})
    with pytest.raises(ConfigError, match=r"source.kind: 'delta' reads its upstream table's versions in order"):
        make_cfg(mode="interval", schedule="@hourly", source={"kind": "delta", "table": _up(tmp_path)})


def test_its_own_tables_may_not_be_inside_the_upstream_table(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match="overlaps"):
        make_cfg(source={"kind": "delta", "table": str(tmp_path)})


def test_conn_id_serves_an_s3_upstream_in_another_bucket_only(make_cfg, tmp_path):
    """``conn_id``: an upstream in another store; not for a local table, nor for a bucket that also holds
    the pipeline's own tables (one bucket, one set of settings); credentials, so not in the fingerprint."""
    cfg = make_cfg(source={"kind": "delta", "table": "s3a://upstream/lake/orders", "conn_id": "up_s3"})
    assert cfg.source.bucket_connections() == {"upstream": "up_s3"}
    plain = make_cfg(source={"kind": "delta", "table": "s3a://upstream/lake/orders"})
    assert plain.source.bucket_connections() == {} and plain.fingerprint() == cfg.fingerprint()
    with pytest.raises(ConfigError, match=r"source.conn_id: 'up_s3' names the connection of an S3 store; table .* is "
                                          r"on the local disk"):
        _cfg(make_cfg, tmp_path, conn_id="up_s3")
    with pytest.raises(ConfigError, match=r"source.conn_id: 'up_s3' serves bucket 'lake', which also holds this "
                                          r"pipeline's sink.table"):
        make_cfg(source={"kind": "delta", "table": "s3a://lake/up/orders", "conn_id": "up_s3"},
                 sink={"table": "s3a://lake/down/orders"}, quarantine={"table": "s3a://other/down/bad"})


# -- planning ------------------------------------------------------------------------------


def test_appends_are_read_once_each_in_version_order_with_footer_counts(make_cfg, tmp_path):
    t = _up(tmp_path)
    _append(t, [1, 2])          # v0
    _append(t, [3], day="2026-01-02")  # v1
    _append(t, [4, 5, 6])       # v2
    batches = _plan_all(_cfg(make_cfg, tmp_path))
    assert len(batches) == 1
    rng, n, _ = batches[0]
    assert n == 6 and rng["versions"] == [0, 3] and _ids(rng) == [0, 1, 2]
    assert {f["partition_values"]["day"] for f in rng["files"]} == {"2026-01-01", "2026-01-02"}
    assert rng["partition_columns"] == {"day": "string"} and rng["table_id"] == DeltaTable(t).metadata().id
    assert all(os.path.isabs(f["path"]) and os.path.exists(f["path"]) for f in rng["files"])
    # nothing new: nothing planned; a new version: only it
    src = source_for(_cfg(make_cfg, tmp_path))
    assert src.next_range([_Plan(rng)], 100)[0] is None
    _append(t, [7])
    rng2, n2, _ = src.next_range([_Plan(rng)], 100)
    assert (rng2["versions"], n2, _ids(rng2)) == ([3, 4], 1, [3])


def test_batches_end_at_version_boundaries_within_the_record_and_version_limits(make_cfg, tmp_path):
    t = _up(tmp_path)
    for i in range(5):
        _append(t, range(10 * i, 10 * i + 3))  # 3 records per version
    by_records = _plan_all(_cfg(make_cfg, tmp_path, max_records_per_batch=7))
    assert [b[0]["versions"] for b in by_records] == [[0, 2], [2, 4], [4, 5]]
    assert [b[1] for b in by_records] == [6, 6, 3]
    by_versions = _plan_all(_cfg(make_cfg, tmp_path, max_versions_per_batch=3))
    assert [b[0]["versions"] for b in by_versions] == [[0, 3], [3, 5]]
    # a version larger than the limit is read whole, alone (version granularity)
    one = _plan_all(_cfg(make_cfg, tmp_path, max_records_per_batch=2))
    assert [b[1] for b in one] == [3] * 5


def test_files_count_toward_the_batch_bounds_at_version_boundaries(make_cfg, tmp_path):
    """At most max_files_per_batch files a batch, whatever their records (an empty file counts), at
    version boundaries: a version of more files is a batch of its own."""
    t = _up(tmp_path)
    write_deltalake(t, pa.table({"order_id": ["a", "b", "c"], "amount": [1.0, 2.0, 3.0],
                                 "day": ["2026-01-01", "2026-01-02", "2026-01-03"]}), partition_by=["day"])
    _append(t, range(1))
    _append(t, range(1, 2))
    _append(t, range(2, 3))
    assert [len(r["files"]) for r, _n, _ in _plan_all(_cfg(make_cfg, tmp_path))] == [6]
    two = _plan_all(_cfg(make_cfg, tmp_path, max_files_per_batch=2))
    assert [(r["versions"], len(r["files"])) for r, _n, _ in two] == [([0, 1], 3), ([1, 3], 2), ([3, 4], 1)]
    assert _cfg(make_cfg, tmp_path).source.max_files_per_batch == 1000
    with pytest.raises(ConfigError, match="source.max_files_per_batch: must be at most 3000"):
        _cfg(make_cfg, tmp_path, max_files_per_batch=5000)


def test_compaction_upstream_is_never_read_again(make_cfg, tmp_path):
    t = _up(tmp_path)
    _append(t, [1, 2])
    _append(t, [3])
    DeltaTable(t).optimize.compact()  # v2: dataChange=false
    _append(t, [4])  # v3
    batches = _plan_all(_cfg(make_cfg, tmp_path))
    assert sum(b[1] for b in batches) == 4
    assert [v for b in batches for v in _ids(b[0])] == [0, 1, 3]
    # read before the compaction, then after it: the compacted rows are not read twice
    t2 = str(tmp_path / "u2")
    _append(t2, [1])
    _append(t2, [2])
    cfg = make_cfg(source={"kind": "delta", "table": t2})
    src = source_for(cfg)
    first = src.next_range([], 100)[0]
    DeltaTable(t2).optimize.compact()
    assert src.next_range([_Plan(first)], 100)[0] is None
    _append(t2, [9])
    nxt, n, _ = src.next_range([_Plan(first)], 100)
    assert n == 1 and _ids(nxt) == [3] and nxt["versions"] == [2, 4]


def test_a_version_that_changes_rows_is_refused_naming_it_or_skipped_when_asked(make_cfg, tmp_path):
    t = _up(tmp_path)
    _append(t, [1, 2])
    _append(t, [3])
    DeltaTable(t).delete("order_id = 'o3'")  # v2
    _append(t, [4])  # v3
    with pytest.raises(UpstreamChanged, match=r"upstream version 2 \(DELETE\) of .* changed or deleted rows"):
        _cfg_plan = _plan_all(_cfg(make_cfg, tmp_path))
    # what comes before it is read first; the refusal comes with the next plan
    src = source_for(_cfg(make_cfg, tmp_path, max_records_per_batch=1))
    rng, n, _ = src.next_range([], 1)
    assert rng["versions"] == [0, 1]
    rng, n, _ = src.next_range([_Plan(rng)], 100)
    assert rng["versions"] == [1, 2] and n == 1
    with pytest.raises(UpstreamChanged, match="on_change_commit: skip"):
        src.next_range([_Plan(rng)], 100)
    skipped = _plan_all(_cfg(make_cfg, tmp_path, on_change_commit="skip"))
    (rng, n, notes), = skipped
    assert n == 4 and _ids(rng) == [0, 1, 3] and rng["skipped"] == {"2": "DELETE: rows changed or deleted "
                                                                          "(on_change_commit: skip)"}
    assert any("version 2 (DELETE)" in x and "passed over" in x for x in notes)


def _feed_table(t: str) -> None:
    """An upstream with the Change Data Feed on: v0 three rows, v1 a MERGE (an update, an insert),
    v2 a DELETE, v3 an append."""
    write_deltalake(t, pa.table({"order_id": ["o1", "o2", "o3"], "amount": [1.0, 2.0, 3.0]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    (DeltaTable(t).merge(pa.table({"order_id": ["o2", "o4"], "amount": [20.0, 4.0]}), predicate="t.order_id = s.order_id",
                         source_alias="s", target_alias="t").when_matched_update_all().when_not_matched_insert_all().execute())
    DeltaTable(t).delete("order_id = 'o3'")
    write_deltalake(t, pa.table({"order_id": ["o5"], "amount": [5.0]}), mode="append")


def test_the_change_feed_reads_each_changing_versions_change_data(make_cfg, tmp_path):
    t = _up(tmp_path)
    _feed_table(t)
    with pytest.raises(UpstreamChanged, match=r"version 1 \(MERGE\).* It wrote change data: set source.change_feed: true"):
        _plan_all(_cfg(make_cfg, tmp_path))
    (rng, n, _), = _plan_all(_cfg(make_cfg, tmp_path, change_feed=True))
    assert rng["change_feed"] is True and rng["versions"] == [0, 4]
    assert [(f["version"], bool(f.get("change_data")), f["records"]) for f in rng["files"]] == [
        (0, False, 3), (1, True, 3), (2, True, 1), (3, False, 1)]  # MERGE: pre- and post-image of o2, insert o4
    assert n == 8 and all("/_change_data/" in f["path"] for f in rng["files"] if f.get("change_data"))


def _kinds(rng) -> list[tuple[int, str, int]]:
    """(version, how its rows are read, records) of each planned file: insert (an added file),
    change (change data), delete (a removed file)."""
    return [(f["version"], "delete" if f.get("removed") else "change" if f.get("change_data") else "insert",
             f["records"]) for f in rng["files"]]


def test_the_change_feed_reads_a_change_without_change_data_as_its_added_and_removed_files(make_cfg, tmp_path):
    """The Delta protocol's "Change Data Files": a version with no cdc action has, as its changes,
    its added files' rows as inserts and its removed files' rows as deletes. Whole partitions
    deleted, a DELETE without a condition (truncate) and an overwrite write no change data."""
    t = _up(tmp_path)
    _append(t, [1, 2])                          # v0
    _append(t, [3], day="2026-01-02")           # v1
    DeltaTable(t).delete("day = '2026-01-01'")  # v2: a whole partition: v0's file removed, nothing written
    write_deltalake(t, pa.table({"order_id": ["o7", "o8"], "amount": [7.0, 8.0], "day": ["2026-01-03"] * 2}),
                    mode="overwrite", partition_by=["day"])  # v3: v1's file removed, one added
    DeltaTable(t).delete()                      # v4: truncate: v3's file removed
    for v in (2, 3, 4):
        assert parse_commit(t, v, (Path(t) / "_delta_log" / f"{v:020d}.json").read_bytes()).changes == ()
    with pytest.raises(UpstreamChanged, match=r"version 2 \(DELETE\).* set source.change_feed: true in orders's YAML "
                                              r"to read the upstream's changes as records"):
        _plan_all(_cfg(make_cfg, tmp_path))
    batches = _plan_all(_cfg(make_cfg, tmp_path, change_feed=True))
    # a batch never reads one file twice (as an insert, then as a delete): it ends before the version
    # that removes a file it reads
    assert [b[0]["versions"] for b in batches] == [[0, 2], [2, 4], [4, 5]]
    assert [_kinds(b[0]) for b in batches] == [
        [(0, "insert", 2), (1, "insert", 1)],
        [(2, "delete", 2), (3, "insert", 2), (3, "delete", 1)],
        [(4, "delete", 2)]]
    assert [b[1] for b in batches] == [3, 5, 2]  # a delete is a record, as a change data row is
    first, second, third = (b[0] for b in batches)
    assert second["files"][0]["path"] == first["files"][0]["path"]  # the file v0 added, v2 removed
    assert second["files"][0]["partition_values"] == {"day": "2026-01-01"}
    assert all(os.path.exists(f["path"]) and f["size"] > 0 for b in batches for f in b[0]["files"])
    stamps = {v: parse_commit(t, v, (Path(t) / "_delta_log" / f"{v:020d}.json").read_bytes()).info["timestamp"]
              for v in range(5)}
    assert all(f["timestamp_ms"] == stamps[f["version"]] for b in batches for f in b[0]["files"])
    assert kind_for("delta").range(second).summary() == f"{t}: versions 2..3, 3 file(s) (2 removed: read as deletes)"


def test_a_removed_file_vacuumed_before_it_was_read_is_data_loss_unless_accepted(make_cfg, tmp_path):
    t = _up(tmp_path)
    _append(t, [1, 2])  # v0
    cfg = _cfg(make_cfg, tmp_path, change_feed=True)
    src = source_for(cfg)
    (b1, _n, _), = _plan_all(cfg)
    DeltaTable(t).delete()  # v1: the truncate removes v0's file
    DeltaTable(t).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with pytest.raises(UpstreamDataLoss, match=r"removed by upstream version 1 \(DELETE\) of .* is no longer on "
                                               r"storage.*its rows are that version's deletes.*on_data_loss: accept"):
        src.next_range([_Plan(b1)], 100)
    accept = source_for(_cfg(make_cfg, tmp_path, change_feed=True, on_data_loss="accept"))
    rng, n, notes = accept.next_range([_Plan(b1)], 100)
    assert n == 0 and rng["versions"][0] == 1 and [(f["version"], f["removed"], f["lost"]) for f in rng["files"]] == [
        (1, True, True)]  # the VACUUM's own versions change no data
    assert "deletes, which are not applied" in rng["files"][0]["skipped"]
    assert any("deletes, which are not applied" in x for x in notes)


def test_a_removed_file_with_a_deletion_vector_is_refused(make_cfg, tmp_path):
    """A removed file whose rows were partly deleted already (its deletion vector) is not read as
    deletes: its rows would delete rows that are no longer in the table."""
    t = _up(tmp_path)
    _append(t, [1, 2])  # v0
    path = DeltaTable(t).file_uris()[0].rsplit("/", 2)
    rel = f"{path[-2]}/{path[-1]}"
    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4, "sizeInBytes": 40,
          "cardinality": 1}
    (Path(t) / "_delta_log" / f"{1:020d}.json").write_text(
        '{"commitInfo":{"timestamp":1,"operation":"DELETE"}}\n'
        + '{"remove":' + json.dumps({"path": rel, "dataChange": True, "deletionTimestamp": 1, "partitionValues":
                                     {"day": "2026-01-01"}, "deletionVector": dv}) + "}\n")
    c = parse_commit(t, 1, (Path(t) / "_delta_log" / f"{1:020d}.json").read_bytes())
    assert c.change == "change" and c.removes[0].deletion_vector
    with pytest.raises(UpstreamRefused, match=r"version 1 \(DELETE\) of .* removed 1 file\(s\) with deletion "
                                              r"vectors"):
        _plan_all(_cfg(make_cfg, tmp_path, change_feed=True))


def test_a_restore_upstream_is_followed_when_nothing_it_undid_was_read(make_cfg, tmp_path):
    t = _up(tmp_path)
    _append(t, [1])  # v0
    _append(t, [2])  # v1
    _append(t, [3])  # v2, undone
    DeltaTable(t).delete("order_id = 'o1'")  # v3, undone
    DeltaTable(t).restore(1)  # v4: the table is v1's
    _append(t, [4])  # v5
    (rng, n, _), = _plan_all(_cfg(make_cfg, tmp_path))
    assert _ids(rng) == [0, 1, 5] and n == 3 and rng["versions"] == [0, 6]
    # the batch before the restore's target ends where the restore's versions end
    src = source_for(_cfg(make_cfg, tmp_path))
    first = src.next_range([], 1)[0]
    second = src.next_range([_Plan(first)], 1)[0]
    assert (first["versions"], second["versions"]) == ([0, 1], [1, 5])
    assert _ids(src.next_range([_Plan(second)], 1)[0]) == [5]


def test_a_restore_that_undid_versions_already_read_names_the_batch_to_rewind_to(make_cfg, tmp_path):
    t = _up(tmp_path)
    _append(t, [1])
    cfg = _cfg(make_cfg, tmp_path)
    src = source_for(cfg)
    b1 = src.next_range([], 100)[0]
    _append(t, [2])  # v1
    b2 = src.next_range([_Plan(b1, 1)], 100)[0]
    DeltaTable(t).restore(0)  # v2: undoes v1, which batch 2 read
    with pytest.raises(UpstreamRefused, match=r"upstream version 2 \(RESTORE\) restored the table to version 0: it "
                       r"undid versions 1..1, .* Rewind \S+ to batch 2 \(`make rewind PIPELINE=\S+ BATCH=2`\)"):
        src.next_range([_Plan(b1, 1), _Plan(b2, 2)], 100)
    # after that rewind the pipeline reads on from batch 2's start: the restore is followed
    marker = kind_for("delta").start_marker(b2)
    assert marker["versions"] == [1, 1]
    assert src.next_range([_Plan(b1, 1), _Plan(marker, 3)], 100)[0] is None
    _append(t, [3])  # v3
    rng, n, _ = src.next_range([_Plan(b1, 1), _Plan(marker, 3)], 100)
    assert _ids(rng) == [3] and n == 1


def test_a_restore_behind_another_names_the_batch_a_rewind_can_read_again_from(make_cfg, tmp_path):
    """Found by the delta source model (1000 examples, seed 21): a RESTORE that undid versions read by
    batch 3 is refused; reading again from batch 3's start would meet an older RESTORE (version 2, to
    version 0) that undid version 1, read by batch 2. The refusal names batch 2, from which a rewind
    can read again, not batch 3, whose rewind would itself be refused."""
    cfg = _cfg(make_cfg, tmp_path, on_change_commit="skip")
    up, src, plans = _up(tmp_path), source_for(cfg), []

    def plan():
        rng, _n, _notes = src.next_range(plans, 100)
        if rng is not None:
            plans.append(_Plan(rng, len(plans) + 1))

    _append(up, [1])  # v0
    plan()
    DeltaTable(up).delete("order_id = 'o1'")  # v1: passed over
    plan()
    DeltaTable(up).restore(0)  # v2: undoes v1 (read, passed over, by batch 2)
    DeltaTable(up).restore(1)  # v3: the table at v1 again
    _append(up, [2])  # v4
    plan()
    assert [p.range["versions"] for p in plans] == [[0, 1], [1, 2], [2, 5]]
    DeltaTable(up).restore(2)  # v5: undoes v3, v4 (batch 3); the table at v2 is the table at v0
    with pytest.raises(UpstreamRefused, match=r"restored the table to version 2: it undid versions 3\.\.4.* "
                                              r"Rewind \w+ to batch 2 "):
        src.next_range(plans, 100)
    plans[1:] = [_Plan({**plans[1].range, "versions": [1, 1], "files": []}, 2)]  # the rewind's start marker
    rng, _n, _notes = src.next_range(plans, 100)  # from batch 2's start: no refusal
    assert rng is None  # the upstream is again the table batch 1 read: nothing to read again


def test_versions_gone_from_the_log_are_data_loss_unless_accepted(make_cfg, tmp_path):
    t = _up(tmp_path)
    for i in range(3):
        _append(t, [i])
    DeltaTable(t).create_checkpoint()
    os.remove(Path(t) / "_delta_log" / f"{0:020d}.json")  # what log cleanup does after a checkpoint
    with pytest.raises(UpstreamDataLoss, match=r"upstream version\(s\) 0..0 of .* are no longer in its log"):
        _plan_all(_cfg(make_cfg, tmp_path))
    (rng, n, notes), = _plan_all(_cfg(make_cfg, tmp_path, on_data_loss="accept"))
    assert rng["lost"] == [0] and _ids(rng) == [1, 2] and n == 2
    assert "LOST versions 0" in range_summary(_ranged(rng))


def test_files_vacuumed_before_they_were_read_are_data_loss_unless_accepted(make_cfg, tmp_path):
    t = _up(tmp_path)
    _append(t, [1])
    _append(t, [2])
    DeltaTable(t).optimize.compact()
    DeltaTable(t).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with pytest.raises(UpstreamDataLoss, match=r"added by upstream version 0 of .* is no longer on storage: a VACUUM"):
        _plan_all(_cfg(make_cfg, tmp_path))
    (rng, n, notes), = _plan_all(_cfg(make_cfg, tmp_path, on_data_loss="accept"))
    assert n == 0 and all(f["skipped"].startswith("gone from storage") for f in rng["files"])


def test_a_table_created_again_or_another_table_is_refused(make_cfg, tmp_path):
    t = _up(tmp_path)
    _append(t, [1])
    src = source_for(_cfg(make_cfg, tmp_path))
    b1 = src.next_range([], 100)[0]
    import shutil
    shutil.rmtree(t)
    _append(t, [1])
    with pytest.raises(UpstreamRefused, match="is another table now"):
        src.next_range([_Plan(b1)], 100)
    with pytest.raises(UpstreamRefused, match="reading another table needs a new pipeline name"):
        src.next_range([_Plan({**b1, "table": "/elsewhere"})], 100)


def test_nothing_to_read_before_the_upstream_exists(make_cfg, tmp_path):
    rng, n, notes = source_for(_cfg(make_cfg, tmp_path)).next_range([], 100)
    assert rng is None and "does not exist yet" in notes[0]


def test_lineage_lists_the_upstream_batches_each_batch_consumed(tmp_path):
    t = str(tmp_path / "t")
    _append(t, [1])
    text = (Path(t) / "_delta_log" / f"{0:020d}.json").read_bytes()
    c = parse_commit(t, 0, text)
    assert c.change == "append" and c.pipeline_batch is None
    tagged = text.replace(b'"operation":"WRITE"', b'"operation":"WRITE","eo.pipeline":"orders","eo.batchId":"12"')
    assert parse_commit(t, 0, tagged).pipeline_batch == ("orders", 12)
    assert DeltaLog(__import__("eobatch.storage.fs", fromlist=["x"]).LocalStorage(), t).commit(5) is None


def test_the_batch_to_rewind_to_for_an_upstream_version_is_the_first_that_read_it_or_later():
    first_batch_reading = kind_for("delta").first_batch_reading
    plans = [_Plan({"versions": [0, 2]}, 1), _Plan({"versions": [2, 3]}, 2), _Plan({"versions": [5, 9]}, 3)]
    assert first_batch_reading(plans, 0) == (1, [0, 2]) and first_batch_reading(plans, 1) == (1, [0, 2])
    assert first_batch_reading(plans, 2) == (2, [2, 3])
    assert first_batch_reading(plans, 3) == (3, [5, 9])  # versions 3, 4 held no data: the next batch after them
    assert first_batch_reading(plans, 9) is None


def test_the_range_checks_rows_per_file_against_the_plan(make_cfg, tmp_path):
    t = _up(tmp_path)
    _append(t, [1, 2])
    (rng, n, _), = _plan_all(_cfg(make_cfg, tmp_path))
    path = rng["files"][0]["path"]
    r = kind_for("delta").range(rng)
    assert r.check_stage(_summary(2, {path: [2, 0, 1]})) == []
    assert r.check_stage(_summary(1, {path: [1, 0, 0]})) != []
    assert r.commit_offsets() == {"table": t, "versions": [0, 1]}
    assert r.summary() == f"{t}: versions 0..0, 1 file(s)"


def _ranged(rng):
    class P:
        source_kind, range, interval = "delta", rng, None
    return P()


def test_the_batches_of_one_run_read_each_version_of_the_log_once(make_cfg, tmp_path, monkeypatch):
    from eobatch.sources.delta import log as delta_log

    t = _up(tmp_path)
    for i in range(6):
        _append(t, [i])
    reads = []
    real = delta_log.DeltaLog.commit
    monkeypatch.setattr(delta_log.DeltaLog, "commit", lambda self, v: reads.append(v) or real(self, v))
    batches = _plan_all(_cfg(make_cfg, tmp_path, max_records_per_batch=2))
    assert [b[0]["versions"] for b in batches] == [[0, 2], [2, 4], [4, 6]]
    assert sorted(reads) == list(range(6))


@pytest.mark.parametrize("table,path,resolved,inside", [
    ("/t", "day=1/part%20a.parquet", "/t/day=1/part a.parquet", True),
    ("/t", "sub/../part.parquet", "/t/part.parquet", True),
    ("/t", "../u/part.parquet", "/u/part.parquet", False),
    ("/t", "%2E%2E/u/part.parquet", "/u/part.parquet", False),
    ("/t", "..%2Fu%2Fpart.parquet", "/u/part.parquet", False),
    ("/t", "/t/part.parquet", "/t/part.parquet", True),
    ("/t", "/tt/part.parquet", "/tt/part.parquet", False),  # a longer name is not below the folder
    ("/t", "file:///t/part.parquet", "/t/part.parquet", True),
    ("/t", "file:/t/x/../../u.parquet", "/u.parquet", False),
    ("/t", "file://localhost/t/part.parquet", "/t/part.parquet", True),
    ("/t", "file://otherhost/t/part.parquet", "file://otherhost/t/part.parquet", False),
    ("/t", "s3a://b/t/part.parquet", "s3a://b/t/part.parquet", False),  # another store
    ("s3a://b/t", "part.parquet", "s3a://b/t/part.parquet", True),
    ("s3a://b/t", "s3://b/t/part.parquet", "s3a://b/t/part.parquet", True),
    ("s3a://b/t", "S3N://b/t/part.parquet", "s3a://b/t/part.parquet", True),
    ("s3a://b/t", "s3a://c/t/part.parquet", "s3a://c/t/part.parquet", False),  # another bucket
    ("s3a://b/t", "/t/../u/part.parquet", "s3a://b/u/part.parquet", False),
    ("s3a://b/t", "hdfs://nn/t/part.parquet", "hdfs://nn/t/part.parquet", False),
])
def test_log_paths_resolve_decoded_and_normalized_and_only_those_below_the_table_are_within(table, path, resolved,
                                                                                              inside):
    from eobatch.sources.delta.log import data_path, within

    assert data_path(table, path) == resolved
    assert within(data_path(table, path), table) is inside
