"""The stage job's reader and classifier on a real Spark session (local, in process).

* Files are read in pieces (here: pieces of a few KiB, so every file is split many times), and
  the quarantine's position of a record is still its exact line number, by eobatch.config.lines' own
  definition of a line, whatever lies at a piece boundary (blank lines, CRLF, invalid UTF-8).
* The classifier's fast path (one typed parse) never decides differently from the full rule
  list, on odd inputs and on random damage of valid records, and its parse (Jackson reading the
  record's bytes, include/jvm/) gives the values of Spark's own ``from_json``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from eobatch.config import lines as eolines

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCHEMA = "order_id STRING, customer STRING, amount DOUBLE, ts TIMESTAMP"


@pytest.fixture(scope="module")
def spark(local_spark):
    # pieces of 4 KiB: every test file below is split into many pieces, packed into tasks
    conf = {"spark.sql.files.maxPartitionBytes": "4096", "spark.sql.files.openCostInBytes": "1024"}
    before = {k: local_spark.conf.get(k) for k in conf}
    for k, v in conf.items():
        local_spark.conf.set(k, v)
    yield local_spark
    for k, v in before.items():
        local_spark.conf.set(k, v)


def _record(rnd: random.Random, i: int) -> bytes:
    kind = rnd.random()
    if kind < 0.80:
        return (b'{"order_id": "o%d", "customer": "c%d", "amount": %d.5, "ts": "2026-01-01T00:00:%02dZ"}'
                % (i, i % 7, i, i % 60))
    if kind < 0.84:
        return b""  # blank
    if kind < 0.87:
        return b" \t \x0b"  # blank too
    if kind < 0.90:
        return b'{"order_id": "o%d", "amount": "abc"}' % i  # wrong type
    if kind < 0.93:
        return b'{"order_id": "o%d", "amount": 1' % i  # truncated
    if kind < 0.95:
        return b'{"order_id": "o%d\xff\xfe"}' % i  # invalid UTF-8
    if kind < 0.97:
        return b'{"customer": "no id %d"}' % i  # missing required field
    return b"\x85 \xe2\x80\xa8 not json %d" % i  # NEL / LS: record content, not line ends


def _write_files(tmp: Path, n_files: int, n_lines: int, seed: int) -> list[Path]:
    rnd = random.Random(seed)
    paths = []
    for f in range(n_files):
        out = []
        for i in range(n_lines):
            end = b"\r\n" if rnd.random() < 0.3 else b"\n"
            out.append(_record(rnd, f * n_lines + i) + end)
        if f % 2:  # no newline at the very end
            out[-1] = out[-1].rstrip(b"\r\n")
        p = tmp / f"land {f} +x.jsonl"  # a space and a plus: the planned path survives Spark's URIs
        p.write_bytes(b"".join(out))
        paths.append(p)
    return paths


def _planned(paths: list[Path]) -> dict:
    """The range the planner records for ``paths`` (the job checks each file's identity against it)."""
    from eobatch.sources.files.planner import counted, planned_file
    from eobatch.storage.fs import LocalStorage

    files = []
    for p in paths:
        n, info = counted(LocalStorage(), str(p))
        files.append({**planned_file(info), "records": n})
    return {"files": files}


def test_quarantined_records_point_at_their_exact_line_across_pieces(spark, tmp_path):
    from pyspark.sql import functions as F

    from eobatch.sources.files import KIND
    from eobatch.sources.files.read import locate, read_lines
    from spark_jobs.classify import classify, kept_records, valid_records

    paths = _write_files(tmp_path, n_files=3, n_lines=500, seed=7)
    rng = _planned(paths)
    lines = read_lines(spark, rng, max_record_bytes=1 << 20)
    assert lines.rdd.getNumPartitions() > 10  # the files really are read in pieces

    expected = {}  # (source, line) -> record bytes, by eobatch.config.lines
    for p in paths:
        for n, rec in eolines.split_records(p.read_bytes()):
            expected[(str(p), n)] = rec
    kept = kept_records(classify(lines, SCHEMA, ["order_id"], 1 << 20), SCHEMA,  # as the job keeps them
                        KIND.located_columns, KIND.quarantine_columns)
    assert kept.count() == len(expected)

    bad = locate(spark, kept.where(F.col("reason").isNotNull()), rng, max_record_bytes=1 << 20).select(
        "source", "position", F.col("raw").cast("binary").alias("raw"), "reason").collect()
    assert len(bad) > 150
    for r in bad:
        assert expected[(r["source"], r["position"])] == bytes(r["raw"]), (r["source"], r["position"], r["reason"])
    assert len({(r["source"], r["position"]) for r in bad}) == len(bad)

    # the valid records are exactly the valid lines: none lost or read twice at a piece boundary
    valid = valid_records(kept, SCHEMA, []).select("order_id").collect()
    ids = sorted(r["order_id"] for r in valid)
    assert len(ids) == len(set(ids)) == len(expected) - len(bad)


def test_the_one_read_observes_its_records_to_quarantine_byte_for_byte_and_its_pieces(spark, tmp_path):
    """The stage job's one read (spark_jobs/stage_batch.py): while the sink would be written, the
    read observes the records to quarantine (eobatch.jvm.CappedLines, every column but the
    record's fields) and the lines of each piece (eobatch.jvm.PieceLines). Read back, those
    records are the ones a read of the source classifies as bad, raw text byte for byte (invalid
    UTF-8, CRLF, NEL included), and located with the observed pieces they point at their exact
    lines, as a counting read of the pieces places them. Past the cap the aggregate gives null,
    in bounded memory."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from eobatch.sources.files import KIND
    from eobatch.sources.files.read import locate
    from spark_jobs.classify import classify, expect, kept_records
    from spark_jobs.stage_batch import BAD_LINES, BAD_LINES_CONF, bad_of, observe_bad

    paths = _write_files(tmp_path, n_files=2, n_lines=400, seed=8)
    rng, job = _planned(paths), {"max_record_bytes": 1 << 20}

    def kept_of(checked):
        return kept_records(checked.where(~F.col("_eo_drop")).drop("_eo_drop"), SCHEMA, KIND.located_columns,
                            KIND.quarantine_columns)

    def one_read():
        checked = expect(classify(KIND.read(spark, rng, job), SCHEMA, ["order_id"], 1 << 20), SCHEMA, [])
        obs = Observation(f"bad{random.random()}")
        kept = kept_of(checked.observe(obs, F.count("reason").alias("bad"),
                                       observe_bad(spark, kept_of(checked)).alias(BAD_LINES)))
        kept.where(F.col("reason").isNull()).write.format("noop").mode("overwrite").save()  # the sink's write
        return kept, obs.get

    def located(records, pieces):
        return {(r["source"], r["position"]): (r["reason"], bytes(r["raw"])) for r in (
            KIND.locate(spark, records, rng, job) if pieces else
            locate(spark, records, rng, max_record_bytes=1 << 20)).select(
            "source", "position", F.col("raw").cast("binary").alias("raw"), "reason").collect()}

    kept, got = one_read()
    assert got[BAD_LINES] is not None and got["bad"] > 80
    observed = bad_of(spark, kept, got[BAD_LINES])
    assert observed.count() == got["bad"]
    by_observation = located(observed, pieces=True)
    assert by_observation == located(kept.where(F.col("reason").isNotNull()), pieces=False)  # a second read
    expected = {(str(p), n): rec for p in paths for n, rec in eolines.split_records(p.read_bytes())}
    assert all(expected[k] == raw for k, (_, raw) in by_observation.items())
    assert any(b"\xff" in raw for _, raw in by_observation.values())

    spark.conf.set(BAD_LINES_CONF, str(len(got[BAD_LINES])))  # one character short of the text and its end
    try:
        assert one_read()[1][BAD_LINES] is None
        for refused in ("-1", "1e6", str((1 << 30) + 1)):  # more than one JVM String holds, or no count
            spark.conf.set(BAD_LINES_CONF, refused)
            with pytest.raises(SystemExit, match=f"{BAD_LINES_CONF} must be a whole number of characters"):
                one_read()
    finally:
        spark.conf.unset(BAD_LINES_CONF)


def test_a_piece_observed_twice_counts_its_lines_once(spark):
    """eobatch.jvm.PieceLines: a piece is read whole by one task, so the same piece in two task
    buffers is a task Spark ran again (a stage re-run after a lost output applies its
    observation again); its lines count once, or every later line of its file would be misplaced."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from eobatch.sources.files.read import _piece_lines

    first = [("f", 0, 7), ("f", 0, 8), ("f", 0, 9)]
    tasks = [first, [("f", 4096, 20), ("g", 0, 30), ("g", 0, 31)], first]  # the first task ran again
    lines = spark.createDataFrame(spark.sparkContext.parallelize([x for t in tasks for x in t], len(tasks)),
                                  "file string, start long, row long")
    assert lines.rdd.glom().collect()[2] == lines.rdd.glom().collect()[0]  # one task's lines per partition
    obs = Observation("pieces_twice")
    lines.observe(obs, F.call_function(_piece_lines(spark), "file", "start", "row").alias("p")).write.format(
        "noop").mode("overwrite").save()
    assert sorted(obs.get["p"].split("\x02")) == ["f\x010\x013\x017", "f\x014096\x011\x0120",
                                                  "g\x010\x012\x0130"]


def test_only_an_expectation_that_answers_alike_in_two_queries_lets_the_job_read_again(spark):
    """Past its observation's cap, a second read classifies the records to quarantine again: an
    expectation that is not deterministic, or reads the time of its query, could answer
    otherwise; the job then caches."""
    from spark_jobs.classify import answers_twice_alike

    def why(expr):
        return answers_twice_alike(spark, SCHEMA, [{"name": "ok", "expr": "amount > 0"}, {"name": "e", "expr": expr}])

    for expr in ("amount >= 0 AND customer LIKE 'c%'", "ts < TIMESTAMP'2030-01-01 00:00:00'", "length(order_id) > 2"):
        assert why(expr) is None, expr
    for expr in ("rand() < 0.5", "uuid() <> order_id", "shuffle(array(1, 2))[0] = 1"):
        assert why(expr) == "expectation e is not deterministic", expr
    for expr in ("ts < current_timestamp()", "ts > now() - INTERVAL 1 DAY", "to_date(ts) = current_date()",
                 "ts < localtimestamp()", "unix_timestamp() > 0"):
        assert why(expr) == "expectation e reads the time of its query", expr
    assert why("no_such_column > 1") == "expectation e cannot be analyzed on its own"


def test_a_plan_that_reads_its_input_twice_is_counted(spark):
    """``reads_of``: how often the write's plan reads the observed input (the job caches the read
    when a transform reads it more than once: interval slices, a self-union)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from spark_jobs.stage_batch import COUNTS, reads_of, transform_slices

    class Passthrough:
        @staticmethod
        def transform(df, ctx):
            return df

    class Twice:
        @staticmethod
        def transform(df, ctx):
            return df.unionByName(df.where("id > 3"))

    observed = spark.range(10).withColumn("_slice", F.lit("a")).observe(Observation(COUNTS), F.count("*").alias("n"))
    assert reads_of(transform_slices(Passthrough, observed, None, [], "_slice"), COUNTS) == 1
    assert reads_of(transform_slices(Passthrough, observed, None, ["a"], "_slice"), COUNTS) == 1
    assert reads_of(transform_slices(Twice, observed, None, [], "_slice"), COUNTS) == 2
    assert reads_of(transform_slices(Passthrough, observed, None, ["a", "b"], "_slice"), COUNTS) == 2


def _long_lines(rnd: random.Random, i: int, limit: int, cap: int) -> bytes:
    """A line (with its end) too large, held whole or not by the reader, or at either bound."""
    n = rnd.choice([limit - 40, limit, cap - 40, cap - 1, cap, cap + 1, cap + 70000])
    kind = rnd.random()
    if kind < 0.15:  # blank however long: no record
        return b" " * n + rnd.choice([b"\n", b"\r\n"])
    if kind < 0.30:  # blank for longer than the bound, then not
        return b"\t" * n + b"x\n"
    if kind < 0.45:  # a valid record after a piece boundary, inside an over-long line: never one of its own
        return b'{"order_id": "pad' + b"y" * n + b'"}{"order_id": "inside-%d"}\r\n' % i
    return b'{"order_id": "long-%d", "customer": "' % i + b"z" * n + b'"}' + rnd.choice([b"\n", b"\r\n"])


def test_lines_longer_than_the_bound_are_quarantined_at_their_line_whole_or_not(spark, tmp_path):
    """The reader holds at most ``max_line_bytes`` of a line (``eobatch.jvm.BoundedLines``): a
    longer line crossing many pieces is one record, too large by its exact length, at its own line,
    with its first bytes as raw; no fragment of it is ever a line (Hadoop's own bound returns the
    rest of it after a piece boundary as a line, a valid record here); a blank one stays blank; a
    byte order mark first is no line's. The counts are the planner's (eobatch.config.lines)."""
    from pyspark.sql import functions as F

    from eobatch.sources.files import KIND
    from eobatch.sources.files.read import locate, read_lines
    from spark_jobs.classify import classify, kept_records, valid_records

    limit = 1000
    cap = eolines.max_line_bytes(limit)
    rnd = random.Random(11)
    paths = []
    for f in range(2):
        out = [b"\xef\xbb\xbf"]
        for i in range(40):
            out.append(_long_lines(rnd, f * 1000 + i, limit, cap) if rnd.random() < 0.3 else _record(rnd, f * 1000 + i) + b"\n")
        if f == 0:  # over-long at the very end, no newline
            out.append(b'{"order_id": "last-%d", "x": "' % f + b"w" * cap)
        p = tmp_path / f"long {f}.jsonl"
        p.write_bytes(b"".join(out))
        paths.append(p)
    rng = _planned(paths)
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(64 << 10))  # lines of up to 6 pieces
    try:
        lines = read_lines(spark, rng, max_record_bytes=limit)
        assert lines.rdd.getNumPartitions() > 20

        expected = {(str(p), n): rec for p in paths for n, rec in eolines.split_records(p.read_bytes())}
        kept = kept_records(classify(lines, SCHEMA, ["order_id"], limit), SCHEMA, KIND.located_columns,
                            KIND.quarantine_columns).persist()  # read once, as the job does
        counted = kept.agg(F.count("*"), F.max(F.octet_length("raw"))).first()
        assert counted[0] == len(expected) == sum(f["records"] for f in rng["files"])  # the planner's count
        assert counted[1] == cap  # no line held beyond the bound

        bad = locate(spark, kept.where(F.col("reason").isNotNull()), rng, max_record_bytes=limit).select(
            "source", "position", F.col("raw").cast("binary").alias("raw"), "reason").collect()
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    too_large = {k: rec for k, rec in expected.items() if len(rec) > limit}
    assert len(too_large) > 10 and sum(len(r) > cap for r in too_large.values()) > 3
    got = {(r["source"], r["position"]): r for r in bad if r["reason"].startswith("record too large")}
    assert set(got) == set(too_large)
    for k, rec in too_large.items():
        assert got[k]["reason"] == f"record too large: {len(rec)} bytes > max_record_bytes {limit}", k
        assert bytes(got[k]["raw"]) == rec[:cap], k
    for r in bad:
        assert bytes(r["raw"]) == expected[(r["source"], r["position"])][:cap], (r["source"], r["position"])

    ids = sorted(r["order_id"] for r in valid_records(kept, SCHEMA, []).select("order_id").collect())
    assert len(ids) == len(set(ids)) == len(expected) - len(bad)
    assert not [i for i in ids if i.startswith(("inside-", "last-", "pad"))]
    kept.unpersist()


ODD = [
    '{"order_id": "a"}', ' {"order_id": "a"}', '\t{"order_id": "a"}', '{"order_id": "a"} trailing',
    '{"order_id": "a"}}', '{"order_id": "a",}', '[{"order_id": "a"}]', '{"order_id": "a"', '"a"', "1", "null",
    "", "  ", "{}", '{"order_id": null}', '{"order_id": 5}', '{"order_id": {"x": 1}}', '{"order_id": ["x"]}',
    '{"order_id": "a", "amount": NaN}', '{"order_id": "a", "x": Infinity}', '{"order_id": "a", "amount": 007}',
    '{"order_id": "a" /* c */}', "{'order_id': 'a'}", '{order_id: "a"}', '{"order_id": "a\tb"}',
    r'{"order_id": "\q"}', '{"order_id": "a", "amount": +1}', '{"order_id": "a", "amount": .5}',
    '{"order_id": "a", "amount": "5"}', '{"order_id": "a", "ts": "yesterday"}', '{"order_id": "a", "ts": 5}',
    '{"order_id": "a", "order_id": "b"}', '{"order_id": "a"} {"order_id": "b"}', '{"order_id": "\u0000"}',
    '{"order_id": "' + "x" * 300 + '"}', "\u2028", '{"order_id": "a", "amount": 1e400}',
    '{"order_id": "a", "amount": "NaN"}', '{"order_id": "a", "amount": "-Infinity"}', '{"order_id": "a", "amount": "INF"}',
    '{"order_id": "a", "amount": -Infinity}', '{"order_id": "NaN"}', '{"order_id": "Inf", "amount": 1}',
]
# a JSON number token must be a number; a string value naming one is how JSON carries NaN / infinities
NAMED = {'{"order_id": "a", "amount": NaN}': False, '{"order_id": "a", "amount": -Infinity}': False,
         '{"order_id": "a", "amount": "NaN"}': True, '{"order_id": "a", "amount": "-Infinity"}': True,
         '{"order_id": "NaN"}': True, '{"order_id": "Inf", "amount": 1}': True, '{"order_id": "a"}': True,
         '{"order_id": "a",}': False}


def _damaged(rnd: random.Random, n: int) -> list[str]:
    base = '{"order_id": "o%d", "customer": "c", "amount": %s, "ts": "2026-01-01T00:00:00Z"}'
    out = []
    for i in range(n):
        s = base % (i, rnd.choice(["1.5", "-2", "1e3", '"x"', "null", "true", "NaN", "[1]"]))
        for _ in range(rnd.randint(0, 2)):
            op, k = rnd.random(), rnd.randrange(len(s) + 1)
            ch = rnd.choice(['"', "{", "}", ",", ":", " ", "\\", "a", "1", "\t", "/", "'"])
            s = s[:k] + ch + s[k:] if op < 0.5 else s[:k] + s[k + 1:]
        out.append(s)
    return out


def test_the_fast_path_decides_like_the_full_rules(spark):
    from pyspark.sql import functions as F

    from spark_jobs.classify import classify

    rnd = random.Random(11)
    texts = ODD + _damaged(rnd, 3000)
    lines = spark.createDataFrame([(f"s{i}", i, t) for i, t in enumerate(texts)], "source string, position long, raw string")
    lines = lines.union(spark.createDataFrame([("null", -1, None)], lines.schema))
    fast = classify(lines, SCHEMA, ["order_id"], 200).select("position", F.col("reason").alias("fast"))
    full = classify(lines, SCHEMA, ["order_id"], 200, fast_path=False).select("position", F.col("reason").alias("full"))
    rows = fast.join(full, "position").collect()
    assert len(rows) == len(texts) + 1
    differ = [(texts[r["position"]] if r["position"] >= 0 else None, r["fast"], r["full"])
              for r in rows if r["fast"] != r["full"]]
    assert not differ, differ[:5]
    valid = {texts[r["position"]]: r["fast"] is None for r in rows if r["position"] >= 0}
    assert {t: valid[t] for t in NAMED} == NAMED
    decided = {r["fast"] is None for r in rows}
    assert decided == {True, False}  # both outcomes occur: the comparison means something


# Inputs where Jackson's byte source and Spark's reader path could part: the encoding Jackson
# guesses from the first bytes (a NUL second byte reads as UTF-16 or UTF-32), a byte-order mark,
# multi-byte and astral characters, escapes, control characters, numbers at the edges, nesting.
ENCODING_EDGES = [
    "{\x00}", "{\x00\x00\x00}\x00\x00\x00", '{"\x00\x00', "{\x00\"\x00o\x00r\x00d\x00", "\ufeff{\"order_id\": \"a\"}",
    '{"order_id": "\u00e9\u4e2d\U0001f600"}', '{"order_id": "\\ud83d\\ude00 \\u00e9 \\n \\" \\\\"}',
    '{"order_id": "\\ud83d"}', '{"order_id": "a\x01b"}', '{"order_id": "a", "amount": -0.0}',
    '{"order_id": "a", "amount": 123456789012345678901234567890}', '{"order_id": "a", "amount": 4.9e-324}',
    '{"order_id": "a", "amount": 1E+2}', '{"order_id": "a", "ts": "2026-01-01 10:00:00"}',
    '{"order_id": "a", "ts": "2026-01-01T10:00:00.123456+02:00"}', '{"order_id": "a", "ts": "2026-13-01T00:00:00Z"}',
    '{"order_id": "a", "customer": {"n": [1, {"x": null}]}}', '{"order_id": "a", "customer": true}',
    "{" * 50 + "}" * 50, '{"order_id": "a"}\x00', "{", "{}", '{ "order_id" : "a" , "amount" : 2 }',
]


def _unicode_damaged(rnd: random.Random, n: int) -> list[str]:
    """Valid records with characters of every UTF-8 length and control characters put anywhere."""
    alphabet = ["\x00", "\x1f", "\x7f", "\u00e9", "\u07ff", "\u0800", "\uffff", "\U0001f600", "\U0010ffff",
                '"', "{", "}", ":", ",", "\\", " ", "1", "e", "-"]
    out = []
    for s in _damaged(rnd, n):
        for _ in range(rnd.randint(0, 3)):
            k = rnd.randrange(len(s) + 1)
            s = s[:k] + rnd.choice(alphabet) + s[k:]
        out.append(s)
    return out


@pytest.mark.parametrize("options", ["STRICT", "LENIENT"])
def test_the_byte_parse_gives_spark_from_json_values(spark, options):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from spark_jobs import classify as cl

    opts = getattr(cl, options)
    typed = T.StructType(list(cl.record_schema(SCHEMA).fields) + [T.StructField(cl.CORRUPT, T.StringType(), True)])
    rnd = random.Random(23)
    texts = ODD + ENCODING_EDGES + _damaged(rnd, 2000) + _unicode_damaged(rnd, 2000)
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)] + [(-1, None)], "i long, raw string")
    both = df.select("i", F.from_json("raw", typed, opts).alias("spark"),
                     cl.utf8_from_json(F.col("raw"), typed, opts).alias("bytes"))
    # compared by Spark (struct equality, NaN equal to NaN), shown as JSON (a damaged timestamp may
    # hold a year Python's datetime cannot)
    rows = both.select("i", F.equal_null("spark", "bytes").alias("same"), F.to_json("spark").alias("spark"),
                       F.to_json("bytes").alias("bytes"), F.col(f"bytes.{cl.CORRUPT}").isNull().alias("parsed")).collect()
    assert len(rows) == len(texts) + 1
    differ = [(texts[r["i"]], r["spark"], r["bytes"]) for r in rows if not r["same"]]
    assert not differ, differ[:5]
    parsed = sum(r["parsed"] for r in rows if r["i"] >= 0)
    assert parsed > 500 and len(texts) - parsed > 500  # both outcomes, often: the comparison means something
    # the byte path really is taken (a record that starts with '{' and a non-zero byte) for most of them
    assert sum(t.startswith("{") and t[1:2] not in ("", "\x00") for t in texts) > 3000


def test_invalid_utf8_never_takes_the_fast_path(spark):
    """Bytes and reader may parse invalid UTF-8 differently: such a record is decided by the full rules."""
    from pyspark.sql import functions as F

    from spark_jobs.classify import classify

    raws = [b'{"order_id": "a\xff"}', b'{"order_id": "\xc3\x28"}', b'{"order_id": "a", "customer": "\xed\xa0\x80"}',
            b'{"order_id": "\xf4\x90\x80\x80"}', b'{"order_id": "a"}']
    lines = spark.createDataFrame([(i, r) for i, r in enumerate(raws)], "position long, raw binary") \
        .select("position", F.col("raw").cast("string").alias("raw"))
    got = {r["position"]: r["reason"] for r in classify(lines, SCHEMA, ["order_id"], 1 << 20).collect()}
    assert got == {0: "invalid UTF-8", 1: "invalid UTF-8", 2: "invalid UTF-8", 3: "invalid UTF-8", 4: None}
