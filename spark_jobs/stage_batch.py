"""spark-submit entry point: stage one attempt of one batch (no Airflow imports).

    spark-submit --py-files eobatch.zip spark_jobs/stage_batch.py --spec-file <ledger path> --spec-sha256 <hex>

1. read the batch plan from the ledger: exactly the recorded source range;
2. split it into records, by the source kind's reader (eobatch.sources.<kind>.read): one row per
   record with source, position, raw (a JSON text) and "_"-prefixed metadata columns for
   transforms, never published (files: one JSON object per line, source = file, position = line;
   Kafka: one value per record, source = topic/partition, position = offset, _kafka_*; parquet:
   one row as a JSON object, source = file, position = row index);
3. classify (spark_jobs/classify.py): too large, invalid UTF-8, not a JSON object, type mismatch,
   missing required field, a partition value no folder can hold -> quarantine with the raw text
   and the reason; the rest parsed with the declared schema;
4. apply the pipeline's transform to the valid records, then the sink kind's step (its
   ``job_module``: a merge sink keeps the latest record of each key, or folds a key's rows into one);
5. write both outputs (spark_jobs/stage_write.py) with attempt-unique file names under each
   table's eo_batches/ folder (invisible to readers: not in the Delta log) and one manifest per
   Spark partition. The source is read and parsed once, the counts observed during that read:
   a kind that can read its range again numbered the same way (files) writes the sink straight
   from it while the records to quarantine are observed too (at most BAD_LINES_CAP characters of
   them; beyond, a second read classifies every record again); otherwise (Kafka, Parquet, Delta;
   an expectation that may answer otherwise twice; a transform reading its input twice) what the
   job keeps of the classified records is cached on local disk and both outputs come from it;
6. write the stage summary (counts, partitions, schemas) last: the attempt is STAGED.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import sys
import time


def _parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    given = ap.add_mutually_exclusive_group(required=True)
    given.add_argument("--spec", help="base64 JSON job spec")
    given.add_argument("--spec-file", help="the job spec's file (local or s3a://), written by the stage task")
    ap.add_argument("--spec-sha256", help="the SHA-256 of the spec file's bytes (with --spec-file)")
    args = ap.parse_args(argv)
    if args.spec_file and not args.spec_sha256:
        ap.error("--spec-file needs --spec-sha256")
    return args


def read_spec(args) -> dict:
    """The job's spec: inline (``--spec``), or the file the stage task wrote (``--spec-file``),
    whose bytes must have the SHA-256 the command line names."""
    if args.spec is not None:
        return json.loads(base64.b64decode(args.spec))
    import hashlib

    from eobatch.storage.fs import storage_for

    data = storage_for(args.spec_file).read_bytes(args.spec_file)
    if hashlib.sha256(data).hexdigest() != args.spec_sha256:
        raise SystemExit(f"the job spec {args.spec_file} is not the one the stage task wrote (SHA-256 differs)")
    return json.loads(data)


def batch_specs(spec: dict) -> list[dict]:
    """Each batch's spec, in order, from a run's spec (``eobatch.job.launch.run_spec``: the
    pipeline's part once, then [batch, attempt] pairs), or from one batch's spec."""
    if "common" in spec:
        return [{**spec["common"], "batch_id": int(b), "attempt": a} for b, a in spec["batches"]]
    return spec["batches"] if "batches" in spec else [spec]


class TransformContext:
    """What a transform may know besides its input DataFrame."""

    def __init__(self, spark, pipeline: str, batch_id: int, options: dict):
        self.spark, self.pipeline, self.batch_id, self.options = spark, pipeline, batch_id, options


def load_transform(spec: dict):
    """The module of the spec's transform: shipped with eobatch, or the pipeline folder's own
    (in the code zip, the bytes of the file the batch was planned with)."""
    from eobatch.config.contract import OWN_TRANSFORMS, SHIPPED_TRANSFORMS

    module = spec.get("transform_module") or f"{SHIPPED_TRANSFORMS}.{spec['transform']}"
    if module.rpartition(".")[0] not in (SHIPPED_TRANSFORMS, OWN_TRANSFORMS):
        raise SystemExit(f"the spec's transform module {module!r} is not in {SHIPPED_TRANSFORMS} or {OWN_TRANSFORMS}")
    mod = importlib.import_module(module)
    if not hasattr(mod, "transform"):
        raise SystemExit(f"the transform {spec['transform']} ({module}) defines no transform(df, ctx)")
    return mod


def executor_env(spec: dict, plan) -> dict:
    """The S3 endpoint and credentials for the executors' environment (s3a's default credential
    chain and the Parquet writers read them there). Set on the session by the driver, from its
    own environment: never on the spark-submit command line. Spark redacts them in its UI and
    event log (spark.redaction.regex)."""
    from eobatch.sources import kind_for
    from eobatch.storage import s3conf

    paths = [spec["sink_table"], spec["quarantine_table"]] + kind_for(plan.source_kind).range(plan.range).locations()
    if not any(s3conf.is_s3(p) for p in paths):
        return {}
    return s3conf.credential_env()


QUARANTINE_ROWS_PER_TASK = 1_000_000

# The records to quarantine that the one read observes (eobatch.jvm.CappedLines, in
# eobatch-jvm.jar), each as one line of JSON (its raw text as base64 inside: any bytes survive),
# at most BAD_LINES_CAP characters of them (the Spark setting BAD_LINES_CONF changes it), in
# bounded memory; with more, a second read classifies every record again.
COUNTS = "eobatch_counts"  # the observation of the read
BAD_LINES = "_eo_bad_lines"
BAD_LINES_CAP = 32 << 20
BAD_LINES_CONF = "spark.eobatch.quarantineChars"
BAD_LINES_MAX = 1 << 30  # the JVM joins them into one String, which holds fewer than 2**31 characters
_BAD_LINES_FN = "eobatch_capped_lines"


def observe_bad(spark, kept):
    """The aggregate (a column of the checked records ``kept`` is made of) of the rows of ``kept``
    (``kept_records``) to quarantine, with all their columns but the record's fields, in at most
    the cap's characters (``bad_of`` reads it back)."""
    from pyspark.sql import functions as F

    from eobatch.core.jvm import jvm_class

    text = spark.conf.get(BAD_LINES_CONF, str(BAD_LINES_CAP))
    if not text.isdigit() or int(text) > BAD_LINES_MAX:
        raise SystemExit(f"{BAD_LINES_CONF} must be a whole number of characters from 0 to {BAD_LINES_MAX}, "
                         f"got {text!r}")
    jvm_class(spark, "eobatch.jvm.CappedLines").register(spark._jsparkSession, _BAD_LINES_FN, int(text))
    # JSON escapes every line end of a string (and base64's own): one line per record
    row = F.struct(*[F.base64("raw").alias("raw") if c == "raw" else F.col(c) for c in _bad_columns(kept)])
    return F.call_function(_BAD_LINES_FN, F.when(F.col("reason").isNotNull() & ~F.col("_eo_drop"), F.to_json(row)))


def _bad_columns(kept) -> list[str]:
    from spark_jobs.classify import REC_FIELD

    return [c for c in kept.columns if not c.startswith(REC_FIELD)]


def bad_of(spark, kept, text: str):
    """The rows to quarantine that ``observe_bad`` observed (its result ``text``) as a DataFrame of
    ``kept``'s columns but the record's fields, raw text byte for byte."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from eobatch.sources.base import local_frame

    fields = [T.StructField(f.name, T.StringType() if f.name == "raw" else f.dataType, True)
              for f in kept.select(*_bad_columns(kept)).schema.fields]
    each = local_frame(spark, "j string", [(x,) for x in text.split("\n") if x])
    rows = each.select(F.from_json("j", T.StructType(fields)).alias("r")).select("r.*")
    return rows.withColumn("raw", F.unbase64("raw").cast("string"))


def reads_of(df, name: str) -> int:
    """How many times the plan of ``df`` reads the input observed as ``name`` (its analyzed plan,
    which does not fix whether a cached relation serves it): each reference runs the read again."""
    return str(df._jdf.queryExecution().analyzed().toString()).count(f"CollectMetrics {name},")


# Every wait of the job has a bound: Spark delivers an Observation's values through its listener
# bus, which a query's end does not wait for.
LISTENER_WAIT_MS = 300_000


def settle_listeners(spark) -> None:
    """Wait until Spark's listener bus has delivered every event so far (the end of each query,
    which fills its Observations), at most LISTENER_WAIT_MS; SystemExit past it."""
    try:
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(LISTENER_WAIT_MS)
    except Exception as e:  # noqa: BLE001 - py4j's error of the JVM's TimeoutException
        raise SystemExit(f"Spark's listener bus did not deliver its events within {LISTENER_WAIT_MS // 1000}s "
                         f"({type(e).__name__}); the attempt is given up and retried") from None


def count_columns(xcols: list[str]) -> list:
    """The counts of the checked records, by the read's Observation or by a read of their own:
    rows in, to quarantine, dropped, and failed per expectation (``xcols``)."""
    from pyspark.sql import functions as F

    return [F.count(F.lit(1)).alias("rows_in"), F.count("reason").alias("rows_bad"),
            F.count_if("_eo_drop").alias("rows_dropped"), *[F.count_if(c).alias(c) for c in xcols]]


def counts_not_by_the_write(spark, counts, out) -> str | None:
    """Why the write of ``out`` (the transform's output) cannot be the read whose Observation
    ``counts`` gives the batch's counts, or None when it is. The Observation is filled by the
    first query that holds the observed read: an action of the transform on its input (``count()``,
    ``first()``, ``isEmpty()``) fills it with what that action read, a part of the range; and a
    transform whose output is not a plan over its input (``df.rdd``, a checkpoint, a frame built
    anew) leaves it unfilled for good, since no query of it ends."""
    settle_listeners(spark)
    if counts._jo is not None and counts._jo.future().isCompleted():
        return "the transform ran an action on its input (count, first, isEmpty, collect, ...)"
    if reads_of(out, COUNTS) == 0:
        return "the transform's output is not a query over its input (df.rdd, a checkpoint, a new DataFrame)"
    return None


def observed_counts(spark, counts) -> dict:
    """The values the write's read observed; SystemExit (never a wait without end) when the
    Observation is not filled once Spark's listeners have had every event."""
    settle_listeners(spark)
    if counts._jo is None or not counts._jo.future().isCompleted():
        raise SystemExit("the write did not observe the counts of its read; nothing of this attempt is prepared")
    return dict(counts.get)


def transform_slices(tmod, valid, ctx, slices: list[str], slice_col: str):
    """The pipeline's transform, once per interval slice (interval mode), so that a transform
    that aggregates never mixes two intervals; each output row keeps its slice. Columns whose
    name starts with "_" are never published."""
    from functools import reduce

    from pyspark.sql import functions as F

    def published(df):
        return df.select(*[c for c in df.columns if not c.startswith("_")])

    if not slices:
        return published(tmod.transform(valid, ctx))
    outs = [published(tmod.transform(valid.where(F.col(slice_col) == s), ctx)).withColumn(slice_col, F.lit(s))
            for s in slices]
    return reduce(lambda a, b: a.unionByName(b), outs)


class StageJob:
    """One attempt of one batch, staged in named steps, each a method a test can call on its own:

    ``check`` (the plan, the contract, the range still readable) -> ``session`` -> ``read`` (the
    kind's records of exactly the range, each classified and checked once) -> ``transform`` (the
    pipeline's transform and the sink kind's step over the valid records, with the counts observed
    by the read that feeds the write, or by a read of their own) -> ``write_sink`` -> ``counted``
    (the counts; an expectation with action fail stops here) -> ``write_quarantine`` (at the exact
    source positions) -> ``report`` (the stage summary, last: the attempt is STAGED)."""

    def __init__(self, spec: dict):
        from eobatch.core.formats import Layout
        from eobatch.core.ledger import Ledger

        self.spec, self.t0 = spec, time.time()
        self.batch_id, self.attempt = int(spec["batch_id"]), spec["attempt"]
        self.layout = Layout(spec["sink_table"], spec["quarantine_table"])
        self.ledger = Ledger(self.layout)
        self.expectations = list(spec.get("expectations") or [])
        self.xcols = [f"_eo_x{i}" for i in range(len(self.expectations))]
        # the kind's job source, and the bound of a record (files: the longest line the reader holds)
        self.src = {**(spec.get("source") or {}), "max_record_bytes": int(spec["max_record_bytes"])}

    def log(self, msg: str) -> None:
        print(f"[eobatch] {self.spec['pipeline']} batch {self.batch_id} attempt {self.attempt} "
              f"+{time.time() - self.t0:.1f}s: {msg}", flush=True)

    # -- check: what is staged is exactly the plan, under the configuration that planned it -------
    def check(self) -> None:
        from eobatch.config.contract import contract_refusal
        from eobatch.sources import kind_for

        b, layout, ledger = self.batch_id, self.layout, self.ledger
        digest = ledger.plan_digest(b)  # before the plan: the record verify compares against
        plan = ledger.plan(b)
        if plan is None or digest is None:
            raise SystemExit(f"batch {b} has no plan at {layout.plan(b)}")
        self.plan, self.digest = plan, digest
        if ledger.prepared(b) is not None:
            raise SystemExit(f"batch {b} is already PREPARED; refusing to stage attempt {self.attempt}")
        refused = contract_refusal(plan, self.spec.get("contract"), self.attempt)
        if refused:
            raise SystemExit(refused)
        try:
            self.kind = kind_for(plan.source_kind)
        except KeyError:
            raise SystemExit(f"source kind {plan.source_kind!r} is not supported by this job") from None
        _HELD.append((self.kind, plan.range))  # released when this batch is staged or has failed (``main``)
        problems = self.kind.unreadable(plan.range, self.src)
        if problems:
            raise SystemExit("the planned source range changed or cannot be read since the plan; the batch range "
                             "can no longer be read exactly: " + "; ".join(problems))

    # -- session: the application's, started by its first batch ----------------------------------
    def session(self) -> None:
        from pyspark import SparkConf, SparkContext
        from pyspark.sql import SparkSession

        from eobatch.storage import s3conf
        from spark_jobs import worker_daemon

        builder = SparkSession.builder.appName(f"eobatch:{self.spec['pipeline']}:b{self.batch_id}:{self.attempt}")
        for k, v in executor_env(self.spec, self.plan).items():
            builder = builder.config(f"spark.executorEnv.{k}", v)
        if SparkSession.getActiveSession() is None:  # the first batch of the application starts it
            SparkContext._ensure_initialized()  # the JVM of spark-submit, whose settings SparkConf then reads
            submitted = dict(SparkConf().getAll())
            for k, v in worker_daemon.conf(submitted.get("spark.master", ""), submitted).items():
                builder = builder.config(k, v)
        self.spark = spark = builder.getOrCreate()
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        for k, v in s3conf.bucket_hadoop_conf().items():  # a bucket in another store (a delta source's conn_id)
            hadoop.set(k, v)
        self.log("Spark session ready")
        spark.conf.set("spark.sql.session.timeZone", "UTC")

    # -- read: the records of exactly the planned range, classified and checked (one typed parse) --
    def read(self):
        """(checked records, interval slices, the kind's own slicing or None): a new read each call."""
        from pyspark.sql import functions as F

        from eobatch.core.formats import SLICE_COL
        from eobatch.sources.base import local_frame
        from spark_jobs.classify import bound_partition_values, classify, expect

        spec, plan, spark = self.spec, self.plan, self.spark
        lines = self.kind.read(spark, plan.range, self.src)
        sliced = [(f.path, f.slice) for f in plan.files() or () if f.slice]
        slices = sorted({name for _path, name in sliced})
        if sliced:  # interval mode: each record's interval slice, by the planned file it came from
            of_file = local_frame(spark, f"source string, {SLICE_COL} string", sliced)
            lines = lines.join(F.broadcast(of_file), "source")
        assigned = self.kind.interval_slices(lines, plan.range) if plan.interval else None
        if assigned is not None:  # Kafka: each record's interval slice, by its own timestamp; others not this batch's
            lines, slices = assigned
        classified = bound_partition_values(classify(lines, spec["schema"], spec["not_null"],
                                                     int(spec["max_record_bytes"])),
                                            spec["schema"], list(spec["partition_by"]))
        return expect(classified, spec["schema"], self.expectations), slices, assigned

    def kept_of(self, checked):
        """What the job keeps of the checked records: all but those dropped, without the record's
        fields of those to quarantine (``classify.kept_records``)."""
        from pyspark.sql import functions as F

        from spark_jobs.classify import kept_records

        return kept_records(checked.where(~F.col("_eo_drop")).drop("_eo_drop", *self.xcols), self.spec["schema"],
                            self.kind.located_columns, self.kind.quarantine_columns)

    # -- transform: the sink's rows, and where the counts come from --------------------------------
    def output(self, kept):
        """The pipeline's transform of the valid records of ``kept``, then the sink kind's step."""
        from eobatch.core.formats import SLICE_COL
        from spark_jobs.classify import valid_records

        out = transform_slices(self.tmod, valid_records(kept, self.spec["schema"], self.extra), self.ctx,
                               self.slices, SLICE_COL)
        return self.sink_step.step(out, self.spec["sink"], self.extra)

    def transform(self) -> None:
        """Read once and transform. Both outputs, the counts and the source positions come from one
        read: either the sink is written straight from it while the counts and the records to
        quarantine are observed (a kind that can read its range again, numbered the same way:
        beyond the observation's cap, a second read classifies every record again), or what the job
        keeps of the classified records is cached on local disk (a Kafka range must not be asked of
        the broker twice; a classification that could answer otherwise the second time; a
        transform that reads its input more than once, or whose output the read's observation
        cannot count: then the counts take a read of their own). Memory stays bounded either way."""
        from pyspark import StorageLevel
        from pyspark.sql import Observation

        from eobatch.core.formats import SLICE_COL
        from eobatch.sinks import job_module
        from eobatch.sources import range_summary
        from spark_jobs.classify import answers_twice_alike

        spec, spark, kind = self.spec, self.spark, self.kind
        self.log(f"reading {range_summary(self.plan)} ({self.plan.rows_in} records by the plan's count)")
        checked, self.slices, assigned = self.read()
        self.extra = [SLICE_COL] if self.slices else []
        cached = ("the source kind cannot read its range again" if not kind.reads_alike
                  or assigned is not None else answers_twice_alike(spark, spec["schema"], self.expectations))
        self.counts = counts = Observation(COUNTS)  # taken once, by the one read
        bad_lines = [] if cached else [observe_bad(spark, self.kept_of(checked)).alias(BAD_LINES)]
        kept = self.kept_of(checked.observe(counts, *count_columns(self.xcols), *bad_lines))
        self.tmod = load_transform(spec)
        self.ctx = TransformContext(spark, spec["pipeline"], self.batch_id, spec.get("transform_options") or {})
        self.sink_step = importlib.import_module(job_module(spec["sink"]["kind"]))  # the sink kind's step
        out, self.got, cache = self.output(kept), None, kept
        apart = counts_not_by_the_write(spark, counts, out)
        if apart:  # the counts by a read of their own, of the checked records cached on local disk
            self.log(f"the counts take a read of their own: {apart}")
            cache = self.read()[0].persist(StorageLevel.DISK_ONLY)  # a new read: what the kind observes of it too
            self.got = cache.agg(*count_columns(self.xcols)).first().asDict()
            kept, cached = self.kept_of(cache), apart
            out = self.output(kept)  # the transform again, over the cached records
        elif not cached and reads_of(out, COUNTS) > 1:  # decided on the analysis only: the cache can still serve it
            cached = "the transform reads its input more than once"
        if cached and not apart:
            kept.persist(StorageLevel.DISK_ONLY)
        self.log("the records to quarantine: " + (f"cached on local disk with the rest of the read ({cached})"
                                                  if cached else "observed by the read, in bounded memory"))
        self.kept, self.out, self.cache, self.cached = kept, out, cache, cached

    # -- write: the sink's rows, then the counts, then the quarantine -----------------------------
    def _stage(self, df, participant: str, table_root: str, partition_by: list[str]) -> list[dict]:
        from eobatch.core.formats import SLICE_COL
        from spark_jobs.stage_write import stage_dataframe

        ledger_spec = {"sink_table": self.layout.sink_table, "quarantine_table": self.layout.quarantine_table}
        return stage_dataframe(df, participant=participant, table_root=table_root, partition_by=partition_by,
                               ledger_spec=ledger_spec, batch_id=self.batch_id, attempt=self.attempt,
                               slice_col=SLICE_COL if self.slices else None)

    def write_sink(self) -> None:
        from eobatch.core.formats import QUARANTINE, SINK

        self.partition_by = {SINK: list(self.spec["partition_by"]), QUARANTINE: []}
        self.manifests = {SINK: self._stage(self.out, SINK, self.layout.sink_table, self.partition_by[SINK])}

    def counted(self) -> None:
        """The batch's counts (the write's read observed them, or a read of their own); SystemExit
        when an expectation whose action is fail failed, before any quarantine file or summary."""
        from pyspark.sql import functions as F

        from eobatch.core.formats import SINK

        got: dict = self.got or observed_counts(self.spark, self.counts)
        self.observed = got
        self.rows_in, self.rows_bad, self.rows_dropped = int(got["rows_in"]), int(got["rows_bad"]), int(got["rows_dropped"])
        self.failed = failed = {e["name"]: int(got[c]) for e, c in zip(self.expectations, self.xcols)}
        self.rows_valid = self.rows_in - self.rows_bad - self.rows_dropped
        self.log(f"read {self.rows_in} records: {self.rows_valid} valid, {self.rows_bad} to quarantine, "
                 f"{self.rows_dropped} dropped; sink staged: {sum(m['rows'] for m in self.manifests[SINK])} rows"
                 + (f"; expectations failed: {failed}" if self.expectations else ""))
        fatal = [e["name"] for e in self.expectations if e["action"] == "fail" and failed[e["name"]]]
        if fatal:  # nothing of this attempt can be prepared
            example = self.kind.locate(self.spark, self.kept.where(F.col("reason").endswith("(action fail)")).limit(1),
                                       self.plan.range, self.src).select("source", "position", "raw", "reason").first()
            # the failed count is of these records (a quarantined record of each expectation that failed)
            assert example is not None, f"expectation {fatal[0]} failed, yet no record is quarantined for it"
            self.cache.unpersist()  # when cached
            raise SystemExit(f"expectation {fatal[0]} (action fail) failed for {failed[fatal[0]]} record(s) of batch "
                             f"{self.batch_id}; nothing is published. First: {example['reason']}, at "
                             f"{example['source']} position {example['position']}: {str(example['raw'])[:300]}")

    def write_quarantine(self) -> None:
        """The quarantine, only when there is something to quarantine, at the exact source positions."""
        from pyspark.sql import functions as F

        from eobatch.core.formats import QUARANTINE
        from spark_jobs.classify import quarantined_records

        rows_bad, cached, kept = self.rows_bad, self.cached, self.kept
        tasks = max(1, -(-rows_bad // QUARANTINE_ROWS_PER_TASK))  # one file for up to a million of them
        seen_bad = None if cached or not rows_bad else self.observed[BAD_LINES]
        if seen_bad is not None:  # no second read
            of_bad = bad_of(self.spark, kept, seen_bad)
        else:  # from the cache; or too many to hold: a second read that classifies every record again
            if not cached and rows_bad:
                self.log(f"{rows_bad} records to quarantine, more than {BAD_LINES_CONF} characters: a second read "
                         f"classifies every record again")
            of_bad = kept.where(F.col("reason").isNotNull())
        bad = quarantined_records(self.kind.locate(self.spark, of_bad, self.plan.range, self.src), self.batch_id,
                                  self.extra)
        # a few bad records spread over every piece of the read: not one file per piece (the cache's
        # per-batch statistics skip the pieces without any); without the cache, a shuffle of the
        # bad records only (a coalesce would read the whole source again in that many tasks)
        self.bad = bad = bad.coalesce(tasks) if cached else bad.repartition(tasks)
        self.manifests[QUARANTINE] = (self._stage(bad, QUARANTINE, self.layout.quarantine_table, [])
                                      if rows_bad else [])
        staged_bad = sum(m["rows"] for m in self.manifests[QUARANTINE])
        if staged_bad != rows_bad:  # a second read that did not find what the one before counted
            raise SystemExit(f"batch {self.batch_id}: the read found {rows_bad} records to quarantine, the "
                             f"quarantine staged {staged_bad}: the source read differently the second time; "
                             f"nothing of this attempt is prepared")

    # -- report: the stage summary, last --------------------------------------------------------
    def report(self) -> dict:
        from pyspark.sql.pandas.types import to_arrow_schema

        from eobatch.config.schemas import schema_to_b64
        from eobatch.core.formats import QUARANTINE, SINK, SLICE_COL, StageSummary
        from eobatch.storage.fs import storage_for

        positions = self.kind.positions(self.kept)
        self.cache.unpersist()  # when cached
        schemas = {SINK: to_arrow_schema(self.out.drop(SLICE_COL).schema, timezone="UTC"),
                   QUARANTINE: to_arrow_schema(self.bad.drop(SLICE_COL).schema, timezone="UTC")}
        manifests = self.manifests
        summary = StageSummary(
            batch_id=self.batch_id, attempt=self.attempt, rows_in=self.rows_in, rows_valid=self.rows_valid,
            rows_quarantined=self.rows_bad,
            row_preserving=bool(getattr(self.tmod, "ROW_PRESERVING", False)) and self.sink_step.KEEPS_ROWS,
            partitions={p: len(m) for p, m in manifests.items()}, manifests=manifests,
            arrow_schema={p: schema_to_b64(s) for p, s in schemas.items()}, partition_by=self.partition_by,
            stage_seconds=round(time.time() - self.t0, 3), spark_app_id=self.spark.sparkContext.applicationId,
            config_fingerprint=self.spec.get("config_fingerprint", ""), source_positions=positions,
            plan_digest=self.digest, rows_dropped=self.rows_dropped, expectations=self.failed,
            contract=self.spec["contract"],
        )
        storage_for(self.layout.sink_table).write_atomic(self.layout.stage_summary(self.batch_id, self.attempt),
                                                         summary.to_json())
        nfiles = sum(len(m["files"]) for ms in manifests.values() for m in ms)
        self.log(f"STAGED in {summary.stage_seconds:.1f}s: {sum(m['rows'] for m in manifests[SINK])} rows to "
                 f"publish, {self.rows_bad} quarantined, {nfiles} files over {summary.partitions} partitions")
        return summary.__dict__

    def run(self) -> dict:
        self.check()
        self.session()
        self.transform()
        self.write_sink()
        self.counted()
        self.write_quarantine()
        return self.report()


def run(spec: dict) -> dict:
    """Stage one attempt of one batch (``StageJob``); its stage summary."""
    return StageJob(spec).run()


_HELD: list = []  # (kind, range) of the batch being staged: what its read holds (open files)


def release_held() -> None:
    """Give back what the batch being staged holds (``SourceKind.release``)."""
    while _HELD:
        kind, rng = _HELD.pop()
        kind.release(rng)


def main(argv=None) -> int:
    """Stage the spec's batch, or each batch of ``{"batches": [...]}`` in order in this one
    application (a run that carries several): each its own attempt, files and stage summary. A
    failure stops the job; the batches before it stay STAGED for the stage task's retry."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    from eobatch.core import faults

    for i, one in enumerate(batch_specs(read_spec(args))):
        if i:
            faults.crash_point("stage.between_batches")
        try:
            run(one)
        finally:  # one batch's resources at a time, whatever the run carries
            release_held()
    return 0


if __name__ == "__main__":
    sys.exit(main())
