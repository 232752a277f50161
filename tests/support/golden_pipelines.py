"""The pipelines whose fingerprints and recorded contract values must never change: every YAML of
include/pipelines/ and the pipelines the unit tests write (tests/support/pipeline_yaml.py, the unit
conftest's, and one of each section and kind), loaded with fixed locations.

``python tests/support/golden_pipelines.py`` prints the values of the code as it is now; the golden
file pipeline_golden.json beside this one holds the values recorded before configuration became
typed models (tests/unit/pipelines/test_loader.py compares them)."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GOLDEN = os.path.join(HERE, "pipeline_golden.json")
ENV = {"EOBATCH_DATA_DIR": "/data/eobatch", "KAFKA_BOOTSTRAP": "127.0.0.1:9092", "S3_BUCKET": "eobatch",
       "AIRFLOW__EOBATCH__ALLOWED_NOTIFIERS": "a.b.Notifier"}  # the platform allows every_key's notifier class
SCHEMA = "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"


def _doc(name: str, source: str, rest: str = "", schema: str = SCHEMA, sink: str = "") -> str:
    return (f"name: {name}\n" + textwrap.dedent(source) + f'schema: "{schema}"\n' + textwrap.dedent(rest)
            + f"sink:\n  table: /data/lake/{name}\n" + sink
            + f"quarantine:\n  table: /data/lake/{name}_bad\n")


FILES = "source:\n  kind: files\n  path: /data/landing/{n}\n"
# one pipeline per section and kind, each key set to a value other than its default
WRITTEN = {
    "unit_base": _doc("unit_base", FILES.format(n="unit_base") + "  max_records_per_batch: 100\n",
                      "description: unit test pipeline\nmode: continuous\nschedule: null\ntransform: passthrough\n",
                      sink="  partition_by: []\n"),
    "every_key": _doc("every_key", FILES.format(n="every_key") + "  max_file_bytes: 4096\n", """\
        description: every top-level key
        schedule: "*/5 * * * *"
        transform: {name: color_counts, options: {window: 1 minute, time_column: ts}}
        max_record_bytes: 2048
        spark: {conn_id: spark_local, conf: {spark.sql.shuffle.partitions: 8}, driver_memory: 1g, executor_memory: 2g}
        retries: {plan: 1, stage: 3, commit: 4, delay_seconds: 2.5, verify_timeout_seconds: 60, plan_wait_seconds: 30}
        alerts:
          notify: [{email: [ops@example.com]}, {notifier: a.b.Notifier, args: {channel: "#x"}}]
          on_failure: true
          run_deadline_minutes: 30
          backlog_max_age_minutes: 15
        aws_conn_id: aws_lake
        expectations: [{name: positive, expr: amount >= 0, action: drop}, {name: has_customer, expr: customer IS NOT NULL}]
        schema_evolution: fail
        maintenance: {schedule: "@weekly", compact: false, target_file_mb: 64, vacuum_retention_hours: 24, pool: lake}
        """, sink="  partition_by: [customer]\n"),
    "parquet_interval": _doc("parquet_interval", """\
        mode: interval
        schedule: "@daily"
        source:
          kind: parquet
          path: /data/landing/parquet_interval
          interval_prefix: "dt={ds}"
          settle_seconds: 5
          late_files: ignore
          late_lookback_intervals: 3
        """),
    "kafka_conn_interval": _doc("kafka_conn_interval", """\
        mode: interval
        schedule: "@hourly"
        source:
          kind: kafka
          conn_id: kafka_orders
          topic: orders
          open_transaction_wait_seconds: 600
          read_batch_bytes: 1048576
          settle_seconds: 10
        """),
    "merge_upsert": _doc("merge_upsert", FILES.format(n="merge_upsert"),
                         schema="order_id STRING NOT NULL, ts TIMESTAMP NOT NULL, amount DOUBLE, op STRING",
                         sink="  mode: merge\n  merge: {keys: [order_id], sequence_by: ts, delete_when: \"op = 'd'\"}\n"),
    "merge_upsert_no_delete": _doc("merge_upsert_no_delete", FILES.format(n="merge_upsert_no_delete"),
                                   schema="order_id STRING NOT NULL, ts TIMESTAMP NOT NULL, amount DOUBLE",
                                   sink="  mode: merge\n  merge: {keys: order_id, sequence_by: ts}\n"),
    "merge_accumulate_interval": _doc("merge_accumulate_interval", """\
        mode: interval
        schedule: "@hourly"
        source:
          kind: files
          path: /data/landing/merge_accumulate_interval
          interval_prefix: "dt={ds}/hour={hh}"
        """, "transform: {name: running_totals, options: {key: customer, value: amount, time: ts}}\n",
        sink="  mode: merge\n  merge: {keys: [customer], accumulate: {events: sum, total: sum, largest: max}}\n"),
    "delta_every_key": _doc("delta_every_key", """\
        source:
          kind: delta
          table: /data/lake/orders
          starting_version: 3
          max_versions_per_batch: 7
          on_change_commit: skip
          on_data_loss: accept
          change_feed: true
          max_records_per_batch: 5000
        """),
    "append_mode_explicit": _doc("append_mode_explicit", FILES.format(n="append_mode_explicit"),
                                 sink="  mode: append\n"),
}


def pipeline_yaml_variants() -> dict[str, str]:
    """tests/support/pipeline_yaml.py's PINNED pipelines, written as its ``write_named`` does."""
    from support.pipeline_yaml import PINNED, named_text

    return {name: named_text(name, body) for name, (body, _fp) in PINNED.items()}


def sources() -> dict[str, str]:
    """{label: YAML text} of every golden pipeline."""
    out = {}
    for f in sorted(glob.glob(os.path.join(REPO, "include", "pipelines", "*.yaml"))):
        with open(f, encoding="utf-8") as fh:
            out["include/pipelines/" + os.path.basename(f)] = fh.read()
    out.update({f"tests/support/pipeline_yaml.py:{k}": v for k, v in pipeline_yaml_variants().items()})
    out.update({f"written:{k}": v for k, v in WRITTEN.items()})
    return out


def attributes(cfg) -> dict:
    """Every attribute of the loaded pipeline (but its file, and which values came from the environment:
    what is shown of it, not what it is), as JSON: what load_pipeline returns."""
    # sink_mode and participants: the sink kind's answers the loader records (participants is a value of
    # its own below), not attributes of the file
    out = {k: getattr(cfg, k) for k in sorted(vars(cfg)) if k not in ("file", "concealed", "sink_mode", "participants")}
    for k in ("source", "sink", "spark", "alerts", "maintenance"):
        out[k] = {"type": type(out[k]).__name__, **dataclasses.asdict(out[k])}
    return json.loads(json.dumps(out, default=_json))


def _json(v):
    return dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else repr(v)


def values(directory: str) -> dict[str, dict]:
    """{label: the values that must not change} of every golden pipeline, loaded from ``directory``
    (the caller sets ENV)."""
    from eobatch.pipelines.loader import config_values, load_pipeline

    out = {}
    for label, text in sources().items():
        path = os.path.join(directory, label.replace("/", "_").replace(":", "_"))
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        cfg = load_pipeline(path)
        out[label] = {"fingerprint": cfg.fingerprint(), "config_values": config_values(cfg),
                      "sink_contract": cfg.sink_contract, "participants": list(cfg.participants),
                      "attributes": attributes(cfg)}
    return out


if __name__ == "__main__":
    import tempfile

    sys.path[:0] = [os.path.join(REPO, "plugins"), os.path.join(REPO, "tests"), REPO]
    os.environ.update(ENV)
    with tempfile.TemporaryDirectory() as d:
        print(json.dumps(values(d), indent=1, sort_keys=True))
