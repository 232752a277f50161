"""eobatch.paths: the one definition of where the job, the jars and the cache are."""

from __future__ import annotations

import os
import re
from pathlib import Path

from eobatch import paths

REPO = Path(__file__).resolve().parents[2]


def test_a_checkout_finds_its_own_folders_and_the_environment_overrides_them(monkeypatch, tmp_path):
    assert paths.CHECKOUT == str(REPO)
    assert paths.STAGE_APP == str(REPO / "spark_jobs" / "stage_batch.py") and os.path.isfile(paths.STAGE_APP)
    assert paths.default_pipelines_dir() == str(REPO / "include" / "pipelines")
    monkeypatch.delenv("EOBATCH_JARS_DIR", raising=False)
    monkeypatch.delenv("EOBATCH_CACHE_DIR", raising=False)
    assert paths.jars_dir() == str(REPO / ".jars") and paths.cache_dir() == str(REPO / ".cache")
    monkeypatch.setenv("EOBATCH_JARS_DIR", str(tmp_path / "j"))
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "c"))
    assert paths.jars_dir() == str(tmp_path / "j") and paths.cache_dir() == str(tmp_path / "c")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.user_cache() == str(tmp_path / "xdg" / "eobatch")


def test_nothing_else_in_eobatch_names_a_repository_folder():
    """Installed, there is no checkout: every path of the product's own files comes from paths."""
    found = []
    for p in sorted((REPO / "plugins" / "eobatch").rglob("*.py")):
        if p.name == "paths.py":
            continue
        text = p.read_text()
        for needle in ("REPO", '".jars"', '".cache"', "os.path.dirname(os.path.dirname(os.path.dirname"):
            if needle in text:
                found.append(f"{p.relative_to(REPO)}: {needle}")
        # the checkout's include/ folder in a path (not the pipeline key ``source.include``)
        found += [f"{p.relative_to(REPO)}: {m.group(0)}" for m in re.finditer(r'(join|Path)\([^)\n]*"include"|"include/', text)]
    assert found == []
