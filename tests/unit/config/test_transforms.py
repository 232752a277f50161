"""A pipeline's own transform: ``transforms/<name>.py`` beside its YAML file (eobatch.config.transforms).

An installed eobatch has no spark_jobs/ folder to add a transform to: the pipeline folder holds
them. The file is checked when the pipeline loads, its SHA-256 is recorded in each plan, and the
stage job receives exactly the bytes that were hashed, in its code zip.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from eobatch.errors import ConfigChanged, ConfigError, RetryableError
from eobatch.job import launch
from eobatch.pipelines.loader import config_values, load_pipeline
from eobatch.protocol import Protocol
from support.protocol_runs import land_ids, run_next

MINE = b'''"""Adds a column."""
ROW_PRESERVING = True


def transform(df, ctx):
    return ("mine", df, ctx)
'''


def _own(tmp_path: Path, name: str, source: bytes) -> Path:
    """``transforms/<name>.py`` beside the pipelines the ``write_yaml`` fixture writes."""
    folder = tmp_path / "pipelines" / "transforms"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_bytes(source)
    return folder / f"{name}.py"


def test_an_own_transform_is_loaded_from_the_pipeline_folder_with_its_hash(tmp_path, make_cfg):
    file = _own(tmp_path, "mine", MINE)
    shipped, own = make_cfg(), make_cfg(transform="mine")
    assert (own.transform, own.transform_file) == ("mine", str(file))
    assert own.transform_code == hashlib.sha256(MINE).hexdigest() == config_values(own)["transform.code"]
    assert shipped.transform_file is None and config_values(shipped)["transform.code"] is None
    assert launch.job_spec(own, 1, "a1")["transform_module"] == "pipeline_transforms.mine"
    assert launch.job_spec(shipped, 1, "a1")["transform_module"] == "spark_jobs.transforms.passthrough"
    before = own.fingerprint()
    file.write_bytes(MINE + b"# an edit\n")
    assert make_cfg(transform="mine").fingerprint() != before, "the code changes what a batch publishes"


@pytest.mark.parametrize("name, source, says", [
    ("broken", b"def transform(df, ctx)\n    return df\n", "transforms/broken.py does not compile: expected ':'"),
    ("nothing", b"def transformer(df, ctx):\n    return df\n", "transforms/nothing.py defines no transform(df, ctx)"),
    ("nested", b"if True:\n    def transform(df, ctx):\n        return df\n",
     "transforms/nested.py defines no transform(df, ctx) at its top level"),
    ("passthrough", MINE, "transforms/passthrough.py has the name of a transform shipped with eobatch"),
])
def test_an_own_transform_that_cannot_run_is_refused_when_the_pipeline_loads(tmp_path, write_yaml, base_cfg,
                                                                             name, source, says):
    _own(tmp_path, name, source)
    with pytest.raises(ConfigError) as e:
        load_pipeline(write_yaml({**base_cfg, "transform": {"name": name}}, "orders.yaml"))
    assert str(e.value).startswith("orders.yaml: transform.name: ") and says in str(e.value), str(e.value)
    assert str(tmp_path) not in str(e.value)


@pytest.mark.parametrize("source", [b"from other import transform\n", b"transform = lambda df, ctx: df\n",
                                    b"import transform\n", b"transform: object = None\n"])
def test_a_transform_bound_by_an_import_or_an_assignment_is_one(tmp_path, make_cfg, source):
    _own(tmp_path, "bound", source)
    assert make_cfg(transform="bound").transform_code == hashlib.sha256(source).hexdigest()


def test_a_batch_is_staged_only_by_the_transform_code_it_was_planned_with(tmp_path, make_cfg):
    """Batch 2 is planned with one version of the file; it is edited: the stage task refuses,
    naming the key; the old bytes back, it stages."""
    file = _own(tmp_path, "mine", MINE)
    cfg = make_cfg()
    land_ids(cfg, "a.jsonl", range(0, 3))
    assert run_next(Protocol(cfg)) == 1
    mine = make_cfg(transform="mine")
    land_ids(cfg, "b.jsonl", range(3, 5))
    Protocol(mine).plan()
    file.write_bytes(MINE.replace(b"mine", b"yours"))
    with pytest.raises(ConfigChanged, match=r"transform.code was '[0-9a-f]{64}' when batch 2 was planned and is now"):
        Protocol(make_cfg(transform="mine")).check_stage(2)
    file.write_bytes(MINE)
    assert Protocol(make_cfg(transform="mine")).check_stage(2) is not None


def test_the_code_zip_ships_the_bytes_the_plan_hashed_and_nothing_edited_since(tmp_path, make_cfg):
    file = _own(tmp_path, "mine", MINE)
    cfg = make_cfg(transform="mine")
    cache = tmp_path / "cache"
    shipped = launch.pyfiles_zip(cache_dir=str(cache))
    own = launch.pyfiles_zip(cfg, cache_dir=str(cache))
    assert own != shipped
    with zipfile.ZipFile(own) as z, zipfile.ZipFile(shipped) as s:
        assert z.read("pipeline_transforms/mine.py") == MINE
        assert set(z.namelist()) - set(s.namelist()) == {"pipeline_transforms/__init__.py", "pipeline_transforms/__init__.pyc",
                                                         "pipeline_transforms/mine.py", "pipeline_transforms/mine.pyc"}
    # the stage job's import, from the zip alone, in a clean interpreter
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import pipeline_transforms.mine as m, json; "
             "print(json.dumps([m.transform(1, 2), m.ROW_PRESERVING, m.__file__]))")
    r = subprocess.run([sys.executable, "-I", "-c", probe, own], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got, preserving, where = json.loads(r.stdout)
    assert got == ["mine", 1, 2] and preserving is True and where.startswith(own)
    assert launch.pyfiles_zip(cfg, cache_dir=str(cache)) == own  # reused as it is
    file.write_bytes(MINE + b"# edited after the pipeline loaded\n")
    before = set(cache.iterdir())
    with pytest.raises(RetryableError, match=r"mine.py changed after the pipeline .* was loaded"):
        launch.pyfiles_zip(cfg, cache_dir=str(cache))
    assert set(cache.iterdir()) == before


@pytest.mark.parametrize("form", ["mine", {"name": "mine"}])
def test_loading_reads_and_checks_the_own_file_once_and_hashes_what_it_checked(tmp_path, write_yaml, base_cfg,
                                                                               monkeypatch, form):
    """One reading per load, in both forms of the key: a file edited between two readings could
    otherwise be checked in one version and hashed in another."""
    from eobatch.config import transforms

    _own(tmp_path, "mine", MINE)
    calls = []
    real = transforms.resolve
    monkeypatch.setattr(transforms, "resolve", lambda f, n: calls.append(n) or real(f, n))
    cfg = load_pipeline(write_yaml({**base_cfg, "transform": form}, "orders.yaml"))
    assert calls == ["mine"] and cfg.transform_code == hashlib.sha256(MINE).hexdigest()
    assert type(cfg.transform) is str and cfg.transform == "mine"
