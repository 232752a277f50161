"""eobatch.config: the section parsers of load_pipeline on the branches test_config.py leaves
untested (a section that is not a mapping; an optional section that is null)."""

from __future__ import annotations

import copy
import os

import pytest

from eobatch.config import ConfigError, load_pipeline

NOT_MAPPINGS = [
    ("sink", "/lake/orders", "must be a mapping with 'table'"),
    ("sink", ["/lake/orders"], "must be a mapping with 'table'"),
    ("quarantine", "/lake/orders_bad", "must be a mapping with 'table'"),
    ("spark", "local[*]", "must be a mapping"),
    ("spark", ["conn_id"], "must be a mapping"),
    ("retries", 3, "must be a mapping (plan, stage, commit, delay_seconds, verify_timeout_seconds, plan_wait_seconds)"),
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
    assert (cfg.verify_timeout_seconds, cfg.plan_wait_seconds) == (900, 3600)


def test_every_retries_key_is_read(write_yaml, base_cfg):
    doc = copy.deepcopy(base_cfg)
    doc["retries"] = {"plan": 0, "stage": 4, "commit": 1, "delay_seconds": 3, "verify_timeout_seconds": 30,
                      "plan_wait_seconds": 120}
    cfg = load_pipeline(write_yaml(doc))
    assert (cfg.plan_retries, cfg.stage_retries, cfg.commit_retries) == (0, 4, 1)
    assert cfg.retry_delay_seconds == 3.0 and isinstance(cfg.retry_delay_seconds, float)
    assert (cfg.verify_timeout_seconds, cfg.plan_wait_seconds) == (30, 120)


@pytest.mark.parametrize("key", ["verify_timeout_seconds", "plan_wait_seconds"])
@pytest.mark.parametrize("value", [0, -1, "60", True])
def test_a_timeout_must_be_a_positive_integer(write_yaml, base_cfg, key, value):
    doc = copy.deepcopy(base_cfg)
    doc["retries"] = {key: value}
    with pytest.raises(ConfigError) as ei:
        load_pipeline(write_yaml(doc))
    assert ei.value.key == f"retries.{key}"
    assert "must be a positive integer" in str(ei.value)
