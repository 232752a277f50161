"""The JSON Schema of a pipeline YAML (docs/pipeline.schema.json, ``make schema``): current with the
models, and a description of what the loader does: every pipeline it loads is valid, and a typo in
a key is not."""

from __future__ import annotations

import os

import jsonschema
import pytest
import yaml

from eobatch.pipelines import json_schema as pipeline_schema
from support import golden_pipelines

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CHECKED_IN = os.path.join(REPO, "docs", "pipeline.schema.json")


@pytest.fixture(scope="module")
def schema():
    return pipeline_schema.json_schema()


def test_the_checked_in_schema_is_current():
    with open(CHECKED_IN, encoding="utf-8") as f:
        assert f.read() == pipeline_schema.render(), "docs/pipeline.schema.json is not current: run `make schema`"


@pytest.mark.parametrize("label", sorted(golden_pipelines.sources()))
def test_every_pipeline_the_loader_takes_is_valid(schema, label):
    jsonschema.validate(yaml.safe_load(golden_pipelines.sources()[label]), schema)


@pytest.mark.parametrize("path, typo", [
    (("source",), "max_record_per_batch"), ((), "retry"), (("sink",), "partitionby"), (("sink", "merge"), "key"),
])
def test_a_typo_in_a_key_is_invalid(schema, path, typo):
    doc = yaml.safe_load(golden_pipelines.sources()["include/pipelines/orders_cdc.yaml"])
    node = doc
    for p in path:
        node = node[p]
    node[typo] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)
