"""The exactly-once protocol of one pipeline: one state machine, five verbs.

::

            plan                stage               verify              commit
 (none) ─────────▶ PLANNED ─────────▶ STAGED ─────────▶ PREPARED ─────────▶ COMMITTED
                      │                  │                                   ▲
                      └──── abort ───────┴──▶ (attempt aborted)  recover ────┘

Like Flink's TwoPhaseCommitSinkFunction (beginTransaction / preCommit / commit / abort,
with a commit issued again on restore), with a batch in the role of a checkpoint:

``plan``    (begin) write the batch plan, the exact source range, put-if-absent, before any
            data is written. Never plans N+1 while N is not committed.
``stage``   (write) done by the spark-submit job under attempt-unique names + manifests;
            idempotent: a new attempt never touches another attempt's files.
``verify``  (pre-commit) check every manifest, file, size, footer, count and schema; then write
            PREPARED put-if-absent. From here on the batch must commit; it is never aborted.
``commit``  one Delta transaction per participant: the prepared files, txn(appId=pipeline,
            version=batch), the offsets and the fingerprint. Idempotent: a participant that
            already holds the batch is checked (same fingerprint) and skipped.
``abort``   remove one failed attempt's staged files; refuses a PREPARED attempt.
``recover`` at the start of every run: check ledger and tables agree (no gap, no unknown
            batch), finish a rewind, commit a PREPARED batch, hand back a PLANNED/STAGED batch
            for re-staging, sweep orphan files of dead or zombie attempts.

Two repairs move the pipeline's position explicitly, never by editing a table behind its back:
``rewind(K)`` reserves batch L+1 (put-if-absent, like any plan: a plan that got there first wins
and the rewind does nothing) as the first batch read again from K's start, then restores every
table to before batch K and marks batches K..L REWOUND (L+1 is a new id: txn versions only grow);
``reset(K)`` forgets batches that no table holds.

Interval mode: a batch's range is its run's data interval, and its commit replaces the files
of earlier batches of the same interval in the same Delta transaction. Batches stay strictly
ordered: a run whose interval is not the in-flight batch's waits (``BatchInFlight``); a run that
fails before PREPARED abandons its batch (ABANDONED and PREPARED share one put-if-absent
record, so exactly one of them is ever decided) and the interval can simply run again.

The tables' txn version is the source of truth for "which batch committed"; the batch plan is
the truth for "what that batch contained". Nothing lives only in Airflow's database.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import time
from dataclasses import dataclass
from typing import ClassVar

from . import faults
from .config import PipelineConfig
from .delta_sink import (
    CommitConflict,
    DeltaParticipant,
    FingerprintMismatch,
    Replace,
    schema_from_b64,
)
from .errors import Kind, TerminalError
from .formats import (
    PARTICIPANTS,
    BatchPlan,
    BatchState,
    CommittedBatch,
    Layout,
    PreparedBatch,
    RewindRecord,
    commit_metadata,
    fingerprint_of,
)
from .ledger import Ledger
from .sources import source_for
from .storage import join, relpath, storage_for
from .verify import NotReady, VerifyFailed, recheck_files, verify_attempt

log = logging.getLogger("eobatch")


class ProtocolError(TerminalError):
    """A state the protocol cannot resolve by itself; the message says how to repair."""


class LedgerMismatch(ProtocolError):
    pass


class ConcurrentPlan(ProtocolError):
    """Another planner wrote this batch id first: wait for that batch, then plan again."""

    kind: ClassVar[Kind] = "wait"


class CommitBlocked(ProtocolError):
    """A PREPARED batch whose files are gone: a person must repair (the message says how)."""


class BatchInFlight(ProtocolError):
    """Interval mode: another run's batch is being staged; wait until it is decided."""

    kind: ClassVar[Kind] = "wait"


class IntervalNotSettled(BatchInFlight):
    """Interval mode: the interval ended less than ``source.settle_seconds`` ago; wait, then plan."""


class AttemptPrepared(ProtocolError):
    """abort lost the attempt's decision to verify: the attempt is (being) PREPARED, not aborted."""


def utcnow() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class Recovery:
    latest: int  # highest planned batch id (0: none)
    committed: int  # highest batch committed in every participant
    pending: int | None  # a PLANNED/STAGED batch to re-stage, if any
    actions: list  # what recovery did, for the task log
    in_flight: BatchPlan | None = None  # interval mode: another run's batch being staged


def _ms(iso_or_dt) -> int:
    if isinstance(iso_or_dt, str):
        iso_or_dt = _dt.datetime.fromisoformat(iso_or_dt)
    if iso_or_dt.tzinfo is None:
        iso_or_dt = iso_or_dt.replace(tzinfo=_dt.timezone.utc)
    return int(iso_or_dt.timestamp() * 1000)


def interval_of(start, end) -> dict:
    """{"start", "end"} as ISO UTC text, from datetimes or ISO strings."""
    def iso(x):
        if isinstance(x, str):
            x = _dt.datetime.fromisoformat(x)
        if x.tzinfo is None:
            x = x.replace(tzinfo=_dt.timezone.utc)
        return x.astimezone(_dt.timezone.utc).isoformat()
    return {"start": iso(start), "end": iso(end)}


class Protocol:
    def __init__(self, cfg: PipelineConfig, storage_options: dict | None = None):
        self.cfg = cfg
        self.app_id = cfg.app_id
        self.layout = Layout(cfg.sink_table, cfg.quarantine_table)
        self.ledger = Ledger(self.layout)
        self.participants = {
            p: DeltaParticipant(p, self.layout.table(p), storage_options) for p in PARTICIPANTS
        }
        self._fs = {p: storage_for(self.layout.table(p)) for p in PARTICIPANTS}
        self.last_late: list = []  # late files the last plan() found (interval mode)

    def fs_for(self, participant: str):
        return self._fs[participant]

    # -- queries ---------------------------------------------------------------------
    def committed_versions(self) -> dict[str, int]:
        return {p: part.committed_version(self.app_id) for p, part in self.participants.items()}

    def state(self, batch_id: int, versions: dict[str, int] | None = None) -> BatchState | None:
        versions = versions if versions is not None else self.committed_versions()
        if self.ledger.plan(batch_id) is None:
            return None
        if self.ledger.abandoned(batch_id) is not None:
            return "ABANDONED"
        if min(versions.values()) >= batch_id:
            return "REWOUND" if batch_id in self.ledger.rewound_ids() else "COMMITTED"
        if self.ledger.prepared(batch_id) is not None:
            return "PREPARED"
        for a in self.ledger.attempts(batch_id):
            if self.ledger.stage_summary(batch_id, a) and not self.ledger.aborted_info(batch_id, a):
                return "STAGED"
        return "PLANNED"

    def _prev_live(self, batch_id: int) -> int:
        """The batch the tables must hold before ``batch_id`` commits: the newest earlier batch
        that was not ABANDONED (0 when none)."""
        b = batch_id - 1
        while b > 0 and self.ledger.abandoned(b) is not None:
            b -= 1
        return b

    def _check_consistent(self, latest: int, versions: dict[str, int]) -> None:
        need = self._prev_live(latest) if latest else 0
        for p, v in versions.items():
            table = self.layout.table(p)
            if v > latest:
                raise LedgerMismatch(
                    f"{p} table {table} holds batch {v} of {self.app_id!r} but the ledger "
                    f"({self.layout.ledger}) only knows batches up to {latest}. The ledger was lost or "
                    f"belongs to another table. Repair: restore the ledger folder (_eo_ledger/), or restore "
                    f"the table to a version before that batch. Nothing was published.")
            if v < need:
                raise LedgerMismatch(
                    f"gap: the ledger planned batch {latest} but the {p} table {table} holds only up to "
                    f"batch {v}; batches {v + 1}..{latest - 1} are missing from the table (was it "
                    f"restored or rewritten?). Repair: `make reset-batch PIPELINE={self.app_id} BATCH={v + 1}` "
                    f"so those ranges are planned and published again. Nothing was published.")

    # -- recover ---------------------------------------------------------------------
    def recover(self, sweep: bool = True, run_id: str | None = None, commit_prepared: bool = True) -> Recovery:
        latest = self.ledger.latest_batch_id()
        versions = self.committed_versions()
        self._check_consistent(latest, versions)
        actions: list[str] = self._complete_rewinds()
        pending = None
        in_flight = None
        if latest and min(versions.values()) < latest and self.ledger.abandoned(latest) is None:
            prepared = self.ledger.prepared(latest)
            if prepared is None and commit_prepared:
                prepared = self._finish_decided_prepare(latest, actions)
            if prepared is not None and not commit_prepared:
                actions.append(f"batch {latest} is PREPARED and waits for its commit (not done in a dry run)")
                pending = latest
            elif prepared is not None:
                actions.append(f"batch {latest} was PREPARED but not committed everywhere "
                               f"({versions}): committing it now")
                self.commit(latest, recovered=True)
            else:
                ahead = [p for p, v in versions.items() if v >= latest]
                if ahead:
                    raise LedgerMismatch(f"batch {latest} is committed in {ahead} but was never PREPARED; "
                                         f"this ledger was not written by this pipeline's commit path")
                plan = self.ledger.plan(latest)
                if self.cfg.mode == "interval" and plan.run_id != run_id:
                    in_flight = plan
                    actions.append(f"batch {latest} (interval {plan.interval_key}) is "
                                   f"{self.state(latest, versions)} by run {plan.run_id}")
                else:
                    pending = latest
                    actions.append(f"batch {latest} is {self.state(latest, versions)}: it will be re-staged "
                                   f"with the same source range")
        elif latest and self.ledger.committed(latest) is None and self.ledger.abandoned(latest) is None:
            self._write_committed(latest, recovered=True, actions=actions)
            actions.append(f"batch {latest} was committed in every table but its ledger entry was missing "
                           f"(crash after the Delta commit): ledger completed")
        if sweep:
            removed = self.sweep(skip=in_flight.batch_id if in_flight else None)
            if removed:
                actions.append(f"swept {len(removed)} orphan file(s) of dead or zombie attempts")
        committed = min(self.committed_versions().values()) if latest else 0
        return Recovery(latest=latest, committed=committed, pending=pending, actions=actions,
                        in_flight=in_flight)

    def _finish_decided_prepare(self, batch_id: int, actions: list) -> PreparedBatch | None:
        """A verify that won an attempt's "prepare" decision and died before writing PREPARED:
        the attempt's files are kept (abort can no longer remove them), so verify it again and
        write PREPARED now. None when no such attempt verifies."""
        for attempt in self.ledger.attempts(batch_id):
            d = self.ledger.decision(batch_id, attempt)
            if d is None or d["decision"] != "prepare":
                continue
            try:
                prepared = self.verify(batch_id, attempt)
            except (VerifyFailed, NotReady) as e:
                actions.append(f"batch {batch_id} attempt {attempt} was decided for PREPARE but does not verify "
                               f"any more ({e}); the batch is staged again")
                continue
            actions.append(f"batch {batch_id} attempt {attempt} was decided for PREPARE by a verify that did not "
                           f"finish: PREPARED now")
            return prepared
        return None

    # -- plan (begin) ----------------------------------------------------------------
    def plan(self, max_records: int | None = None, interval: dict | None = None,
             run_id: str | None = None) -> tuple[BatchPlan | None, bool]:
        """(plan, is_new). An uncommitted batch is returned as it is (never planned past).

        Interval mode (``interval`` = {"start", "end"}): the range is the interval's records; an
        uncommitted batch of another run raises BatchInFlight (wait for it to be decided).
        """
        t0 = time.time()
        latest = self.ledger.latest_batch_id()
        versions = self.committed_versions()
        self._check_consistent(latest, versions)
        if latest and min(versions.values()) < latest and self.ledger.abandoned(latest) is None:
            pending = self.ledger.plan(latest)
            if self.ledger.prepared(latest) is not None:
                if pending.run_id == run_id:
                    raise ProtocolError(f"batch {latest} of this run is PREPARED and must be committed before "
                                        f"a new plan: clear the run from its `recover` (or `commit`) task")
                # another run's batch between its verify and the end of its commit (runs overlap:
                # interval mode, backfills): wait. A batch whose committer died is committed by
                # the commit task's retries or the next run's recover.
                raise BatchInFlight(f"batch {latest} of run {pending.run_id} is PREPARED and not yet committed "
                                    f"everywhere ({versions}); batches are strictly ordered, so this run waits "
                                    f"for its commit (a run's recover commits it if its run is gone)")
            if self.cfg.mode == "interval" and pending.run_id != run_id:
                raise BatchInFlight(f"batch {latest} (interval {pending.interval_key}) of run {pending.run_id} "
                                    f"is not decided yet; batches are strictly ordered, so this run waits. "
                                    f"If that run is gone without its abort (marked failed or deleted by "
                                    f"hand), clear it so it finishes or abandons its batch, or pause the "
                                    f"pipeline and forget the batch: `make reset-batch PIPELINE={self.app_id} BATCH={latest}`")
            return pending, False
        limit = max_records or self.cfg.source.max_records_per_batch
        source = source_for(self.cfg)
        if self.cfg.mode == "interval":
            if interval is None:
                raise ProtocolError("interval mode: the run has no data interval")
            if _ms(interval["end"]) <= _ms(interval["start"]):
                raise ProtocolError(f"interval mode needs a data interval of non-zero length, got "
                                    f"[{interval['start']}, {interval['end']}) (use a cron schedule, whose "
                                    f"runs cover the time between two ticks)")
            self._check_settled(interval)
            kw = {}
            if self.cfg.source.kind == "files":  # late files: look back at the intervals already planned
                kw = {"lookback": self._lookback(interval["start"]), "published": self._published_slices()}
            rng, n, notes = source.interval_range(_ms(interval["start"]), _ms(interval["end"]), limit,
                                                  earlier=self._last_interval_before(interval["start"]), **kw)
        else:
            interval = None
            rng, n, notes = source.next_range(self._read_so_far(), limit)  # may raise DataLossError
        self.last_late = list(getattr(source, "late", []))  # for the task's log and metrics
        if rng is None:
            for msg in notes:
                log.warning(msg)
            return None, False
        plan = BatchPlan(
            pipeline=self.cfg.name, batch_id=latest + 1, source_kind=self.cfg.source.kind, range=rng,
            rows_in=n, config_fingerprint=self.cfg.fingerprint(), planned_at=utcnow(),
            plan_seconds=round(time.time() - t0, 3), notes=notes, interval=interval, run_id=run_id,
            late=self.last_late,
        )
        if not self.ledger.put_plan(plan):
            raise ConcurrentPlan(f"another planner wrote batch {plan.batch_id} first "
                                 f"({self.layout.plan(plan.batch_id)}); this run planned nothing")
        faults.crash_point("plan.after_record")
        return plan, True

    # -- verify (pre-commit) ---------------------------------------------------------
    def verify(self, batch_id: int, attempt: str, dry_run: bool = False) -> PreparedBatch:
        """PREPARED or an exception: NotReady (wait), VerifyFailed (abort the attempt).

        ``dry_run``: the same checks, but nothing is recorded (the batch stays PLANNED)."""
        t0 = time.time()
        existing = self.ledger.prepared(batch_id)
        if existing is not None:
            if existing.attempt != attempt:
                log.warning("batch %s was already PREPARED by attempt %s; attempt %s lost and its files "
                            "will be swept", batch_id, existing.attempt, attempt)
            return existing
        plan = self.ledger.plan(batch_id)
        if plan is None:
            raise ProtocolError(f"batch {batch_id} has no plan at {self.layout.plan(batch_id)}")
        if self.ledger.abandoned(batch_id) is not None:
            raise VerifyFailed(f"batch {batch_id} was ABANDONED; attempt {attempt} cannot be prepared")
        if self.ledger.aborted_info(batch_id, attempt) is not None:
            raise VerifyFailed(f"batch {batch_id} attempt {attempt} was ABORTED (its files removed); it cannot "
                               f"be prepared: the next run stages the batch again")
        summary, adds, totals = verify_attempt(self.layout, self.ledger, self.fs_for, plan, attempt,
                                               self.participants)
        prepared = PreparedBatch(
            pipeline=self.cfg.name, batch_id=batch_id, attempt=attempt, adds=adds,
            arrow_schema=summary.arrow_schema, partition_by=summary.partition_by,
            fingerprint=fingerprint_of(adds), rows_in=summary.rows_in, rows_valid=summary.rows_valid,
            rows_quarantined=summary.rows_quarantined, rows_published=totals["rows_published"],
            bytes=totals["bytes"], files=totals["files"], prepared_at=utcnow(),
            verify_seconds=round(time.time() - t0, 3), stage_seconds=summary.stage_seconds,
        )
        if dry_run:
            return prepared
        # Win the attempt's decision before PREPARED: an abort racing this verify (a zombie
        # verify, a task marked failed) either won first, and then this attempt is never
        # prepared, or loses, and then it never removes the files that PREPARED names.
        decided = self.ledger.decide(batch_id, attempt, "prepare", {"decided_at": utcnow()})
        if decided["decision"] != "prepare":
            raise VerifyFailed(f"batch {batch_id} attempt {attempt} was ABORTED while it was verified (its "
                               f"files are being removed); it cannot be prepared: the next run stages the "
                               f"batch again")
        if not self.ledger.put_prepared(prepared):
            winner = self.ledger.prepared(batch_id)
            if winner is None:
                raise VerifyFailed(f"batch {batch_id} was ABANDONED while attempt {attempt} was verified")
            log.warning("batch %s: attempt %s verified, but attempt %s was PREPARED first; this "
                        "attempt's files will be swept", batch_id, attempt, winner.attempt)
            return winner
        faults.crash_point("verify.after_prepared")
        return prepared

    # -- commit ----------------------------------------------------------------------
    def _check_committed(self, participant: str, batch_id: int, prepared: PreparedBatch) -> int:
        found = self.participants[participant].find_batch_commit(self.app_id, batch_id)
        if found is None:
            log.warning("%s: txn says batch %s is committed but its commit info is no longer in the "
                        "log history (log cleaned up?); fingerprint not checked", participant, batch_id)
            return -1
        version, info = found
        if info.get("eo.fingerprint") != prepared.fingerprint:
            raise FingerprintMismatch(
                f"{participant} table {self.layout.table(participant)} version {version} holds batch "
                f"{batch_id} with file-set fingerprint {info.get('eo.fingerprint')}, but the PREPARED "
                f"batch has {prepared.fingerprint} (attempt {prepared.attempt}). Another writer "
                f"committed a different file set for this batch; stop and inspect.")
        return version

    def commit(self, batch_id: int, recovered: bool = False) -> CommittedBatch:
        t0 = time.time()
        plan = self.ledger.plan(batch_id)
        prepared = self.ledger.prepared(batch_id)
        if plan is None or prepared is None:
            raise ProtocolError(f"batch {batch_id} is not PREPARED; nothing to commit")
        self._complete_rewinds()
        # Every participant that does not hold the batch yet is checked before the first Delta
        # commit: a batch is published in all its tables or in none (a VACUUM that removed the
        # quarantine's staged files must not leave the sink holding the batch alone).
        todo = {p: prepared.adds[p] for p in PARTICIPANTS
                if self.participants[p].committed_version(self.app_id) < batch_id}
        problems = recheck_files(self.layout, self.fs_for, todo)
        if problems:
            held = [p for p in PARTICIPANTS if p not in todo]
            repair = (f"`make reset-batch PIPELINE={self.app_id} BATCH={batch_id}` to plan and stage it again"
                      if not held else
                      f"the {', '.join(held)} table already holds it, so it cannot be planned again: restore the "
                      f"missing files from a backup (or the table to the version before batch {batch_id} and then "
                      f"reset-batch)")
            raise CommitBlocked(f"PREPARED batch {batch_id} cannot be committed: " + "; ".join(problems) +
                                f". Its staged files were removed (VACUUM or by hand). Repair: {repair}.")
        versions: dict[str, int] = {}
        done_now = 0
        for participant in PARTICIPANTS:
            part = self.participants[participant]
            v = part.committed_version(self.app_id)
            if v >= batch_id:
                versions[participant] = self._check_committed(participant, batch_id, prepared)
                log.info("%s: batch %s already committed at version %s (fingerprint checked): no-op",
                         participant, batch_id, versions[participant])
                continue
            prev = self._prev_live(batch_id)
            if v != prev:
                raise LedgerMismatch(f"{participant} table is at batch {v}; batch {batch_id} cannot be "
                                     f"committed after it (it needs batch {prev})")
            faults.fail_point("commit.before_delta_commit")
            faults.crash_point("commit.before_delta_commit")
            try:
                versions[participant] = part.commit(
                    self.app_id, batch_id, prepared.adds[participant],
                    schema_from_b64(prepared.arrow_schema[participant]),
                    list(prepared.partition_by.get(participant, [])),
                    commit_metadata(plan, prepared, participant), expected_prev=prev,
                    replace=self._replaces(plan),
                )
            except CommitConflict as e:
                log.info("%s", e)
                if part.committed_version(self.app_id) >= batch_id:
                    versions[participant] = self._check_committed(participant, batch_id, prepared)
                    log.info("%s: a concurrent committer published batch %s first (same fingerprint)",
                             participant, batch_id)
                    continue
                raise
            done_now += 1
            log.info("%s: committed batch %s as Delta version %s (%d files)", participant, batch_id,
                     versions[participant], len(prepared.adds[participant]))
            if done_now == 1:
                faults.crash_point("commit.after_first_participant")
        faults.crash_point("commit.after_delta_commit")
        rec = self._write_committed(batch_id, recovered, versions, time.time() - t0)
        try:  # the batch is decided: what its losing and dead attempts left can go now
            swept = self._sweep_batch(batch_id)
            if swept:
                log.info("batch %s: swept %d staged file(s) of other attempts", batch_id, len(swept))
        except Exception as e:  # noqa: BLE001 - clean-up only; the next run's sweep retries it
            log.warning("batch %s committed; sweeping other attempts' files failed (%s); the next run "
                        "retries", batch_id, e)
        return rec

    def _write_committed(self, batch_id: int, recovered: bool, versions: dict | None = None,
                         seconds: float = 0.0, actions: list | None = None) -> CommittedBatch:
        """The ledger's COMMITTED record of a batch every table holds (put-if-absent).

        Its fingerprint is the PREPARED record's, checked against each table's commit info. A
        batch whose PREPARED record is missing (lost by a crash after the commit started, or a
        ledger copied without it) is completed from the tables' Delta commit info instead, only
        when every table holds this pipeline's commit of the batch with one and the same
        fingerprint; otherwise LedgerMismatch, and nothing is written."""
        prepared = self.ledger.prepared(batch_id)
        if prepared is not None:
            fingerprint = prepared.fingerprint
            if versions is None:
                versions = {p: self._check_committed(p, batch_id, prepared) for p in PARTICIPANTS}
        else:
            found = {p: self.participants[p].find_batch_commit(self.app_id, batch_id) for p in PARTICIPANTS}
            prints = {p: (f[1].get("eo.fingerprint") if f else None) for p, f in found.items()}
            fingerprint = prints[PARTICIPANTS[0]]
            if not fingerprint or any(fp != fingerprint for fp in prints.values()):
                held = "; ".join(
                    f"the {p} table {self.layout.table(p)} " + (
                        f"holds it at version {f[0]} (attempt {f[1].get('eo.attempt')}, fingerprint "
                        f"{f[1].get('eo.fingerprint') or 'none'})" if f else
                        "holds it without a commit carrying this pipeline's batch metadata in its history "
                        "(log cleaned up, or another writer)")
                    for p, f in found.items())
                staged = ", ".join(self.ledger.attempts(batch_id)) or "none left"
                raise LedgerMismatch(
                    f"batch {batch_id} of {self.app_id!r} is committed in every table but its PREPARED record "
                    f"({self.layout.prepared(batch_id)}) is missing (lost by a crash?), and the tables' Delta "
                    f"commit info cannot stand in for it: {held}. Nothing was changed. Repair: put the PREPARED "
                    f"record back from a backup of the ledger, or write it again from the attempt the tables "
                    f"hold (attempts in the ledger: {staged}): `python -m eobatch.cli verify {self.app_id} "
                    f"{batch_id} <attempt>`; then run again: recover checks it against every table (a table "
                    f"holding another file set stops with FingerprintMismatch: inspect its history).")
            if versions is None:
                versions = {p: f[0] for p, f in found.items()}
            note = (f"PREPARED record of batch {batch_id} was missing (lost by a crash?); completed from the "
                    f"Delta commit info (fingerprint {fingerprint}, versions {versions})")
            log.warning("%s", note)
            if actions is not None:
                actions.append(note)
        rec = CommittedBatch(pipeline=self.cfg.name, batch_id=batch_id, fingerprint=fingerprint,
                             delta_versions=versions, committed_at=utcnow(),
                             commit_seconds=round(seconds, 3), recovered=recovered)
        if not self.ledger.put_committed(rec):
            rec = self.ledger.committed(batch_id)
        return rec

    # -- abort -----------------------------------------------------------------------
    def abort(self, batch_id: int, attempt: str, reason: str) -> list[str]:
        """Remove one attempt's staged files, after winning its decision ("abort").

        Raises AttemptPrepared when verify won the decision first: then the attempt's files are
        (or will be) PREPARED and must be committed; nothing is removed."""
        prepared = self.ledger.prepared(batch_id)
        if prepared is not None and prepared.attempt == attempt:
            raise AttemptPrepared(f"batch {batch_id} attempt {attempt} is PREPARED: it must be committed, "
                                  f"never aborted")
        decided = self.ledger.decide(batch_id, attempt, "abort", {"reason": reason[:2000], "aborted_at": utcnow()})
        if decided["decision"] != "abort":
            raise AttemptPrepared(f"batch {batch_id} attempt {attempt} was verified and decided for PREPARE "
                                  f"first; it is not aborted (the next run's recover finishes its PREPARE "
                                  f"and commits it)")
        removed = []
        for participant in PARTICIPANTS:
            fs = self.fs_for(participant)
            folder = join(self.layout.table(participant), self.layout.attempt_staging_rel(batch_id, attempt))
            for f in list(fs.list_files(folder)):
                fs.delete(f.path)
                removed.append(f.path)
            fs.remove_empty_dirs(folder)
        return removed

    def _read_so_far(self, pending_rewind: RewindRecord | None = None) -> list[BatchPlan]:
        """The plans whose ranges count as read, in order: all but REWOUND (and ABANDONED) ones.

        Right after a rewind to K (``pending_rewind``: the one being planned now), the last of them
        is a marker of K's start (an empty range at K's first offsets), so a position-based source
        (Kafka) restarts exactly where K started, even when K was the first batch or started after
        a loss it accepted. Once the batch after the rewind is planned, its range carries on.
        """
        rewinds = self.ledger.rewinds() + ([pending_rewind] if pending_rewind else [])
        gone = {b for r in rewinds for b in range(r.to_batch, r.after_batch + 1)}
        plans = [p for p in self.ledger.plans()
                 if p.batch_id not in gone and self.ledger.abandoned(p.batch_id) is None]
        if rewinds:
            last = max(rewinds, key=lambda r: (r.after_batch, -r.to_batch))
            k = self.ledger.plan(last.to_batch)
            if k is not None and not any(p.batch_id > last.after_batch for p in plans) and "partitions" in k.range:
                plans = [p for p in plans if p.batch_id < last.to_batch] + [_start_marker(k)]
        return plans

    def _check_settled(self, interval: dict) -> None:
        """Interval mode: plan an interval only ``source.settle_seconds`` after its end, so that
        files and records still arriving for it (renames, clock skew, slow uploads) are on time."""
        ready = _ms(interval["end"]) + 1000 * self.cfg.source.settle_seconds
        wait = ready - int(time.time() * 1000)
        if wait > 0:
            raise IntervalNotSettled(f"interval {interval['start']}/{interval['end']} is planned "
                                     f"{self.cfg.source.settle_seconds}s after its end (source.settle_seconds): "
                                     f"{wait / 1000:.0f}s to go")

    def _lookback(self, start) -> list[tuple[int, int]]:
        """Interval mode: the ``source.late_lookback_intervals`` intervals before ``start`` that are
        checked for late files, newest first, none before the first interval this ledger planned
        (a pipeline is not answerable for what landed before it started)."""
        from croniter import croniter

        n = self.cfg.source.late_lookback_intervals
        first = min((_ms(p.interval["start"]) for p in self.ledger.plans() if p.interval), default=None)
        if not n or first is None:
            return []
        at = _dt.datetime.fromtimestamp(_ms(start) / 1000, _dt.timezone.utc)
        ticks = croniter(self.cfg.interval_cron, at)
        out, end = [], _ms(start)
        for _ in range(n):
            lo = int(ticks.get_prev(_dt.datetime).timestamp() * 1000)
            if lo < first:
                break
            out.append((lo, end))
            end = lo
        return out

    def _published_slices(self) -> dict[str, set]:
        """Interval mode: slice name -> {(path, size, mtime)} its newest committed live batch
        published (what a late file is judged against)."""
        held = min(self.committed_versions().values())
        out: dict[str, set] = {}
        for plan in sorted(self.ledger.live_plans(), key=lambda p: -p.batch_id):
            if plan.batch_id > held:
                continue
            for name, files in plan.slices().items():
                out.setdefault(name, {(f["path"], f["size"], f["mtime_ms"]) for f in files})
        return out

    def _last_interval_before(self, start) -> BatchPlan | None:
        """Interval mode: the newest live batch of the latest interval that ends at or before
        ``start``: where this interval's records begin, as the ledger recorded it."""
        earlier = [p for p in self.ledger.live_plans() if p.interval and _ms(p.interval["end"]) <= _ms(start)]
        return max(earlier, key=lambda p: (_ms(p.interval["end"]), p.batch_id), default=None)

    def _replaces(self, plan: BatchPlan) -> Replace | None:
        """Interval mode: what this batch's commit replaces: every earlier file of the interval
        slices it publishes. Files staged before slices existed are found by their batch folder
        (those batches published exactly their own interval)."""
        if plan.interval is None:
            return None
        names = set(plan.slices())
        legacy = frozenset(p.batch_id for p in self.ledger.plans() if p.batch_id < plan.batch_id and p.interval
                           and not any("slice" in f for f in p.range.get("files", []))
                           and set(p.slices()) & names)
        return Replace(slices=frozenset(names), batches=legacy)

    # -- abandon (interval mode) -------------------------------------------------------
    def abandon(self, batch_id: int, reason: str) -> bool:
        """Give up a batch that was never PREPARED, so later batches can go ahead.

        Only in interval mode: the batch's range is its interval, which can simply run again.
        (In continuous mode the next batch starts where this one ends: it is re-staged instead.)
        False when the batch was PREPARED first: then it must, and will, be committed.
        """
        if self.cfg.mode != "interval":
            raise ProtocolError("only interval-mode batches can be abandoned")
        if self.ledger.put_abandoned(batch_id, {"reason": reason[:2000], "abandoned_at": utcnow()}):
            return True
        return self.ledger.abandoned(batch_id) is not None

    # -- rewind (repair) ---------------------------------------------------------------
    def rewind(self, to_batch: int, run_id: str | None = None, dry_run: bool = False,
               max_records: int | None = None) -> list[str]:
        """Bring the tables back to before batch ``to_batch`` and read again from its start.

        Delta's RESTORE alone is not enough: it keeps the txn ids, so replayed batches with their
        old ids would be skipped as "already committed". Instead the rewind is recorded first
        (put-if-absent, ``rewinds/<after>-<to>.json``), each table is restored to the version
        before ``to_batch``'s commit, and batches ``to_batch``..``after`` become REWOUND: their
        ranges no longer count as read, and the next batch, with the next new id, starts at
        ``to_batch``'s start. Continuous mode only (in interval mode, run the intervals again).
        """
        if self.cfg.mode != "continuous":
            raise ProtocolError("rewind_to_batch is for continuous mode; in interval mode run the intervals "
                                "again (a manual run with that logical date, or a backfill with reprocessing)")
        done = [r for r in self.ledger.rewinds() if run_id and r.run_id == run_id and r.to_batch == to_batch]
        if done:  # this run asked for it before (a retried or cleared run): once is enough
            return [f"the rewind to before batch {to_batch} was already done by run {run_id}"] + \
                self._complete_rewinds()
        latest = self.ledger.latest_batch_id()
        versions = self.committed_versions()
        self._check_consistent(latest, versions)
        live = [b for b in range(1, latest + 1) if b not in self.ledger.rewound_ids()]
        if to_batch not in live:
            raise ProtocolError(f"cannot rewind to batch {to_batch}: the committed batches that can be rewound "
                                f"are {_ranges(live) or 'none'}")
        if min(versions.values()) < latest or self.ledger.committed(latest) is None:
            raise ProtocolError(f"cannot rewind while batch {latest} is {self.state(latest, versions)}: let a "
                                f"normal run commit it first, or `make reset-batch PIPELINE={self.app_id} "
                                f"BATCH={latest}`")
        restore = {}
        for p in PARTICIPANTS:
            found = self.participants[p].find_batch_commit(self.app_id, to_batch)
            if found is None:
                raise ProtocolError(f"cannot rewind: the {p} table's history no longer has batch {to_batch}'s "
                                    f"commit (log cleaned up)")
            restore[p] = found[0] - 1
            missing = self.participants[p].missing_files_at(restore[p], self.fs_for(p))
            if missing:
                raise ProtocolError(f"cannot rewind to batch {to_batch}: the {p} table's version {restore[p]} "
                                    f"(before that batch) can no longer be restored: {len(missing)} of its files "
                                    f"were removed (VACUUM, e.g. after a compaction), such as {missing[0]}; "
                                    f"nothing was rewound")
        gone = [b for b in live if b >= to_batch]
        rows = sum((self.ledger.prepared(b).rows_published if self.ledger.prepared(b) else 0) for b in gone)
        what = (f"rewind to before batch {to_batch}: tables restored to versions {restore}, batches "
                f"{_ranges(gone)} ({rows} published rows) become REWOUND and batch {latest + 1} reads again "
                f"from batch {to_batch}'s start")
        if dry_run:
            return [f"dry run: would {what}"]
        rec = RewindRecord(pipeline=self.cfg.name, after_batch=latest, to_batch=to_batch,
                           restore_versions=restore, requested_at=utcnow(), run_id=run_id)
        # The rewind and every plan are exclusive through the ledger itself: the rewind reserves
        # batch latest+1 put-if-absent, as the first batch that reads again from to_batch's start.
        # A run that planned latest+1 from the old position first wins; this rewind then did nothing.
        plan = self._replay_plan(rec, max_records, run_id)
        if not self.ledger.put_plan(plan):
            other = self.ledger.plan(plan.batch_id)
            raise ConcurrentPlan(f"cannot rewind now: batch {plan.batch_id} was planned by run "
                                 f"{other.run_id if other else '?'} while this rewind was being checked; "
                                 f"nothing was rewound. Ask again once that batch is committed")
        self.ledger.put_rewind(rec)
        return [what + f"; batch {plan.batch_id} is planned: {plan.range_summary()}"] + self._complete_rewinds()

    def _replay_plan(self, rec: RewindRecord, max_records: int | None, run_id: str | None) -> BatchPlan:
        """Batch ``rec.after_batch + 1``: the first range read again from ``rec.to_batch``'s start."""
        t0 = time.time()
        source = source_for(self.cfg)
        rng, n, notes = source.next_range(self._read_so_far(pending_rewind=rec),
                                          max_records or self.cfg.source.max_records_per_batch)
        if rng is None:  # nothing to read again (e.g. the landing files are gone): an empty batch
            k = self.ledger.plan(rec.to_batch)
            rng, n = (_start_marker(k).range, None) if "partitions" in k.range else ({"files": []}, 0)
        return BatchPlan(
            pipeline=self.cfg.name, batch_id=rec.after_batch + 1, source_kind=self.cfg.source.kind, range=rng,
            rows_in=n, config_fingerprint=self.cfg.fingerprint(), planned_at=utcnow(),
            plan_seconds=round(time.time() - t0, 3), run_id=run_id, rewind=json.loads(rec.to_json()),
            notes=[f"rewind after batch {rec.after_batch} to before batch {rec.to_batch}: reads again from batch "
                   f"{rec.to_batch}'s start"] + notes,
        )

    def _complete_rewinds(self) -> list[str]:
        """Finish a recorded rewind whose RESTORE did not happen yet in some table (a crash).

        Only a table still holding the rewind's ``after_batch`` can be missing it: every commit
        completes pending rewinds first.
        """
        done = []
        recs = self.ledger.rewinds()
        latest = self.ledger.plan(self.ledger.latest_batch_id()) if self.ledger.latest_batch_id() else None
        if latest is not None and latest.rewind:  # a rewind that died between its reservation and its record
            rec = RewindRecord.from_json(json.dumps(latest.rewind))
            if rec.key not in {r.key for r in recs}:
                self.ledger.put_rewind(rec)
                recs = self.ledger.rewinds()
        if not recs:
            return done
        for p in PARTICIPANTS:
            part = self.participants[p]
            held = part.committed_version(self.app_id)
            for rec in recs:
                if rec.after_batch != held:
                    continue
                if part.find_commit("eo.rewind", f"{self.app_id}:{rec.key}", limit=200) is not None:
                    continue
                try:
                    v = part.restore(rec.restore_versions[p], {"eo.pipeline": self.app_id,
                                                               "eo.rewind": f"{self.app_id}:{rec.key}"})
                except Exception as e:  # noqa: BLE001 - a Delta error: say what it blocks and how to repair
                    raise LedgerMismatch(
                        f"the rewind {rec.key} (to before batch {rec.to_batch}) cannot restore the {p} table "
                        f"{self.layout.table(p)} to version {rec.restore_versions[p]}: {e}. Files of that "
                        f"version were removed after the rewind was checked (a VACUUM). Repair: put the missing "
                        f"files back from a backup, then run again; nothing is published until then") from e
                done.append(f"{p}: restored to version {rec.restore_versions[p]} (as version {v}) for the "
                            f"rewind to before batch {rec.to_batch}")
                faults.crash_point("rewind.after_first_restore")
        return done

    # -- reset (repair) ----------------------------------------------------------------
    def reset(self, from_batch: int) -> list[int]:
        """Forget batches ``from_batch``.. that no table holds, so their ranges are planned again.

        The repair for a PREPARED batch whose staged files are gone, and for a gap between
        ledger and tables (a table restored to an older version): the ledger records of those
        batches move to ``_eo_ledger/archive/<time>/``; the next run plans from the end of
        batch ``from_batch - 1`` and the sweep removes their staged files. Refused when any
        table holds one of those batches (that would publish it twice).
        """
        versions = self.committed_versions()
        if max(versions.values()) >= from_batch:
            raise ProtocolError(f"cannot reset to batch {from_batch}: the tables hold batches up to {versions}; "
                                f"resetting would publish them twice")
        latest = self.ledger.latest_batch_id()
        if from_batch < 1 or from_batch > latest:
            raise ProtocolError(f"batch {from_batch} is not in the ledger (batches 1..{latest})")
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        archive = join(self.layout.ledger, "archive", stamp)
        fs = self.ledger.fs
        moved = []
        for b in range(latest, from_batch - 1, -1):  # newest first: a crash leaves a consistent prefix
            for path, name in ((self.layout.committed(b), "committed"), (self.layout.prepared(b), "prepared")):
                if fs.exists(path):
                    fs.write_atomic(join(archive, name, path.rsplit("/", 1)[-1]), fs.read_bytes(path))
                    fs.delete(path)
            for f in list(fs.list_files(self.layout.attempts_dir(b))):
                fs.write_atomic(join(archive, "attempts", relpath(f.path, join(self.layout.ledger, "attempts"))),
                                fs.read_bytes(f.path))
                fs.delete(f.path)
            fs.remove_empty_dirs(self.layout.attempts_dir(b))
            plan = self.layout.plan(b)
            fs.write_atomic(join(archive, "plans", plan.rsplit("/", 1)[-1]), fs.read_bytes(plan))
            fs.delete(plan)
            moved.append(b)
        for b in self._staged_batches():
            if b >= from_batch:
                self._sweep_batch(b, everything=True)
        self.sweep(recent=None)
        return sorted(moved)

    # -- sweep -----------------------------------------------------------------------
    def sweep(self, recent: int | None = 5, skip: int | None = None) -> list[str]:
        """Delete staged files no commit will ever reference.

        Looks at the ``recent`` newest batches (all when None), and only at what is decided,
        so a sweep never races a live attempt (another run's, or a zombie's that may still be
        PREPARED): for a PREPARED (or committed) batch every file outside its prepared set goes
        (failed attempts, zombies that finished late); for an ABANDONED batch everything goes;
        for an undecided batch only ABORTED attempts go. The dead attempts of an undecided batch
        stay until it is decided: the commit removes them (``_sweep_batch``).
        """
        latest = self.ledger.latest_batch_id()
        removed: list[str] = []
        for b in self._staged_batches():
            if b > latest or b == skip or (recent is not None and b < latest - recent):
                continue  # planned after this sweep began (a live run's), or out of scope
            removed += self._sweep_batch(b)
        return removed

    def _staged_batches(self) -> list[int]:
        ids = set()
        for participant in PARTICIPANTS:
            for d in self.fs_for(participant).list_dirs(self.layout.staging_root(participant)):
                if d.startswith("b") and d[1:].isdigit():
                    ids.add(int(d[1:]))
        return sorted(ids)

    def _sweep_batch(self, b: int, everything: bool = False) -> list[str]:
        """The staged files of batch ``b`` that no commit will reference (see ``sweep``);
        ``everything``: all of them (batches that ``reset`` forgot)."""
        prepared = None if everything else self.ledger.prepared(b)  # immutable once read
        if everything or prepared is not None or self.ledger.abandoned(b) is not None:
            dead = None  # decided: every file outside the prepared set (if any) goes
        else:
            dead = {a for a in self.ledger.attempts(b) if self.ledger.aborted_info(b, a) is not None}
            if not dead:
                return []
        removed: list[str] = []
        for participant in PARTICIPANTS:
            fs = self.fs_for(participant)
            table = self.layout.table(participant)
            keep = {a["path"] for a in prepared.adds.get(participant, [])} if prepared else set()
            folder = join(table, self.layout.batch_staging_rel(b))
            for f in list(fs.list_files(folder)):
                rel = relpath(f.path, table)
                if rel in keep or (dead is not None and rel.split("/")[2] not in dead):  # eo_batches/b../<attempt>/
                    continue
                fs.delete(f.path)
                removed.append(f.path)
            fs.remove_empty_dirs(folder)
        return removed


def _start_marker(k: BatchPlan) -> BatchPlan:
    """An empty range at batch ``k``'s first offsets (position-based sources)."""
    start = {p: [fr, fr] for p, (fr, _to) in k.range["partitions"].items()}
    return BatchPlan(pipeline=k.pipeline, batch_id=k.batch_id, source_kind=k.source_kind,
                     range={**k.range, "partitions": start, "lost": {}}, rows_in=0,
                     config_fingerprint=k.config_fingerprint, planned_at=k.planned_at)


def _ranges(ids: list[int]) -> str:
    """[1, 2, 3, 5] -> '1..3, 5'."""
    out, ids = [], sorted(ids)
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}..{ids[j]}")
        i = j + 1
    return ", ".join(out)


__all__ = ["Protocol", "Recovery", "ProtocolError", "BatchInFlight", "IntervalNotSettled", "AttemptPrepared", "LedgerMismatch", "ConcurrentPlan", "CommitBlocked",
           "FingerprintMismatch", "NotReady", "VerifyFailed"]
