"""The bad-input matrix: each bad record ends in quarantine with its reason, in the same batch as
the good ones, never half-published; the counts reconcile for every batch."""

from __future__ import annotations

import json

import pytest

from support.checks import assert_exactly_once, delta_log_commits, read_rows
from support.harness import orders, run_batch, spark_read, write_pipeline

pytestmark = pytest.mark.integration


def test_bad_input_matrix(tmp_path):
    p = write_pipeline(tmp_path, extra="max_record_bytes: 400\n")
    good = orders("g", 5)
    cases = {
        '{"order_id": "m1", "amount": 1.0': "malformed JSON: not a JSON object",
        "[1, 2, 3]": "malformed JSON: not a JSON object",
        '"just a string"': "malformed JSON: not a JSON object",
        '{"order_id": "t1", "amount": "12 euros"}': "field 'amount': expected DOUBLE, got 12 euros",
        '{"order_id": "t2", "ts": "yesterday"}': "field 'ts': expected TIMESTAMP, got yesterday",
        '{"customer": "nobody"}': "missing required field 'order_id'",
        '{"order_id": null, "amount": 3}': "missing required field 'order_id'",
        json.dumps({"order_id": "big", "customer": "x" * 500}): "record too large: ",
    }
    lines = [json.dumps(r) for r in good] + list(cases)
    path = p.landing / "matrix.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'{"order_id": "\xff\xfe bad utf8"}\n' + b"\n   \n\r\n")
    p.landed.extend(good)
    (p.landing / "empty.jsonl").write_bytes(b"")
    # schema drift: a new field is ignored, a changed type is quarantined
    drift = [{"order_id": "d1", "amount": 1.5, "coupon": "NEW"}]
    p.land("drift/a.jsonl", drift, bad=['{"order_id": "d2", "amount": {"value": 2}}'])
    # the same file name in two folders: two different files
    p.land("x/same.jsonl", orders("x", 2))
    p.land("y/same.jsonl", orders("y", 3))

    assert run_batch(p) == 1
    q = read_rows(p.quarantine)
    reasons = {r["raw"]: r["reason"] for r in q}
    for raw, reason in cases.items():
        assert reasons[raw].startswith(reason), (raw, reasons[raw])
    utf8 = [r for r in q if r["reason"] == "invalid UTF-8"]
    assert len(utf8) == 1 and utf8[0]["position"] == len(lines) + 1 and "\ufffd" in utf8[0]["raw"]
    assert {r["reason"] for r in q if r["raw"].startswith('{"order_id": "d2"')} == {
        "field 'amount': expected DOUBLE, got {\"value\":2}"}
    assert all(r["source"] == str(path) for r in q if r["raw"] in cases)
    by_raw_pos = {r["raw"]: r["position"] for r in q}
    assert by_raw_pos['{"customer": "nobody"}'] == 5 + list(cases).index('{"customer": "nobody"}') + 1

    published = {r["order_id"]: r for r in read_rows(p.sink)}
    assert set(published) == {r["order_id"] for r in good + drift + orders("x", 2) + orders("y", 3)}
    assert "coupon" not in published["d1"]

    prepared = p.protocol().ledger.prepared(1)
    assert prepared.rows_in == prepared.rows_valid + prepared.rows_quarantined == 5 + len(cases) + 1 + 2 + 2 + 3
    plan = p.protocol().ledger.plan(1)
    assert {f["path"].rsplit("/", 2)[-2] + "/" + f["path"].rsplit("/", 1)[-1] for f in plan.range["files"]} >= {
        "x/same.jsonl", "y/same.jsonl"}
    assert [f["records"] for f in plan.range["files"] if f["path"].endswith("empty.jsonl")] == [0]
    p.landed_bad = list(cases) + ['{"order_id": "d2", "amount": {"value": 2}}']  # raw texts, but for the UTF-8 one
    q_raws = sorted(r["raw"] for r in q if r["reason"] != "invalid UTF-8")
    assert q_raws == sorted(p.landed_bad)


def test_a_file_larger_than_the_batch_limit_is_one_whole_batch(tmp_path):
    p = write_pipeline(tmp_path, max_records=10)
    p.land("a-big.jsonl", orders("big", 35))
    p.land("b-small.jsonl", orders("small", 4))
    assert run_batch(p) == 1
    assert run_batch(p) == 2
    plans = [p.protocol().ledger.plan(b) for b in (1, 2)]
    assert [pl.rows_in for pl in plans] == [35, 4]
    assert_exactly_once(p, batches=2)


def test_lines_of_unicode_line_separators_are_counted_alike_by_plan_and_job(tmp_path):
    """U+0085, U+2028, U+2029 and a lone \r are record content for the planner and for Spark (whose
    regex $ would otherwise treat a line made of them as blank): the counts reconcile at verify and
    those lines land in quarantine. (More of them than the job's read holds, by a cap set low: its
    second read classifies every record again.)"""
    p = write_pipeline(tmp_path, extra="spark:\n  conf:\n    spark.eobatch.quarantineChars: 100\n")
    good = orders("u", 3)
    odd = ["\u0085", "\u2028", "\u2029", "\r\u0085"]
    body = "\n".join([json.dumps(good[0])] + odd[:3] + [json.dumps(good[1])] + odd[3:] + [json.dumps(good[2])])
    (p.landing / "odd.jsonl").write_bytes((body + "\n").encode())
    p.landed.extend(good)
    assert run_batch(p) == 1
    prepared = p.protocol().ledger.prepared(1)
    assert (prepared.rows_in, prepared.rows_valid, prepared.rows_quarantined) == (7, 3, 4)
    q = read_rows(p.quarantine)
    assert sorted(r["raw"] for r in q) == sorted(odd)
    assert {r["reason"] for r in q} == {"malformed JSON: not a JSON object"}
    p.landed_bad = [r["raw"] for r in q]
    assert_exactly_once(p, batches=1)


def test_partition_values_no_folder_can_hold_are_quarantined_the_others_read_back_exactly(tmp_path):
    """A value longer than a folder name (300 bytes, 150 x "é": ENAMETOOLONG in the stage's writer)
    or empty (Delta reads "" as null) is quarantined naming the column and the bound; "/", "..",
    NUL, "=", "%" and spaces are folder-safe, and delta-rs and delta-spark read every value back."""
    p = write_pipeline(tmp_path, partition_by=["customer"])
    fits = ["a/b", "..", ".", "x=y%20z", "nul\u0000byte", "sp ace", "é", "~h", "y" * 191]  # 191: a 200-byte folder
    too_long = {"x" * 300: "takes 309 bytes", "é" * 150: "takes 909 bytes", "y" * 192: "takes 201 bytes",
                "": "is an empty string, which Delta reads as null"}
    good = [{"order_id": f"ok-{i}", "customer": v, "amount": 1.0} for i, v in enumerate(fits)]
    bad = [json.dumps({"order_id": f"bad-{i}", "customer": v}) for i, v in enumerate(too_long)]
    p.land("a.jsonl", good, bad=bad)
    assert run_batch(p) == 1
    assert_exactly_once(p, batches=1)

    q = {json.loads(r["raw"])["customer"]: r["reason"] for r in read_rows(p.quarantine)}
    for v, why in too_long.items():
        assert q[v].startswith(f"partition value of column 'customer' {why}"), q[v]
    assert q["x" * 300].endswith("more than 200 (sink.partition_by)")
    adds = [a for c in delta_log_commits(p.sink) for a in c["adds"]]
    for a in adds:  # the folder in the log is the one on disk (no URI escapes), at most 200 bytes
        folder = a["path"].split("/")[-2]
        assert "%" not in a["path"] and len(folder.encode()) <= 200 and (p.sink / a["path"]).is_file()
    assert sorted(a["partitionValues"]["customer"] for a in adds) == sorted(fits)
    by_id = {r["order_id"]: r["customer"] for r in read_rows(p.sink)}
    spark = {r["order_id"]: r["customer"] for r in spark_read(p.sink)[str(p.sink)]["rows"]}
    assert by_id == spark == {r["order_id"]: r["customer"] for r in good}


# -- links and identity: time of check is not time of use -------------------------------------------


def test_a_file_swapped_for_a_link_while_the_job_reads_is_read_as_planned(tmp_path, local_spark):
    """The job opens each planned file itself (no link followed) and Spark reads that descriptor:
    a landing writer who swaps the planned file for a link to a secret after the job checked it,
    and back after the read, has the job read the planned file, never the secret."""
    import os

    from eobatch.sources.files import FilesSource
    from eobatch.sources.files.read import read_lines, seen
    from support.landing import SECRET

    p = write_pipeline(tmp_path)
    a = p.land("a.jsonl", orders("a", 3))
    secret = tmp_path / "credentials"
    secret.write_text(SECRET * 3)
    rng, n, _ = FilesSource(p.cfg).next_range([], 100)
    assert n == 3
    lines = read_lines(local_spark, rng, str(p.landing), max_record_bytes=1 << 20)  # checked and opened here; read lazily, below
    os.rename(a, tmp_path / "moved.jsonl")
    os.symlink(secret, a)
    raws = sorted(r["raw"] for r in lines.select("raw", "source").collect())
    os.remove(a)
    os.rename(tmp_path / "moved.jsonl", a)
    assert raws == sorted(json.dumps(r) for r in orders("a", 3))
    assert {r["source"] for r in lines.select("source").collect()} == {str(a)}
    st = os.stat(a)
    assert seen(rng, str(p.landing)) == {"files": {str(a): [st.st_size, st.st_dev, st.st_ino, st.st_mtime_ns]}}


def test_a_sub_folder_swapped_for_a_link_after_the_plan_is_never_read(tmp_path):
    """A planned file's folder replaced by a link to a folder holding a file of the same name,
    size and modification time (the old check saw the same file) fails the stage, reads nothing."""
    import os

    from support.harness import stage

    p = write_pipeline(tmp_path)
    a = p.land("sub/a.jsonl", orders("a", 3))
    plan, _ = p.protocol().plan()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    st = os.stat(a)
    (elsewhere / "a.jsonl").write_text('{"secret": "s3cr3t"}' + " " * (st.st_size - 21) + "\n")
    os.utime(elsewhere / "a.jsonl", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.rename(p.landing / "sub", p.landing / ".sub-moved")
    os.symlink(elsewhere, p.landing / "sub")
    r = stage(p, plan.batch_id, "a1")
    assert r.returncode != 0 and "symbolic link" in r.stdout + r.stderr
    assert p.protocol().ledger.stage_summary(plan.batch_id, "a1") is None


def test_an_over_long_line_never_held_is_quarantined_at_its_line_and_the_rest_publishes(tmp_path):
    """A 64 MiB line in the middle of a landing file and a 512 MiB one at its end, with no newline,
    through a 512 MiB driver: the job never holds either (Spark's text reader held a line whole and
    ran out of memory on every attempt, halting the pipeline). Each is quarantined at its line,
    reason with its exact length, raw its first 64 Ki characters (as any too large record); every other record
    publishes once; the counts reconcile at verify. (Sparse files: no disk is used.)"""
    from eobatch.config.lines import RAW_CHARS

    limit, mid, end = 1000, 64 << 20, 512 << 20
    p = write_pipeline(tmp_path, extra=f"max_record_bytes: {limit}\nspark: {{driver_memory: 512m}}\n")
    before, between = orders("a", 3), orders("b", 3)
    heads = [b'{"order_id": "mid", "pad": "', b'{"order_id": "end", "pad": "']
    path = p.landing / "big.jsonl"
    with open(path, "wb") as f:
        f.write("".join(json.dumps(r) + "\n" for r in before).encode())
        f.write(heads[0])
        f.seek(mid - len(heads[0]) - 2, 1)  # a hole: zero bytes, part of the line
        f.write(b'"}\n')
        f.write("".join(json.dumps(r) + "\n" for r in between).encode())
        f.write(heads[1])
        f.truncate(f.tell() + end - len(heads[1]))
    p.landed.extend(before + between)
    p.landed_bad.extend((h + b"\0" * RAW_CHARS)[:RAW_CHARS].decode() for h in heads)  # what the quarantine keeps

    assert run_batch(p) == 1
    q = sorted(read_rows(p.quarantine), key=lambda r: r["position"])
    assert [(r["source"], r["position"], r["reason"]) for r in q] == [
        (str(path), 4, f"record too large: {mid} bytes > max_record_bytes {limit}"),
        (str(path), 8, f"record too large: {end} bytes > max_record_bytes {limit}")]
    prepared = p.protocol().ledger.prepared(1)
    assert (prepared.rows_in, prepared.rows_valid, prepared.rows_quarantined) == (8, 6, 2)
    assert_exactly_once(p, batches=1)
