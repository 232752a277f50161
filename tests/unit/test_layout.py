"""The layout of tests/unit: one test module per product module, named after it, in folders that
mirror the product's packages. A newcomer changing a module finds its tests in one place:

* ``tests/unit/core/test_ledger.py`` tests ``plugins/eobatch/core/ledger.py``;
* ``tests/unit/protocol/test_verbs.py`` tests ``plugins/eobatch/protocol/verbs.py``;
* ``tests/unit/sources/test_kafka.py`` tests the package ``plugins/eobatch/sources/kafka/`` (all
  of it), ``tests/unit/test_sources.py`` the registry in ``plugins/eobatch/sources/__init__.py``;
* a module of ``spark_jobs/`` or ``dags/`` alike (``spark_jobs/classify.py``: ``test_classify.py``),
  and an Airflow plugin module of ``plugins/`` (``plugins/eobatch_ui.py``, which only re-exports ``eobatch.ui.plugin``: ``ui/test_plugin.py``).

A test goes to the module of what it exercises (the function or class under test), however it
got there: a scenario of plan, verify, commit, abort or recover to ``protocol/test_verbs.py``, one
of rewind, reset or sweep to ``protocol/test_repairs.py``. Never a file named after a behaviour.
Helpers and fixtures shared by several test modules live in ``tests/unit/conftest.py`` or in
``tests/support/`` (``from support.<module> import ...``).
"""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parent
REPO = UNIT.parents[1]
# Where product modules live, each folder the root of its import names (eobatch.*, spark_jobs.*, the DAG file);
# and the Airflow plugin modules beside the eobatch package (plugins/*.py).
PRODUCT = (REPO / "plugins" / "eobatch", REPO / "spark_jobs", REPO / "dags")
PLUGINS = REPO / "plugins"
# Test modules of something that is not a product module.
NOT_A_MODULE = {UNIT / "test_makefile.py": "the Makefile", UNIT / "test_layout.py": "this layout",
                UNIT / "test_supply_chain.py": "the locks and the jar lists",
                UNIT / "test_packages.py": "what each package of eobatch may import",
                UNIT / "test_docs.py": "the documentation site's generated pages (docs/hooks.py)"}


def product_module(test_module: Path) -> Path | None:
    """The product module ``tests/unit/<folders>/test_<name>.py`` is named after: ``<name>.py`` or
    the package ``<name>/`` in ``<folders>`` of a product root, or (no folders) the Airflow plugin
    module ``plugins/<name>.py``; None when there is none."""
    rel = test_module.relative_to(UNIT)
    name = rel.name.removeprefix("test_").removesuffix(".py")
    candidates = [m for root in PRODUCT for folder in [root.joinpath(*rel.parts[:-1])]
                  for m in (folder / f"{name}.py", folder / name / "__init__.py")]
    if len(rel.parts) == 1:
        candidates.append(PLUGINS / f"{name}.py")
    return next((m for m in candidates if m.is_file()), None)


def _test_modules() -> list[Path]:
    return sorted(p for p in UNIT.rglob("test_*.py") if "__pycache__" not in p.parts)


def test_every_test_module_is_named_after_a_product_module():
    assert product_module(UNIT / "protocol" / "test_verbs.py") == REPO / "plugins/eobatch/protocol/verbs.py"
    assert product_module(UNIT / "sources" / "test_kafka.py") == REPO / "plugins/eobatch/sources/kafka/__init__.py"
    assert product_module(UNIT / "test_some_behaviour.py") is None  # what this test refuses
    unnamed = [str(p.relative_to(REPO)) for p in _test_modules()
               if p not in NOT_A_MODULE and product_module(p) is None]
    assert unnamed == [], (
        f"{unnamed}: a unit test module is named after the product module it tests (test_<module>.py, in "
        f"the folder that mirrors the module's package); move each test to the module of what it exercises")


def test_every_folder_of_unit_tests_is_a_package():
    """Test modules are ``unit.<folders>.test_<name>``: tests/unit/sources/test_kafka.py and
    tests/integration/test_kafka.py are two modules for pytest and for mypy, not one name twice."""
    folders = [UNIT] + sorted(p for p in UNIT.rglob("*") if p.is_dir() and p.name != "__pycache__")
    assert [str(d.relative_to(REPO)) for d in folders if not (d / "__init__.py").is_file()] == []


def test_test_modules_share_helpers_through_conftest_or_support_never_through_each_other():
    imports = {}
    for p in _test_modules():
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found = [n for n in names if n.split(".")[0] in ("unit", "conftest") or n.split(".")[-1].startswith("test_")]
            if found or (isinstance(node, ast.ImportFrom) and node.level):
                imports.setdefault(str(p.relative_to(REPO)), []).extend(found or ["(a relative import)"])
    assert imports == {}, "shared helpers belong in tests/unit/conftest.py or tests/support/"
