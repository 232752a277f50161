"""spark_jobs/worker_daemon.py: the Python workers import pyspark and py4j from their installed
copies when those are the versions of Spark's source zips, and the stage job starts its workers
through it only in local mode, never over a pipeline's own settings. A real stage job's workers
are checked in tests/integration/test_driver_jvm.py."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pyspark
import pytest

from spark_jobs import worker_daemon as wd

SPARK_LIB = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")


def _zip(path, package: str, version: str) -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{package}/__init__.py", "")
        z.writestr(f"{package}/version.py", f"__version__: str = '{version}'\n")
    return str(path)


def _installed(folder, package: str, version: str) -> str:
    os.makedirs(folder / package, exist_ok=True)
    (folder / package / "version.py").write_text(f"__version__ = \"{version}\"\n")
    return str(folder)


@pytest.mark.parametrize("zipped, installed, moved", [
    ("4.2.0", "4.2.0", True),
    ("4.2.0", "4.1.1", False),  # another pyspark installed: Spark's own stays first
    ("4.2.0", None, False),  # none installed
])
def test_a_source_zip_goes_last_only_when_the_same_version_is_installed(tmp_path, zipped, installed, moved):
    z = _zip(tmp_path / "pyspark.zip", "pyspark", zipped)
    site = _installed(tmp_path / "site", "pyspark", installed) if installed else str(tmp_path / "empty")
    path = [z, "/job/code.zip", site]
    assert wd.installed_first(path) == ([path[1], site, z] if moved else path)


def test_py4j_is_judged_on_its_own(tmp_path):
    p = _zip(tmp_path / "pyspark.zip", "pyspark", "4.2.0")
    j = _zip(tmp_path / "py4j-0.10.9.9-src.zip", "py4j", "0.10.9.9")
    site = _installed(tmp_path / "site", "pyspark", "4.2.0")
    assert wd.installed_first([p, j, site]) == [j, site, p]  # no py4j installed: its zip stays
    _installed(tmp_path / "site", "py4j", "0.10.9.9")
    assert wd.installed_first([p, j, site]) == [site, p, j]


def test_this_venvs_workers_import_the_installed_compiled_pyspark():
    zips = sorted(os.path.join(SPARK_LIB, f) for f in os.listdir(SPARK_LIB) if f.endswith(".zip"))
    assert len(zips) == 2, zips  # pyspark.zip and py4j-<v>-src.zip, as Spark puts them on the workers' path
    code = ("import sys; from spark_jobs import worker_daemon as wd; sys.path[:] = wd.installed_first(sys.path); "
            "import pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*zips, os.path.dirname(os.path.dirname(wd.__file__))])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [pyspark.__file__, __import__("py4j").__file__]
    # without it, the zips win: what the daemon would import
    code = "import pyspark; print(pyspark.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert ".zip" in out


@pytest.mark.parametrize("master, given, used", [
    ("local[*]", {}, True),
    ("local", {}, True),
    ("local[2, 3]", {}, True),
    ("spark://10.0.0.5:7077", {}, False),  # a cluster's executors get the code zip only with their first task
    ("local-cluster[2,1,1024]", {}, False),
    ("yarn", {}, False),
    ("local[*]", {"spark.python.daemon.module": "my.daemon"}, False),  # the pipeline's own
    ("local[*]", {"spark.executorEnv.PYTHONPATH": "/opt/libs"}, False),
])
def test_the_stage_job_starts_its_workers_through_it_in_local_mode_only(master, given, used):
    conf = wd.conf(master, given)
    assert bool(conf) == used
    if used:
        assert conf["spark.python.daemon.module"] == wd.MODULE
        assert os.path.isdir(os.path.join(conf["spark.executorEnv.PYTHONPATH"], "spark_jobs"))
