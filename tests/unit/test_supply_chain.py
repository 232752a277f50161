"""What the set-up installs is pinned to its bytes: both Python locks carry a SHA-256 for every
package and are installed with --require-hashes; the resolved jars must match committed SHA-256
lists (eobatch/job/jars.py for `make jars`; include/check-jars.sh for `kafka-jars` and `s3-jars`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEST_TOOLS = {"pytest", "selenium", "aiosmtpd", "hypothesis", "ruff", "mypy", "duckdb", "matplotlib",
              "psycopg2-binary", "asyncpg", "uv"}


def _locked(lock: str) -> dict[str, list[str]]:
    """name -> hashes of each requirement of a lock (pip's format, continuation lines joined)."""
    text = (REPO / lock).read_text().replace("\\\n", " ")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        # a name, its extras (kept: pip's hash mode needs the extras a dependency asks for), the version
        m = re.fullmatch(r"([A-Za-z0-9._-]+)(?:\[[A-Za-z0-9._,-]+\])?==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)", line)
        assert m, f"{lock}: not a pinned requirement with hashes: {line[:120]}"
        out[m.group(1).lower().replace("_", "-")] = re.findall(r"sha256:([0-9a-f]{64})", m.group(3))
    return out


@pytest.mark.parametrize("lock", ["requirements.txt", "requirements-dev.txt"])
def test_every_locked_package_is_pinned_with_its_hashes(lock):
    assert len(_locked(lock)) > 10


def test_the_test_tools_are_not_in_the_runtime_lock():
    runtime, dev = _locked("requirements.txt"), _locked("requirements-dev.txt")
    assert not TEST_TOOLS & set(runtime)
    assert TEST_TOOLS <= set(dev)
    shared = set(runtime) & set(dev)
    assert all(runtime[n] == dev[n] for n in shared), "a package locked twice must be the same distribution"


def test_the_venv_installs_both_locks_requiring_hashes_and_nothing_unpinned():
    recipe = (REPO / "Makefile").read_text().split("$(VENV)/.installed:", 1)[1].split("\n\n", 1)[0]
    installs = [line for line in recipe.splitlines() if "pip install" in line]
    assert installs and all("--require-hashes" in line for line in installs)
    assert "-r requirements.txt" in recipe and "-r requirements-dev.txt" in recipe
    assert "--upgrade" not in recipe


def test_maven_runs_with_strict_checksums():
    makefile = (REPO / "Makefile").read_text()
    assert "MVN := mvn --batch-mode --quiet --strict-checksums" in makefile
    assert not re.search(r"^\t\s*mvn ", makefile, re.M), "every mvn call goes through $(MVN)"


@pytest.fixture
def jars(tmp_path):
    folder = tmp_path / "jars"
    folder.mkdir()
    (folder / "a-1.0.jar").write_bytes(b"a")
    (folder / "b-2.0.jar").write_bytes(b"b")
    (folder / "eobatch-jvm.jar").write_bytes(b"built here")
    listing = tmp_path / "jars.sha256"
    r = subprocess.run([str(REPO / "include/check-jars.sh"), "--write", str(folder), str(listing)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "eobatch-jvm.jar" not in listing.read_text()
    return folder, listing


def _check(folder: Path, listing: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "include/check-jars.sh"), str(folder), str(listing)], capture_output=True, text=True)


def test_the_listed_jars_pass(jars):
    assert _check(*jars).returncode == 0


def test_a_changed_jar_is_refused(jars):
    folder, listing = jars
    (folder / "b-2.0.jar").write_bytes(b"other bytes")
    r = _check(folder, listing)
    assert r.returncode != 0 and "b-2.0.jar" in r.stdout + r.stderr


@pytest.mark.parametrize("change", ["added", "missing"])
def test_a_jar_the_list_does_not_name_or_a_missing_one_is_refused(jars, change):
    folder, listing = jars
    if change == "added":
        (folder / "c-3.0.jar").write_bytes(b"c")
    else:
        (folder / "a-1.0.jar").unlink()
    r = _check(folder, listing)
    assert r.returncode != 0 and ("c-3.0.jar" if change == "added" else "a-1.0.jar") in r.stderr


@pytest.mark.parametrize("folder,listing", [(".jars", "spark"), (".jars-kafka", "kafka-broker"), (".jars-s3proxy", "s3proxy")])
def test_the_resolved_jars_of_this_checkout_are_the_listed_ones(folder, listing):
    if not (REPO / folder / ".resolved").exists() or shutil.which("sha256sum") is None:
        pytest.skip(f"{folder} not resolved in this checkout")
    r = _check(REPO / folder, REPO / "include" / "jars" / f"{listing}.sha256")
    assert r.returncode == 0, r.stderr


# -- the Maven plugin that resolves the jars is pinned, not the installed Maven's default ----------------

POMS = ["include/pom.xml", "include/kafka-broker/pom.xml", "include/s3proxy/pom.xml"]
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _declared_plugins(pom: str) -> dict[str, str]:
    """{artifactId: version} of the plugins a pom declares (build/plugins and pluginManagement)."""
    import xml.etree.ElementTree as ET

    root = ET.parse(REPO / pom).getroot()
    props = {p.tag.split("}")[1]: (p.text or "") for p in root.findall("m:properties/*", _POM_NS)}
    out = {}
    for plugin in root.findall(".//m:build//m:plugins/m:plugin", _POM_NS):
        version = plugin.findtext("m:version", "", _POM_NS)
        version = re.sub(r"\$\{([^}]+)\}", lambda m: props.get(m.group(1), m.group(0)), version)
        out[plugin.findtext("m:artifactId", "", _POM_NS)] = version
    return out


@pytest.mark.parametrize("pom", POMS)
def test_every_pom_pins_the_dependency_plugin_it_runs(pom):
    from eobatch.job import jars

    group, artifact, version = jars.DEPENDENCY_PLUGIN.split(":")
    assert (group, artifact) == ("org.apache.maven.plugins", "maven-dependency-plugin")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), "a release, never a range or a SNAPSHOT"
    assert _declared_plugins(pom).get(artifact) == version


def test_the_makefile_names_the_pinned_plugin_by_its_coordinates():
    from eobatch.job import jars

    makefile = (REPO / "Makefile").read_text()
    assert f"DEPENDENCY_PLUGIN := {jars.DEPENDENCY_PLUGIN}\n" in makefile
    assert "dependency:copy-dependencies" not in makefile, "a bare prefix runs the installed Maven's default plugin"
    assert makefile.count("$(DEPENDENCY_PLUGIN):copy-dependencies") == 2  # kafka-jars, s3-jars


def test_eobatch_jars_runs_the_pinned_plugin_with_strict_checksums(tmp_path, monkeypatch):
    """The command `eobatch jars` runs (a stand-in mvn that records its arguments)."""
    from eobatch.errors import UsageError
    from eobatch.job import jars

    argv_file = tmp_path / "argv"
    mvn = tmp_path / "mvn"
    mvn.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_file}\nexit 1\n')
    mvn.chmod(0o755)
    with pytest.raises(UsageError, match="Maven could not resolve"):
        jars.resolve(str(tmp_path / "jars"), mvn=str(mvn), log=lambda _m: None)
    argv = argv_file.read_text().splitlines()
    assert "--strict-checksums" in argv
    assert f"{jars.DEPENDENCY_PLUGIN}:copy-dependencies" in argv
    assert not any(a.startswith("dependency:") for a in argv)


# -- the build backend of the wheel is installed from a lock, every distribution hash-checked ---------------

def _pins(lock: str) -> dict[str, str]:
    """name -> version of each requirement of a lock."""
    text = (REPO / lock).read_text().replace("\\\n", " ")
    return {m.group(1).lower().replace("_", "-"): m.group(2)
            for m in re.finditer(r"^([A-Za-z0-9._-]+)==(\S+)", text, re.M)}


def test_the_build_backend_is_pinned_and_locked_with_its_hashes():
    import importlib.metadata
    import tomllib

    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert len(requires) == 1 and (m := re.fullmatch(r"([a-z-]+)==(\S+)", requires[0])), requires
    backend, version = m.groups()
    build, dev = _locked("requirements-build.txt"), _locked("requirements-dev.txt")
    assert _pins("requirements-build.txt")[backend] == version == _pins("requirements-dev.txt")[backend]
    wanted = {re.split(r"[<>=!~; ]", r, maxsplit=1)[0].lower() for r in importlib.metadata.requires(backend) or []
              if "python_version < '3.11'" not in r}
    assert wanted <= set(build), "every dependency of the backend is in its lock"
    assert set(build) == wanted | {backend}, "the build lock holds the backend and its dependencies, nothing else"
    assert all(build[n] == dev[n] and _pins("requirements-build.txt")[n] == _pins("requirements-dev.txt")[n]
               for n in build), "the same distributions as the dev lock"


def test_make_wheel_builds_with_the_locked_backend_and_no_isolated_install():
    makefile = (REPO / "Makefile").read_text()
    env = re.search(r"^BUILD_ENV := (\S+)$", makefile, re.M)
    assert env, "the backend has an environment of its own"
    recipe = makefile.split("$(BUILD_ENV)/.installed: requirements-build.txt", 1)[1].split("\n\n", 1)[0]
    installs = [line for line in recipe.splitlines() if "pip install" in line]
    assert installs and all("--require-hashes" in line and "-r requirements-build.txt" in line for line in installs)
    wheel = makefile.split("\nwheel:", 1)[1].split("\n\n", 1)[0]
    assert "$(BUILD_ENV)/.installed" in wheel.splitlines()[0]
    builds = [line for line in wheel.splitlines() if "build" in line and "$(BUILD_ENV)/bin/" in line]
    assert builds and all("hatchling build" in line or "--no-build-isolation" in line or "--no-isolation" in line
                          for line in builds)
    commands = "\n".join(line for line in makefile.splitlines() if line.startswith("\t"))
    assert not re.search(r"-m build(?! --no-isolation)|pip wheel(?!.*--no-build-isolation)|uv build", commands), \
        "an isolated build installs the backend from the index, unchecked"
    assert "requirements-build.in -o requirements-build.txt" in makefile.split("\nlock:", 1)[1].split("\n\n", 1)[0]
