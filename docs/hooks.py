"""mkdocs hooks of the documentation site (docs/mkdocs.yml): the pages that are generated at build
time, so that they cannot drift from what they describe.

* ``reference.md``: the marker ``<!-- eobatch:reference -->`` becomes the pipeline YAML reference,
  every section and key with its type, default, allowed values and description, rendered from
  ``docs/pipeline.schema.json`` (the JSON Schema ``make schema`` writes from the configuration's
  typed models; a unit test fails when it is not current).
* ``benchmarks.md``: the marker ``<!-- eobatch:bench -->`` becomes the figures of the last
  ``make bench`` (``.bench/results.json``, or ``$EOBATCH_BENCH_DIR/results.json``) with its plot
  (``bench.png`` beside it), or, when there is no such file (a clean checkout), how to produce it;
  ``<!-- eobatch:bench-landing -->`` the landing-zone figures of the same file (``landing_zone``,
  ``landing_zone_s3``), or that the last run has none.

The site also serves the schema itself (``pipeline.schema.json``), for editors that take a URL.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REFERENCE_MARKER = "<!-- eobatch:reference -->"
BENCH_MARKER = "<!-- eobatch:bench -->"
LANDING_MARKER = "<!-- eobatch:bench-landing -->"
DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
SCHEMA = DOCS / "pipeline.schema.json"


def bench_dir() -> Path:
    return Path(os.environ.get("EOBATCH_BENCH_DIR") or REPO / ".bench")


# --- mkdocs events -------------------------------------------------------------------------------

def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "pipeline.schema.json", abs_src_path=str(SCHEMA)))
    png = bench_dir() / "bench.png"
    if (bench_dir() / "results.json").is_file() and png.is_file():
        files.append(File.generated(config, "bench.png", abs_src_path=str(png)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if REFERENCE_MARKER in markdown:
        markdown = markdown.replace(REFERENCE_MARKER, render_reference(json.loads(SCHEMA.read_text())))
    if BENCH_MARKER in markdown:
        markdown = markdown.replace(BENCH_MARKER, render_bench(bench_dir()))
    if LANDING_MARKER in markdown:
        markdown = markdown.replace(LANDING_MARKER, render_landing(bench_dir()))
    return markdown


# --- the pipeline YAML reference -----------------------------------------------------------------

def render_reference(schema: dict) -> str:
    """Every key of the schema: one table per section, top level first, then each section (a
    source kind, a nested section, the items of a list of sections) in the order of its keys."""
    ref = _Reference(schema.get("$defs", {}))
    ref.section("Top-level keys", "", schema, anchor="top-level-keys")
    return "\n".join(ref.out)


class _Reference:
    def __init__(self, defs: dict) -> None:
        self.defs = defs
        self.out: list[str] = []

    def resolve(self, node: dict) -> dict:
        while "$ref" in node:
            node = {**self.defs[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
        return node

    def sections_in(self, node: dict) -> list[dict]:
        """The object sections a key can hold: itself, a branch of anyOf, or a list's items."""
        node = self.resolve(node)
        if "properties" in node:
            return [node]
        found: list[dict] = []
        for branch in node.get("anyOf", []):
            found += self.sections_in(branch)
        if "items" in node and isinstance(node["items"], dict):
            found += self.sections_in(node["items"])
        return found

    def section(self, title: str, path: str, node: dict, anchor: str, level: int = 2) -> None:
        node = self.resolve(node)
        self.out += [f"{'#' * level} {title} {{#{anchor}}}", ""]
        if node.get("description") and path:
            self.out += [_text(node["description"]), ""]
        required = set(node.get("required", []))
        conditional = _conditionally_required(node)
        nested: list[tuple[str, str, dict, str]] = []
        props = node.get("properties", {})
        if props:
            self.out += ["| key | type | default | allowed | description |", "|---|---|---|---|---|"]
        for key, sub in props.items():
            key_path = f"{path}.{key}" if path else key
            if "oneOf" in sub:  # one section per kind (source: kind: files | kafka | parquet)
                kinds = [self.resolve(b) for b in sub["oneOf"]]
                links = ", ".join(f"[{_kind_title(k)}](#{_anchor(key_path, _kind_title(k))})" for k in kinds)
                self.row(key_path, f"one of: {links}", None, True, "", sub.get("description", ""))
                for k in kinds:
                    nested.append((f"`{key_path}` with `{_kind_title(k)}`", key_path, k, _anchor(key_path, _kind_title(k))))
                continue
            inner = self.sections_in(sub)
            item = "[]" if self.resolve(sub).get("type") == "array" or "items" in self.resolve(sub) else ""
            for s in inner:
                nested.append((f"`{key_path}{item}`", key_path + item, s, _anchor(key_path + item)))
            desc = _text(sub.get("description", ""))
            if not desc and inner and not item:  # the section's own description, its first sentence
                desc = _first_sentence(_text(inner[0].get("description", "")))
            if key in conditional:
                desc = (desc + " " if desc else "") + f"Required when {conditional[key]}."
            default = sub.get("default", _NO_DEFAULT)
            if inner and isinstance(default, dict):
                default = _SECTION_DEFAULTS  # each key's default is in the section's table
            self.row(key_path, self.type_of(sub, key_path + item), default, key in required, self.allowed(sub), desc)
        self.out.append("")
        for title_, path_, node_, anchor_ in nested:
            self.section(title_, path_, node_, anchor_, level=3 if level >= 2 else level + 1)

    def row(self, key: str, type_: str, default: Any, required: bool, allowed: str, desc: str) -> None:
        if required:
            dflt = "required"
        elif default is _NO_DEFAULT:
            dflt = "—"
        elif default is _SECTION_DEFAULTS:
            dflt = "each key's own"
        else:
            dflt = f"`{_json(default)}`"
        self.out.append(f"| `{key}` | {type_} | {dflt} | {allowed} | {_cell(_text(desc))} |")

    def type_of(self, node: dict, path: str) -> str:
        if "$ref" in node:
            target = self.resolve(node)
            if "properties" in target:
                return f"section ([below](#{_anchor(path)}))"
            return self.type_of(target, path)
        if "const" in node:
            return f"`{_json(node['const'])}`"
        if "enum" in node:
            kinds = sorted({_json_type(v) for v in node["enum"]})
            return " or ".join(kinds)
        for combo in ("anyOf", "oneOf"):
            if combo in node:
                parts: list[str] = []
                for b in node[combo]:
                    t = self.type_of(b, path)
                    if t not in parts:
                        parts.append(t)
                return " or ".join(parts)
        types = node.get("type")
        if types is None:
            return "any"
        names = []
        for t in types if isinstance(types, list) else [types]:
            if t == "array" and isinstance(node.get("items"), dict):
                names.append(f"list of {self.type_of(node['items'], path)}")
            elif t == "object" and "properties" in node:
                names.append(f"section ([below](#{_anchor(path)}))")
            elif t == "object" and isinstance(node.get("additionalProperties"), dict):
                names.append(f"map of string to {self.type_of(node['additionalProperties'], path)}")
            else:
                names.append(t)
        return " or ".join(names)

    def allowed(self, node: dict) -> str:
        node = self.resolve(node) if "$ref" in node and "properties" not in self.resolve(node) else node
        parts: list[str] = []
        if "enum" in node:
            parts.append(", ".join(f"`{_json(v)}`" for v in node["enum"]))
        if "pattern" in node:
            parts.append(f"matches `{node['pattern']}`")
        if "minimum" in node:
            parts.append(f"≥ {node['minimum']}")
        if "exclusiveMinimum" in node:
            parts.append(f"> {node['exclusiveMinimum']}")
        if "maximum" in node:
            parts.append(f"≤ {node['maximum']}")
        if "minItems" in node:
            parts.append(f"at least {node['minItems']} item{'s' if node['minItems'] != 1 else ''}")
        if node.get("uniqueItems"):
            parts.append("no repeats")
        for combo in ("anyOf", "oneOf"):
            for b in node.get(combo, []):
                sub = self.allowed(b)
                if sub and sub not in parts:
                    parts.append(sub)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict) and "properties" not in self.resolve(node[key]):
                sub = self.allowed(node[key])
                if sub:
                    parts.append(("each: " if key == "items" else "each value: ") + sub)
        return "; ".join(parts)


_NO_DEFAULT = object()
_SECTION_DEFAULTS = object()


def _first_sentence(s: str) -> str:
    return s.split(". ")[0].rstrip(".") + "." if s else ""


def _conditionally_required(node: dict) -> dict[str, str]:
    """``allOf: [{if: {properties: {k: {const: v}}}, then: {required: [...]}}]`` as key -> condition."""
    out: dict[str, str] = {}
    for rule in node.get("allOf", []):
        cond = rule.get("if", {}).get("properties", {})
        when = " and ".join(f"`{k}: {_json(v['const'])}`".replace('"', "") for k, v in cond.items() if "const" in v)
        for key in rule.get("then", {}).get("required", []):
            out[key] = when
    return out


def _kind_title(node: dict) -> str:
    return node.get("title") or "kind"


def _anchor(path: str, extra: str = "") -> str:
    return re.sub(r"[^a-z0-9]+", "-", f"{path} {extra}".lower()).strip("-")


def _json(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(", ", ": "))


def _json_type(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}.get(type(v), "any")


def _text(s: str) -> str:
    """A docstring's text for Markdown: ``code`` -> `code`, one line."""
    return re.sub(r"``(.+?)``", r"`\1`", " ".join(s.split()))


def _cell(s: str) -> str:
    return s.replace("|", "\\|")


# --- the benchmark results -----------------------------------------------------------------------

_SIZE_COLUMNS = [("records", "records"), ("files", "files"), ("this product, DAG run (s)", "eo_seconds"),
                 ("stage job alone (s)", "stage_seconds"), ("Structured Streaming (s)", "sss_seconds"),
                 ("plain append (s)", "alo_seconds"), ("eo / sss", "eo_over_sss"),
                 ("stage / sss", "stage_over_sss"), ("driver peak RSS (MiB)", "driver_peak_rss_mib")]
_SCALARS = ["commit_large_over_small", "verify_seconds_per_1000_files", "fixed_overhead_seconds",
            "plan_late_over_early", "kafka_stage_over_consume_floor", "kafka_read_over_consume_floor",
            "merge_over_append", "catchup_over_sss", "eo_scheduler_seconds", "delta_source_over_sss",
            "plan_1m_over_1k", "plan_task_over_sss_trigger"]
_CATCHUP_ROWS = [("this product, one DAG run", "eo"), ("Structured Streaming, maxFilesPerTrigger=1", "sss"),
                 ("this product, one batch per DAG run", "eo_one_per_run"),
                 ("this product, all of it as one batch", "eo_one_batch")]


def render_bench(folder: Path) -> str:
    results = folder / "results.json"
    if not results.is_file():
        return ("No benchmark results in this build: `.bench/results.json` does not exist. Run `make bench` "
                "(see [Run it](#run-it-make-bench) below; `SIZES=1000 SINGLE_FILE_GB=0 KAFKA_RECORDS=0 MERGE_RECORDS=0 CATCHUP=0 SCHEDULER_RUNS=0 "
                "DELTA_RECORDS=0 PLAN_LATE_BATCHES=1000 LANDING_SIZES=0 LANDING_S3_SIZES=0` takes about two minutes), then `make docs`: this section then shows "
                "its figures and its plot.")
    res = json.loads(results.read_text())
    env = res.get("environment") or {}
    lines = [f"From `{results.relative_to(REPO) if results.is_relative_to(REPO) else results}`"
             + (f", run started {env['started_at']}" if env.get("started_at") else "")
             + (f", Spark master `{env['master']}`" if env.get("master") else "")
             + (f", driver memory {env['driver_memory']}" if env.get("driver_memory") else "")
             + (f", {env['cpus']} CPUs" if env.get("cpus") else "")
             + (f", {env['bench_seconds']} s in all" if env.get("bench_seconds") is not None else "") + ".", ""]
    if (folder / "bench.png").is_file():
        lines += ["![seconds against records, this product and its peers](bench.png)", ""]
    rows = list(res.get("sizes") or [])
    if res.get("single_file"):
        rows.append({**res["single_file"], "files": "1 (single file)"})
    if rows:
        lines += ["| " + " | ".join(h for h, _ in _SIZE_COLUMNS) + " |", "|" + "---|" * len(_SIZE_COLUMNS)]
        for r in rows:
            lines.append("| " + " | ".join(_fmt(r.get(k)) for _, k in _SIZE_COLUMNS) + " |")
        lines.append("")
        errors = [f"- {_fmt(r.get('records'))} records, `{k}`: {_cell(str(r[k]))}"
                  for r in rows for k in sorted(r) if k.endswith("_error")]
        lines += errors + ([""] if errors else [])
    c = res.get("catchup")
    if c:
        lines += [f"Catch-up: a backlog of {_fmt(c.get('batches'))} batches of {_fmt(c.get('records_per_batch'))} "
                  f"records (one landing file each), drained:", "",
                  "| contender | seconds | seconds per batch |", "|---|---|---|"]
        for label, key in _CATCHUP_ROWS:
            if f"{key}_seconds" in c:
                err = c.get(f"{key}_error")
                lines.append(f"| {label} | {_fmt(c.get(f'{key}_seconds'))} | {_fmt(c.get(f'{key}_seconds_per_batch'))}"
                             + (f" ({_cell(str(err))})" if err else "") + " |")
        lines.append("")
    lines += ["| figure | value | note |", "|---|---|---|"]
    for k in _SCALARS:
        if k in res:
            note = res.get(f"{k}_note") or res.get(f"{k}_error") or ""
            lines.append(f"| `{k}` | {_fmt(res.get(k))} | {_cell(str(note))} |")
    return "\n".join(lines) + "\n"


_LANDING_COLUMNS = [("files", "files"), ("plan task (s)", "plan_task_seconds"), ("plan max RSS (MiB)", "plan_max_rss_mib"),
                    ("recover task (s)", "recover_task_seconds"), ("recover max RSS (MiB)", "recover_max_rss_mib"),
                    ("plan, discovery full (s)", "plan_full_seconds"),
                    ("Structured Streaming trigger (s)", "sss_trigger_seconds"),
                    ("its latestOffset (s)", "sss_latest_offset_seconds"), ("plan / trigger", "plan_task_over_sss_trigger")]
_LANDING_S3_COLUMNS = [("objects", "files"), ("plan task (s)", "plan_task_seconds"), ("plan max RSS (MiB)", "plan_max_rss_mib"),
                       ("LIST calls a plan", "list_calls_per_plan"), ("recover task (s)", "recover_task_seconds"),
                       ("plan, discovery full (s)", "plan_full_seconds"),
                       ("LIST calls a plan, discovery full", "list_calls_per_plan_full"), ("upload (s)", "upload_seconds")]


def render_landing(folder: Path) -> str:
    """The landing-zone figures of ``folder/results.json`` (``tests/bench/landing_zone.py``)."""
    results = folder / "results.json"
    res = json.loads(results.read_text()) if results.is_file() else {}
    if not res.get("landing_zone") and not res.get("landing_zone_s3"):
        why = res.get("plan_1m_over_1k_note") or ("no `.bench/results.json`" if not res else "")
        return ("The last `make bench` of this checkout has no landing-zone figures"
                + (f" ({_cell(str(why))})" if why else "") + ": see the recorded run below.\n")
    env = res.get("environment") or {}
    where = results.relative_to(REPO) if results.is_relative_to(REPO) else results
    lines = [f"From `{where}`" + (f", run started {env['started_at']}" if env.get("started_at") else "")
             + (f", {env['cpus']} CPUs" if env.get("cpus") else "") + ".", ""]
    for key, title, columns in (("landing_zone", "On the local disk", _LANDING_COLUMNS),
                                ("landing_zone_s3", "On the S3 server", _LANDING_S3_COLUMNS)):
        rows = res.get(key) or []
        if not rows:
            note = res.get(f"{key}_note")
            lines += [f"{title}: no figures" + (f" ({_cell(str(note))})" if note else "") + ".", ""]
            continue
        lines += [f"{title}:", "", "| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_fmt(r.get(k)) for _, k in columns) + " |" for r in rows]
        lines += [""] + [f"- {_fmt(r.get('files'))} files, `{k}`: {_cell(str(r[k]))}"
                         for r in rows for k in sorted(r) if k.endswith("_error")]
        lines.append("")
    lines += ["| figure | value | note |", "|---|---|---|"]
    for k in ("plan_1m_over_1k", "plan_task_over_sss_trigger"):
        note = res.get(f"{k}_note") or ""
        lines.append(f"| `{k}` | {_fmt(res.get(k))} | {_cell(str(note))} |")
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        if 0 < abs(v) < 0.1:  # a ratio or seconds far below one: its first digits
            return f"{v:.2g}"
        return f"{v:.2f}" if v < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)
