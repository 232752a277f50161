"""The packages of eobatch and what each may import, as their ``__init__`` docstrings say: every
import statement of every module (module level, in a function, under ``if TYPE_CHECKING:``) is
checked, so that a new edge the wrong way fails here and not in a Spark job or at DAG parse time.

* ``core``: the vocabulary the kinds and the protocol build on (formats, ledger, checkpoint, table
  files, registry, faults); no Airflow, no pyspark; nothing of the layers above it (``sources/``,
  ``sinks/``, ``pipelines/``, ``protocol/``), nor of ``airflow/``, ``job/``, ``ui/``, the CLI.
* ``config``: the pipeline file; nothing of ``core/``, ``storage/``, the kinds, ``pipelines/``,
  ``protocol/``, ``airflow/``, ``job/``, ``ui/``, the CLI; its ``__init__`` imports nothing.
* ``storage``: files and credentials; nothing of ``core/``, ``config/``,
  the kinds, ``pipelines/``, ``protocol/``, ``airflow/``, ``job/``, ``ui/``, the CLI.
* ``sources``, ``sinks``: the kinds; no Airflow; nothing of ``pipelines/`` and ``protocol/`` (the
  layers above), ``airflow/``, ``job/``, ``ui/``, the CLI.
* ``pipelines``: the pipeline files read (the loader, with the kinds' sections); no Airflow, no
  pyspark; nothing of ``protocol/``, ``airflow/``, ``job/``, ``ui/``, the CLI.
* ``protocol``: the protocol that drives the kinds (verbs, repairs, verify, replay, runs,
  maintenance); no Airflow, no pyspark; nothing of ``airflow/``, ``job/``, ``ui/``, the CLI.
* ``job``: builds and launches the Spark job; no Airflow, no pyspark; nothing of ``airflow/``,
  ``ui/``, the CLI.
* ``airflow``: anything but ``ui/`` and the CLI.
* ``errors`` (a module: the exception types every layer raises): nothing of eobatch.
* Nowhere in eobatch a module-level pyspark import (the Airflow side imports these modules); one
  under ``if TYPE_CHECKING:`` never runs (the types of the kinds' Spark side, in annotations only).

The packages are floors (``LAYERS``, bottom up): an import between two of them goes down, never
up nor sideways; and no import circle, between packages nor between modules, whatever the kind
of import.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path
from typing import TypeGuard

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "plugins" / "eobatch"

AIRFLOW = ("airflow",)  # Apache Airflow
UP = ("eobatch.airflow", "eobatch.ui", "eobatch.cli")
# package -> (names it must not import, exceptions: names it may import although a rule above covers them)
RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "core": (AIRFLOW + ("pyspark", "eobatch.sources", "eobatch.sinks", "eobatch.pipelines", "eobatch.protocol",
                        "eobatch.job") + UP, ()),
    "config": (AIRFLOW + ("pyspark", "eobatch.core", "eobatch.storage", "eobatch.sources", "eobatch.sinks",
                          "eobatch.pipelines", "eobatch.protocol", "eobatch.job") + UP, ()),
    "storage": (AIRFLOW + ("pyspark", "eobatch.core", "eobatch.config", "eobatch.sources", "eobatch.sinks",
                           "eobatch.pipelines", "eobatch.protocol", "eobatch.job") + UP, ()),
    "sources": (AIRFLOW + ("eobatch.pipelines", "eobatch.protocol", "eobatch.job") + UP, ()),
    "sinks": (AIRFLOW + ("eobatch.pipelines", "eobatch.protocol", "eobatch.job") + UP, ()),
    "pipelines": (AIRFLOW + ("pyspark", "eobatch.protocol", "eobatch.job") + UP, ()),
    "protocol": (AIRFLOW + ("pyspark", "eobatch.job") + UP, ()),
    "job": (AIRFLOW + ("pyspark",) + UP, ()),
    "airflow": (("pyspark", "eobatch.ui", "eobatch.cli"), ()),
}

# The floors of eobatch's packages, bottom up (a top-level module is a package of its own;
# ``eobatch`` is the package's ``__init__``: its version): each imports only from the floors below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "eobatch"),
    ("settings", "paths"),
    ("storage",),
    ("config",),
    ("core",),  # the vocabulary
    ("sources", "sinks"),  # the kinds
    ("pipelines",),  # the pipeline files read, with the kinds' sections
    ("protocol",),  # what drives the kinds
    ("job",),
    ("preflight",),
    ("airflow",),
    ("doctor",),
    ("cli",),
    ("ui",),
)


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO / "plugins").with_suffix("").parts).removesuffix(".__init__")


def absolute(package: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` in ``package`` names, relative imports resolved."""
    base = node.module or ""
    if not node.level:
        return base
    parts = package.split(".")
    anchor = ".".join(parts[: len(parts) - node.level + 1])
    return f"{anchor}.{base}" if base else anchor


def _type_checking(node: ast.AST) -> TypeGuard[ast.If]:
    """Whether ``node`` is ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): its body never runs."""
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(absolute module name, line, at module level) of each import statement of ``path``: ``from x
    import y`` gives x and x.y (y may be a submodule). An import under ``if TYPE_CHECKING:`` is not
    at module level (it never runs), but counts for the packages' rules as any other."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, top) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = absolute(package, child)
                out.append((base, child.lineno, top))
                out.extend((f"{base}.{a.name}", child.lineno, top) for a in child.names)
            if _type_checking(child):
                visit(ast.Module(body=child.body, type_ignores=[]), False)
                visit(ast.Module(body=child.orelse, type_ignores=[]), top)
                continue
            visit(child, top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(), str(path)), True)
    return out


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(path: Path) -> list[str]:
    rel = path.relative_to(PACKAGE)
    found = []
    for name, line, top in imports(path):
        where = f"{path.relative_to(REPO)}:{line}"
        if name.split(".")[0] == "pyspark" and top:
            found.append(f"{where}: {name} at module level")
        if len(rel.parts) > 1 and rel.parts[0] in RULES:
            forbidden, allowed = RULES[rel.parts[0]]
            if _under(name, forbidden) and not _under(name, allowed):
                found.append(f"{where}: {rel.parts[0]}/ imports {name}")
    return found


def test_the_error_types_import_nothing_of_eobatch():
    """Every layer raises them (config and storage included, which import nothing of core)."""
    assert [n for n, _line, _top in imports(PACKAGE / "errors.py") if n.split(".")[0] == "eobatch"] == []


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_package_imports_only_what_its_docstring_allows():
    assert set(RULES) <= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    found = [v for p in _modules() for v in violations(p)]
    assert found == [], "an import the package's rules forbid (see its __init__ docstring)"


def test_the_check_finds_a_forbidden_import_in_a_function(tmp_path):
    probe = PACKAGE / "core" / "_probe_forbidden.py"
    probe.write_text("def f():\n    from ..airflow import operators\n    import pyspark\n    return operators\n"
                     "import pyspark.sql\n"
                     "if TYPE_CHECKING:\n    from pyspark.sql import DataFrame\nelse:\n    import pyspark.ml\n")
    try:
        assert violations(probe) == ["plugins/eobatch/core/_probe_forbidden.py:2: core/ imports eobatch.airflow",
                                     "plugins/eobatch/core/_probe_forbidden.py:2: core/ imports eobatch.airflow.operators",
                                     "plugins/eobatch/core/_probe_forbidden.py:3: core/ imports pyspark",
                                     "plugins/eobatch/core/_probe_forbidden.py:5: pyspark.sql at module level",
                                     "plugins/eobatch/core/_probe_forbidden.py:5: core/ imports pyspark.sql",
                                     # under TYPE_CHECKING: not at module level, still forbidden to core
                                     "plugins/eobatch/core/_probe_forbidden.py:7: core/ imports pyspark.sql",
                                     "plugins/eobatch/core/_probe_forbidden.py:7: core/ imports pyspark.sql.DataFrame",
                                     "plugins/eobatch/core/_probe_forbidden.py:9: pyspark.ml at module level",
                                     "plugins/eobatch/core/_probe_forbidden.py:9: core/ imports pyspark.ml"]
    finally:
        probe.unlink()


def test_each_package_says_what_it_may_import_and_the_config_package_imports_nothing():
    for name in RULES:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text())) or ""
        assert "May import" in doc and "Must not import" in doc, name
    tree = ast.parse((PACKAGE / "config" / "__init__.py").read_text())
    assert [type(n) for n in tree.body] == [ast.Expr], "config/__init__.py is a docstring only (the Spark job loads it)"


def module_imports(path: Path) -> set[str]:
    """The eobatch modules ``path`` imports, by any import statement: at module level, in a
    function or under ``if TYPE_CHECKING:`` (``from x import y`` gives x.y when y is a module, else x)."""
    known = {_module(p) for p in _modules()}
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = absolute(package, node)
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    return {m for m in out if m in known and m != module}


def import_graph() -> dict[str, set[str]]:
    """Every module of eobatch and the modules it imports (``module_imports``)."""
    return {_module(p): module_imports(p) for p in _modules()}


def package_of(module: str) -> str:
    """The package of eobatch a module is in: its sub-package, or a top-level module itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def arrows_up(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(module, package) of each import of a package on the module's own floor or above it."""
    floor = {name: i for i, names in enumerate(LAYERS) for name in names}
    return {(m, package_of(d)) for m, deps in graph.items() for d in deps
            if package_of(d) != package_of(m) and floor[package_of(d)] >= floor[package_of(m)]}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_between_modules_not_even_through_a_function_level_or_type_only_import():
    """A function-level import that would close a circle at module level hides it, and one under
    ``if TYPE_CHECKING:`` closes it for the reader and the type checker: counted here as any other,
    the graph of every import statement has no circle."""
    graph = import_graph()
    assert sum(map(len, graph.values())) > 200  # the graph was read
    assert cycles(graph) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_import_between_two_packages_goes_down_a_floor():
    """The layer order: the vocabulary (``core``) under the kinds, the kinds under the pipeline
    files' loader that asks them for their sections, the protocol that drives them above it, and so
    on up (``LAYERS``); no import goes up a floor or sideways."""
    graph = import_graph()
    assert {package_of(m) for m in graph} == {n for names in LAYERS for n in names}, \
        "every package of eobatch (and every top-level module) stands on one floor of LAYERS"
    assert sorted(arrows_up(graph)) == [], "an import of a package on the importer's floor or above it"
    assert arrows_up({"eobatch.core.x": {"eobatch.sources", "eobatch.errors"}, "eobatch.sources": {"eobatch.core.x"},
                      "eobatch.sinks.y": {"eobatch.sources"}, "eobatch.errors": set()}) == {
        ("eobatch.core.x", "sources"), ("eobatch.sinks.y", "sources")}


def test_no_import_circle_between_packages():
    """The graph of the packages (an import of one module of a package by one of another) has no circle."""
    packages: dict[str, set[str]] = {}
    for m, deps in import_graph().items():
        packages.setdefault(package_of(m), set()).update(
            package_of(d) for d in deps if package_of(d) != package_of(m))
    assert {"core", "sources", "sinks", "protocol"} <= packages.keys()
    assert cycles(packages) == []


def _reasons(source: str) -> tuple[dict[int, str], set[int]]:
    """The ``#`` comments of ``source`` that say something (a bare ``noqa``/``type: ignore`` does
    not) by line, and the lines that hold only a comment."""
    comments = {t.start[0]: t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type == tokenize.COMMENT}
    lines = source.splitlines()
    said = {n: c for n, c in comments.items() if re.sub(r"#|noqa(:\s*[A-Z0-9, ]+)?|type:\s*ignore(\[[^]]*])?|[\s-]", "", c)}
    return said, {n for n in comments if lines[n - 1].lstrip().startswith("#")}


def function_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, commented) of each import statement in a function of ``path`` (at any depth);
    commented: a comment on one of its lines or alone on the line just above, or it directly follows
    a commented import of the same block (one comment may say why for a block of imports)."""
    source = path.read_text()
    said, alone = _reasons(source)
    out: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for _field, value in ast.iter_fields(node):
            if not isinstance(value, list):
                continue
            previous = False  # the statement before was a commented import
            for child in value:
                if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                    name = child.names[0].name if isinstance(child, ast.Import) else "." * child.level + (child.module or "")
                    own = any(n in said for n in range(child.lineno, (child.end_lineno or child.lineno) + 1))
                    previous = own or previous or (child.lineno - 1 in alone and child.lineno - 1 in said)
                    out.append((child.lineno, name, previous))
                    continue
                previous = False
                if isinstance(child, ast.AST):
                    visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(source, str(path)), False)
    return out


def test_every_import_in_a_function_says_why_it_is_there():
    """Imports go at module level; one in a function is lazy for a reason (an optional or heavy
    dependency, what the Spark job or an Airflow process must not load, a command's own import),
    said in a comment on it or just above it. A stdlib import is never a reason to be lazy."""
    found = [(p, line, name) for p in _modules() for line, name, commented in function_imports(p) if not commented]
    where = [f"{p.relative_to(REPO)}:{line}: {name}" for p, line, name in found]
    stdlib = [w for w, (_p, _l, name) in zip(where, found) if name.split(".")[0] in sys.stdlib_module_names]
    assert stdlib == [], f"{len(stdlib)} stdlib import(s) in a function: move them to module level"
    assert where == [], f"{len(where)} import(s) in a function without a comment saying why"


def test_the_check_of_function_imports_reads_comments_and_blocks(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os\n\n\ndef f():\n    import json  # noqa: F401\n    # pyspark: the job only\n"
                     "    from pyspark.sql import Window\n    from pyspark.sql import functions as F\n\n"
                     "    x = 1\n    import time\n    import re  # the reason\n    return os, x\n")
    assert function_imports(probe) == [(5, "json", False), (7, "pyspark.sql", True), (8, "pyspark.sql", True),
                                       (11, "time", False), (12, "re", True)]
