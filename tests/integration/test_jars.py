"""The stage job's jars as a deployment choice (docs/site/deployment.md "The JVM jars"): the core set
resolved alone by the real Maven (no AWS SDK bundle fetched), and a pre-built, read-only jars folder
serving a stage job on a worker with no Maven at all."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from eobatch import paths
from eobatch.job import jars
from support.checks import assert_exactly_once
from support.harness import orders, run_batch

pytestmark = pytest.mark.integration


def test_the_core_set_is_resolved_by_maven_without_the_s3_jars(tmp_path):
    """The real mvn, the product's pom and settings, into a new folder: exactly the listed core jars,
    each with its listed SHA-256; no hadoop-aws, no AWS SDK bundle. (Maven reads the local repository,
    warm from `make setup`: nothing of the s3 set is resolved, so nothing of it is downloaded.)"""
    if shutil.which("mvn") is None:
        pytest.skip("no mvn on PATH")
    folder = tmp_path / "jars"
    said: list[str] = []
    t0 = time.monotonic()
    jars.resolve(str(folder), log=said.append, sets=("core",), settings=jars.PRODUCT_SETTINGS)
    took = time.monotonic() - t0
    names = sorted(n for n in os.listdir(folder) if n.endswith(".jar"))
    assert names == sorted(jars.listed(sets=("core",))), names
    assert not [n for n in names if n.startswith(jars.S3_JARS)], names
    assert jars.problems(str(folder), sets=("core",)) == []
    assert not any("-Ps3" in line for line in said), said
    size = sum((folder / n).stat().st_size for n in names)
    print(f"core set: {len(names)} jars, {size / 1e6:.1f} MB, resolved in {took:.1f}s")


def _without_mvn(tmp_path: Path) -> str:
    """PATH with every folder of this one, but a folder holding mvn is replaced by a copy of its links
    without it (e.g. /usr/bin: bash, java and the rest stay)."""
    out = []
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.exists(os.path.join(folder, "mvn")):
            out.append(folder)
            continue
        copy = tmp_path / f"bin-{len(out)}"
        copy.mkdir()
        for name in os.listdir(folder):
            if name != "mvn":
                (copy / name).symlink_to(os.path.join(folder, name))
        out.append(str(copy))
    path = os.pathsep.join(out)
    assert shutil.which("mvn", path=path) is None
    return path


def test_a_stage_job_runs_from_a_prebuilt_read_only_jars_folder_with_no_maven(pipeline, tmp_path, monkeypatch):
    """A platform's pre-built folder (an image layer): the core jars, read-only, named by
    EOBATCH_JARS_DIR; the worker has no mvn. The launch checks them against the list and the batch
    is published exactly once."""
    built = tmp_path / "prebuilt-jars"
    built.mkdir()
    source = Path(paths.CHECKOUT) / ".jars"
    for name in [*jars.listed(sets=("core",)), paths.JVM_EXTENSION]:  # a checkout's own JVM jar is built there
        shutil.copy2(source / name, built / name)
        (built / name).chmod(0o444)
    built.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    try:
        monkeypatch.setenv("EOBATCH_JARS_DIR", str(built))
        monkeypatch.setenv("PATH", _without_mvn(tmp_path))
        p = pipeline
        p.land("a.jsonl", orders("a", 5))
        assert run_batch(p) == 1
        assert_exactly_once(p, 1)
        assert sorted(os.listdir(built)) == sorted([*jars.listed(sets=("core",)), paths.JVM_EXTENSION])
    finally:
        built.chmod(0o755)
