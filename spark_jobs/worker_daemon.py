"""The Python workers' daemon of a stage job in local mode: pyspark's own, importing compiled code.

Spark starts the Python workers' daemon (``python -m pyspark.daemon``) with its source zips
first on the path (``<SPARK_HOME>/python/lib/pyspark.zip`` and ``py4j-<v>-src.zip``). Python
cannot cache what it compiles from a zip, so every daemon compiles pyspark's modules again, and
every worker reads the zips' directories again when its task adds the job's code zip to the
path (py-spy of a 5M-record stage job: 3.5 s of the workers' 12.5 s of CPU). When the
same pyspark and py4j are installed beside them (a pip-installed pyspark is: the zips are in
its own folder), this daemon puts the zips after the installed copies, then runs pyspark's
daemon unchanged: the workers import the installed, compiled modules. Another version, or no
installed copy, leaves the path as Spark gave it.

``conf`` says when the stage job uses it: a local master only (its executors are this host's
processes and can import the job's code zip when the daemon starts; a cluster's executors
fetch that zip only when their first task runs), and never over a pipeline's own
``spark.python.daemon.module`` or ``spark.executorEnv.PYTHONPATH``.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from collections.abc import Mapping

MODULE = "spark_jobs.worker_daemon"
_VERSION = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.M)
_LOCAL = re.compile(r"local(\[[^\]]*\])?")


def _version(text: str) -> str | None:
    m = _VERSION.search(text)
    return m.group(1) if m else None


def _zipped_version(zip_path: str, package: str) -> str | None:
    try:
        with zipfile.ZipFile(zip_path) as z:
            return _version(z.read(f"{package}/version.py").decode("utf-8", "replace"))
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def _installed_version(path: list[str], package: str) -> str | None:
    for entry in path:
        if not entry or entry.endswith(".zip"):
            continue
        try:
            with open(os.path.join(entry, package, "version.py"), encoding="utf-8", errors="replace") as f:
                return _version(f.read())
        except OSError:
            continue
    return None


def installed_first(path: list[str]) -> list[str]:
    """``path`` with each of Spark's source zips (pyspark, py4j) moved after the other entries when
    those hold the same version of that package, installed; else ``path`` as it is."""
    zips = {"pyspark": [p for p in path if os.path.basename(p) == "pyspark.zip"],
            "py4j": [p for p in path if re.fullmatch(r"py4j-[\w.]+-src\.zip", os.path.basename(p))]}
    moved: list[str] = []
    for package, found in zips.items():
        rest = [p for p in path if p not in found]
        for z in found:
            v = _zipped_version(z, package)
            if v is not None and v == _installed_version(rest, package):
                moved.append(z)
    return [p for p in path if p not in moved] + moved


def job_code_root() -> str:
    """The path entry the job's code is imported from: its code zip (``--py-files``), or a folder."""
    import spark_jobs

    return os.path.dirname(os.path.dirname(os.path.abspath(spark_jobs.__file__)))


def conf(master: str, existing: Mapping[str, str | None]) -> dict[str, str]:
    """The Spark settings that start the workers through this daemon: for a local master only,
    none of them when the pipeline sets either (``existing``: the settings as they stand)."""
    keys = ("spark.python.daemon.module", "spark.executorEnv.PYTHONPATH")
    if not _LOCAL.fullmatch(master or "") or any(existing.get(k) for k in keys):
        return {}
    return {keys[0]: MODULE, keys[1]: job_code_root()}


if __name__ == "__main__":
    sys.path[:] = installed_first(sys.path)
    import pyspark
    from pyspark.daemon import manager

    # stderr: the daemon's stdout carries its port to Spark
    print(f"[eobatch] python workers: pyspark {pyspark.__version__} from {os.path.dirname(pyspark.__file__)}",
          file=sys.stderr, flush=True)
    manager()
