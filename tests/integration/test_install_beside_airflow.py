"""eobatch installed into the Airflow a platform team already runs, on each Python of PYTHONS: the
wheel changes neither Airflow nor any of its providers.

For each Python (``EOBATCH_INSTALL_PYTHONS``; `make install-check` runs "3.11 3.12", `make
install-check PYTHONS="3.11 3.12 3.13"` more): a fresh venv of that interpreter (found on PATH or among pyenv's
versions; skipped, saying so, when this machine has none), Airflow installed the way a platform team
installs it, every Airflow distribution and provider pinned (Airflow's published constraints file
is not reachable from here: the pins are the runtime lock's, requirements.txt; the installer
resolves the rest from the index), ``pip freeze``; then the documented install, ``pip install
eobatch-<version>-py3-none-any.whl`` (the wheel built from this checkout, as `make wheel` builds
it), and: apache-airflow and every apache-airflow-providers-* at the versions they had,
``eobatch --version`` the wheel's version, ``import eobatch.airflow.dag_factory`` working, and
``airflow providers list`` showing eobatch.

The platform's install uses uv (the dev lock's; its cache holds what `make setup` downloaded), the
eobatch install the user's pip (pip's cache holds the pyspark wheel `make setup` built).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# `make test`: 3.12 here; 3.11, the Python of the checkout, is installed from the runtime lock and runs a
# pipeline in test_installed.py: two Pythons in every CI run
PYTHONS = os.environ.get("EOBATCH_INSTALL_PYTHONS", "3.12").split()
OURS = ("AIRFLOW", "EOBATCH", "PIPELINES_DIR", "PYTHON", "VIRTUAL_ENV", "SPARK", "PYSPARK", "JAVA_TOOL")


def platform_pins() -> list[str]:
    """Airflow and its providers as the runtime lock pins them (name==version)."""
    return re.findall(r"^(apache-airflow(?:-[a-z0-9-]+)?==[^\s\\]+)", (REPO / "requirements.txt").read_text(), re.M)


def interpreter(version: str) -> str | None:
    """``python<version>`` on PATH (a pyenv shim only when that version is installed), else pyenv's own."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}")))
    if found:
        return found[-1]
    on_path = shutil.which(f"python{version}")
    if on_path and subprocess.run([on_path, "-c", "pass"], capture_output=True).returncode == 0:
        return on_path
    return None


def _run(argv: list, env: dict, cwd: Path, timeout: float = 1200) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {r.returncode}:\n{r.stdout[-4000:]}\n{r.stderr[-6000:]}")
    return r


def _freeze(python: Path, env: dict, cwd: Path) -> dict[str, str]:
    out = _run([python, "-m", "pip", "list", "--format", "json"], env, cwd).stdout
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(out)}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel as `make wheel` builds it (the stage job's JVM jar from `make setup`)."""
    dist = tmp_path_factory.mktemp("dist")
    _run([REPO / ".venv" / "bin" / "hatchling", "build", "-t", "wheel", "-d", dist], dict(os.environ), REPO)
    built, = dist.glob("eobatch-*-py3-none-any.whl")
    return built


@pytest.mark.parametrize("version", PYTHONS)
def test_the_wheel_installs_into_an_existing_airflow_without_changing_airflow_or_its_providers(version, wheel, tmp_path):
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine (python{version} on PATH, or pyenv's versions/{version}.*)")
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if not p.startswith(str(REPO))]
    # this machine's environment (its certificates, proxies, index settings) but nothing of the checkout's,
    # of Airflow's or of eobatch's
    env = {k: v for k, v in os.environ.items() if not k.startswith(OURS)}
    env |= {"PATH": os.pathsep.join([str(venv / "bin")] + path), "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8",
            "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           # the installers' caches of this machine (what `make setup` downloaded and built)
            "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR") or os.path.expanduser("~/.cache/pip"),
            "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR") or os.path.expanduser("~/.cache/uv"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    _run([python, "-m", "venv", venv], env, work)
    py = venv / "bin" / "python"
    assert _run([py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], env, work).stdout.strip() == version
    # the platform's Airflow, every Airflow distribution pinned
    pins = platform_pins()
    assert any(p.startswith("apache-airflow==") for p in pins) and any("providers-apache-spark==" in p for p in pins), pins
    t0 = time.monotonic()
    _run([REPO / ".venv" / "bin" / "uv", "pip", "install", "--quiet", "--python", py, *pins], env, work)
    t1 = time.monotonic()
    before = _freeze(py, env, work)
    airflow = {n: v for n, v in before.items() if n == "apache-airflow" or n.startswith("apache-airflow-")}
    assert {p.split("==")[0] for p in pins} <= set(airflow), (pins, airflow)

    _run([venv / "bin" / "pip", "install", "--quiet", wheel], env, work)  # the documented install
    t2 = time.monotonic()
    after = _freeze(py, env, work)
    changed = {n: (v, after.get(n)) for n, v in airflow.items() if after.get(n) != v}
    others = {n: (v, after.get(n)) for n, v in before.items() if n not in airflow and after.get(n) != v}
    assert changed == {}, f"installing eobatch changed Airflow or a provider: {changed} (and else: {others})"
    print(f"python {version}: eobatch's install changed none of the {len(airflow)} Airflow distributions; "
          f"other packages it changed: {others or 'none'} (installing Airflow {t1 - t0:.0f} s, eobatch {t2 - t1:.0f} s)")

    expected = wheel.name.split("-")[1]
    assert _run(["eobatch", "--version"], env, work).stdout.strip() == f"eobatch {expected}"
    _run([py, "-c", "import eobatch.airflow.dag_factory"], env, work)
    providers = json.loads(_run(["airflow", "providers", "list", "-o", "json"], env, work).stdout)
    assert {"eobatch": expected}.items() <= {p["package_name"]: p["version"] for p in providers}.items(), providers
