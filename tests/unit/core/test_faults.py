"""eobatch.core.faults: crash points, fired by the environment (``EOBATCH_CRASH``), once per marker
folder (``EOBATCH_CRASH_ONCE_DIR``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from eobatch.core import faults

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"


POINT = "commit.after_delta_commit"
SCRIPT = ("import sys; from eobatch.core.faults import crash_point; "
          f"crash_point({POINT!r}); print('survived'); sys.exit(0)")


def _run(env_extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOBATCH_")}
    env["PYTHONPATH"] = str(PLUGINS) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)


def test_crash_point_does_nothing_without_env(monkeypatch):
    monkeypatch.delenv("EOBATCH_CRASH", raising=False)
    monkeypatch.delenv("EOBATCH_PAUSE", raising=False)
    for p in faults.POINTS:
        assert faults.crash_point(p) is None


def test_crash_point_ignores_other_points(monkeypatch):
    monkeypatch.delenv("EOBATCH_PAUSE", raising=False)
    monkeypatch.setenv("EOBATCH_CRASH", "plan.after_record,verify.after_prepared")
    assert faults.crash_point(POINT) is None
    monkeypatch.setenv("EOBATCH_CRASH", "commit.after_delta")  # a prefix is not the point
    assert faults.crash_point(POINT) is None


def test_crash_point_kills_the_process_with_137():
    r = _run({"EOBATCH_CRASH": f"plan.after_record,{POINT}"})
    assert r.returncode == 137, r.stderr
    assert "survived" not in r.stdout
    assert f"injected crash at {POINT}" in r.stderr


def test_crash_point_without_env_survives_in_subprocess():
    r = _run({})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "survived"


def test_crash_point_once_dir_fires_once(tmp_path):
    once = tmp_path / "once"
    env = {"EOBATCH_CRASH": POINT, "EOBATCH_CRASH_ONCE_DIR": str(once)}
    first = _run(env)
    assert first.returncode == 137, first.stderr
    assert (once / POINT).is_file()
    second = _run(env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "survived"
