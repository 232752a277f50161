"""The Makefile hands user variables (PIPELINE, CONF, DATE, BATCH ...) to its commands through
the environment: the shell never parses their values, so a quote or a `;` in one is a character
of the value, never a command.

Every make here runs with `-o setup -o venv`: prerequisites are not remade (no pip, no mvn).
The commands a recipe starts (`bash include/run_pipeline.sh`, `python ...`) are replaced by a
bash function exported through the environment, which records its argv: no Airflow, no Spark.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_VARS = ("PIPELINE", "RUNS", "CONF", "DATE", "FORMAT", "BATCHES", "SEED", "BACKEND", "RECORDS", "MASTER",
             "BATCH", "DRY_RUN", "PYTEST_ARGS")
EVIL = 'x"; touch {d}/pwned; echo "'
CONF = """{"note": "it's $5; \\"quoted\\" `id` $(id)", "rewind_to_batch": 3}"""

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def _env(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in USER_VARS and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    env["PIPELINES_DIR"] = str(tmp_path / "pipelines")  # empty: no pipeline by any name
    (tmp_path / "pipelines").mkdir(exist_ok=True)
    env.update(extra)
    return env


def _make(tmp_path: Path, target: str, *assignments: str, capture_cmd: str | None = None):
    """make <target> VAR=value ...; with capture_cmd, that command only records its argv.
    Returns (completed process, recorded argv or None)."""
    argv_file = tmp_path / "argv"
    argv_file.unlink(missing_ok=True)
    extra = {}
    if capture_cmd:
        extra[f"BASH_FUNC_{capture_cmd}%%"] = '() { printf "%s\\0" "$@" > "$EO_TEST_ARGV"; }'
        extra["EO_TEST_ARGV"] = str(argv_file)
    p = subprocess.run(["make", "-s", "-o", "setup", "-o", "venv", target, *assignments], cwd=REPO,
                       env=_env(tmp_path, **extra), capture_output=True, text=True, timeout=120)
    argv = argv_file.read_text().split("\0")[:-1] if argv_file.exists() else None
    return p, argv


def test_a_pipeline_name_is_never_run_as_a_command(tmp_path):
    """The real `ledger` target (the real CLI) with a name that closes the quotes of a pasted "$(PIPELINE)"."""
    evil = EVIL.format(d=tmp_path)
    p, _ = _make(tmp_path, "ledger", f"PIPELINE={evil}")
    assert not (tmp_path / "pwned").exists()
    assert p.returncode != 0
    assert f"no pipeline named {evil!r}" in p.stderr


def test_run_hands_conf_with_quotes_to_run_pipeline_sh_intact(tmp_path):
    evil = EVIL.format(d=tmp_path)
    p, argv = _make(tmp_path, "run", f"PIPELINE={evil}", "RUNS=2", f"CONF={CONF}", "DATE=2026-11-21 06:00",
                    capture_cmd="bash")
    assert p.returncode == 0, p.stderr
    assert argv == ["include/run_pipeline.sh", evil, "2", CONF, "2026-11-21 06:00"]
    assert not (tmp_path / "pwned").exists()


def test_run_defaults(tmp_path):
    p, argv = _make(tmp_path, "run", capture_cmd="bash")
    assert p.returncode == 0, p.stderr
    assert argv == ["include/run_pipeline.sh", "orders", "1", "", ""]


@pytest.mark.parametrize("target,assignments,expected", [
    ("ledger", ["PIPELINE={evil}"], ["-m", "eobatch.cli", "ledger", "{evil}", "--format", "table"]),
    ("ledger", ["PIPELINE={evil}", "FORMAT=json"], ["-m", "eobatch.cli", "ledger", "{evil}", "--format", "json"]),
    ("reset-batch", ["PIPELINE={evil}", "BATCH=7"], ["-m", "eobatch.cli", "reset-batch", "{evil}", "7"]),
    ("rewind", ["PIPELINE={evil}", "BATCH=7"], ["-m", "eobatch.cli", "rewind", "{evil}", "7"]),
    ("rewind", ["PIPELINE={evil}", "BATCH=7", "DRY_RUN=1"],
     ["-m", "eobatch.cli", "rewind", "{evil}", "7", "--dry-run"]),
    ("sweep", ["PIPELINE={evil}"], ["-m", "eobatch.cli", "sweep", "{evil}", "--all"]),
    ("chaos", ["BATCHES=5", "SEED={evil}"],
     ["tests/chaos/run_chaos.py", "--batches", "5", "--seed", "{evil}", "--backend", "files"]),
    ("chaos", ["BATCHES=5", "SEED=3", "BACKEND=s3", "MASTER=spark://{evil}:7077"],
     ["tests/chaos/run_chaos.py", "--batches", "5", "--seed", "3", "--backend", "s3",
      "--master", "spark://{evil}:7077"]),
    # the bench reads SIZES, SINGLE_FILE_GB, MASTER ... from its environment, never from the recipe
    ("bench", ["SIZES={evil}", "MASTER={evil}"], ["tests/bench/run_bench.py"]),
    ("bench", [], ["tests/bench/run_bench.py"]),
])
def test_documented_commands_get_their_values_verbatim(tmp_path, target, assignments, expected):
    evil = EVIL.format(d=tmp_path)
    p, argv = _make(tmp_path, target, *(a.replace("{evil}", evil) for a in assignments), capture_cmd="python")
    assert p.returncode == 0, p.stderr
    assert argv == [a.replace("{evil}", evil) for a in expected]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("target", ["reset-batch", "rewind"])
def test_batch_is_required(tmp_path, target):
    p, argv = _make(tmp_path, target, "PIPELINE=orders", capture_cmd="python")
    assert p.returncode == 2 and f"usage: make {target} PIPELINE=<name> BATCH=<id>" in p.stderr
    assert argv is None


def test_no_recipe_pastes_a_user_value_into_shell_text(tmp_path):
    """`make -n` prints the recipes as the shell gets them: no value is in them."""
    marker = "EO_MARKER_VALUE"
    for target in ("run", "ledger", "reset-batch", "rewind", "sweep", "chaos", "bench"):
        p = subprocess.run(["make", "-n", "-o", "setup", "-o", "venv", target,
                            *(f"{v}={marker}{v}" for v in USER_VARS if v != "PYTEST_ARGS")],
                           cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert marker not in p.stdout, (target, p.stdout)
