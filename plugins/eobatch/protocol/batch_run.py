"""One run's batch, start to end: what the Airflow tasks and the CLI verbs both drive.

A DAG run is recover -> plan -> stage -> verify -> commit, and ``fail`` when a task of it
failed. Each step here is a method that calls the protocol, decides what the run does next
and returns a report with the lines for the task log; it raises the taxonomy's errors
(``eobatch.errors``) and nothing else. The operators (``eobatch.airflow.operators``) only translate: an
error's kind to a sensor poke, a retry or a failure, and a report to log lines and XCom. The
CLI translates the same errors to exit codes, so `cli abort` does exactly what the abort task
does (in interval mode it also abandons the batch).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core import stuck
from ..core.formats import JSON, BatchPlan, PreparedBatch
from ..errors import AttemptPrepared, ProtocolError, kind_of
from ..sources import range_summary
from ..storage.credentials import scrub
from .verbs import Protocol

log = logging.getLogger("eobatch")


@dataclass(frozen=True)
class RunParams:
    """What a run was asked to do (the trigger form's params, checked by ``eobatch.airflow.params``)."""

    max_records_per_batch: int | None = None
    dry_run: bool = False
    rewind_to_batch: int | None = None
    confirm_rewind: bool = False
    accept_loss: bool = False
    max_batches_per_run: int | None = None  # continuous mode: the YAML's value when None
    replan_pending: bool = False  # continuous mode: forget the pending batches, plan their range again


@dataclass
class Report:
    """What a step did: ``lines`` for the task log (``warnings`` at warning level), ``value``
    for XCom or the CLI's JSON, ``skip``: the run ends here, for this reason (a dry run, nothing
    new)."""

    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    value: object = None
    skip: str | None = None
    detail: JSON = field(default_factory=dict)  # more about the step, for the CLI's JSON


class BatchRun:
    """One DAG run of pipeline ``proto`` (its ``run_id``, asked for ``params``), step by step: each
    method calls the protocol and returns a ``Report``; errors are those of ``eobatch.errors``."""

    def __init__(self, proto: Protocol, run_id: str | None = None, params: RunParams | None = None):
        self.proto = proto
        self.run_id = run_id
        self.params = params or RunParams()

    @property
    def interval_mode(self) -> bool:
        """Whether the pipeline runs in interval mode (a batch per data interval)."""
        return self.proto.cfg.mode == "interval"

    # -- recover ---------------------------------------------------------------------
    def recover(self) -> Report:
        """``Protocol.recover`` at the start of the run, then the rewind the params ask for;
        Report.value: ``latest``, ``committed``, ``pending`` and ``actions``."""
        t0 = time.time()
        p = self.params
        replanned = self._replan_pending() if p.replan_pending else []
        # the batch this run finds pending, per the ledger: a refusal of it is recorded (stuck.find_stuck)
        pending = None if p.dry_run or not self.run_id else stuck.first_open(self.proto.ledger)
        try:
            rec = self.proto.recover(run_id=self.run_id, commit_prepared=not p.dry_run)
        except Exception as e:
            if pending is not None and kind_of(e) != "wait":
                self._tried(pending, e)
            raise
        if rec.pending is not None and not p.dry_run:
            self._tried(rec.pending)
        rewind = (self.proto.rewind(p.rewind_to_batch, run_id=self.run_id, dry_run=p.dry_run,
                                    max_records=p.max_records_per_batch, accept_loss=p.accept_loss)
                  if p.rewind_to_batch else [])
        r = Report(lines=[f"run {self.run_id}, params {p}"] + replanned + rec.actions + rewind,
                   value={"latest": rec.latest, "committed": rec.committed, "pending": rec.pending,
                          "actions": rec.actions + rewind})
        r.lines.append(f"ledger at batch {rec.latest}, tables committed up to batch {rec.committed}"
                       f"{f', batch {rec.pending} pending' if rec.pending else ''} ({time.time() - t0:.2f}s)")
        if p.dry_run and (p.rewind_to_batch or (rec.pending and self.proto.ledger.prepared(rec.pending))):
            r.skip = "dry run: " + "; ".join(rewind or rec.actions) + "; nothing was changed"
        return r

    def _replan_pending(self) -> list[str]:
        """The run param ``replan_pending``: forget the batches after the newest one a table holds
        (``Protocol.reset``: refused when a table holds one, or when their landing files are gone),
        so that this run plans their range again under the pipeline file as it is now. Refused while
        one of them is PREPARED: a PREPARED batch is committed, never forgotten."""
        held = max(self.proto.committed_versions().values())
        latest = self.proto.ledger.latest_batch_id()
        if latest <= held:
            return ["replan_pending: no batch is pending; nothing was forgotten"]
        prepared = [b for b in range(held + 1, latest + 1) if self.proto.ledger.prepared(b) is not None]
        if prepared:
            raise ProtocolError(f"replan_pending: batch {prepared[0]} is PREPARED: it must be committed under the "
                                f"configuration that prepared it, never planned again; nothing was forgotten")
        moved = self.proto.reset(held + 1)
        return [f"replan_pending: batches {moved[0]}..{moved[-1]} forgotten (nothing of them is published; their "
                f"records are in the ledger's archive): their range is planned again under "
                f"{self.proto.cfg.file} as it is now"]

    def _tried(self, batch_id: int, error: BaseException | None = None) -> None:
        """Record in the ledger that this run took up ``batch_id`` (planned by another run), or was
        refused while it was pending (``Ledger.put_run_try``): what the stuck detector counts. A
        record that cannot be written is logged; it never fails the run."""
        if not self.run_id:
            return
        try:
            plan = self.proto.ledger.plan(batch_id)
            if plan is None or (error is None and plan.run_id == self.run_id):
                return
            text = None if error is None else scrub(f"{type(error).__name__}: {error}")[:2000]
            self.proto.ledger.put_run_try(batch_id, self.run_id, text, type(error).__name__ if error else None)
        except Exception as e:  # noqa: BLE001 - the detector's record; the run's outcome is its step's
            log.warning("batch %s: this run's try was not recorded in the ledger (%s: %s)", batch_id,
                        type(e).__name__, e)

    # -- plan ------------------------------------------------------------------------
    def plan(self, interval: dict[str, str] | None = None) -> Report:
        """Report.value: the run's batch ids, in order (new, or the undecided batches of an earlier
        run, handed back); ``skip`` when there is nothing new. Waits are errors of kind wait
        (another run's batch first, an interval not settled yet)."""
        cfg = self.proto.cfg
        interval = interval if self.interval_mode else None
        plans, new = self.proto.plan_batches(max_records=self.params.max_records_per_batch, interval=interval,
                                             run_id=self.run_id,
                                             max_batches=self.params.max_batches_per_run or cfg.max_batches_per_run)
        r = Report(warnings=[n for p in plans for n in p.notes] + (self.proto.last_warnings if new else []))
        if not plans:
            what = f" interval [{interval['start']}, {interval['end']})" if interval else ""
            r.skip = f"nothing new in {cfg.source.describe()}{what}: no batch planned, the tables are unchanged"
            return r
        for plan in plans:
            now = "PLANNED" if new else self.proto.state(plan.batch_id)
            state = "re-staged with its recorded range" if now == "PLANNED" and not new else str(now)
            r.lines.append(f"batch {plan.batch_id} {state}: {range_summary(plan)}, {plan.rows_in} records"
                           f"{f' (planned in {plan.plan_seconds:.2f}s)' if new else ''}"
                           f"{' [dry run]' if self.params.dry_run else ''}")
        if len(plans) > 1:
            r.lines.append(f"this run carries batches {plans[0].batch_id}..{plans[-1].batch_id}: one Spark "
                           f"application stages them, each is verified and committed on its own, in order")
        r.value = [p.batch_id for p in plans]
        r.detail = {"batch_id": plans[0].batch_id, "batches": r.value, "new": new, "range": range_summary(plans[0])}
        return r

    # -- stage -----------------------------------------------------------------------
    def check_stage(self, batch_id: int) -> Report:
        """Before the stage job is built from the pipeline file: the file must say what the
        batch's plan recorded (``Protocol.check_stage``; ConfigChanged names the repair)."""
        plan = self.proto.check_stage(batch_id)
        return Report(lines=[f"batch {batch_id}: staged under the configuration its plan recorded"] if plan else [])

    def stage_attempts(self, batch_ids: list[int], new_attempt: Callable[[], str]) -> Report:
        """Which attempt of each of the run's batches its verify takes (Report.value: {batch: attempt};
        Report.detail["stage"]: the batches the job must stage now). A PREPARED batch is done; a
        STAGED one keeps its attempt (an earlier try of the stage task staged it before the job
        failed on a later batch); every other batch gets a new attempt id (``new_attempt()``).
        Each is checked against the pipeline file first (``check_stage``)."""
        chosen: dict[int, str] = {}
        todo: dict[int, str] = {}
        r = Report(value=chosen, detail={"stage": todo})
        for b in batch_ids:
            r.lines += self.check_stage(b).lines
            if self.proto.ledger.prepared(b) is not None:
                r.lines.append(f"batch {b} is PREPARED already: not staged again")
                continue
            kept = self.proto.staged_attempt(b)
            if kept is not None:
                r.lines.append(f"batch {b} is STAGED by attempt {kept}: verified as it is, not staged again")
                chosen[b] = kept
                continue
            chosen[b] = todo[b] = new_attempt()
            self._started(b, todo[b])
        return r

    def _started(self, batch_id: int, attempt: str) -> None:
        """Record the attempt's start before its job is submitted, so that an attempt that never
        ends is seen (``stuck.find_stuck``). A record that cannot be written is logged: the job
        is staged all the same (the detector then judges the batch by its runs alone)."""
        try:
            self.proto.ledger.put_attempt_started(batch_id, attempt, self.run_id)
        except Exception as e:  # noqa: BLE001 - see above
            log.warning("batch %s attempt %s: its start was not recorded in the ledger (%s: %s)", batch_id, attempt,
                        type(e).__name__, e)

    # -- verify ----------------------------------------------------------------------
    def verify(self, batch_id: int, attempt: str) -> Report:
        """``Protocol.verify`` of one attempt (a dry run records nothing); NotReady (wait) while it
        is not staged yet, VerifyFailed when what it staged is wrong."""
        dry = self.params.dry_run
        p: PreparedBatch = self.proto.verify(batch_id, attempt, dry_run=dry)
        return Report(
            lines=[f"batch {batch_id} {'verified (dry run, not PREPARED)' if dry else 'PREPARED'} from attempt "
                   f"{p.attempt} in {p.verify_seconds:.2f}s: {p.rows_in} rows in = {p.rows_valid} valid + "
                   f"{p.rows_quarantined} quarantined; {p.rows_published} rows to publish in {p.files} files "
                   f"({p.bytes} bytes); fingerprint {p.fingerprint[:16]}"],
            value={"attempt": p.attempt, "fingerprint": p.fingerprint, "dry_run": dry, "rows_in": p.rows_in,
                   "rows_published": p.rows_published, "rows_quarantined": p.rows_quarantined, "files": p.files,
                   "bytes": p.bytes})

    def verify_run(self, attempts: dict[int, str]) -> Report:
        """Verify each of the run's batches ({batch: attempt}), in order; Report.value: {batch:
        verify's value}. A batch PREPARED already (an earlier poke) is taken as it is; a NotReady
        (wait) of one batch raises after the ones before it are PREPARED, so the next poke goes on."""
        values: dict[int, object] = {}
        r = Report(value=values)
        for b in sorted(attempts):
            one = self.verify(b, attempts[b])
            r.lines += one.lines
            values[b] = one.value
        return r

    # -- commit ----------------------------------------------------------------------
    def commit(self, batch_id: int, verified: JSON | None = None, attempt: str | None = None) -> Report:
        """Commit the PREPARED batch; in a dry run, report what would be published and undo the
        attempt instead (``verified``: the verify step's report value)."""
        if self.params.dry_run:
            return self._dry_run_end(batch_id, dict(verified or {}), attempt)
        c = self.proto.commit(batch_id)
        p = self.proto.ledger.prepared(batch_id)
        if p is None:  # commit() read it, and a committed batch's record is never removed
            raise ProtocolError(f"batch {batch_id} has no PREPARED record at {self.proto.layout.prepared(batch_id)} "
                                f"after its commit")
        return Report(lines=[f"batch {batch_id} COMMITTED in {c.commit_seconds:.2f}s: Delta versions "
                             f"{c.delta_versions}; {p.rows_published} rows published, {p.rows_quarantined} "
                             f"quarantined"],
                      value={"batch_id": batch_id, "delta_versions": c.delta_versions})

    def _dry_run_end(self, batch_id: int, report: JSON, attempt: str | None) -> Report:
        cfg = self.proto.cfg
        attempt = report.get("attempt") or attempt
        removed = self.proto.abort(batch_id, attempt, reason=f"dry run {self.run_id}") if attempt else []
        plan: BatchPlan = self.proto.ledger.require_plan(batch_id)
        r = Report(lines=[f"DRY RUN of batch {batch_id}: would publish {report.get('rows_published')} rows to "
                          f"{cfg.sink_table} and {report.get('rows_quarantined')} rows to {cfg.quarantine_table} "
                          f"in {report.get('files')} files ({report.get('bytes')} bytes) from "
                          f"{range_summary(plan)}. Nothing was published; the attempt was aborted "
                          f"({len(removed)} staged files removed)."],
                   value={"dry_run": True, "batch_id": batch_id, "range": range_summary(plan), **report})
        if self.interval_mode:
            self.proto.abandon(batch_id, f"dry run {self.run_id}")
            r.lines.append(f"dry run: interval batch {batch_id} abandoned")
        else:
            r.lines.append(f"dry run: batch {batch_id} stays PLANNED; the next run re-stages this range")
        return r

    # -- fail (abort) ----------------------------------------------------------------
    def fail_run(self, batch_ids: list[int], attempts: dict[int, str], reason: str | None = None) -> Report:
        """A task of a run of several batches failed: ``fail`` for each of them that has an
        attempt (a PREPARED one keeps its files: the next run's recover commits it)."""
        r, removed = Report(), 0
        for b in batch_ids:
            one = self.fail(b, attempts.get(b), reason)
            r.lines += one.lines
            r.warnings += one.warnings
            removed += int(one.value or 0)  # type: ignore[call-overload]
        r.value = removed
        return r

    def _kept_staged(self, batch_id: int, attempt: str) -> bool:
        """Is ``attempt`` STAGED (its stage summary written) with no decision yet? A run that failed
        after it (a later batch of the same Spark job met a limit, the job was killed past its
        bound) keeps it: the next run verifies it as it is. An attempt that verify rejected has the
        decision "abort" (``Protocol.verify``) and is removed as before."""
        led = self.proto.ledger
        return led.stage_summary(batch_id, attempt) is not None and led.decision(batch_id, attempt) is None

    # -- fail (abort) ----------------------------------------------------------------
    def fail(self, batch_id: int | None, attempt: str | None, reason: str | None = None) -> Report:
        """A task of the run failed: remove its attempt's staged files (never a PREPARED
        attempt's); in interval mode also abandon the batch, so later intervals go ahead and
        this one can run again. Report.value: the number of files removed."""
        reason = reason or f"run {self.run_id} failed"
        interval = self.interval_mode
        if not interval and batch_id is not None and attempt is not None and self._kept_staged(batch_id, attempt):
            return Report(lines=[f"batch {batch_id} attempt {attempt} is STAGED and no verify rejected it: kept; the "
                                 f"next run verifies it as it is instead of staging the batch again"], value=0)
        if batch_id is None or attempt is None:
            if batch_id is not None and interval and self.proto.ledger.prepared(batch_id) is None:
                self.proto.abandon(batch_id, f"{reason} before staging")
                return Report(lines=[f"no attempt was started; interval batch {batch_id} is ABANDONED"], value=0)
            return Report(lines=["no attempt was started; nothing to remove"], value=0)
        try:
            removed = self.proto.abort(batch_id, attempt, reason=reason)
        except AttemptPrepared as e:  # verify won the attempt's decision: its files stay
            if interval and self.proto.abandon(batch_id, reason):
                return Report(warnings=[f"{e}; the interval batch {batch_id} is ABANDONED before it became "
                                        f"PREPARED (nothing is published; the sweep removes its files)"], value=0)
            # not an error of the run (the next run's recover commits the batch), but nothing was aborted
            return Report(warnings=[str(e)], value=0, detail={"aborted": False, "error": e})
        if interval and self.proto.abandon(batch_id, reason):
            line = (f"batch {batch_id} attempt {attempt} aborted, {len(removed)} staged file(s) removed; the "
                    f"interval batch is ABANDONED: run the interval again to publish it")
        else:
            line = (f"batch {batch_id} attempt {attempt} aborted, {len(removed)} staged file(s) removed; the batch "
                    f"stays PLANNED and the next run re-stages the same range")
        return Report(lines=[line], value=len(removed))
