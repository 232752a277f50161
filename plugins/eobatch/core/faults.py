"""Named crash points for fault-injection tests and `make chaos`.

Production code calls ``crash_point("commit.after_delta_commit")`` at each phase boundary.
Nothing happens unless the environment variable ``EOBATCH_CRASH`` names that point; then the
process dies at once with ``os._exit(137)`` (what ``kill -9`` looks like to everyone else),
without cleanup, ``finally`` blocks or flushing. With ``EOBATCH_CRASH_ONCE_DIR`` set, each point
fires once only (a marker file records it), so the next attempt gets through.
``EOBATCH_PAUSE`` names points where the process instead sleeps (up to 10 minutes), so a test
can ``kill -9`` it at a known place, e.g. a spark-submit in the middle of writing (with
``EOBATCH_CRASH_ONCE_DIR``, only the first process to get there pauses, and its pid is written
to the marker ``pause-<point>``).
"""

from __future__ import annotations

import os
import sys
import time

POINTS = (
    "plan.after_record",
    "stage.after_first_file",
    "verify.after_prepared",
    "commit.before_delta_commit",
    "commit.after_first_participant",
    "commit.after_delta_commit",
    "rewind.before_restore",
    "rewind.after_first_restore",
)
# in the Airflow tasks that can commit (eobatch.airflow.operators): after their work, asset events
# included, and before Airflow stores the task's success (and with it the events)
TASK_POINTS = ("commit.before_task_success", "recover.before_task_success")
# in the stage job of a run that carries several batches: after one batch is STAGED, before the next
JOB_POINTS = ("stage.between_batches",)


class InjectedFault(OSError):
    """A transient failure injected by EOBATCH_FAIL (looks like a storage error to callers)."""


def _fires(var: str, name: str, marker: str) -> bool:
    """``name`` is listed in ``$var`` and, with EOBATCH_CRASH_ONCE_DIR, has not fired before."""
    wanted = os.environ.get(var, "")
    if not wanted or name not in wanted.split(","):
        return False
    once_dir = os.environ.get("EOBATCH_CRASH_ONCE_DIR")
    if once_dir:
        os.makedirs(once_dir, exist_ok=True)
        try:
            os.close(os.open(os.path.join(once_dir, marker), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
    return True


def fail_point(name: str) -> None:
    """Raise InjectedFault at ``name`` when ``EOBATCH_FAIL`` names it (once per marker dir)."""
    if _fires("EOBATCH_FAIL", name, "fail-" + name):
        raise InjectedFault(f"injected transient storage error at {name}")


def crash_point(name: str) -> None:
    if _fires("EOBATCH_PAUSE", name, "pause-" + name):
        once_dir = os.environ.get("EOBATCH_CRASH_ONCE_DIR")
        if once_dir:  # the marker says who paused: a test can kill that process's machine
            with open(os.path.join(once_dir, "pause-" + name), "w") as f:
                f.write(str(os.getpid()))
        sys.stderr.write(f"eobatch: paused at {name}\n")
        sys.stderr.flush()
        time.sleep(600)
    if not _fires("EOBATCH_CRASH", name, name):
        return
    sys.stderr.write(f"eobatch: injected crash at {name}\n")
    sys.stderr.flush()
    os._exit(137)
