"""The documentation site's generated pages (docs/hooks.py, `make docs`): the pipeline YAML
reference holds every key of docs/pipeline.schema.json, and the benchmark page shows the figures
of .bench/results.json when there are any and otherwise says how to produce them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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
