"""Classify records: parse each record's JSON once, and say why a record is quarantined.

A record is valid when it is a JSON object (UTF-8, at most ``max_record_bytes``) whose fields fit
the declared schema and whose required fields are present. Otherwise its ``reason`` names the
first rule it breaks: unreadable at the source (the kind's reader could not read the record at that
position and says why in ``UNREADABLE``), null value (tombstone), too large, invalid UTF-8, malformed JSON / not a
JSON object, a field of the wrong type, a missing required field.

Cost: the typed parse runs once per record and decides the common case on its own (the "fast
path": an object that parsed with no corrupt record and has its required fields). It is Spark's
``from_json`` reading the record's UTF-8 bytes in place (``utf8_from_json``: Spark 4.2's own
``from_json`` decodes every record through a new ``InputStreamReader``, and takes three times
as long). Only a record that fails it evaluates the full rule list, with Spark's own
``from_json``, which parses it again loosely to name the field of the wrong type and checks that
it is a JSON object at all; Spark evaluates a CASE branch only for the rows that reach it. The
fast path never accepts a record that the full rule list rejects, and gives the values Spark's
``from_json`` gives (``tests/integration/test_spark_read_classify.py`` compares them).
"""

from __future__ import annotations

from eobatch.config import sql_guard

CORRUPT = "_corrupt_record"
UNREADABLE = "_eo_unreadable"  # an optional column of the lines: why the source could not read the record
# An optional column of the lines: the length of a record whose ``raw`` holds only its first bytes
# (a line too long for the files reader to hold, eobatch.sources.files.read); null for the others.
CUT_BYTES = "_eo_bytes"
REC_FIELD = "_eo_rec"  # ``kept_records``' column of the record's field i: REC_FIELD + str(i)
# Spark's default (allowNonNumericNumbers) reads a string naming NaN / an infinity ("NaN",
# "-Infinity", "INF") into a float column, which is how JSON carries them; the same option also
# lets the parser accept a bare NaN / Infinity token, which is not JSON. The fast path parses
# without that option (a bare token never passes it; a string naming one fails it too), and a
# record that fails the fast path is parsed again with Spark's default: the full rule list's
# strict json_object_keys refuses the bare token and the string form stays valid.
LENIENT = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
STRICT = {**LENIENT, "allowNonNumericNumbers": "false"}


def record_schema(ddl: str):
    """The declared schema as a StructType; SystemExit for a DDL that is not a list of columns."""
    from pyspark.sql import types as T

    schema = T.StructType.fromDDL(ddl)
    if not isinstance(schema, T.StructType):  # fromDDL gives a bare type for a DDL such as "int"
        raise SystemExit(f"the job spec's schema {ddl!r} is not a list of columns")
    return schema


JVM_CLASS = "eobatch.jvm.Utf8JsonToStructs"  # include/jvm/, in eobatch-jvm.jar (make jars)


def utf8_from_json(raw, schema, options: dict):
    """``F.from_json(raw, schema, options)`` into a struct, Jackson reading each record's UTF-8 bytes
    in place: Spark's own parser, options and corrupt-record column (``JVM_CLASS``: the same
    values; a record that is not valid UTF-8 may parse differently, so callers check validity)."""
    from pyspark.sql import Column, SparkSession

    from eobatch.core.jvm import jvm_class

    spark = SparkSession.getActiveSession()
    assert spark is not None, "utf8_from_json needs an active Spark session"
    cls = jvm_class(spark, JVM_CLASS)
    return Column(cls.column(raw._jc, schema.json(), dict(options), spark.conf.get("spark.sql.session.timeZone")))


def classify(lines, ddl: str, not_null: list[str], max_record_bytes: int, *, fast_path: bool = True):
    """``lines`` plus ``rec`` (the parsed record) and ``reason`` (null when the record is valid).
    A record of ``CUT_BYTES`` bytes (when the kind gives that column) is too large by that length."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = record_schema(ddl)
    typed = T.StructType([T.StructField(f.name, f.dataType, True) for f in schema.fields]
                         + [T.StructField(CORRUPT, T.StringType(), True)])
    own = [c for c in lines.columns if c in (UNREADABLE, CUT_BYTES)]  # a kind's columns read here, not kept
    keep = [c for c in lines.columns if c != "raw" and c not in own]
    raw = F.col("raw")
    # the full rule list's parse; evaluated only for the records the fast path leaves to it
    rec = F.from_json(raw, typed, LENIENT)
    size = F.coalesce(F.col(CUT_BYTES), F.octet_length(raw)) if CUT_BYTES in lines.columns else F.octet_length(raw)
    missing = [F.when(rec[c].isNull(), F.lit(f"missing required field '{c}'")) for c in not_null]

    loose = F.from_json(raw, T.StructType([T.StructField(f.name, T.StringType(), True) for f in schema.fields]))
    mismatches = [
        F.when(loose[f.name].isNotNull() & rec[f.name].isNull(),
               F.concat(F.lit(f"field '{f.name}': expected {f.dataType.simpleString().upper()}, got "),
                        F.substring(loose[f.name], 1, 80)))
        for f in schema.fields
    ]
    full = (
        F.when(raw.isNull(), F.lit("null value (tombstone)"))
        .when(size > max_record_bytes,
              F.concat(F.lit("record too large: "), size.cast("string"),
                       F.lit(f" bytes > max_record_bytes {max_record_bytes}")))
        .when(~F.is_valid_utf8(raw), F.lit("invalid UTF-8"))
        .when(F.json_object_keys(raw).isNull(), F.lit("malformed JSON: not a JSON object"))
        .when(rec[CORRUPT].isNotNull(),
              F.coalesce(F.concat_ws("; ", *mismatches) if mismatches else F.lit(None),
                         F.lit("does not fit the schema")))
    )
    if missing:
        full = full.when(F.concat_ws("; ", *missing) != "", F.concat_ws("; ", *missing))
    if UNREADABLE in lines.columns:  # before every other rule: there is no record to judge
        full = F.when(F.col(UNREADABLE).isNotNull(), F.col(UNREADABLE)).otherwise(full)
    if not fast_path:
        return lines.select(*keep, "raw", rec.alias("rec"), full.alias("reason"))
    fast = F.col("_eo_fast")
    ok = (raw.isNotNull() & F.startswith(raw, F.lit("{")) & fast.isNotNull() & fast[CORRUPT].isNull()
          & (size <= max_record_bytes) & F.is_valid_utf8(raw))
    for c in not_null:
        ok = ok & fast[c].isNotNull()
    parsed = lines.select(*keep, "raw", *own, utf8_from_json(raw, typed, STRICT).alias("_eo_fast"))
    return parsed.select(*keep, "raw", F.when(ok, fast).otherwise(rec).alias("rec"),
                         F.when(ok, F.lit(None).cast("string")).otherwise(full).alias("reason"))


def bound_partition_values(classified, ddl: str, partition_by: list[str]):
    """``classified`` with a ``reason`` for the valid records whose partition values no folder can
    hold (``eobatch.core.formats``: the one definition of a value's folder and its bounds): an empty
    string (Delta reads an empty partition value as null), a ``<column>=<value>`` folder longer
    than PARTITION_SEGMENT_MAX_BYTES (ENAMETOOLONG on a local disk), or all of them longer than
    PARTITION_PATH_MAX_BYTES (S3 keys). Checked on the record's field of each partition column
    (those of the declared schema; a column a transform computes is not a record's to answer for),
    so that the tables never hold a value that a writer (this job, delta-rs's OPTIMIZE or MERGE)
    cannot put in a path."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from eobatch.core.formats import HIVE_NULL, PARTITION_PATH_MAX_BYTES, PARTITION_SEGMENT_MAX_BYTES, PATH_SAFE_CHARS

    types = {f.name: f.dataType for f in record_schema(ddl).fields}
    cols = [c for c in partition_by if c in types]
    if not cols:
        return classified
    rec = F.col("rec")
    lengths, checks = [], []
    for c in cols:
        head = len(c.encode()) + 1
        if not isinstance(types[c], T.StringType):  # an INT, DATE or BOOLEAN: never longer than a null's folder
            lengths.append(F.lit(head + len(HIVE_NULL)))
            continue
        v = rec[c]
        escaped = F.octet_length(v) + 2 * F.octet_length(F.regexp_replace(v, f"[{PATH_SAFE_CHARS}]", ""))
        n = F.when(v.isNull(), F.lit(head + len(HIVE_NULL))).otherwise(escaped + head)
        lengths.append(n)
        checks.append(F.when(v == "", F.lit(f"partition value of column '{c}' is an empty string, which Delta "
                                            f"reads as null (sink.partition_by)")))
        checks.append(F.when(n > PARTITION_SEGMENT_MAX_BYTES, F.concat(
            F.lit(f"partition value of column '{c}' takes "), n.cast("string"),
            F.lit(f" bytes as a folder name ({c}=...), more than {PARTITION_SEGMENT_MAX_BYTES} (sink.partition_by)"))))
    total = sum(lengths[1:], lengths[0]) + (len(lengths) - 1)
    checks.append(F.when(total > PARTITION_PATH_MAX_BYTES, F.concat(
        F.lit(f"partition values of columns {', '.join(cols)} take "), total.cast("string"),
        F.lit(f" bytes as folders of a file path, more than {PARTITION_PATH_MAX_BYTES} (sink.partition_by)"))))
    reason = F.when(F.col("reason").isNull(), F.coalesce(*checks)).otherwise(F.col("reason"))
    return classified.withColumn("reason", reason)


def kept_records(classified, ddl: str, located: tuple[str, ...] = (), quarantine_only: tuple[str, ...] = ()):
    """What the job keeps of its one read, to write both outputs from (and count, and locate):
    each record field as ``_eo_rec<i>`` (a record may have fields named like the lines' own
    columns), ``reason``, ``raw`` and the ``quarantine_only`` columns only for the records to
    quarantine (null for the others: a null costs the cache a bit, a value its bytes), and every
    other column of the lines but the ``located`` ones (the kind's ``locate`` recomputes them for
    the records to quarantine). Flat columns cache far cheaper than the parsed struct."""
    from pyspark.sql import functions as F

    fields = record_schema(ddl).fields
    bad = F.col("reason").isNotNull()
    other = [F.when(bad, F.col(c)).alias(c) if c in quarantine_only else F.col(c)
             for c in classified.columns if c not in ("raw", "rec", "reason", *located)]
    return classified.select(*[F.col("rec")[f.name].alias(f"{REC_FIELD}{i}") for i, f in enumerate(fields)],
                             "reason", F.when(bad, F.col("raw")).alias("raw"), *other)


def valid_records(kept, ddl: str, extra: list[str]):
    """The valid records (of ``kept_records``) under their own names, with the lines' ``_``-prefixed
    metadata for the transform (the kind's ``_eo_*`` internals excluded) and the ``extra``
    columns (the interval slice)."""
    from pyspark.sql import functions as F

    fields = record_schema(ddl).fields
    meta = [c for c in kept.columns if c.startswith("_") and not c.startswith("_eo_")]
    return kept.where(F.col("reason").isNull()).select(
        *[F.col(f"{REC_FIELD}{i}").alias(f.name) for i, f in enumerate(fields)], *meta, *extra)


def quarantined_records(kept, batch_id: int, extra: list[str]):
    """The rows of the quarantine table: batch id, source, position, raw text (valid UTF-8, at
    most RAW_CHARS characters), reason; ``extra`` columns are kept (the interval slice)."""
    from pyspark.sql import functions as F

    from eobatch.config.lines import RAW_CHARS

    raw = F.substring("raw", 1, RAW_CHARS)
    return kept.where(F.col("reason").isNotNull()).select(
        F.lit(batch_id).cast("long").alias("batch_id"), "source", "position",
        F.when(F.is_valid_utf8(raw), raw).otherwise(F.make_valid_utf8(raw)).alias("raw"),
        "reason", *extra)


# Expressions that Spark takes as deterministic within one query but that give another value in the
# next query (the time it is optimized at): ``now()``, ``current_date()``, ``localtimestamp()``, ...
_PER_QUERY = ("Current", "Now", "LocalTimestamp")


def answers_twice_alike(spark, ddl: str, expectations: list[dict]) -> str | None:
    """None when ``expect`` gives every record the same verdict in two queries (two reads of the
    same records); else why not: an expectation that is not deterministic (``rand()``,
    ``uuid()``) or reads the time of its query (``current_timestamp()``: a record can pass it in
    one read and fail it in the next). The classification itself is deterministic. Decided from
    Spark's analysis of each expression over an empty frame of the record schema."""
    import re

    from pyspark.sql import functions as F

    empty = spark.createDataFrame([], record_schema(ddl))
    for e in expectations:
        try:
            plan = empty.select(F.expr(e["expr"]))._jdf.queryExecution().analyzed()
        except Exception:  # noqa: BLE001 - expect() names the expectation that cannot be evaluated
            return f"expectation {e['name']} cannot be analyzed on its own"
        if not plan.deterministic():
            return f"expectation {e['name']} is not deterministic"
        names = re.findall(r'"class":"org\.apache\.spark\.sql\.catalyst\.expressions\.(\w+)"', plan.toJSON())
        if any(n.startswith(_PER_QUERY) for n in names):
            return f"expectation {e['name']} reads the time of its query"
    return None


EXPECTATION_PRECEDENCE = ("fail", "quarantine", "drop")  # a record failing several: the first action here


def expect(classified, ddl: str, expectations: list[dict]):
    """``classified`` with the pipeline's expectations applied to its valid records: ``reason``
    set to ``expectation <name> failed`` for those quarantined by one (or ``... failed (action
    fail)`` for one whose batch must fail), ``_eo_drop`` true for those dropped, and one boolean
    ``_eo_x<i>`` per expectation (it failed; counted by the caller). A record passes an
    expectation when its expression is true (false or null fail it); a record failing several
    takes the action that comes first in EXPECTATION_PRECEDENCE, and its reason names the first
    of those (in the YAML's order). Records already invalid are not evaluated."""
    from pyspark.sql import functions as F

    if not expectations:
        return classified.withColumn("_eo_drop", F.lit(False))
    fields = record_schema(ddl).fields
    outer = classified.columns
    # the record's fields under their own names (the lines' columns renamed out of their way:
    # a record field never starts with "_", so no name is shadowed)
    scope = classified.select(*[F.col(c).alias(f"_eo_o{i}") for i, c in enumerate(outer)],
                              *[F.col("rec")[f.name].alias(f.name) for f in fields])
    reason = F.col(f"_eo_o{outer.index('reason')}")  # the classification's: null for a valid record
    failed = []
    for e in expectations:
        refused = sql_guard.job_refusal(scope, e["expr"])  # Spark's own parse: a spec past the loader too
        if refused:
            raise SystemExit(f"expectation {e['name']}: {e['expr']!r} {refused}; nothing of this batch is staged")
        try:
            verdict = F.expr(e["expr"])
        except Exception as err:  # a parse error: name the expectation
            raise SystemExit(f"expectation {e['name']}: {e['expr']!r} is not a Spark SQL expression: {err}") from None
        failed.append(reason.isNull() & ~F.coalesce(verdict.cast("boolean"), F.lit(False)))
    try:
        scope = scope.select("*", *[f.alias(f"_eo_x{i}") for i, f in enumerate(failed)])
    except Exception as err:  # e.g. an unknown column or a type error, found by Spark's analysis
        names = ", ".join(f"{e['name']} ({e['expr']!r})" for e in expectations)
        raise SystemExit(f"the expectations {names} cannot be evaluated on the schema: {err}") from None
    hit = {a: [i for i, e in enumerate(expectations) if e["action"] == a] for a in EXPECTATION_PRECEDENCE}
    any_of = {a: F.lit(False) if not ix else F.greatest(*[F.col(f"_eo_x{i}") for i in ix], F.lit(False))
              for a, ix in hit.items()}
    first = {a: F.coalesce(*[F.when(F.col(f"_eo_x{i}"), F.lit(expectations[i]["name"])) for i in ix], F.lit(None))
             for a, ix in hit.items() if ix}
    new_reason = reason
    for action, suffix in (("quarantine", " failed"), ("fail", " failed (action fail)")):  # fail wins: last
        if hit[action]:
            new_reason = F.when(reason.isNull() & any_of[action],
                                F.concat(F.lit("expectation "), first[action], F.lit(suffix))).otherwise(new_reason)
    return scope.select(*[(new_reason if c == "reason" else F.col(f"_eo_o{i}")).alias(c) for i, c in enumerate(outer)],
                        (reason.isNull() & ~any_of["fail"] & ~any_of["quarantine"] & any_of["drop"]).alias("_eo_drop"),
                        *[F.col(f"_eo_x{i}") for i in range(len(expectations))])
