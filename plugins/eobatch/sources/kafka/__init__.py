"""``kind: kafka``: exact offset ranges of a topic's partitions.

Config ``config.KafkaConfig``, planner ``planner.KafkaSource``, range ``range.KafkaRange``,
Spark reader ``read.read_lines`` (confluent-kafka inside Spark tasks); ``KIND`` ties them to
the registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.formats import SLICE_COL
from ...storage.lineage import LineageDataset, kafka_namespace
from ..base import (
    COMMON_HARMLESS,
    PLANNED,
    ConfigContext,
    IntervalTooLarge,
    SourceConfig,
    fields_as_keys,
    harmless,
    pinned,
)
from .client import for_job, job_env, settings
from .config import KafkaConfig
from .intervals import slice_column
from .offsets import DataLossError, KafkaUnavailable, partition_offsets, spread
from .planner import KafkaSource
from .range import KafkaRange, range_summary
from .read import DEFAULT_READ_BATCH_BYTES, KafkaReadError, partition_positions, read_lines

if TYPE_CHECKING:
    from ..section import SourceSection


class KafkaKind:
    name = "kafka"
    config_keys = fields_as_keys(KafkaConfig)  # the config's fields are the source: keys (the section's, a test checks)
    contract_keys = pinned("bootstrap_servers", "conn_id", "topic")  # its part of config.contract: the topic and its cluster
    harmless_keys = {
        **COMMON_HARMLESS, **harmless(PLANNED, "starting_offsets", "isolation_level"),
        "source.on_data_loss": "the policy when records are gone before they are read: changing it is a repair",
        "source.consumer_timeout_seconds": "how long a read waits for progress",
        "source.read_batch_bytes": "how much a read task buffers before Spark takes it, not what is read",
        "source.open_transaction_wait_seconds": "how long a plan waits for an open transaction; the range is in the plan",
    }
    position_based = True
    checks_late_files = False
    interval_by_record_time = True  # interval mode: records go to intervals by their own timestamps
    replayable = False  # records are produced again upstream, not landed by a replay
    reads_alike = False  # not declared alike: the stage job caches what it read (spark_jobs/stage_batch.py)
    reads_table_versions = False
    located_columns = ()
    quarantine_columns = ()
    _accounts = None  # the accumulator of the read in this process (the stage job)
    _outside = None  # interval mode: the observation of the records read that fall in no slice

    @property
    def config_model(self) -> type[SourceSection]:
        """The ``source:`` section's model (pydantic: imported where YAML is read, never by the Spark job)."""
        # pydantic: only where YAML is read (the Spark job loads this kind without it)
        from .section import KafkaSection

        return KafkaSection

    def parse_config(self, src: dict, ctx: ConfigContext) -> SourceConfig:  # KafkaConfig
        return self.config_model.parse(src, ctx)

    def planner(self, cfg) -> KafkaSource:
        return KafkaSource(cfg)

    def range(self, data: dict) -> KafkaRange:
        return KafkaRange.from_json(data)

    def start_marker(self, rng: dict) -> dict:
        return KafkaRange.from_json(rng).start_marker().to_json()

    def job_source(self, source: KafkaConfig) -> dict:
        """The spec's servers: from the connection when the source names one (the connection's
        other settings travel to the job apart, ``client.job_env``)."""
        servers = source.bootstrap_servers if not source.conn_id else settings(source)["bootstrap.servers"]
        return {"kind": self.name, "bootstrap_servers": servers,
                "consumer_timeout_seconds": source.consumer_timeout_seconds,
                "read_batch_bytes": source.read_batch_bytes or DEFAULT_READ_BATCH_BYTES}

    def job_env(self, source: KafkaConfig) -> dict[str, str]:
        return job_env(settings(source)) if source.conn_id else {}

    def lineage_inputs(self, source: KafkaConfig, rng: dict) -> list[LineageDataset]:
        """The topic (namespace ``kafka://<first bootstrap server>``), its offsets ``[from, to)`` per
        partition (and what ``on_data_loss: accept`` skipped, ``lost``)."""
        r = KafkaRange.from_json(rng)
        servers = settings(source)["bootstrap.servers"]
        detail: dict = {"kind": self.name, "topic": r.topic,
                        "partitions": {p: [f, t] for p, (f, t) in r.partitions.items()}}
        if r.lost:
            detail["lost"] = {p: [f, t] for p, (f, t) in r.lost.items()}
        return [LineageDataset(kafka_namespace(servers), r.topic, detail=detail)]

    def unreadable(self, rng: dict, job: dict) -> list[str]:
        return [] if job.get("bootstrap_servers") else ["the job spec names no Kafka bootstrap servers"]

    def gone(self, rng: dict) -> list[str]:
        return []  # records deleted by retention: the plan that reads them again fails (on_data_loss)

    def first_batch_reading(self, plans, version: int) -> None:
        """Its offsets are a topic's, not a table's versions (``SourceKind.first_batch_reading``)."""
        return None

    def read(self, spark, rng: dict, job: dict):
        self._outside = None
        lines, self._accounts = read_lines(spark, rng, for_job(job["bootstrap_servers"]),
                                           float(job.get("consumer_timeout_seconds") or 120),
                                           max_bytes=int(job.get("read_batch_bytes") or DEFAULT_READ_BATCH_BYTES))
        return lines

    def interval_slices(self, lines, rng: dict):
        """Interval mode: (the lines this batch publishes, each with its slice in ``slice_col``,
        the slice names); None for a range without slices (not interval mode, or planned by
        offsets-for-times before intervals were assigned by record timestamps). The records of the
        covering range that fall in no slice are counted per partition while they are left out
        (``_outside``): the offset accounting (``positions``) holds them too."""
        if "slices" not in rng:
            return None
        # pyspark: the Spark job only (the Airflow side imports this module)
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        # a batch without slices only moved the scan on: nothing of it is published
        tagged = lines.withColumn(SLICE_COL, slice_column(rng) if rng["slices"] else F.lit(None).cast("string"))
        self._outside = Observation("eobatch_kafka_outside")
        left_out = F.col(SLICE_COL).isNull()
        tagged = tagged.observe(self._outside, *[F.count_if(left_out & (F.col("_kafka_partition") == int(p))).alias(str(p))
                                                 for p in sorted(rng["partitions"], key=int)])
        return tagged.where(~left_out), sorted(rng["slices"])

    def locate(self, spark, records, rng: dict, job: dict):
        return records  # offsets are exact already

    def positions(self, lines) -> dict:
        # the accounts of this job's one read (``read``): one stage job reads one range
        return partition_positions(lines, self._accounts.value if self._accounts is not None else {},
                                   self._outside.get if self._outside is not None else {})

    def release(self, rng: dict) -> None:
        """Nothing outlives a read: each task's consumer is closed when the task ends."""


KIND = KafkaKind()

__all__ = ["KIND", "KafkaKind", "KafkaConfig", "KafkaSource", "KafkaRange", "DataLossError", "KafkaUnavailable",
           "IntervalTooLarge", "KafkaReadError", "partition_offsets", "range_summary", "spread"]
