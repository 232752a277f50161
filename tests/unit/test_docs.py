"""The documentation site's generated pages (docs/hooks.py, `make docs`): the pipeline YAML
reference holds every key of docs/pipeline.schema.json, and the benchmark page shows the figures
of .bench/results.json when there are any and otherwise says how to produce them. The Python API
page (docs/site/api.md, rendered by mkdocstrings from the docstrings) names objects that exist, and
every member of the kinds' interfaces has a docstring, so that the page shows it."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
from pathlib import Path

import griffe
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
API_PAGE = REPO / "docs" / "site" / "api.md"
# the interfaces a kind implements: every member of each is documented on the API page
INTERFACES = ["eobatch.sources.base.SourceKind", "eobatch.sources.base.Planner", "eobatch.sources.base.SourceRange",
              "eobatch.sinks.base.SinkKind", "eobatch.sinks.base.Participant"]


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _key_paths(node: dict, defs: dict, path: str = "") -> set[str]:
    """Every key of the schema as the reference names it (``sink.merge.keys``, ``alerts.notify[].email``)."""
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    out: set[str] = set()
    for key, sub in node.get("properties", {}).items():
        p = f"{path}.{key}" if path else key
        out.add(p)
        for branch in sub.get("oneOf", []) + sub.get("anyOf", []):
            out |= _key_paths(branch, defs, p)
        if "$ref" in sub:
            out |= _key_paths(sub, defs, p)
        if isinstance(sub.get("items"), dict):
            out |= _key_paths(sub["items"], defs, p + "[]")
    return out


def test_the_reference_lists_every_key_of_the_schema_with_its_default():
    schema = json.loads((REPO / "docs" / "pipeline.schema.json").read_text())
    page = _hooks().render_reference(schema)
    rows = {line.split("|")[1].strip().strip("`"): line for line in page.splitlines() if line.startswith("| `")}
    keys = _key_paths(schema, schema["$defs"])
    assert keys - rows.keys() == set()
    assert {"source.topic", "sink.merge.sequence_by", "alerts.notify[].smtp_conn_id", "expectations[].action"} <= keys
    assert "| `100000` |" in rows["source.max_records_per_batch"]
    assert '`"republish"`, `"fail"`, `"ignore"`' in rows["source.late_files"]
    assert "Required when `mode: merge`" in rows["sink.merge"]


def test_the_benchmark_page_shows_the_last_results_or_says_how_to_get_them(tmp_path):
    hooks = _hooks()
    assert "`make bench`" in hooks.render_bench(tmp_path)
    results = {"sizes": [{"records": 1000, "files": 1, "eo_seconds": 22.4, "sss_seconds": 12.3, "eo_over_sss": 1.82,
                          "eo_error": None}],
               "single_file": None, "merge_over_append": None, "merge_over_append_note": "skipped: MERGE_RECORDS=0",
               "environment": {"master": "local[*]", "cpus": 2}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    page = hooks.render_bench(tmp_path)
    assert "| 1,000 | 1 | 22.40 | — | 12.30 | — | 1.82 |" in page
    assert "| `merge_over_append` | — | skipped: MERGE_RECORDS=0 |" in page
    assert "bench.png" not in page
    (tmp_path / "bench.png").write_bytes(b"\x89PNG")
    assert "](bench.png)" in hooks.render_bench(tmp_path)


def test_the_benchmark_page_shows_the_landing_zone_figures(tmp_path):
    hooks = _hooks()
    assert "no landing-zone figures" in hooks.render_landing(tmp_path)
    results = {"sizes": [], "single_file": None, "environment": {"cpus": 2},
               "landing_zone": [{"files": 1000, "plan_task_seconds": 0.05, "plan_max_rss_mib": 130.2,
                                 "recover_task_seconds": 0.04, "sss_trigger_seconds": 9.5,
                                 "plan_task_over_sss_trigger": 0.0053}],
               "landing_zone_s3": None, "landing_zone_s3_note": "skipped: LANDING_S3_SIZES=0",
               "plan_1m_over_1k": None, "plan_1m_over_1k_note": "one landing size only",
               "plan_task_over_sss_trigger": 0.0053}
    (tmp_path / "results.json").write_text(json.dumps(results))
    page = hooks.render_landing(tmp_path)
    assert "| 1,000 | 0.05 | 130.20 | 0.04 | — | — | 9.50 | — | 0.0053 |" in page
    assert "On the S3 server: no figures (skipped: LANDING_S3_SIZES=0)." in page
    assert "| `plan_1m_over_1k` | — | one landing size only |" in page
    assert "| `plan_task_over_sss_trigger` | 0.0053 |" in hooks.render_bench(tmp_path)


# -- the Python API page (docs/site/api.md) ---------------------------------------------------------

def _api_directives() -> dict[str, dict]:
    """Each ``::: identifier`` line of the API page, with the options below it (mkdocstrings' YAML)."""
    out: dict[str, dict] = {}
    lines = API_PAGE.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.fullmatch(r":::\s+(\S+)\s*", line)
        if not m:
            continue
        block = []
        for more in lines[i + 1:]:
            if not more.startswith("    "):
                break
            block.append(more)
        options = (yaml.safe_load("\n".join(block)) or {}).get("options", {}) if block else {}
        assert m.group(1) not in out, f"docs/site/api.md renders {m.group(1)} twice"
        out[m.group(1)] = options
    return out


def _runtime_object(identifier: str) -> object:
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = identifier.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:n]))
        except ModuleNotFoundError:
            continue
        for attr in parts[n:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(identifier)


def _interface_members(cls: type) -> set[str]:
    """The members a kind must have, as the registries check them (``core.registry.missing_members``)."""
    return set(getattr(cls, "__annotations__", {})) | {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


@pytest.fixture(scope="module")
def package() -> griffe.Object:
    """eobatch as mkdocstrings reads it (griffe, from the source; docs/mkdocs.yml: paths)."""
    found = griffe.load("eobatch", search_paths=[str(REPO / "plugins")], resolve_aliases=False)
    assert isinstance(found, griffe.Object)
    return found


def test_the_api_page_is_in_the_site_and_renders_from_the_code():
    config = yaml.safe_load((REPO / "docs" / "mkdocs.yml").read_text())
    assert {"Python API": "api.md"} in config["nav"]
    assert any(isinstance(p, dict) and "mkdocstrings" in p for p in config["plugins"])
    directives = _api_directives()
    assert set(INTERFACES) <= set(directives)
    # no hand-kept copy of an interface is left on the contributing page: it links to the reference
    contributing = (REPO / "docs" / "site" / "contributing.md").read_text()
    assert "class SourceKind(" not in contributing and "class SinkKind(" not in contributing
    assert "api.md#eobatch.sources.base.SourceKind" in contributing and "api.md#eobatch.sinks.base.SinkKind" in contributing


def test_every_object_the_api_page_names_exists(package):
    for identifier, options in _api_directives().items():
        obj = _runtime_object(identifier)  # AttributeError / ModuleNotFoundError: the page names nothing
        static = package[identifier.removeprefix("eobatch.")]
        assert static is not None
        for key in ("members", "inherited_members"):
            names = options.get(key)
            if isinstance(names, list):
                missing = [n for n in names if not hasattr(obj, n)]
                assert not missing, f"docs/site/api.md: {identifier} has no {missing} ({key})"


@pytest.mark.parametrize("identifier", INTERFACES)
def test_every_member_of_a_kinds_interface_is_documented_on_the_api_page(package, identifier):
    """The page shows a member only with a docstring (mkdocs.yml: show_if_no_docstring false): a
    member added to an interface without one fails here, as does a page that leaves it out."""
    cls = _runtime_object(identifier)
    assert isinstance(cls, type)
    members = _interface_members(cls)
    assert members, identifier
    static = package[identifier.removeprefix("eobatch.")]
    undocumented = sorted(m for m in members if m not in static.members or not static.members[m].docstring
                          or not static.members[m].docstring.value.strip())
    assert not undocumented, f"{identifier}: members without a docstring: {undocumented}"
    shown = _api_directives()[identifier].get("members")
    assert shown is None or (isinstance(shown, list) and members <= set(shown)), \
        f"docs/site/api.md leaves members of {identifier} out: {sorted(members - set(shown or []))}"
