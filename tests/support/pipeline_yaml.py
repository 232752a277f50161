"""Pipeline YAML files for the unit tests of config and of the source kinds: a named pipeline of
any ``source:`` section, and the fingerprints of files and Kafka pipelines from before source
kinds were packages; loading a definition written with the ``write_yaml`` fixture."""

from __future__ import annotations

import copy
import textwrap

from eobatch.pipelines.loader import load_pipeline

SCHEMA = "order_id STRING NOT NULL, amount DOUBLE"

# Fingerprints computed by the code before source kinds were packages (config.SourceConfig hashed
# with asdict): a pipeline keeps its fingerprint across the change, so its batches still match.
PINNED = {
    "fp_files": ("""\
        mode: interval
        schedule: "@hourly"
        source:
          kind: files
          path: /data/landing/fp_files
          max_records_per_batch: 5000
          interval_prefix: "dt={ds}/hour={hh}"
          settle_seconds: 30
          late_files: fail
          late_lookback_intervals: 6
          max_file_bytes: 1048576
        """, "3075d3ad127ff0ea"),
    "fp_files_min": ("""\
        source:
          kind: files
          path: /data/landing/fp_files_min
        """, "6fd204a6d586dd2d"),  # was 834509e834844caa while max_file_bytes defaulted to 128 MiB
    "fp_kafka": ("""\
        source:
          kind: kafka
          bootstrap_servers: "127.0.0.1:9092,broker2:9093"
          topic: orders.v1
          max_records_per_batch: 2000
          starting_offsets: latest
          isolation_level: read_uncommitted
          on_data_loss: accept
          consumer_timeout_seconds: 60
        """, "598e3a33ad7963b7"),
    "fp_kafka_min": ("""\
        source:
          kind: kafka
          bootstrap_servers: "127.0.0.1:9092"
          topic: orders
        """, "ccb7f55617dfbc17"),
}


def named_text(name: str, body: str) -> str:
    """The YAML of pipeline ``name`` whose ``source:`` (and mode) is ``body``."""
    return f"name: {name}\n" + textwrap.dedent(body) + textwrap.dedent(f"""\
        schema: "{SCHEMA}"
        transform: passthrough
        sink:
          table: /data/lake/{name}
        quarantine:
          table: /data/lake/{name}_bad
        """)


def write_named(tmp_path, name: str, body: str) -> str:
    """``<tmp_path>/<name>.yaml``: pipeline ``name`` whose ``source:`` (and mode) is ``body``, its path."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(named_text(name, body))
    return str(path)


def load_doc(write_yaml, doc, name="pipeline.yaml"):
    """The pipeline definition ``doc`` (a mapping), written with the ``write_yaml`` fixture and loaded."""
    return load_pipeline(write_yaml(doc, name))


def kafka_doc(base_cfg, **source):
    """A copy of pipeline definition ``base_cfg`` reading Kafka topic "orders" (``source`` overrides keys)."""
    cfg = copy.deepcopy(base_cfg)
    cfg["source"] = {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topic": "orders", **source}
    return cfg
