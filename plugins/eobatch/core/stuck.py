"""Is the pipeline stuck? The one definition, from the ledger alone, that the recover task's alert,
the ledger page (and its JSON), `eobatch ledger` and `eobatch doctor` all show.

A pipeline is stuck when its oldest batch not yet decided (PLANNED, STAGED or PREPARED, per the
ledger's records) has

* been tried by ``alerts.stuck_after_runs`` runs (default 3) without being committed: the run
  that planned it, every run that took it up again (``Ledger.put_run_try``, written by
  ``BatchRun.recover``) or started a stage attempt of it (``Ledger.put_attempt_started``); a dry
  run is not a try (it leaves its batch PLANNED on purpose); or
* a stage attempt that the stage task started more than ``alerts.stuck_attempt_hours`` (default
  6) ago, with no stage summary and no decision: a Spark job that hangs, or a task that died
  without its abort.

What it says (``Stuck``): the batch, its state, since when (its plan; a hung attempt: its start),
how many runs and attempts tried it (aborted ones counted), the last error the ledger recorded
(a run's refusal, or an attempt's abort reason) and the one repair that applies, named, with its
command. The repair of a refusal is the one its error names (``Repair: ...``, the protocol's own
words); the others are here (``repair_for``).
"""

from __future__ import annotations

import datetime as dt
import re
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .. import paths
from ..config.pipeline import STUCK_AFTER_RUNS, STUCK_ATTEMPT_HOURS
from .formats import JSON

if TYPE_CHECKING:
    from ..config.pipeline import PipelineConfig
    from .ledger import Ledger

SCAN = 1000  # at most this many undecided batches are looked at (a run plans at most 1000)
RUN_IDS_SHOWN = 10  # the newest run ids named
DRY_RUN = "dry run "  # the abort reason of a dry run's attempt (BatchRun._dry_run_end), then the run id
# the name of the repair a refusal's error names, by the error's type (eobatch.errors)
REFUSALS = {
    "ConfigChanged": "configuration edit refused while the batch is pending",
    "CommitBlocked": "the batch's staged files are gone",
    "SliceRewritten": "the interval's files were rewritten by another writer",
    "LedgerMismatch": "the ledger and the tables disagree",
}


@dataclass(frozen=True)
class Repair:
    name: str  # what is wrong, in a few words
    text: str  # what to do
    command: str | None = None  # the command that does it (None: the text says where to act)


@dataclass(frozen=True)
class Stuck:
    pipeline: str
    batch_id: int
    state: str  # PLANNED | STAGED | PREPARED
    cause: str  # "runs": tried by too many runs; "attempt": a stage attempt older than its bound
    since: str  # ISO time: the batch's plan (cause "runs"), the attempt's start (cause "attempt")
    runs: int  # distinct runs that tried it (dry runs not counted)
    run_ids: list[str]  # the newest of them (RUN_IDS_SHOWN), oldest first
    attempts: int  # stage attempts started (dry runs' not counted)
    aborted: int  # of which aborted
    why: str  # one sentence: which bound it passed
    repair: Repair
    last_error: str | None = None
    last_error_at: str | None = None
    attempt: str | None = None  # cause "attempt": the attempt that hangs
    limits: JSON = field(default_factory=dict)  # the bounds it was judged by

    def lines(self) -> list[str]:
        """What the task log, `eobatch ledger` and an alert say, one line each."""
        out = [f"pipeline {self.pipeline} is STUCK: batch {self.batch_id} is {self.state} since {self.since}; "
               f"{self.why}",
               f"tried by {self.runs} run(s) ({', '.join(self.run_ids) or 'none recorded'}), {self.attempts} stage "
               f"attempt(s), {self.aborted} aborted"]
        if self.last_error:
            out.append(f"last error ({self.last_error_at or 'time not recorded'}): {self.last_error}")
        out.append(f"repair ({self.repair.name}): {self.repair.text}")
        if self.repair.command:
            out.append(f"command: {self.repair.command}")
        return out

    def to_json(self) -> JSON:
        return asdict(self)


def find_stuck(ledger: Ledger, cfg: PipelineConfig, now: float | None = None) -> Stuck | None:
    """The pipeline's stuck batch (see the module), or None when none is past its bounds."""
    batch = first_open(ledger)
    if batch is None:
        return None
    plan = ledger.plan(batch)
    if plan is None:  # forgotten by a reset-batch while we looked
        return None
    now = time.time() if now is None else now
    limit_runs = getattr(cfg.alerts, "stuck_after_runs", STUCK_AFTER_RUNS)
    limit_hours = getattr(cfg.alerts, "stuck_attempt_hours", STUCK_ATTEMPT_HOURS)
    t = _tries(ledger, batch, plan.run_id)
    hung = [a for a in t.running if now - _epoch(a["started_at"]) > limit_hours * 3600]
    if not hung and t.runs_count < limit_runs:
        return None
    state = _state(ledger, batch)
    if hung:
        a = hung[0]
        cause, since, attempt = "attempt", str(a["started_at"]), str(a["attempt"])
        why = (f"its stage attempt {attempt} (run {a.get('run_id') or '?'}) started {(now - _epoch(since)) / 3600:.1f} "
               f"h ago and has no stage summary (limit {limit_hours:g} h)")
    else:
        cause, since, attempt = "runs", plan.planned_at, None
        why = f"{t.runs_count} runs tried it and none committed it (limit {limit_runs} runs)"
    error, error_at, error_type = t.last_error
    return Stuck(pipeline=cfg.name, batch_id=batch, state=state, cause=cause, since=since, runs=t.runs_count,
                 run_ids=t.run_ids[-RUN_IDS_SHOWN:], attempts=t.attempts, aborted=t.aborted, why=why,
                 repair=repair_for(cfg.name, batch, state, cause, attempt, error, error_type),
                 last_error=error, last_error_at=error_at, attempt=attempt,
                 limits={"stuck_after_runs": limit_runs, "stuck_attempt_hours": limit_hours})


def first_open(ledger: Ledger) -> int | None:
    """The oldest batch the ledger holds undecided: the newest batches without a COMMITTED or
    ABANDONED record that are not REWOUND (batches are decided in order, so they are the tail)."""
    latest = ledger.latest_batch_id()
    if not latest:
        return None
    rewound = ledger.rewound_ids()
    first = None
    b = latest
    while b >= 1 and latest - b < SCAN:
        if b in rewound or ledger.committed(b) is not None or ledger.abandoned(b) is not None:
            break
        first = b
        b -= 1
    return first


def _state(ledger: Ledger, batch: int) -> str:
    if ledger.prepared(batch) is not None:
        return "PREPARED"
    staged = any(ledger.stage_summary(batch, a) is not None and ledger.decision(batch, a) is None
                 for a in ledger.attempts(batch))
    return "STAGED" if staged else "PLANNED"


@dataclass
class _Tries:
    run_ids: list[str]  # distinct, oldest first, dry runs left out
    attempts: int
    aborted: int
    running: list[JSON]  # started records of attempts without a stage summary and a decision, oldest first
    errors: list[tuple[str, str, str]]  # (at, error, error type)

    @property
    def runs_count(self) -> int:
        return len(self.run_ids)

    @property
    def last_error(self) -> tuple[str | None, str | None, str | None]:
        if not self.errors:
            return None, None, None
        at, text, kind = max(self.errors)
        return text, at or None, kind


def _tries(ledger: Ledger, batch: int, planned_by: str | None) -> _Tries:
    """Who tried ``batch`` (its planner, the runs that took it up, its attempts) and what failed."""
    seen: list[tuple[str, str]] = [("", planned_by)] if planned_by else []  # (when, run id)
    dry: set[str] = set()
    t = _Tries([], 0, 0, [], [])
    for attempt in ledger.attempts(batch):
        started, decision = ledger.attempt_started(batch, attempt), ledger.decision(batch, attempt)
        reason = str((decision or {}).get("reason") or "")
        if reason.startswith(DRY_RUN):
            dry.add(reason[len(DRY_RUN):])
            continue
        t.attempts += 1
        if started and started.get("run_id"):
            seen.append((str(started.get("started_at") or ""), str(started["run_id"])))
        if decision is not None and decision.get("decision") == "abort":
            t.aborted += 1
            t.errors.append((str(decision.get("aborted_at") or ""), f"attempt {attempt} aborted: {reason}", ""))
        elif decision is None and started and ledger.stage_summary(batch, attempt) is None:
            t.running.append(started)
    digest = ledger.plan_digest(batch)
    for rec in ledger.run_tries(batch):
        if rec.get("plan_digest") not in (None, digest) or not rec.get("run_id"):
            continue  # a try of a plan that reset-batch forgot
        seen.append((str(rec.get("at") or ""), str(rec["run_id"])))
        if rec.get("error"):
            t.errors.append((str(rec.get("at") or ""), str(rec["error"]), str(rec.get("error_type") or "")))
    for _when, run_id in sorted(seen):
        if run_id not in dry and run_id not in t.run_ids:
            t.run_ids.append(run_id)
    t.running.sort(key=lambda a: str(a.get("started_at")))
    return t


def _epoch(iso: Any) -> float:
    d = dt.datetime.fromisoformat(str(iso))
    return (d if d.tzinfo else d.replace(tzinfo=dt.timezone.utc)).timestamp()


def command(verb: str, pipeline: str, *args: object, conf: str | None = None) -> str:
    """A repair command as this deployment runs it: a checkout's make target (``make reset-batch
    PIPELINE=orders BATCH=7``, ``make run PIPELINE=orders CONF='{...}'``), else the installed console
    command (``eobatch reset-batch orders 7``, ``eobatch run orders --conf '{...}'``)."""
    if verb == "reset-batch" and paths.CHECKOUT:
        return f"make reset-batch PIPELINE={pipeline} BATCH={args[0]}"
    if verb == "run":
        if paths.CHECKOUT:
            return f"make run PIPELINE={pipeline}" + (f" CONF='{conf}'" if conf else "")
        return f"eobatch run {pipeline}" + (f" --conf '{conf}'" if conf else "")
    return " ".join(["eobatch", verb, pipeline, *map(str, args)])


def named_repair(error: str) -> tuple[str, str | None] | None:
    """(text, command) of the ``Repair: ...`` an error names (its first `command`), or None."""
    _, found, text = error.partition("Repair: ")
    if not found:
        return None
    m = re.search(r"`([^`]+)`", text)
    return text.strip(), (m.group(1) if m else None)


def repair_for(pipeline: str, batch: int, state: str, cause: str, attempt: str | None, error: str | None,
               error_type: str | None) -> Repair:
    """The one repair that applies to a stuck batch (see the module)."""
    reset = command("reset-batch", pipeline, batch)
    if cause == "attempt" and attempt:
        return Repair("a stage attempt that does not finish",
                      f"look at the stage task of the run that started attempt {attempt} (its log, its Spark "
                      f"application). Stop it: mark that task failed in Airflow, whose abort task then removes the "
                      f"attempt's files, or abort the attempt from a shell (the hung job can then never be PREPARED); "
                      f"the next run re-stages the same source range",
                      command("abort", pipeline, batch, attempt))
    named = named_repair(error) if error else None
    if named is not None:
        return Repair(REFUSALS.get(error_type or "", "a refusal that names its repair"), named[0], named[1])
    if state == "PREPARED":
        return Repair("a commit that keeps failing",
                      f"batch {batch} is PREPARED: it must be committed, never aborted. Read the commit task's error "
                      f"(or commit it from a shell, which prints it), fix its cause (the tables' store, their "
                      f"permissions); the next run's recover commits it, and nothing else is planned until it is",
                      command("commit", pipeline, batch))
    return Repair("a batch that fails the same way in every run",
                  f"read the error of the failed task (stage or verify) in the log of the last run, fix its cause "
                  f"(the landing data, the transform, the job's resources) and run again. A fix that edits the "
                  f"pipeline file or its transform is refused while batch {batch} is pending: then pause the "
                  f"pipeline and forget the batch (nothing of it is published), and the next run plans its range "
                  f"again under the new file",
                  reset)
