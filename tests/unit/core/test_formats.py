"""eobatch.core.formats: the ledger's records and their JSON, the layout and the ids that become paths,
fingerprints, commit metadata, partition values."""

from __future__ import annotations

import ast
import json

import pytest

from eobatch.core.formats import (
    BatchPlan,
    CommittedBatch,
    InvalidId,
    Layout,
    ManifestFile,
    PartitionManifest,
    PreparedBatch,
    StagedFile,
    StageSummary,
    bid,
    check_attempt,
    check_batch_id,
    commit_metadata,
    files_shown,
    fingerprint_of,
    planned_files,
)
from support.records import plan_record as _plan
from support.records import prepared_record as _prepared

# -- records ---------------------------------------------------------------------------------


def test_batch_plan_roundtrip():
    plan = _plan(notes=["changed /landing/x.jsonl after ..."])
    data = plan.to_json()
    assert isinstance(data, bytes)
    d = json.loads(data)
    assert d["format"] == 1 and d["batch_id"] == 1 and d["range"]["files"][0]["path"] == "/landing/a.jsonl"
    assert BatchPlan.from_json(data) == plan
    assert BatchPlan.from_json(data.decode()) == plan


def test_the_files_of_a_range_are_typed_values_read_in_one_place():
    entry = {"path": "/landing/a.jsonl", "size": 10, "mtime_ms": 5, "records": 2, "slice": "iv=1", "extra": 1}
    plan = _plan(files=[entry, {"path": "/landing/b.jsonl", "size": 3, "mtime_ms": 6, "records": 0,
                                "skipped": "a forged footer"}])
    a, b = plan.files() or ()
    assert (a.path, a.size, a.mtime_ms, a.records, a.slice, a.skipped) == ("/landing/a.jsonl", 10, 5, 2, "iv=1", None)
    assert a.entry is entry and b.skipped == "a forged footer" and b.slice is None  # the record's own entry
    assert planned_files({"topic": "t", "partitions": {"0": [0, 5]}}) is None  # Kafka: a range with no files
    assert planned_files(None) is None and planned_files({"files": "?"}) is None
    shown = files_shown({"files": [entry] * 5, "topic": "x"}, 2)
    assert shown == {"files": [entry] * 2, "files_not_shown": 3, "topic": "x"}
    assert files_shown({"files": [entry]}, 2) == {"files": [entry]}


def test_no_code_outside_the_kinds_indexes_a_range_s_files():
    """A range's files are read through ``planned_files`` (``BatchPlan.files``): only the kinds that
    record them and core.formats name the range's ``files`` key."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    pattern = re.compile(r"""(range|rng)(\.get\(|\[)["']files["']""")
    found = [f"{p.relative_to(repo)}:{i}" for root in ("plugins/eobatch", "spark_jobs", "dags")
             for p in sorted((repo / root).rglob("*.py"))
             if "sources" not in p.relative_to(repo).parts and p.name != "formats.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


STAGED_KEYS = frozenset({"path", "size", "partition_values", "modification_time", "stats"})


def _indexed_name(n: ast.AST) -> str | None:
    """The variable ``n`` indexes with a staged file's key (``x["path"]``, ``x.get("size")``), or None."""
    if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and isinstance(n.slice, ast.Constant):
        return n.value.id if n.slice.value in STAGED_KEYS else None
    if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
            and isinstance(n.func.value, ast.Name) and n.args and isinstance(n.args[0], ast.Constant)):
        return n.func.value.id if n.args[0].value in STAGED_KEYS else None
    return None


def _staged_files_indexed(tree: ast.AST) -> list[int]:
    """Lines that index as a dict (``f["path"]``, ``f.get("size")``) a variable bound by a loop or a
    comprehension over a PREPARED batch's staged files (an iterable that names ``adds``)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        loops: list[ast.For | ast.AsyncFor | ast.comprehension]
        scope: list[ast.AST]
        if isinstance(node, ast.For | ast.AsyncFor):
            loops, scope = [node], list(node.body)
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            loops = list(node.generators)
            scope = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            scope += [c for g in node.generators for c in g.ifs]
        else:
            continue
        names = {n.id for loop in loops
                 if any(isinstance(m, ast.Name) and m.id == "adds" or isinstance(m, ast.Attribute) and m.attr == "adds"
                        for m in ast.walk(loop.iter))
                 for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        found |= {n.lineno for part in scope for n in ast.walk(part)
                  if isinstance(n, ast.expr) and names and _indexed_name(n) in names}
    return sorted(found)


def test_no_code_but_core_formats_indexes_a_staged_file_as_json():
    """A PREPARED batch's staged files are ``StagedFile`` values (``f.path``, ``f.size``): only
    core.formats reads and writes their JSON entries. (The Delta source reads another table's log,
    whose add actions are JSON.)"""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    found = [f"{p.relative_to(repo)}:{i}" for root in ("plugins/eobatch", "spark_jobs", "dags")
             for p in sorted((repo / root).rglob("*.py")) if p.name != "formats.py"
             for i in _staged_files_indexed(ast.parse(p.read_text()))]
    assert found == []


def test_the_staged_file_scan_finds_a_dict_use():
    src = """
keep = {a["path"] for a in prepared.adds.get(participant, [])}
total = sum(int(a.get("size") or 0) for a in adds)
for part, files in prepared.adds.items():
    for f in files:
        pass
for a in adds:
    pv = a.get("partition_values") or {}
ok = {f.path for f in prepared.adds[p]} | {c["path"] for c in commits}
"""
    assert _staged_files_indexed(ast.parse(src)) == [2, 3, 8]

def test_prepared_batch_roundtrip():
    p = _prepared()
    assert PreparedBatch.from_json(p.to_json()) == p



# -- staged files: typed in memory, the PREPARED record's JSON as it always was -------------------

ADD = {"path": "eo_batches/b0000000001/a1/day=2024-01-01/part-0.parquet", "size": 123,
       "partition_values": {"day": "2024-01-01", "region": None}, "modification_time": 1_700_000_000_000,
       "stats": '{"numRecords":2}'}


def test_a_staged_file_reads_and_writes_the_entry_a_prepared_record_holds():
    f = StagedFile.from_json(ADD)
    assert f == StagedFile(ADD["path"], 123, {"day": "2024-01-01", "region": None}, 1_700_000_000_000,
                           '{"numRecords":2}')
    assert f.to_json() == ADD and list(f.to_json()) == list(ADD)  # the same keys, values and order
    assert hash(f) == hash(StagedFile.from_json(dict(ADD)))  # a value (partition values are not hashed)
    with pytest.raises(AttributeError):
        setattr(f, "path", "elsewhere")  # noqa: B010 - frozen


def test_a_staged_file_of_an_older_or_hand_written_record_keeps_what_it_lacks_lacking():
    """Without ``partition_values`` it has none; without ``modification_time`` or ``stats`` they are
    None (its commit takes its own time and no statistics, as it always did), and its entry is
    written back without them."""
    bare = StagedFile.from_json({"path": "eo_batches/b1/a/x.parquet", "size": 7})
    assert bare == StagedFile("eo_batches/b1/a/x.parquet", 7)
    assert (bare.partition_values, bare.modification_time, bare.stats) == ({}, None, None)
    assert bare.to_json() == {"path": "eo_batches/b1/a/x.parquet", "size": 7, "partition_values": {}}
    zero = {**ADD, "modification_time": 0, "partition_values": None, "stats": None}
    assert StagedFile.from_json(zero).modification_time == 0  # kept: the commit takes its own time for 0 too
    assert StagedFile.from_json(zero).partition_values == {} and StagedFile.from_json(zero).stats is None
    with pytest.raises(KeyError):
        StagedFile.from_json({"path": "x"})  # no size: no staged file


def test_a_prepared_record_s_json_is_byte_for_byte_the_one_before_staged_files_were_typed():
    """PREPARED holds ``StagedFile`` values; its JSON is the dict it held before (``asdict``, sorted)."""
    p = _prepared()
    assert all(isinstance(f, StagedFile) for files in p.adds.values() for f in files)
    before = {**vars(p), "adds": {k: [f.to_json() for f in v] for k, v in p.adds.items()}}
    assert p.to_json() == json.dumps(before, sort_keys=True, indent=1, default=str).encode()
    d = json.loads(p.to_json())
    d["adds"]["sink"].append(ADD)
    # a hand-written entry, with no time nor statistics
    d["adds"]["quarantine"].append({"path": "eo_batches/b0000000001/a1/q.parquet", "size": 1, "partition_values": {}})
    data = json.dumps(d, sort_keys=True, indent=1).encode()
    again = PreparedBatch.from_json(data)
    assert again.adds["sink"][1] == StagedFile.from_json(ADD) and again.adds["quarantine"][0].modification_time is None
    assert again.to_json() == data


def _fp(entries) -> str:
    """The fingerprint of staged files given as the PREPARED record's entries."""
    return fingerprint_of({p: [StagedFile.from_json(a) for a in files] for p, files in entries.items()})


def test_the_fingerprint_of_staged_files_is_the_one_of_their_entries():
    entries = {"sink": [ADD, {"path": "eo_batches/b1/a/b.parquet", "size": 5}], "quarantine": []}
    typed = {p: [StagedFile.from_json(a) for a in files] for p, files in entries.items()}
    assert fingerprint_of(typed) == _fp(entries) == _fp(json.loads(json.dumps(entries)))
    # the golden value: participant, path and size, as every ledger's PREPARED and Delta commits hold it
    assert fingerprint_of({"sink": [StagedFile("x/a.parquet", 10)]}) == \
        "ebaf6d86b250cc4e727e091017f1e30b3bb4e3252ffe45ab0138b50a7684a02b"

@pytest.mark.parametrize("record", [
    CommittedBatch(pipeline="orders", batch_id=3, fingerprint="ab", delta_versions={"sink": 4, "quarantine": 2},
                   committed_at="t", commit_seconds=0.1, recovered=True),
    ManifestFile(path="eo_batches/b1/a/x.parquet", size=1, rows=1, partition_values={"day": "2024-01-01"}),
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


def test_commit_metadata():
    plan, prepared = _plan(), _prepared()
    offsets = [["/landing/a.jsonl", 10, 1000], ["/landing/b.jsonl", 20, 2000]]
    md = commit_metadata(plan, prepared, "sink", offsets)
    assert md["eo.pipeline"] == "orders" and md["eo.batchId"] == "1" and md["eo.attempt"] == "a1"
    assert md["eo.participant"] == "sink" and md["eo.fingerprint"] == prepared.fingerprint
    assert json.loads(md["eo.offsets"]) == offsets
    assert json.loads(md["eo.rows"]) == {"in": 5, "published": 4, "quarantined": 1}
    assert all(isinstance(v, str) for v in md.values())


# -- fingerprint_of ------------------------------------------------------------------------------


def test_fingerprint_of_is_order_independent():
    a = {"path": "eo_batches/b1/t/a.parquet", "size": 10, "stats": "x"}
    b = {"path": "eo_batches/b1/t/b.parquet", "size": 20}
    q = {"path": "eo_batches/b1/t/q.parquet", "size": 5}
    fp = _fp({"sink": [a, b], "quarantine": [q]})
    assert _fp({"quarantine": [q], "sink": [b, a]}) == fp
    assert len(fp) == 64
    # only participant, path and size count
    assert _fp({"sink": [dict(a, stats="other", modification_time=9), b], "quarantine": [q]}) == fp


def test_fingerprint_of_changes_with_size_path_or_participant():
    a = {"path": "x/a.parquet", "size": 10}
    fp = _fp({"sink": [a]})
    assert _fp({"sink": [dict(a, size=11)]}) != fp
    assert _fp({"sink": [dict(a, path="x/b.parquet")]}) != fp
    assert _fp({"quarantine": [a]}) != fp
    assert _fp({"sink": [a, {"path": "x/c.parquet", "size": 1}]}) != fp
    assert _fp({"sink": []}) == _fp({})


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


# -- ids: attempt and batch ids are checked by one function wherever they become paths ------------


BAD_ATTEMPTS = ["../../..", "..", "a/b", "", ".hidden", "a b", "x" * 65, None, 7, "a\x00b", "t1-abc/../../x"]


@pytest.mark.parametrize("attempt", BAD_ATTEMPTS)
def test_attempt_ids_are_checked_wherever_they_become_paths(attempt):
    lay = Layout("/lake/t", "/lake/q")
    with pytest.raises(InvalidId):
        check_attempt(attempt)
    for build in (lay.attempt_dir, lay.attempt_staging_rel, lay.stage_summary, lay.decision):
        with pytest.raises(InvalidId):
            build(1, attempt)


@pytest.mark.parametrize("batch_id", [0, -1, True, "1", 1.0, None, 10**10])
def test_batch_ids_are_positive_integers(batch_id):
    with pytest.raises(InvalidId):
        check_batch_id(batch_id)


# -- partition values ------------------------------------------------------------------------


def test_partition_values_are_spelled_one_way_for_adds_and_removes():
    """The stage job's adds and the commit's removes use one spelling (the Delta protocol's)."""
    import datetime as dt

    from eobatch.core.formats import partition_text

    assert partition_text(None) is None
    assert [partition_text(True), partition_text(False)] == ["true", "false"]
    assert partition_text(dt.date(2026, 1, 2)) == "2026-01-02"
    assert partition_text(dt.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02 03:04:05.000000"
    assert partition_text(dt.datetime(2026, 1, 2, 4, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=1)))) == \
        "2026-01-02 03:04:05.000000"
    assert [partition_text(7), partition_text("a/b")] == ["7", "a/b"]


def test_the_partition_folders_of_a_file_stay_within_the_bound_together_whatever_a_transform_computes():
    """Issue 41: each folder was bounded, not all of them: six partition columns a transform computes,
    each near the folder bound, made a path of 1,200 bytes, longer than an S3 key (every stage of
    such a pipeline failed). The longest folders keep a shorter prefix and their value's digest."""
    from eobatch.core.formats import PARTITION_PATH_MAX_BYTES, partition_path

    cols = [f"computed_{i}" for i in range(6)]
    paths = {partition_path(cols, ["é" * 150 + str(j), *["x" * 190] * 5]) for j in range(50)}
    assert len(paths) == 50 and all(len(p) <= PARTITION_PATH_MAX_BYTES for p in paths)
    assert all(p.count("/") == 5 and p.count("~h") == 6 for p in paths)
    short = partition_path(cols, ["a", "b", "c", "d", "e", "x" * 180])  # what fits together stays whole
    assert short.startswith("computed_0=a/computed_1=b/") and short.endswith("=" + "x" * 180)
    assert partition_path(cols, ["y" * 190] * 6) == partition_path(cols, ["y" * 190] * 6)  # one path per values


def test_partition_columns_whose_folders_cannot_fit_together_are_refused_at_load(make_cfg):
    import pytest

    from eobatch.errors import ConfigError

    cols = ", ".join(f"a_rather_long_partition_column_name_{i:02d} STRING" for i in range(8))
    with pytest.raises(ConfigError, match="take at least .* bytes in a file's path, more than 512"):
        make_cfg(schema=f"id STRING, {cols}", transform="color_counts",
                 sink={"table": make_cfg().sink_table, "partition_by": [f"a_rather_long_partition_column_name_{i:02d}"
                                                                        for i in range(8)]})


def test_an_s3_table_whose_key_leaves_no_room_for_its_staged_files_is_refused_at_load(make_cfg):
    import pytest

    from eobatch.errors import ConfigError

    base = make_cfg()
    long_key = "s3a://bkt/" + "/".join(["a" * 60] * 7)  # 426 bytes: no room for 512 bytes of partition folders
    with pytest.raises(ConfigError, match="an S3 key holds at most 1024"):
        make_cfg(sink={"table": long_key, "partition_by": ["customer"]},
                 quarantine={"table": "s3a://bkt/q"}, source={"kind": "files", "path": base.source.path})
    assert make_cfg(sink={"table": long_key, "partition_by": []}, quarantine={"table": "s3a://bkt/q"},
                    source={"kind": "files", "path": base.source.path}).sink_table == long_key


def test_a_partition_value_is_one_folder_of_safe_characters_within_the_bound():
    """``formats.partition_segment``: the one definition of a partition value's folder."""
    from eobatch.core.formats import PARTITION_SEGMENT_MAX_BYTES, partition_path, partition_segment

    assert partition_segment("c", "c7") == "c=c7"
    assert partition_segment("c", None) == "c=__HIVE_DEFAULT_PARTITION__"
    assert partition_segment("c", "a/b") == "c=a~2Fb" and partition_segment("c", "..") == "c=.."
    assert partition_segment("c", "x=y%z \x00~") == "c=x~3Dy~25z~20~00~7E"
    assert partition_segment("c", "é") == "c=~C3~A9"
    assert partition_path(["a", "b"], [True, 3]) == "a=true/b=3" and partition_path([], []) == ""
    assert len(partition_segment("c", "y" * 198)) == PARTITION_SEGMENT_MAX_BYTES  # the longest kept whole
    # longer: a prefix that never splits an escape, and a digest of the whole value
    for v in ("y" * 199, "é" * 150, "x" * 5000, "é" * 66 + "x" * 80):
        seg = partition_segment("c", v)
        assert len(seg) <= PARTITION_SEGMENT_MAX_BYTES and "~h" in seg, seg
        assert all(part[:2].isalnum() and part[:2].upper() == part[:2] for part in seg.split("~")[1:-1])
    assert partition_segment("c", "é" * 150) != partition_segment("c", "é" * 151)
