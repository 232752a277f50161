"""``kind: kafka``: exact offset ranges of a topic's partitions.

Config ``config.KafkaConfig``, planner ``planner.KafkaSource``, range ``range.KafkaRange``,
Spark reader ``read.read_lines`` (confluent-kafka inside Spark tasks); ``KIND`` ties them to
the registry.
"""

from __future__ import annotations

from ..base import ConfigContext, IntervalTooLarge
from .client import for_job, job_env, settings
from .config import KEYS, KafkaConfig, parse
from .planner import DataLossError, KafkaSource, KafkaUnavailable, partition_offsets, spread
from .range import KafkaRange, range_summary
from .read import KafkaReadError


class KafkaKind:
    name = "kafka"
    config_keys = KEYS
    position_based = True
    checks_late_files = False
    located_columns = ()
    quarantine_columns = ()

    def parse_config(self, src: dict, ctx: ConfigContext) -> KafkaConfig:
        return parse(src, ctx)

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
                "consumer_timeout_seconds": source.consumer_timeout_seconds}

    def job_env(self, source: KafkaConfig) -> dict[str, str]:
        return job_env(settings(source)) if source.conn_id else {}

    def unreadable(self, rng: dict, job: dict) -> list[str]:
        return [] if job.get("bootstrap_servers") else ["the job spec names no Kafka bootstrap servers"]

    def gone(self, rng: dict) -> list[str]:
        return []  # records deleted by retention: the plan that reads them again fails (on_data_loss)

    def read(self, spark, rng: dict, job: dict):
        from .read import read_lines

        return read_lines(spark, rng, for_job(job["bootstrap_servers"]),
                          float(job.get("consumer_timeout_seconds") or 120))

    def locate(self, spark, records, rng: dict, job: dict):
        return records  # offsets are exact already

    def positions(self, lines) -> dict:
        from .read import partition_positions

        return partition_positions(lines)


KIND = KafkaKind()

__all__ = ["KIND", "KafkaKind", "KafkaConfig", "KafkaSource", "KafkaRange", "DataLossError", "KafkaUnavailable",
           "IntervalTooLarge", "KafkaReadError", "partition_offsets", "range_summary", "spread"]
