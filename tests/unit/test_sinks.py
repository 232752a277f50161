"""eobatch.sinks: the registry of sink kinds, and the rule that makes a kind a plug-in: no module
outside a kind's registry folder branches on a kind's name or imports a kind's package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from eobatch import sinks, sources
from eobatch.sinks import SinkKind, kind_for, kind_for_mode, kind_names, modes

REPO = Path(__file__).resolve().parents[2]
PRODUCT = [REPO / "plugins", REPO / "spark_jobs", REPO / "dags"]
# Where each kind's name may be spoken: its registry's folder.
REGISTRIES = {"sinks": REPO / "plugins" / "eobatch" / "sinks", "sources": REPO / "plugins" / "eobatch" / "sources"}
# Known branches on a source kind's name outside sources/, left for the next step of issue 28 (item 4:
# the backlog and replay ask the kind instead). The test fails when one goes, so that this list shrinks.
KNOWN: set[tuple[str, str]] = set()  # none left: backlog and replay ask the kind (Planner.backlog, replayable)


def test_the_registry_knows_the_builtin_kinds_and_their_modes():
    assert kind_names() == ["delta", "delta_merge"] and modes() == ["append", "merge"]
    for name in kind_names():
        kind = kind_for(name)
        assert isinstance(kind, SinkKind) and kind.name == name and kind_for_mode(kind.mode) is kind
    with pytest.raises(KeyError, match="unknown sink kind 'iceberg'"):
        kind_for("iceberg")
    with pytest.raises(TypeError, match="does not implement eobatch.sinks.SinkKind"):
        sinks.register(object())


def _names() -> dict[str, str]:
    """Every kind's name as code could spell it -> its registry (sink modes are names too)."""
    out = {n: "sources" for n in sources.kind_names()}
    out |= {n: "sinks" for n in kind_names()} | {m: "sinks" for m in modes()}
    return out


def _module(path: Path) -> str:
    rel = path.relative_to(REPO / "plugins") if REPO / "plugins" in path.parents else path.relative_to(REPO)
    return ".".join(rel.with_suffix("").parts).removesuffix(".__init__")


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = (module if is_package else module.rpartition(".")[0]).split(".")
            anchor = ".".join(parts[: len(parts) - node.level + 1])
            base = f"{anchor}.{base}" if base else anchor
        return [base] + [f"{base}.{a.name}" for a in node.names]
    return []


def _constants(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for e in node.elts for c in _constants(e)]
    return []


def kind_branches(path: Path) -> set[tuple[str, str]]:
    """(file, kind name) of each comparison of a kind or mode with a kind's name, and (file, "import
    <package>") of each import of a kind's package, outside that kind's registry folder."""
    names = _names()
    rel = str(path.relative_to(REPO))
    source = path.read_text()
    tree = ast.parse(source)
    module = _module(path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for i, side in enumerate(sides):
                others = " ".join(ast.get_source_segment(source, s) or "" for j, s in enumerate(sides) if j != i)
                for c in _constants(side):
                    if c in names and ("kind" in others or "mode" in others) and REGISTRIES[names[c]] not in path.parents:
                        found.add((rel, c))
        for imported in _imported(node, module, path.name == "__init__.py"):
            parts = imported.split(".")
            if (len(parts) >= 3 and parts[0] == "eobatch" and parts[1] in REGISTRIES and parts[2] in names
                    and REGISTRIES[parts[1]] not in path.parents):
                found.add((rel, f"import eobatch.{parts[1]}.{parts[2]}"))
    return found


def test_the_check_finds_a_branch_on_a_kind_and_an_import_of_a_kind():
    probe = REPO / "plugins" / "eobatch" / "_probe_kind_branch.py"
    probe.write_text("from .sinks.delta_merge import MergeConfig\n\n\ndef f(cfg):\n"
                     "    return cfg.sink_mode == 'merge' or cfg.source.kind in ('kafka',)\n")
    try:
        assert kind_branches(probe) == {("plugins/eobatch/_probe_kind_branch.py", "merge"),
                                        ("plugins/eobatch/_probe_kind_branch.py", "kafka"),
                                        ("plugins/eobatch/_probe_kind_branch.py", "import eobatch.sinks.delta_merge")}
    finally:
        probe.unlink()


def test_no_module_outside_a_registry_branches_on_a_kind_or_imports_one():
    """Adding a sink touches only ``sinks/<name>/`` (and a source only ``sources/<name>/``): config,
    the protocol, verify, launch, maintenance and the Spark job ask the registry."""
    found = set()
    for root in PRODUCT:
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                found |= kind_branches(path)
    assert found - KNOWN == set(), "a module outside sinks/ or sources/ names a kind: ask its registry instead"
    assert KNOWN - found == set(), "a known branch is gone: remove it from KNOWN"
