"""The JSON Schema of a pipeline YAML, generated from its typed models (``loader.PipelineFile``)
and the section models of every registered source and sink kind (``config_model`` of a kind; a
kind without one is described by its keys alone).

``make schema`` writes it to ``docs/pipeline.schema.json`` (checked in: a unit test fails when it
is not current). Editors with the YAML language server (VS Code's YAML extension) validate and
complete a pipeline file against it: docs/site/reference.md "Pipeline files in an editor".
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .. import sinks, sources
from ..config import transforms
from .loader import PipelineFile, SinkSection, TransformSection

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def json_schema() -> dict[str, Any]:
    """The schema of a pipeline YAML (JSON Schema draft 2020-12) with the built-in kinds (a kind
    registered by a platform is not in the checked-in file)."""
    source_kinds = [(name, sources.kind_for(name)) for name in sources.BUILTIN]
    sink_kinds = [sinks.kind_for(name) for name in sinks.BUILTIN]
    top = PipelineFile.model_json_schema(by_alias=True)
    defs = top.setdefault("$defs", {})
    props = top["properties"]
    props["source"] = {"description": "where the records come from: one of the source kinds",
                       "oneOf": [_kind_schema(name, kind, defs) for name, kind in source_kinds]}
    props["transform"] = {"description": TransformSection.__doc__,
                          "anyOf": [{"type": "string", "description": transforms.DESCRIPTION},
                                    props["transform"]]}
    sink = defs[SinkSection.__name__]
    sink["properties"]["mode"] = {"enum": [k.mode for k in sink_kinds], "default": sinks.kind_for(sinks.DEFAULT).mode}
    sink["additionalProperties"] = False
    sink["allOf"] = []
    for kind in sink_kinds:
        own = _own_properties(kind, defs)
        sink["properties"].update(own["properties"])
        if own.get("required"):  # the kind's required keys, when its mode is chosen
            sink["allOf"].append({"if": {"properties": {"mode": {"const": kind.mode}}, "required": ["mode"]},
                                  "then": {"required": own["required"]}})
    if not sink["allOf"]:
        del sink["allOf"]
    _null_where_default(top)
    return {"$schema": DRAFT, "title": "eobatch pipeline", **{k: v for k, v in top.items() if k != "title"}}


def _null_where_default(node: Any) -> None:
    """A key whose default is null may be written as null (the loader takes it as not given)."""
    if isinstance(node, dict):
        if "default" in node and node["default"] is None and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        for v in node.values():
            _null_where_default(v)
    elif isinstance(node, list):
        for v in node:
            _null_where_default(v)


def _own_properties(kind: Any, defs: dict) -> dict:
    """``properties`` and ``required`` of a kind's section model (its keys alone without one)."""
    model = getattr(kind, "config_model", None)
    if model is None:
        return {"properties": {k: {} for k in sorted(kind.config_keys)}}
    schema = model.model_json_schema(by_alias=True)
    defs.update(schema.pop("$defs", {}))
    return schema


def _kind_schema(name: str, kind: Any, defs: dict) -> dict:
    own = _own_properties(kind, defs)
    props = {**own["properties"], "kind": {"const": name}}
    return {"title": f"kind: {name}", "type": "object", "properties": props, "additionalProperties": False,
            "required": sorted({"kind", *own.get("required", [])})}


def render() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1], "w", encoding="utf-8") if len(sys.argv) > 1 else sys.stdout as out:
        out.write(render())
