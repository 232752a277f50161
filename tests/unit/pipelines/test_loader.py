"""eobatch.pipelines.loader: loading, expansion and validation of pipeline YAML files."""

from __future__ import annotations

import copy
import datetime
import datetime as dt
import json
import os

import pytest

from eobatch import paths
from eobatch.pipelines import loader as config
from eobatch.pipelines.loader import Column, ConfigError, load_all, load_pipeline, parse_schema
from support import golden_pipelines
from support.pipeline_yaml import kafka_doc as _kafka
from support.pipeline_yaml import load_doc as _load


def _expect_error(write_yaml, doc, key, name="pipeline.yaml", contains=None):
    path = write_yaml(doc, name)
    with pytest.raises(ConfigError) as ei:
        load_pipeline(path)
    msg = str(ei.value)
    assert msg.startswith(f"{name}:"), msg
    assert os.path.dirname(path) not in msg  # the basename, not the full path
    if key:
        assert f": {key}:" in msg, msg
        assert ei.value.key == key
    if contains:
        assert contains in msg, msg
    return ei.value


# -- a valid file ------------------------------------------------------------------


def test_valid_pipeline_loads_with_all_fields(write_yaml, base_cfg, tmp_path):
    path = write_yaml(base_cfg, "orders.yaml")
    cfg = load_pipeline(path)
    assert cfg.name == "orders"
    assert cfg.app_id == "orders"
    assert cfg.file == os.path.abspath(path)
    assert cfg.mode == "continuous"
    assert cfg.schedule is None
    assert cfg.description == "unit test pipeline"
    assert cfg.source.kind == "files"
    assert cfg.source.path == str(tmp_path / "landing")
    assert cfg.source.max_records_per_batch == 100
    assert cfg.schema == base_cfg["schema"]
    assert cfg.columns == (
        Column("order_id", "STRING", True), Column("customer", "STRING", False),
        Column("amount", "DOUBLE", False), Column("ts", "TIMESTAMP", False),
    )
    assert cfg.transform == "passthrough"
    assert cfg.transform_options == {}
    assert cfg.sink_table == str(tmp_path / "lake" / "orders")
    assert cfg.quarantine_table == str(tmp_path / "lake" / "orders_quarantine")
    assert cfg.partition_by == ()
    # defaults
    assert cfg.max_record_bytes == 1 << 20
    assert cfg.spark.conn_id == "spark_default"
    assert cfg.spark.conf == {}
    assert cfg.stage_retries == 1 and cfg.commit_retries == 8
    assert cfg.retry_delay_seconds == 10.0 and cfg.verify_timeout_seconds == 900


def test_defaults_for_mode_and_transform_and_optional_sections(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    for k in ("mode", "schedule", "transform", "description"):
        doc.pop(k)
    cfg = _load(write_yaml, doc)
    assert cfg.mode == "continuous"
    assert cfg.schedule is None
    assert cfg.transform == "passthrough"
    assert cfg.description == ""


def test_full_pipeline_with_transform_mapping_spark_and_retries(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc.update({
        "schema": "event_id STRING NOT NULL, color STRING NOT NULL, ts TIMESTAMP NOT NULL",
        "transform": {"name": "color_counts", "options": {"window": "1 minute", "time_column": "ts"}},
        "max_record_bytes": 4096,
        "spark": {"conn_id": "spark_local", "conf": {"spark.sql.shuffle.partitions": 8},
                  "driver_memory": "1g"},
        "retries": {"stage": 0, "commit": 3, "delay_seconds": 0.5, "verify_timeout_seconds": 60},
        "schedule": "@hourly",
    })
    cfg = _load(write_yaml, doc)
    assert cfg.transform == "color_counts"
    assert cfg.transform_options == {"window": "1 minute", "time_column": "ts"}
    assert cfg.max_record_bytes == 4096
    assert cfg.spark.conn_id == "spark_local"
    assert cfg.spark.conf == {"spark.sql.shuffle.partitions": "8"}  # values become strings
    assert cfg.spark.driver_memory == "1g" and cfg.spark.executor_memory is None
    assert (cfg.stage_retries, cfg.commit_retries) == (0, 3)
    assert cfg.retry_delay_seconds == 0.5 and cfg.verify_timeout_seconds == 60
    assert cfg.schedule == "@hourly"


def test_partition_by_is_kept(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc["schema"] = "id STRING, day DATE, region STRING, amount DOUBLE"
    doc["sink"]["partition_by"] = ["day", "region"]
    assert _load(write_yaml, doc).partition_by == ("day", "region")


def test_paths_are_normalised_and_s3a_is_accepted(write_yaml, base_cfg, tmp_path):
    doc = copy.deepcopy(base_cfg)
    doc["source"]["path"] = str(tmp_path) + "//landing/./x/../"
    doc["sink"]["table"] = "s3a://my-bucket/lake/orders/"
    cfg = _load(write_yaml, doc)
    assert cfg.source.path == str(tmp_path / "landing")
    assert cfg.sink_table == "s3a://my-bucket/lake/orders"


# -- ${VAR} expansion ------------------------------------------------------------------


def test_eobatch_data_dir_from_environment(write_yaml, base_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("EOBATCH_DATA_DIR", str(tmp_path / "data"))
    doc = copy.deepcopy(base_cfg)
    doc["source"]["path"] = "${EOBATCH_DATA_DIR}/landing/orders"
    doc["sink"]["table"] = "${EOBATCH_DATA_DIR}/lake/orders"
    doc["quarantine"]["table"] = "${EOBATCH_DATA_DIR}/lake/orders_q"
    cfg = _load(write_yaml, doc)
    assert cfg.source.path == str(tmp_path / "data" / "landing" / "orders")
    assert cfg.sink_table == str(tmp_path / "data" / "lake" / "orders")
    assert cfg.quarantine_table == str(tmp_path / "data" / "lake" / "orders_q")


def test_eobatch_data_dir_defaults_to_repo_demo_data(write_yaml, base_cfg, monkeypatch):
    monkeypatch.delenv("EOBATCH_DATA_DIR", raising=False)
    doc = copy.deepcopy(base_cfg)
    doc["source"]["path"] = "${EOBATCH_DATA_DIR}/landing/orders"
    cfg = _load(write_yaml, doc)
    assert cfg.source.path == os.path.join(paths.CHECKOUT, ".demo", "data", "landing", "orders")


def test_var_with_default(write_yaml, base_cfg, tmp_path, monkeypatch):
    monkeypatch.delenv("EOBATCH_UNIT_ROOT", raising=False)
    doc = copy.deepcopy(base_cfg)
    doc["source"]["path"] = "${EOBATCH_UNIT_ROOT:-" + str(tmp_path / "dflt") + "}/landing"
    assert _load(write_yaml, doc).source.path == str(tmp_path / "dflt" / "landing")
    # empty counts as unset
    monkeypatch.setenv("EOBATCH_UNIT_ROOT", "")
    assert _load(write_yaml, doc).source.path == str(tmp_path / "dflt" / "landing")
    # set: the value wins over the default
    monkeypatch.setenv("EOBATCH_UNIT_ROOT", str(tmp_path / "env"))
    assert _load(write_yaml, doc).source.path == str(tmp_path / "env" / "landing")


def test_expansion_only_in_location_and_connection_keys(write_yaml, base_cfg, monkeypatch):
    monkeypatch.setenv("EOBATCH_UNIT_BROKER", "broker-1:9093")
    monkeypatch.setenv("EOBATCH_UNIT_CONN", "spark_cluster")
    monkeypatch.delenv("EOBATCH_UNIT_TOPIC", raising=False)
    doc = _kafka(base_cfg, bootstrap_servers="${EOBATCH_UNIT_BROKER}", topic="${EOBATCH_UNIT_TOPIC:-orders}")
    doc["spark"] = {"conn_id": "${EOBATCH_UNIT_CONN}"}
    cfg = _load(write_yaml, doc)
    assert (cfg.source.bootstrap_servers, cfg.source.topic) == ("broker-1:9093", "orders")
    assert cfg.spark.conn_id == "spark_cluster"


VARS_ELSEWHERE = [
    # (id, dotted key to set, value, expected error key)
    ("partition-by", "sink.partition_by", ["${EOBATCH_UNIT_VAR}"], "sink.partition_by[0]"),
    ("executor-memory", "spark", {"executor_memory": "${EOBATCH_UNIT_VAR}"}, "spark.executor_memory"),
    ("description", "description", "token: ${EOBATCH_UNIT_VAR}", "description"),
    ("description-with-default", "description", "${EOBATCH_UNIT_VAR:-none}", "description"),
    ("transform-options", "transform", {"name": "passthrough", "options": {"x": "${EOBATCH_UNIT_VAR}"}},
     "transform.options.x"),
    ("spark-conf-value", "spark", {"conf": {"spark.app.name": "${EOBATCH_UNIT_VAR}"}}, "spark.conf.spark.app.name"),
    ("schema", "schema", "a STRING COMMENT '${EOBATCH_UNIT_VAR}'", "schema"),
    ("name", "name", "${EOBATCH_UNIT_VAR}", "name"),
]


@pytest.mark.parametrize("dotted,value,key", [c[1:] for c in VARS_ELSEWHERE], ids=[c[0] for c in VARS_ELSEWHERE])
@pytest.mark.parametrize("env", ["s3cr3t-value", None])
def test_variables_outside_location_and_connection_keys_are_refused(write_yaml, base_cfg, monkeypatch,
                                                                    dotted, value, key, env):
    """A YAML could otherwise copy any environment variable (a secret) into the UI or the job."""
    if env is None:
        monkeypatch.delenv("EOBATCH_UNIT_VAR", raising=False)
    else:
        monkeypatch.setenv("EOBATCH_UNIT_VAR", env)
    doc = copy.deepcopy(base_cfg)
    _set(doc, dotted, value)
    e = _expect_error(write_yaml, doc, key, name="orders.yaml", contains="variables are expanded only in")
    assert "source.path" in str(e) and "spark.conn_id" in str(e)
    assert "s3cr3t" not in str(e)


def test_a_dollar_without_braces_is_plain_text(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc["description"] = "orders over $5 and {x}"
    assert _load(write_yaml, doc).description == "orders over $5 and {x}"


def test_unset_variable_without_default_is_an_error(write_yaml, base_cfg, monkeypatch):
    monkeypatch.delenv("EOBATCH_UNIT_NOT_SET", raising=False)
    doc = copy.deepcopy(base_cfg)
    doc["source"]["path"] = "${EOBATCH_UNIT_NOT_SET}/landing"
    _expect_error(write_yaml, doc, None, contains="EOBATCH_UNIT_NOT_SET")


def test_unset_variable_error_names_the_key(write_yaml, base_cfg, monkeypatch):
    monkeypatch.delenv("EOBATCH_UNIT_NOT_SET", raising=False)
    doc = copy.deepcopy(base_cfg)
    doc["source"]["path"] = "${EOBATCH_UNIT_NOT_SET}/landing"
    _expect_error(write_yaml, doc, "source.path", contains="EOBATCH_UNIT_NOT_SET")


# -- errors ------------------------------------------------------------------------------


def test_invalid_yaml_syntax(write_yaml):
    path = write_yaml("name: orders\nsource: [unclosed\n", "broken.yaml")
    with pytest.raises(ConfigError) as ei:
        load_pipeline(path)
    assert str(ei.value).startswith("broken.yaml: invalid YAML")


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", ""])
def test_not_a_mapping(write_yaml, text):
    path = write_yaml(text, "list.yaml")
    with pytest.raises(ConfigError) as ei:
        load_pipeline(path)
    assert str(ei.value).startswith("list.yaml: must be a YAML mapping")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_pipeline(str(tmp_path / "nope.yaml"))
    assert str(ei.value).startswith("nope.yaml: cannot read")


def _set(doc, dotted, value):
    *parents, last = dotted.split(".")
    d = doc
    for p in parents:
        d = d[p]
    if value is _DELETE:
        d.pop(last)
    else:
        d[last] = value


_DELETE = object()


BAD_CASES = [
    # (id, dotted key to set, value, expected error key, text in message)
    ("unknown-top-key", "colour", "red", "colour", "unknown key"),
    ("unknown-source-key", "source.bogus", 1, "source.bogus", "unknown key"),
    ("unknown-sink-key", "sink.format", "delta", "sink.format", "unknown key"),
    ("unknown-quarantine-key", "quarantine.path", "/x", "quarantine.path", "unknown key"),
    ("unknown-spark-key", "spark", {"cores": 4}, "spark.cores", "unknown key"),
    ("unknown-retries-key", "retries", {"forever": True}, "retries.forever", "unknown key"),
    ("name-dash", "name", "Bad-Name", "name", "[a-z][a-z0-9_]*"),
    ("name-digit", "name", "1abc", "name", "[a-z][a-z0-9_]*"),
    ("name-upper", "name", "Orders", "name", None),
    ("name-int", "name", 123, "name", None),
    ("name-missing", "name", _DELETE, "name", "is required"),
    ("mode-bad", "mode", "streaming", "mode", "'continuous' or 'interval'"),
    ("prefix-in-continuous", "source.interval_prefix", "dt={ds}", "source.interval_prefix", "only used in interval mode"),
    ("schedule-garbage", "schedule", "every five minutes", "schedule", "not a cron expression"),
    ("schedule-bad-field", "schedule", "61 * * * *", "schedule", None),
    ("schedule-4-fields", "schedule", "* * * *", "schedule", None),
    ("schedule-preset", "schedule", "@fortnightly", "schedule", "unknown preset"),
    ("schedule-empty", "schedule", "  ", "schedule", None),
    ("schedule-int", "schedule", 5, "schedule", None),
    ("source-missing", "source", _DELETE, "source", "is required"),
    ("source-not-mapping", "source", "files", "source", None),
    ("source-kind-missing", "source.kind", _DELETE, "source.kind", "is required"),
    ("source-kind-bad", "source.kind", "ftp", "source.kind", None),
    ("source-kind-kafka-with-path", "source.kind", "kafka", "source.path", "unknown key"),
    ("source-path-missing", "source.path", _DELETE, "source.path", "is required"),
    ("source-path-relative", "source.path", "landing/orders", "source.path", "absolute path"),
    ("source-path-empty", "source.path", "", "source.path", None),
    ("source-path-scheme", "source.path", "hdfs://namenode/landing", "source.path", "unsupported scheme"),
    ("sink-scheme", "sink.table", "gs://bucket/lake/orders", "sink.table", "unsupported scheme"),
    ("sink-bad-bucket", "sink.table", "s3a://B/lake", "sink.table", "not a valid s3a://"),
    ("quarantine-relative", "quarantine.table", "lake/q", "quarantine.table", "absolute path"),
    ("sink-missing", "sink", _DELETE, "sink", "is required"),
    ("sink-table-missing", "sink.table", _DELETE, "sink.table", "is required"),
    ("quarantine-missing", "quarantine", _DELETE, "quarantine", "is required"),
    ("transform-unknown", "transform", "no_such_transform", "transform",
     "no transform 'no_such_transform': no file transforms/no_such_transform.py beside the pipeline file, "
     "and eobatch ships none of that name (change_rows, change_totals, color_counts, passthrough, running_totals)"),
    ("transform-bad-name", "transform", "../evil", "transform", None),
    ("batches-zero", "max_batches_per_run", 0, "max_batches_per_run", "must be a positive integer, got 0"),
    ("batches-too-many", "max_batches_per_run", 1001, "max_batches_per_run", "must be at most 1000, got 1001"),
    ("batches-text", "max_batches_per_run", "5", "max_batches_per_run", "must be a positive integer, got '5'"),
    ("transform-mapping-no-name", "transform", {"options": {}}, "transform.name", "is required"),
    ("transform-options-list", "transform", {"name": "passthrough", "options": [1]}, "transform.options", None),
    ("transform-mapping-unknown", "transform", {"name": "passthrough", "opts": {}}, "transform.opts", None),
    ("partition-not-column", "sink.partition_by", ["region"], "sink.partition_by", "'region' is not a column"),
    ("partition-bad-type", "sink.partition_by", ["amount"], "sink.partition_by", "has type DOUBLE"),
    ("partition-not-list", "sink.partition_by", "customer", "sink.partition_by", None),
    ("max-records-zero", "source.max_records_per_batch", 0, "source.max_records_per_batch", "positive integer"),
    ("max-records-negative", "source.max_records_per_batch", -5, "source.max_records_per_batch", None),
    ("max-records-bool", "source.max_records_per_batch", True, "source.max_records_per_batch", None),
    ("max-records-str", "source.max_records_per_batch", "10", "source.max_records_per_batch", None),
    ("max-records-float", "source.max_records_per_batch", 1.5, "source.max_records_per_batch", None),
    ("max-record-bytes-zero", "max_record_bytes", 0, "max_record_bytes", None),
    ("retries-negative", "retries", {"stage": -1}, "retries.stage", None),
    ("retries-bool", "retries", {"commit": True}, "retries.commit", None),
    ("retries-delay", "retries", {"delay_seconds": "soon"}, "retries.delay_seconds", None),
    ("spark-conf-list", "spark", {"conf": ["a"]}, "spark.conf", None),
    ("aws-conn-id-space", "aws_conn_id", "my conn", "aws_conn_id", "Airflow connection id"),
    ("schema-evolution-bad", "schema_evolution", "merge", "schema_evolution", "add_columns, fail"),
    ("maintenance-not-mapping", "maintenance", "weekly", "maintenance", "must be a mapping"),
    ("maintenance-schedule", "maintenance", {"schedule": "every sunday"}, "maintenance.schedule", "not a cron"),
    ("maintenance-retention", "maintenance", {"vacuum_retention_hours": -1}, "maintenance.vacuum_retention_hours",
     ">= 0"),
    ("maintenance-unknown", "maintenance", {"zorder": ["a"]}, "maintenance.zorder", "unknown key"),
    ("expectations-mapping", "expectations", {"a": "amount > 0"}, "expectations", "must be a list"),
    ("expectation-no-name", "expectations", [{"expr": "amount > 0"}], "expectations[0].name", "is required"),
    ("expectation-bad-name", "expectations", [{"name": "Pos", "expr": "amount > 0"}], "expectations[0].name",
     "[a-z][a-z0-9_]*"),
    ("expectation-twice", "expectations", [{"name": "p", "expr": "amount > 0"}, {"name": "p", "expr": "amount < 9"}],
     "expectations[1].name", "defined twice"),
    ("expectation-no-column", "expectations", [{"name": "p", "expr": "1 = 1"}], "expectations[0].expr",
     "names no column"),
    ("expectation-two-statements", "expectations", [{"name": "p", "expr": "amount > 0; DROP TABLE x"}],
     "expectations[0].expr", "one Spark SQL boolean expression"),
    ("expectation-bad-action", "expectations", [{"name": "p", "expr": "amount > 0", "action": "warn"}],
     "expectations[0].action", "quarantine, drop, fail"),
    ("expectation-unknown-key", "expectations", [{"name": "p", "expr": "amount > 0", "severity": 1}],
     "expectations[0].severity", "unknown key"),
    ("aws-conn-id-mapping", "aws_conn_id", {"login": "AKIA"}, "aws_conn_id", "Airflow connection id"),
    ("schema-missing", "schema", _DELETE, "schema", "is required"),
    ("schema-unknown-type", "schema", "a STRING, b FOO", "schema", "unknown or unsupported type"),
    ("schema-duplicate", "schema", "a STRING, a INT", "schema", "declared twice"),
    ("schema-duplicate-case", "schema", "a STRING, A INT", "schema", "declared twice"),
    ("schema-underscore", "schema", "_a STRING, b INT", "schema", "reserved"),
    ("schema-garbage", "schema", "garbage", "schema", "cannot parse"),
    ("schema-trailing-comma", "schema", "a STRING,", "schema", "cannot parse"),
    ("schema-empty", "schema", "  ", "schema", None),
    ("schema-not-string", "schema", ["a STRING"], "schema", None),
    ("schema-bad-array", "schema", "a ARRAY<FOO>", "schema", None),
    ("schema-bad-map", "schema", "a MAP<STRING>", "schema", None),
    ("schema-bad-struct", "schema", "a STRUCT<x FOO>", "schema", None),
]


@pytest.mark.parametrize("dotted,value,key,text", [c[1:] for c in BAD_CASES], ids=[c[0] for c in BAD_CASES])
def test_bad_values_name_file_and_key(write_yaml, base_cfg, dotted, value, key, text):
    doc = copy.deepcopy(base_cfg)
    _set(doc, dotted, value)
    _expect_error(write_yaml, doc, key, name="orders.yaml", contains=text)


@pytest.mark.parametrize("dotted, typo, allowed", [
    ("", "schedul", "alerts, aws_conn_id, description, expectations, maintenance, max_batches_per_run, "
                    "max_record_bytes, mode, name, "
                    "quarantine, retries, schedule, schema, schema_evolution, sink, source, spark, transform"),
    ("source", "max_record_per_batch", "discovery, full_listing_hours, include, interval_prefix, kind, late_files, late_lookback_intervals, max_file_bytes, "
                                       "max_files_per_batch, max_records_per_batch, notifications, path, settle_seconds"),
    ("retries", "comit", "commit, delay_seconds, plan, plan_wait_seconds, stage, stage_timeout_seconds, verify_timeout_seconds"),
    ("alerts.notify[0]", "smtp", "email, from_email, smtp_conn_id"),
])
def test_a_typo_in_a_key_names_the_file_the_key_path_and_what_is_allowed(write_yaml, base_cfg, dotted, typo, allowed):
    doc = copy.deepcopy(base_cfg)
    doc["alerts"] = {"notify": [{"email": "ops@example.com"}]}
    node = doc
    for part in filter(None, dotted.replace("[0]", ".0").split(".")):
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[typo] = 1
    key = f"{dotted}.{typo}" if dotted else typo
    _expect_error(write_yaml, doc, key, name="orders.yaml", contains=f"unknown key (allowed: {allowed})")


def test_expectations_load_in_order_and_change_the_fingerprint_only_when_present(write_yaml, base_cfg):
    from eobatch.pipelines.loader import Expectation

    plain = load_pipeline(write_yaml(base_cfg))
    doc = copy.deepcopy(base_cfg)
    doc["expectations"] = [{"name": "positive_amount", "expr": " amount >= 0 ", "action": "drop"},
                           {"name": "known_customer", "expr": "`customer` IS NOT NULL"}]
    cfg = load_pipeline(write_yaml(doc))
    assert cfg.expectations == (Expectation("positive_amount", "amount >= 0", "drop"),
                                Expectation("known_customer", "`customer` IS NOT NULL", "quarantine"))
    assert cfg.fingerprint() != plain.fingerprint()
    doc["expectations"] = []
    assert load_pipeline(write_yaml(doc)).fingerprint() == plain.fingerprint()


def test_partition_by_every_column_is_an_error(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc["schema"] = "day DATE, region STRING"
    doc["sink"]["partition_by"] = ["day", "region"]
    _expect_error(write_yaml, doc, "sink.partition_by", contains="at least one column")


def test_partition_by_not_checked_for_non_passthrough_transforms(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc["transform"] = {"name": "color_counts"}
    doc["sink"]["partition_by"] = ["window_start"]  # a column of the transform's output
    assert _load(write_yaml, doc).partition_by == ("window_start",)


@pytest.mark.parametrize("schedule", ["@hourly", "@daily", "@once", "@continuous", "*/5 * * * *",
                                      "0 3 * * 1-5", "  @hourly  "])
def test_good_schedules(write_yaml, base_cfg, schedule):
    doc = copy.deepcopy(base_cfg)
    doc["schedule"] = schedule
    assert _load(write_yaml, doc).schedule == schedule


def test_a_schedule_on_a_tables_asset_events(write_yaml, base_cfg, tmp_path):
    doc = copy.deepcopy(base_cfg)
    doc["schedule"] = {"asset": str(tmp_path / "lake" / "bronze") + "/"}
    cfg = _load(write_yaml, doc)
    assert (cfg.schedule, cfg.schedule_asset) == (None, str(tmp_path / "lake" / "bronze"))
    doc["schedule"] = {"asset": "s3://bucket/lake/bronze"}
    assert _load(write_yaml, doc).schedule_asset == "s3a://bucket/lake/bronze"
    doc["schedule"] = {"asset": "lake/bronze"}
    _expect_error(write_yaml, doc, "schedule.asset", contains="must be an absolute path")
    doc["schedule"] = {"asset": "/x", "cron": "@hourly"}
    _expect_error(write_yaml, doc, "schedule", contains="a schedule mapping has one key, asset")
    doc.update(mode="interval", schedule={"asset": "/x"})
    _expect_error(write_yaml, doc, "schedule", contains="interval mode needs a cron schedule")


OVERLAPS = [
    ("sink-inside-source", {"source.path": "{r}/data", "sink.table": "{r}/data/lake"}, {"source.path", "sink.table"}),
    ("source-inside-sink", {"sink.table": "{r}/lake", "source.path": "{r}/lake/landing"}, {"source.path", "sink.table"}),
    ("same-sink-and-quarantine", {"sink.table": "{r}/lake/t", "quarantine.table": "{r}/lake/t"},
     {"sink.table", "quarantine.table"}),
    ("quarantine-inside-sink", {"sink.table": "{r}/lake/t", "quarantine.table": "{r}/lake/t/q"},
     {"sink.table", "quarantine.table"}),
    ("quarantine-is-source", {"source.path": "{r}/in", "quarantine.table": "{r}/in/"},
     {"source.path", "quarantine.table"}),
    ("after-normalisation", {"source.path": "{r}/in", "sink.table": "{r}/x/../in/lake"},
     {"source.path", "sink.table"}),
]


@pytest.mark.parametrize("paths,keys", [c[1:] for c in OVERLAPS], ids=[c[0] for c in OVERLAPS])
def test_overlapping_folders(write_yaml, base_cfg, tmp_path, paths, keys):
    doc = copy.deepcopy(base_cfg)
    for dotted, p in paths.items():
        _set(doc, dotted, p.format(r=tmp_path))
    path = write_yaml(doc, "orders.yaml")
    with pytest.raises(ConfigError) as ei:
        load_pipeline(path)
    msg = str(ei.value)
    assert msg.startswith("orders.yaml: ")
    assert "overlaps" in msg
    assert ei.value.key in keys
    assert all(k in msg for k in keys), msg


def test_sibling_folders_with_common_prefix_do_not_overlap(write_yaml, base_cfg, tmp_path):
    doc = copy.deepcopy(base_cfg)
    doc["source"]["path"] = str(tmp_path / "orders")
    doc["sink"]["table"] = str(tmp_path / "orders_table")
    doc["quarantine"]["table"] = str(tmp_path / "orders_table_q")
    cfg = _load(write_yaml, doc)
    assert cfg.sink_table == str(tmp_path / "orders_table")


def test_root_folder_overlaps_everything(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc["source"]["path"] = "/"
    _expect_error(write_yaml, doc, "source.path", contains="overlaps")


def test_transform_options_with_yaml_date(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc["transform"] = {"name": "passthrough", "options": {"since": datetime.date(2024, 1, 1)}}
    path = write_yaml(doc, "orders.yaml")
    assert "since: 2024-01-01" in open(path, encoding="utf-8").read()  # an unquoted YAML date
    try:
        cfg = load_pipeline(path)
    except ConfigError as e:
        assert "transform.options" in str(e)
        return
    assert len(cfg.fingerprint()) == 16


# -- sections: the section parsers on the branches the cases above leave untested (a section that
# is not a mapping; an optional section that is null)

NOT_MAPPINGS = [
    ("sink", "/lake/orders", "must be a mapping with 'table'"),
    ("sink", ["/lake/orders"], "must be a mapping with 'table'"),
    ("quarantine", "/lake/orders_bad", "must be a mapping with 'table'"),
    ("spark", "local[*]", "must be a mapping"),
    ("spark", ["conn_id"], "must be a mapping"),
    ("retries", 3, "must be a mapping (plan, stage, commit, delay_seconds, verify_timeout_seconds, plan_wait_seconds, "
                 "stage_timeout_seconds)"),
    ("retries", [1, 2], "must be a mapping (plan, stage, commit"),
]


@pytest.mark.parametrize("section,value,text", NOT_MAPPINGS, ids=[f"{c[0]}-{type(c[1]).__name__}" for c in NOT_MAPPINGS])
def test_a_section_that_is_not_a_mapping_names_file_and_section(write_yaml, base_cfg, section, value, text):
    doc = copy.deepcopy(base_cfg)
    doc[section] = value
    path = write_yaml(doc, "orders.yaml")
    with pytest.raises(ConfigError) as ei:
        load_pipeline(path)
    assert ei.value.key == section
    assert str(ei.value).startswith(f"orders.yaml: {section}: {text}"), str(ei.value)
    assert os.path.dirname(path) not in str(ei.value)


@pytest.mark.parametrize("empty", [None, {}])
def test_null_or_empty_spark_and_retries_take_the_defaults(write_yaml, base_cfg, empty):
    doc = copy.deepcopy(base_cfg)
    doc["spark"] = empty
    doc["retries"] = empty
    cfg = load_pipeline(write_yaml(doc))
    assert (cfg.spark.conn_id, cfg.spark.conf, cfg.spark.driver_memory, cfg.spark.executor_memory) == (
        "spark_default", {}, None, None)
    assert (cfg.plan_retries, cfg.stage_retries, cfg.commit_retries) == (2, 1, 8)
    assert cfg.retry_delay_seconds == 10.0 and isinstance(cfg.retry_delay_seconds, float)
    assert (cfg.verify_timeout_seconds, cfg.plan_wait_seconds, cfg.stage_timeout_seconds) == (900, 3600, 21600)


def test_every_retries_key_is_read(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc["retries"] = {"plan": 0, "stage": 4, "commit": 1, "delay_seconds": 3, "verify_timeout_seconds": 30,
                      "plan_wait_seconds": 120, "stage_timeout_seconds": 600}
    cfg = load_pipeline(write_yaml(doc))
    assert (cfg.plan_retries, cfg.stage_retries, cfg.commit_retries) == (0, 4, 1)
    assert cfg.retry_delay_seconds == 3.0 and isinstance(cfg.retry_delay_seconds, float)
    assert (cfg.verify_timeout_seconds, cfg.plan_wait_seconds, cfg.stage_timeout_seconds) == (30, 120, 600)


@pytest.mark.parametrize("key", ["verify_timeout_seconds", "plan_wait_seconds", "stage_timeout_seconds"])
@pytest.mark.parametrize("value", [0, -1, "60", True])
def test_a_timeout_must_be_a_positive_integer(write_yaml, base_cfg, key, value):
    doc = copy.deepcopy(base_cfg)
    doc["retries"] = {key: value}
    with pytest.raises(ConfigError) as ei:
        load_pipeline(write_yaml(doc))
    assert ei.value.key == f"retries.{key}", str(ei.value)
    assert "must be a positive integer" in str(ei.value)


# -- spark.conf: a pipeline YAML may tune Spark, not weaken its security -----------------------

SECURITY_SPARK_CONF = [
    "spark.redaction.regex", "spark.redaction.string.regex", "spark.eventLog.enabled", "spark.eventLog.dir",
    "spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions", "spark.driver.defaultJavaOptions",
    "spark.driver.extraClassPath", "spark.executor.extraClassPath", "spark.executor.extraLibraryPath",
    "spark.jars", "spark.jars.packages", "spark.jars.repositories", "spark.jars.ivy", "spark.jars.ivySettings",
    "spark.files", "spark.archives", "spark.submit.pyFiles", "spark.submit.deployMode", "spark.yarn.dist.jars",
    "spark.executorEnv.AWS_SECRET_ACCESS_KEY", "spark.yarn.appMasterEnv.PATH", "spark.kubernetes.driverEnv.X",
    "spark.kubernetes.executor.secrets.creds", "spark.kubernetes.driver.secretKeyRef.AWS_KEY",
    "spark.kubernetes.authenticate.driver.serviceAccountName", "spark.kubernetes.executor.podTemplateFile",
    "spark.pyspark.python", "spark.pyspark.driver.python", "spark.python.worker.reuse", "spark.plugins",
    "spark.extraListeners", "spark.sql.queryExecutionListeners", "spark.sql.streaming.streamingQueryListeners",
    "spark.sql.extensions", "spark.sql.catalog.spark_catalog", "spark.sql.catalog.other",
    "spark.sql.hive.metastore.jars", "spark.executor.resource.gpu.discoveryScript",
    "spark.authenticate", "spark.authenticate.secret", "spark.acls.enable", "spark.admin.acls",
    "spark.admin.acls.groups", "spark.modify.acls", "spark.ui.view.acls", "spark.ui.view.acls.groups",
    "spark.ui.filters", "spark.ssl.enabled", "spark.ssl.keyStorePassword", "spark.network.crypto.enabled",
    "spark.io.encryption.enabled", "spark.kerberos.keytab", "spark.yarn.principal",
    "spark.hadoop.fs.s3a.access.key", "spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.session.token",
    "spark.hadoop.fs.s3a.bucket.b.access.key", "spark.hadoop.fs.s3a.aws.credentials.provider",
    "spark.hadoop.fs.s3a.assumed.role.arn", "spark.hadoop.hadoop.security.credential.provider.path",
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", "spark.hadoop.fs.gs.auth.type",
    "spark.driver.log.dfsDir", "spark.driver.log.persistToDfs.enabled", "spark.history.fs.logDirectory",
    # keys are matched whatever their case
    "SPARK.JARS", "Spark.Driver.ExtraJavaOptions", "spark.EXECUTORENV.x", "spark.Hadoop.fs.s3a.Secret.Key",
]


@pytest.mark.parametrize("key", SECURITY_SPARK_CONF)
def test_security_spark_conf_is_refused(write_yaml, base_cfg, monkeypatch, key):
    monkeypatch.delenv("EOBATCH_ALLOW_SPARK_CONF", raising=False)
    doc = dict(base_cfg, spark={"conf": {"spark.sql.shuffle.partitions": 8, key: "x"}})
    _expect_error(write_yaml, doc, f"spark.conf.{key}", name="orders.yaml", contains="EOBATCH_ALLOW_SPARK_CONF")


TUNING_SPARK_CONF = {
    "spark.sql.shuffle.partitions": "16", "spark.executor.cores": "2", "spark.executor.memory": "2g",
    "spark.driver.memory": "1g", "spark.executor.instances": "4", "spark.sql.adaptive.enabled": "true",
    "spark.sql.files.maxPartitionBytes": "64m", "spark.memory.fraction": "0.7",
    "spark.kubernetes.container.image": "eobatch:1", "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
    "spark.hadoop.fs.s3a.path.style.access": "true", "spark.sql.parquet.compression.codec": "zstd",
}


def test_tuning_spark_conf_is_kept(write_yaml, base_cfg, monkeypatch):
    monkeypatch.delenv("EOBATCH_ALLOW_SPARK_CONF", raising=False)
    doc = dict(base_cfg, spark={"conf": TUNING_SPARK_CONF})
    assert _load(write_yaml, doc).spark.conf == TUNING_SPARK_CONF


@pytest.mark.parametrize("key", ["spark.sql.session.timeZone", "spark.speculation", "SPARK.SPECULATION",
                                 "spark.hadoop.fs.s3a.change.detection.mode"])
@pytest.mark.parametrize("allow", [None, "spark.sql.session.timeZone,spark.speculation", "*"])
def test_spark_conf_the_product_sets_for_correctness_is_refused(write_yaml, base_cfg, monkeypatch, key, allow):
    if allow is None:
        monkeypatch.delenv("EOBATCH_ALLOW_SPARK_CONF", raising=False)
    else:
        monkeypatch.setenv("EOBATCH_ALLOW_SPARK_CONF", allow)
    doc = dict(base_cfg, spark={"conf": {key: "true"}})
    _expect_error(write_yaml, doc, f"spark.conf.{key}", name="orders.yaml",
                  contains="set by the product for correctness")


def test_platform_allows_security_spark_conf_by_environment(write_yaml, base_cfg, monkeypatch):
    monkeypatch.setenv("EOBATCH_ALLOW_SPARK_CONF", " SPARK.EXECUTORENV.* , spark.jars.packages,,")
    conf = {"spark.executorEnv.REGION": "eu-west-1", "spark.jars.packages": "org.example:lib:1.0"}
    doc = dict(base_cfg, spark={"conf": conf})
    assert _load(write_yaml, doc).spark.conf == conf
    doc = dict(base_cfg, spark={"conf": {**conf, "spark.jars": "/tmp/evil.jar"}})  # only what is listed
    _expect_error(write_yaml, doc, "spark.conf.spark.jars", name="orders.yaml", contains="EOBATCH_ALLOW_SPARK_CONF")


@pytest.mark.parametrize("key", ["spark.app.name=x", "spark.jars=/tmp/evil.jar#", " spark.jars", "spark.jars ", "a b"])
def test_spark_conf_key_with_equals_or_space_is_refused(write_yaml, base_cfg, monkeypatch, key):
    """``--conf k=v`` is split at the first '=': such a key would set another setting."""
    monkeypatch.setenv("EOBATCH_ALLOW_SPARK_CONF", "spark.app.name")
    doc = dict(base_cfg, spark={"conf": {key: "v"}})
    _expect_error(write_yaml, doc, f"spark.conf.{key}", name="orders.yaml", contains="'=' or white space")


# -- parse_schema --------------------------------------------------------------------


def test_parse_schema_complex_types():
    cols = parse_schema("a STRING NOT NULL, b DECIMAL(10,2), c ARRAY<STRING>, "
                        "d STRUCT<x: INT, y: STRING>, e MAP<STRING,INT>")
    assert [c.name for c in cols] == ["a", "b", "c", "d", "e"]
    assert [c.not_null for c in cols] == [True, False, False, False, False]
    assert cols[0].type == "STRING"
    assert cols[1].type == "DECIMAL(10,2)"
    assert cols[2].type == "ARRAY<STRING>"
    assert cols[3].type.upper() == "STRUCT<X: INT, Y: STRING>"
    assert cols[4].type == "MAP<STRING,INT>"


def test_parse_schema_case_whitespace_backticks_comments():
    cols = parse_schema("`id` bigint not null,\n  amount  decimal( 12 , 3 ) COMMENT 'money, in EUR',"
                        " tags array<struct<k:string, v: map<string, array<int>>>>, d date")
    assert cols == (
        Column("id", "BIGINT", True),
        Column("amount", "DECIMAL( 12 , 3 )", False),
        Column("tags", "ARRAY<STRUCT<K:STRING, V: MAP<STRING, ARRAY<INT>>>>", False),
        Column("d", "DATE", False),
    )


def test_parse_schema_error_uses_given_file_and_key():
    with pytest.raises(ConfigError) as ei:
        parse_schema("a NOPE", file="/x/y/p.yaml", key="schema")
    assert str(ei.value).startswith("p.yaml: schema: column 'a'")


# -- load_all ----------------------------------------------------------------------------


def test_load_all_bad_file_does_not_stop_good_one(write_yaml, base_cfg, tmp_path):
    d = tmp_path / "pipelines"
    bad = copy.deepcopy(base_cfg)
    bad["name"] = "Bad-Name"
    bad_path = write_yaml(bad, "a_bad.yaml", d)
    good = copy.deepcopy(base_cfg)
    write_yaml(good, "b_good.yml", d)
    write_yaml("not: [yaml", "c_broken.yaml", d)
    (d / "notes.txt").write_text("ignored")
    configs, errors = load_all(str(d))
    assert list(configs) == ["orders"]
    assert configs["orders"].file.endswith("b_good.yml")
    assert set(errors) == {bad_path, str(d / "c_broken.yaml")}
    assert errors[bad_path].startswith("a_bad.yaml: name: ")


def test_load_all_duplicate_name_is_error_of_later_file(write_yaml, base_cfg, tmp_path):
    d = tmp_path / "pipelines"
    first = write_yaml(base_cfg, "a.yaml", d)
    second = write_yaml(base_cfg, "b.yaml", d)
    configs, errors = load_all(str(d))
    assert configs["orders"].file == first
    assert list(errors) == [second]
    assert errors[second] == "b.yaml: name: 'orders' is already defined in a.yaml"


def test_load_all_uses_pipelines_dir_env(write_yaml, base_cfg, tmp_path, monkeypatch):
    d = tmp_path / "elsewhere"
    write_yaml(base_cfg, "orders.yaml", d)
    monkeypatch.setenv("PIPELINES_DIR", str(d))
    configs, errors = load_all()
    assert list(configs) == ["orders"] and errors == {}
    assert config.find_pipeline("orders").name == "orders"
    with pytest.raises(KeyError):
        config.find_pipeline("missing")


def test_shipped_pipelines_load(monkeypatch):
    monkeypatch.delenv("PIPELINES_DIR", raising=False)
    configs, errors = load_all(os.path.join(paths.CHECKOUT, "include", "pipelines"))
    assert errors == {}
    assert {"orders", "colors", "orders_kafka", "orders_hourly", "orders_cdc"} <= set(configs)
    assert configs["orders_cdc"].sink_mode == "merge" and configs["customer_totals"].sink_mode == "merge"
    assert configs["orders_hourly"].mode == "interval"


# -- fingerprint -----------------------------------------------------------------------------


def test_fingerprint_changes_with_what_a_batch_publishes(write_yaml, base_cfg):
    fp = _load(write_yaml, base_cfg).fingerprint()
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert _load(write_yaml, base_cfg).fingerprint() == fp  # stable

    changed = copy.deepcopy(base_cfg)
    changed["schema"] = base_cfg["schema"] + ", region STRING"
    assert _load(write_yaml, changed).fingerprint() != fp

    changed = copy.deepcopy(base_cfg)
    changed["source"]["max_records_per_batch"] = 7
    assert _load(write_yaml, changed).fingerprint() != fp

    changed = copy.deepcopy(base_cfg)
    changed["max_record_bytes"] = 1000
    assert _load(write_yaml, changed).fingerprint() != fp


def test_fingerprint_ignores_schedule_description_and_retries(write_yaml, base_cfg):
    fp = _load(write_yaml, base_cfg).fingerprint()
    changed = copy.deepcopy(base_cfg)
    changed["schedule"] = "*/5 * * * *"
    changed["description"] = "something else"
    changed["retries"] = {"commit": 1}
    changed["spark"] = {"driver_memory": "4g"}
    assert _load(write_yaml, changed).fingerprint() == fp


# -- interval mode ------------------------------------------------------------------------------

INTERVAL_BAD = [
    ("prefix-unknown-field", {"source.interval_prefix": "dt={date}"}, "source.interval_prefix", "placeholders"),
    ("prefix-no-field", {"source.interval_prefix": "daily"}, "source.interval_prefix", "at least one"),
    ("prefix-absolute", {"source.interval_prefix": "/dt={ds}"}, "source.interval_prefix", "relative"),
    ("prefix-dotdot", {"source.interval_prefix": "../dt={ds}"}, "source.interval_prefix", "relative"),
    ("prefix-broken", {"source.interval_prefix": "dt={ds"}, "source.interval_prefix", "not a valid pattern"),
    ("schedule-once", {"schedule": "@once"}, "schedule", "no data intervals"),
    ("schedule-null", {"schedule": None}, "schedule", "interval mode needs a schedule"),
]


@pytest.mark.parametrize("case", INTERVAL_BAD, ids=[c[0] for c in INTERVAL_BAD])
def test_interval_mode_bad_values(case, write_yaml, base_cfg):
    _id, sets, key, text = case
    doc = dict(base_cfg, mode="interval", schedule="@hourly")
    for k, v in sets.items():
        _set(doc, k, v)
    with pytest.raises(ConfigError) as ei:
        load_pipeline(write_yaml(doc))
    assert ei.value.key == key
    assert text in str(ei.value)


def test_interval_mode_loads(write_yaml, base_cfg):
    doc = dict(base_cfg, mode="interval", schedule="@hourly")
    doc["source"]["interval_prefix"] = "dt={ds}/hour={hh}"
    cfg = load_pipeline(write_yaml(doc))
    assert cfg.mode == "interval" and cfg.source.interval_prefix == "dt={ds}/hour={hh}"


def test_interval_starting(write_yaml, base_cfg):
    from eobatch.pipelines.loader import load_pipeline

    cfg = load_pipeline(write_yaml(dict(base_cfg, mode="interval", schedule="@hourly")))
    utc = dt.timezone.utc
    start, end = cfg.interval_starting(dt.datetime(2026, 1, 1, 4, tzinfo=utc))
    assert (start, end) == (dt.datetime(2026, 1, 1, 4, tzinfo=utc), dt.datetime(2026, 1, 1, 5, tzinfo=utc))
    with pytest.raises(ValueError, match="not a start"):
        cfg.interval_starting(dt.datetime(2026, 1, 1, 4, 30, tzinfo=utc))
    daily = load_pipeline(write_yaml(dict(base_cfg, mode="interval", schedule="30 2 * * *")))
    assert daily.interval_starting(dt.datetime(2026, 1, 1, 2, 30, tzinfo=utc))[1] == \
        dt.datetime(2026, 1, 2, 2, 30, tzinfo=utc)


# -- interval_prefix against the schedule: one folder per interval ----------------------------

PREFIX_SCHEDULE_OK = [
    ("dt={ds}/hour={hh}", "@hourly"),
    ("dt={ds}/hour={hh}", "0 * * * *"),
    ("{ds_nodash}/{hh}", "0 0-23 * * *"),
    ("dt={ds}", "@daily"),
    ("dt={ds}", "@midnight"),
    ("dt={ds}", "0 0 * * *"),
    ("{ds_nodash}", "0 0 1-31 * *"),
]


@pytest.mark.parametrize("prefix,schedule", PREFIX_SCHEDULE_OK)
def test_interval_prefix_matching_the_schedule_loads(write_yaml, base_cfg, prefix, schedule):
    doc = dict(base_cfg, mode="interval", schedule=schedule)
    doc["source"]["interval_prefix"] = prefix
    cfg = load_pipeline(write_yaml(doc))
    assert (cfg.source.interval_prefix, cfg.schedule) == (prefix, schedule)


PREFIX_SCHEDULE_BAD = [
    # (id, prefix, schedule, text in the message)
    ("hourly-prefix-daily", "dt={ds}/hour={hh}", "@daily", "2024-01-01 00:00 to 2024-01-02 00:00 UTC (1 day)"),
    ("hourly-prefix-daily-cron", "dt={ds}/hour={hh}", "0 0 * * *", "(1 day)"),
    ("hourly-prefix-15-minutes", "dt={ds}/hour={hh}", "*/15 * * * *", "(15 minutes)"),
    ("hourly-prefix-starts-at-30", "dt={ds}/hour={hh}", "30 * * * *", "2024-01-01 00:30 to 2024-01-01 01:30"),
    ("hourly-prefix-starts-at-second-30", "dt={ds}/hour={hh}", "0 * * * * 30", "00:00:30"),
    ("hourly-prefix-every-2-hours", "dt={ds}/hour={hh}", "0 */2 * * *", "(2 hours)"),
    ("hourly-prefix-weekdays", "dt={ds}/hour={hh}", "0 * * * 1-5", "2024-01-05 23:00 to 2024-01-08 00:00"),
    ("hourly-prefix-not-in-december", "dt={ds}/hour={hh}", "0 * * 1-11 *", "2024-11-30 23:00 to 2025-01-01 00:00"),
    ("hourly-prefix-weekly", "dt={ds}/hour={hh}", "@weekly", "(7 days)"),
    ("daily-prefix-hourly", "dt={ds}", "@hourly", "2024-01-01 00:00 to 2024-01-01 01:00 UTC (1 hour)"),
    ("daily-prefix-hourly-cron", "{ds_nodash}", "0 * * * *", "(1 hour)"),
    ("daily-prefix-15-minutes", "dt={ds}", "*/15 * * * *", "(15 minutes)"),
    ("daily-prefix-at-6", "dt={ds}", "0 6 * * *", "2024-01-01 06:00 to 2024-01-02 06:00"),
    ("daily-prefix-twice-a-day", "dt={ds}", "0 0,12 * * *", "(12 hours)"),
    ("daily-prefix-weekly", "dt={ds}", "@weekly", "(7 days)"),
    ("daily-prefix-monthly", "dt={ds}", "@monthly", "2024-01-01 00:00 to 2024-02-01 00:00"),
    ("daily-prefix-yearly", "dt={ds}", "@yearly", None),
    ("daily-prefix-weekdays", "dt={ds}", "0 0 * * 1-5", "2024-01-05 00:00 to 2024-01-08 00:00 UTC (3 days)"),
    ("daily-prefix-skips-the-31st", "{ds_nodash}", "0 0 1-30 * *", "2024-01-30 00:00 to 2024-02-01 00:00"),
]


@pytest.mark.parametrize("prefix,schedule,text", [c[1:] for c in PREFIX_SCHEDULE_BAD],
                         ids=[c[0] for c in PREFIX_SCHEDULE_BAD])
def test_interval_prefix_not_matching_the_schedule_is_refused(write_yaml, base_cfg, prefix, schedule, text):
    doc = dict(base_cfg, mode="interval", schedule=schedule)
    doc["source"]["interval_prefix"] = prefix
    e = _expect_error(write_yaml, doc, "source.interval_prefix", name="orders.yaml", contains=text)
    msg = str(e)
    assert repr(schedule) in msg and repr(prefix) in msg
    grain = "one clock hour" if "{hh}" in prefix else "one UTC day"
    assert grain in msg
    assert "dt={ds}/hour={hh} with @hourly" in msg and "dt={ds} with @daily" in msg


@pytest.mark.parametrize("prefix", ["hour={hh}", "{hh}"])
def test_interval_prefix_with_hour_but_no_date_is_refused(write_yaml, base_cfg, prefix):
    doc = dict(base_cfg, mode="interval", schedule="@hourly")
    doc["source"]["interval_prefix"] = prefix
    _expect_error(write_yaml, doc, "source.interval_prefix", name="orders.yaml",
                  contains="also needs {ds} or {ds_nodash}")


def test_two_pipelines_on_one_table_is_an_error(tmp_path, base_cfg):
    import copy

    import yaml as _yaml

    a = copy.deepcopy(base_cfg)
    b = copy.deepcopy(base_cfg)
    b["name"] = "other"
    (tmp_path / "a.yaml").write_text(_yaml.safe_dump(a))
    (tmp_path / "b.yaml").write_text(_yaml.safe_dump(b))
    good, errors = load_all(str(tmp_path))
    assert list(good) == [a["name"]]
    assert "sink.table" in errors[str(tmp_path / "b.yaml")] and "exactly one pipeline" in errors[str(tmp_path / "b.yaml")]


MERGE_SCHEMA = "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP NOT NULL, op STRING"
MERGE_CASES = [
    # (id, sink.mode, sink.merge, expected error key, text in message)
    ("mode-unknown", "upsert", None, "sink.mode", "append, merge"),
    ("merge-missing", "merge", None, "sink.merge", "needs a mapping"),
    ("merge-not-mapping", "merge", ["order_id"], "sink.merge", "needs a mapping"),
    ("merge-unknown-key", "merge", {"keys": ["order_id"], "sequence_by": "ts", "order": "desc"},
     "sink.merge.order", "unknown key"),
    ("keys-missing", "merge", {"sequence_by": "ts"}, "sink.merge.keys", "is required"),
    ("keys-empty", "merge", {"keys": [], "sequence_by": "ts"}, "sink.merge.keys", "non-empty list"),
    ("keys-twice", "merge", {"keys": ["order_id", "order_id"], "sequence_by": "ts"}, "sink.merge.keys", "distinct"),
    ("key-not-a-column", "merge", {"keys": ["id"], "sequence_by": "ts"}, "sink.merge.keys", "not a column"),
    ("key-nullable", "merge", {"keys": ["customer"], "sequence_by": "ts"}, "sink.merge.keys", "NOT NULL"),
    ("key-double", "merge", {"keys": ["amount"], "sequence_by": "ts"}, "sink.merge.keys", "has type DOUBLE"),
    ("sequence-missing", "merge", {"keys": ["order_id"]}, "sink.merge", "either sequence_by"),
    ("sequence-and-accumulate", "merge", {"keys": ["order_id"], "sequence_by": "ts", "accumulate": {"amount": "sum"}},
     "sink.merge", "not both"),
    ("accumulate-not-mapping", "merge", {"keys": ["customer"], "accumulate": ["amount"]}, "sink.merge.accumulate",
     "must be a mapping"),
    ("accumulate-bad-function", "merge", {"keys": ["order_id"], "accumulate": {"amount": "avg"}},
     "sink.merge.accumulate.amount", "sum, min, max"),
    ("accumulate-a-key", "merge", {"keys": ["order_id"], "accumulate": {"order_id": "max"}},
     "sink.merge.accumulate.order_id", "is a key column"),
    ("accumulate-sum-of-text", "merge", {"keys": ["order_id"], "accumulate": {"customer": "sum", "amount": "sum",
                                                                               "ts": "max", "op": "max"}},
     "sink.merge.accumulate.customer", "sum needs a number"),
    ("accumulate-leaves-a-column", "merge", {"keys": ["order_id"], "accumulate": {"amount": "sum"}},
     "sink.merge.accumulate", "customer, ts, op have none"),
    ("accumulate-delete-when", "merge", {"keys": ["order_id"], "accumulate": {"amount": "sum"},
                                         "delete_when": "op = 'd'"}, "sink.merge.delete_when", "never deleted"),
    ("sequence-is-a-key", "merge", {"keys": ["order_id"], "sequence_by": "order_id"}, "sink.merge.sequence_by",
     "is a key column"),
    ("sequence-nullable", "merge", {"keys": ["order_id"], "sequence_by": "amount"}, "sink.merge.sequence_by",
     "NOT NULL"),
    ("delete-when-two-statements", "merge", {"keys": ["order_id"], "sequence_by": "ts", "delete_when": "op='d'; x"},
     "sink.merge.delete_when", "one Spark SQL boolean expression"),
    ("delete-when-a-metadata-column", "merge", {"keys": ["order_id"], "sequence_by": "ts",
                                                "delete_when": "_change_type = 'delete' or op = '_x'"},
     "sink.merge.delete_when", "names _change_type: a column whose name starts with '_'"),
    ("merge-with-append", "append", {"keys": ["order_id"], "sequence_by": "ts"}, "sink.merge", "only for"),
]


@pytest.mark.parametrize("mode,merge,key,text", [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES])
def test_bad_merge_sinks_name_file_and_key(write_yaml, base_cfg, mode, merge, key, text):
    doc = copy.deepcopy(base_cfg)
    doc["schema"] = MERGE_SCHEMA
    doc["sink"]["mode"] = mode
    if merge is not None:
        doc["sink"]["merge"] = merge
    _expect_error(write_yaml, doc, key, name="orders.yaml", contains=text)


def test_a_merge_sink_loads_adds_the_tombstones_participant_and_changes_the_fingerprint(write_yaml, base_cfg):
    from eobatch.sinks.delta import DeltaConfig
    from eobatch.sinks.delta_merge import MergeConfig

    doc = copy.deepcopy(base_cfg)
    doc["schema"] = MERGE_SCHEMA
    append = load_pipeline(write_yaml(doc))
    assert (append.sink_mode, append.sink, append.participants) == ("append", DeltaConfig(), ("sink", "quarantine"))
    doc["sink"].update(mode="merge", merge={"keys": "order_id", "sequence_by": "ts", "delete_when": " op = 'd' "})
    cfg = load_pipeline(write_yaml(doc))
    assert cfg.sink == MergeConfig(keys=("order_id",), sequence_by="ts", delete_when="op = 'd'")
    assert cfg.sink.upsert
    assert cfg.participants == ("sink", "quarantine", "tombstones")
    assert cfg.fingerprint() != append.fingerprint()
    doc["sink"]["merge"] = {"keys": ["order_id"], "sequence_by": "ts"}
    assert load_pipeline(write_yaml(doc)).fingerprint() not in (cfg.fingerprint(), append.fingerprint())


def test_merge_sinks_run_in_interval_mode_running_aggregates_from_interval_partials(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc.update(schema=MERGE_SCHEMA, mode="interval", schedule="@hourly")
    doc["sink"].update(mode="merge", merge={"keys": ["order_id"], "sequence_by": "ts"})
    cfg = load_pipeline(write_yaml(doc))  # a re-run re-applies the same versions: no change
    assert cfg.participants == ("sink", "quarantine", "tombstones") and not cfg.sink.interval_partials(cfg.mode)
    doc["schema"] = "order_id STRING NOT NULL, amount DOUBLE"
    doc["sink"]["merge"] = {"keys": ["order_id"], "accumulate": {"amount": "sum"}}
    cfg = load_pipeline(write_yaml(doc))  # a re-run replaces its interval's partials; the sink is their fold
    assert cfg.participants == ("partials", "sink", "quarantine") and cfg.sink.interval_partials(cfg.mode)
    continuous = copy.deepcopy(doc)
    continuous.update(mode="continuous")
    del continuous["schedule"]
    # the sink's rows mean something else in each mode: a table cannot change from one to the other
    assert load_pipeline(write_yaml(continuous)).sink_contract != cfg.sink_contract


def test_an_accumulating_merge_sink_loads_without_tombstones(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc["schema"] = "customer STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"
    doc["sink"].update(mode="merge", merge={"keys": ["customer"], "accumulate": {"amount": "sum", "ts": "max"}})
    cfg = load_pipeline(write_yaml(doc))
    assert cfg.sink_mode == "merge" and not cfg.sink.upsert
    assert cfg.sink.accumulate == (("amount", "sum"), ("ts", "max"))
    assert cfg.participants == ("sink", "quarantine")


def test_every_key_of_a_pipeline_file_is_in_the_contract_or_declared_harmless():
    """A key added to the loader without a role here fails this test: a pending batch could not
    forget it."""
    from eobatch.pipelines import loader as c
    from eobatch.pipelines.loader import SINK_KEYS, TOP_KEYS, contract, harmless
    from eobatch.sinks.delta_merge.section import MERGE_KEYS
    from eobatch.sources import kind_for, kind_names

    CONTRACT, HARMLESS = contract().keys, harmless()
    sections = {"source": {k for kind in kind_names() for k in kind_for(kind).config_keys},
                "sink": SINK_KEYS, "sink.merge": MERGE_KEYS, "quarantine": c.QUARANTINE_KEYS,
                "spark": c.SPARK_KEYS, "retries": c.RETRY_KEYS, "alerts": c.ALERT_KEYS,
                "maintenance": c.MAINTENANCE_KEYS, "transform": {"options"}}
    keys = ({k for k in TOP_KEYS if k not in sections} | {f"{s}.{k}" for s, ks in sections.items() for k in ks}
            | {"transform"}  # transform: <name>, or {name, options}
            | {"transform.code"})  # not a key: the content of the file transform: names (config.transforms)
    assert not (set(CONTRACT) & set(HARMLESS)), "a key is both in the contract and harmless"
    assert keys - set(CONTRACT) - set(HARMLESS) == set(), "keys with no role in the configuration contract"
    assert set(CONTRACT) | set(HARMLESS) <= keys, "roles of keys the loader does not accept"


# -- every pipeline keeps its fingerprint, its recorded contract values and the configuration it loads
# to (recorded before configuration became typed models): a batch planned before a change of the
# loader still matches its plan after it (tests/support/golden_pipelines.py)



@pytest.fixture(scope="module")
def golden_now(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        for k, v in golden_pipelines.ENV.items():
            mp.setenv(k, v)
        return golden_pipelines.values(str(tmp_path_factory.mktemp("golden")))


def test_every_pipeline_is_in_the_golden_file(golden_now):
    with open(golden_pipelines.GOLDEN, encoding="utf-8") as f:
        recorded = json.load(f)
    assert sorted(golden_now) == sorted(recorded), "a pipeline was added or removed: record it (see golden_pipelines)"


@pytest.mark.parametrize("label", sorted(golden_pipelines.sources()))
def test_pipeline_loads_as_recorded(golden_now, label):
    with open(golden_pipelines.GOLDEN, encoding="utf-8") as f:
        recorded = json.load(f)[label]
    assert golden_now[label]["fingerprint"] == recorded["fingerprint"]
    assert golden_now[label] == recorded


# -- every mistake of a file at once ------------------------------------------------


def test_a_file_with_four_mistakes_names_all_four_in_one_error(write_yaml, base_cfg):
    """A file with four independent mistakes took four runs to fix, one error each: one ConfigError
    lists them all (in the file's order), and so do the DAG folder's import error and doctor."""
    from eobatch import doctor
    from eobatch.airflow.dag_factory import build_all, invalid_pipelines_dag

    doc = {**base_cfg, "colour": "red", "retries": {"stage": -1}, "spark": {"log_level": "loud"}}
    doc["source"] = {**doc["source"], "path": "relative/landing"}
    path = write_yaml(doc, "orders.yaml")
    with pytest.raises(ConfigError) as ei:
        load_pipeline(path)
    mistakes = ["source.path: 'relative/landing' must be an absolute path",
                "colour: unknown key (allowed: alerts, aws_conn_id, ",
                "retries.stage: must be a non-negative integer, got -1",
                "spark.log_level: must be one of OFF, FATAL, ERROR, WARN, INFO, DEBUG, TRACE, ALL"]
    assert str(ei.value).startswith("orders.yaml: 4 problems: "), str(ei.value)
    keys = [p.key for p in ei.value.problems]  # each a ConfigError of its key, in the file's order
    assert sorted(keys) == ["colour", "retries.stage", "source.path", "spark.log_level"]
    text = open(path, encoding="utf-8").read()
    assert keys == sorted(keys, key=lambda k: text.index(k.split(".")[0] + ":")), keys
    folder = os.path.dirname(path)
    dags, errors = build_all(folder)
    import_error = invalid_pipelines_dag(errors).doc_md or ""
    check, _ = doctor._pipelines(folder)
    for shown in (str(ei.value), import_error, check.text):
        assert all(m in shown for m in mistakes), shown
    assert "orders" not in dags and not check.ok
