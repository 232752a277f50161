"""The facade of one pipeline's protocol: ``Protocol``, which the Airflow tasks, the CLI and the
tests drive.

Its verbs walk a batch through the state machine (the package's docstring draws it), as
Flink's two-phase commit does a transaction: begin, pre-commit, commit, abort, and a commit
issued again on restore. Each verb hands over to the object of its phase, which ``Protocol``
builds and holds::

    verb                        phase                                  object (module)
    plan, plan_batches          begin: a batch's exact source range    planning     (planning.py)
    verify                      pre-commit: an attempt PREPARED        verifying    (verify.py)
    commit                      commit: every table, then COMMITTED    committing   (committing.py)
    abort, abandon              abort: an attempt's files; an          here
                                interval's batch given up
    recover                     the start of every run                 recovering   (recovery.py)
    rewind, reset, forget_void  the operator's repairs                 repairs      (repairs.py)
    sweep                       the staged files no commit references  sweeper      (repairs.py)

``check_stage`` is the stage task's check (the Spark job stages). Beside the phases:
``replacing.py`` (interval mode: the files a commit replaces, which plan, verify and commit
check), ``config_check.py`` (the configuration check every phase runs first) and ``state.py``
(the decisions, pure functions). Each object reads ``Protocol`` only through its public
queries (``queries.Queries``, a structural type): none imports this module, none calls a
private method of another object.
"""

from __future__ import annotations

from typing import Any

from ..config.pipeline import PipelineConfig
from ..core.checkpoint import History, ReadSoFar, RewindKey
from ..core.formats import (
    JSON,
    STAGED,
    BatchPlan,
    BatchState,
    CommittedBatch,
    Layout,
    PreparedBatch,
    RewindRecord,
    utcnow,
)
from ..core.ledger import Ledger
from ..errors import AttemptPrepared, ProtocolError
from ..sinks import LEGACY_CONTRACT, Participant, sink_for
from ..sources import kind_for
from ..sources.base import Planner
from ..storage.fs import Storage, join, storage_for
from . import config_check
from . import state as st
from .committing import Committing
from .planning import Planning
from .recovery import Recovering, Recovery
from .repairs import Repairs, Sweeper
from .replacing import Replacing
from .replay import void_files
from .verify import Verifying


class Protocol:
    """One pipeline's protocol, the facade of its objects: its ledger, its participants (tables)
    and their storages; the phases of a batch (``plan``, ``verify``, ``commit``, ``abort``,
    ``abandon``) and ``recover``, each handed over to the object of its phase (``planning``,
    ``verifying``, ``committing``, ``recovering``); the repairs and the sweep beside them
    (``repairs``, ``sweeper``); and the queries they all decide by."""

    def __init__(self, cfg: PipelineConfig, storage_options: JSON | None = None):
        self.cfg = cfg
        self.app_id = cfg.app_id
        self.layout = Layout(cfg.sink_table, cfg.quarantine_table)
        self.ledger = Ledger(self.layout)
        self.names = cfg.participants  # the tables of a batch, in commit order
        self._fs: dict[str, Storage] = {p: storage_for(self.layout.table(p)) for p in self.names}
        self.sink = sink_for(cfg)  # the sink's kind: its tables, its check of staged rows
        self.participants: dict[str, Participant] = self.sink.participants(cfg, self.layout, self.fs_for,
                                                                           storage_options)
        # what the last plan found, which ``planning`` sets (the plan task and the backlog read them):
        self.last_late: list[JSON] = []  # late files the last plan() found (interval mode)
        self.last_skipped: list[JSON] = []  # landing inputs the last plan() skipped, and planned files it will not read
        self.last_warnings: list[str] = []  # why the last plan_batches() carries fewer batches than it could
        # the planner of the last plan_batches(): after a plan, the backlog asks it (a landing folder is
        # listed once per plan task, not again for the count)
        self.last_planner: Planner | None = None
        # ``plan_batches``' new plans: the history they were planned from with them, and the first (the
        # oldest batch not yet published); what the plan task's backlog reads instead of the ledger
        self.last_reading: tuple[History, BatchPlan | None] | None = None
        self.sweeper = Sweeper(self.app_id, self.layout, self.ledger, self.participants, self.fs_for)
        self.repairs = Repairs(self, self.sweeper)
        self.replacing = Replacing(self)  # interval mode: the files a batch's commit replaces
        self.planning = Planning(self, self.replacing)
        self.verifying = Verifying(self, self.repairs, self.replacing)
        self.committing = Committing(self, self.repairs, self.sweeper, self.replacing)
        self.recovering = Recovering(self, self.repairs, self.committing)

    # -- the phases of a batch: begin (plan), pre-commit (verify), commit, abort ----------
    def plan(self, max_records: int | None = None, interval: dict[str, str] | None = None,
             run_id: str | None = None) -> tuple[BatchPlan | None, bool]:
        """(plan, is_new): ``plan_batches`` of one batch; the first batch still to decide when
        there is one."""
        return self.planning.plan(max_records=max_records, interval=interval, run_id=run_id)

    def plan_batches(self, max_records: int | None = None, interval: dict[str, str] | None = None,
                     run_id: str | None = None, max_batches: int = 1) -> tuple[list[BatchPlan], bool]:
        """(plans, are_new). The batches still to decide are returned as they are, in order (never
        planned past); otherwise up to ``max_batches`` new batches, each with its own plan record
        (put-if-absent, in order, each range starting where the one before ends), until the
        source has nothing more. A run that plans several marks them as one run's
        (``BatchPlan.run_first``): they commit in order, and until they have, every table holds
        at least the batch before the first of them. What the plan found is left in ``last_late``,
        ``last_skipped``, ``last_warnings``, ``last_planner`` and ``last_reading``.

        Interval mode (``interval`` = {"start", "end"}): one batch, the interval's records; an
        uncommitted batch of another run raises BatchInFlight (wait for it to be decided).
        """
        return self.planning.plan_batches(max_records=max_records, interval=interval, run_id=run_id,
                                          max_batches=max_batches)

    def check_stage(self, batch_id: int) -> BatchPlan | None:
        """The stage task's check before it starts the job: the pipeline's file must say what
        batch ``batch_id``'s plan recorded (``config.contract``), since the job is built from the
        file: ConfigChanged (its repair) otherwise. A batch is staged, like it is verified and
        committed, only under the configuration that planned it (the job checks its spec again,
        verify checks what the job recorded). None when the batch has no plan (the job says so).
        A batch every table holds (a late stage task, after a recover committed it) is decided, as
        for ``commit``: an edit since its plan is taken by the next batches, and the refusal's
        advice, putting the old value back, would hold them up (the job refuses a PREPARED batch)."""
        plan = self.ledger.plan(batch_id)
        if plan is not None:
            self.check_config(batch_id, self.committed_versions(), plan=plan)
        return plan

    def verify(self, batch_id: int, attempt: str, dry_run: bool = False) -> PreparedBatch:
        """Pre-commit: check every manifest, file, size, footer, count and schema of a staged
        attempt, then write PREPARED put-if-absent (after winning the attempt's decision against
        an abort): from then on the batch must commit. PREPARED or an exception: NotReady (wait),
        VerifyFailed (abort the attempt).

        ``dry_run``: the same checks, but nothing is recorded (the batch stays PLANNED)."""
        return self.verifying.verify(batch_id, attempt, dry_run=dry_run)

    def commit(self, batch_id: int, recovered: bool = False) -> CommittedBatch:
        """Commit PREPARED batch ``batch_id``: one Delta transaction per participant, in commit order,
        each carrying the batch's txn version and fingerprint (a table that holds the batch already
        is checked, not committed again), then the ledger's COMMITTED record. ``recovered``: done by
        ``recover``, not by the batch's own commit task. CommitBlocked when its staged files are gone."""
        return self.committing.commit(batch_id, recovered=recovered)

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
        for participant in STAGED:
            fs = self.fs_for(participant)
            folder = join(self.layout.table(participant), self.layout.attempt_staging_rel(batch_id, attempt))
            for f in list(fs.list_files(folder)):
                fs.delete(f.path)
                removed.append(f.path)
            fs.remove_empty_dirs(folder)
        return removed

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

    # -- recover: the start of every run ---------------------------------------------------
    def recover(self, sweep: bool = True, run_id: str | None = None, commit_prepared: bool = True) -> Recovery:
        """The start of every run: check that the ledger and the tables agree (LedgerMismatch when
        they do not), finish a rewind, commit the PREPARED batches (not when ``commit_prepared`` is
        False: a dry run), hand back the first batch still to decide for re-staging (``pending``)
        and, with ``sweep``, remove the staged files of dead or zombie attempts."""
        return self.recovering.recover(sweep=sweep, run_id=run_id, commit_prepared=commit_prepared)

    # -- the repairs and the sweep (``repairs.py``): handed over ---------------------------
    def rewind(self, to_batch: int, run_id: str | None = None, dry_run: bool = False,
               max_records: int | None = None, accept_loss: bool = False) -> list[str]:
        """``Repairs.rewind``: bring the tables back to before batch ``to_batch`` and read again from its start."""
        return self.repairs.rewind(to_batch, run_id=run_id, dry_run=dry_run, max_records=max_records,
                                   accept_loss=accept_loss)

    def reset(self, from_batch: int, accept_loss: bool = False) -> list[int]:
        """``Repairs.reset``: forget batches ``from_batch``.. that no table holds."""
        return self.repairs.reset(from_batch, accept_loss=accept_loss)

    def forget_void(self, after: int, probe: int | None = None) -> list[int]:
        """``Repairs.forget_void``: forget the first void plan after batch ``after`` and the plans after it."""
        return self.repairs.forget_void(after, probe=probe)

    def sweep(self, recent: int | None = 5, skip: int | None = None) -> list[str]:
        """``Sweeper.sweep``: delete staged files no commit will ever reference."""
        return self.sweeper.sweep(recent=recent, skip=skip)

    # -- queries: what the phases and the repairs decide by (``queries.Queries``) ----------
    def inputs(self, participant: str) -> str:
        """The participant whose staged files ``participant``'s commit takes."""
        return self.participants[participant].reads_from or participant

    def fs_for(self, participant: str) -> Storage:
        """The storage of ``participant``'s table."""
        return self._fs[participant]

    def committed_versions(self) -> dict[str, int]:
        """{participant: the newest batch its table holds} (its txn version for this pipeline)."""
        return {p: part.committed_batch(self.app_id) for p, part in self.participants.items()}

    def state(self, batch_id: int, versions: dict[str, int] | None = None) -> BatchState | None:
        """Batch ``batch_id``'s state (``state.batch_state``), None when it has no plan; ``versions``:
        ``committed_versions()`` when the caller read them already."""
        versions = versions if versions is not None else self.committed_versions()
        if not self.ledger.has_plan(batch_id):
            return None
        facts = st.BatchFacts(
            planned=True, abandoned=self.is_abandoned(batch_id),
            prepared=self.ledger.prepared(batch_id) is not None,
            staged=any(self.ledger.stage_summary(batch_id, a) and not self.ledger.aborted_info(batch_id, a)
                       for a in self.ledger.attempts(batch_id)),
            rewound=batch_id in self.ledger.rewound_ids())
        return st.batch_state(facts, min(versions.values()), batch_id)

    def as_of(self, batch_id: int) -> dict[str, dict[str, Any]]:
        """The pipeline as of batch ``batch_id``: {participant: {"table", "version"}}, each table at
        the version of the commit that carried the batch, one consistent cut of every table (the
        sink, the quarantine, a sink's own tables): read them all at these versions and no table is
        a batch ahead of another. ProtocolError for a batch that is not committed (or rewound)."""
        state = self.state(batch_id)
        if state != "COMMITTED":
            raise ProtocolError(f"batch {batch_id} of {self.app_id} is {state or 'not in the ledger'}: only a "
                                f"committed batch is a cut of the pipeline's tables")
        committed = self.ledger.committed(batch_id)
        versions = dict(committed.delta_versions) if committed is not None else {}
        out = {}
        for name, part in self.participants.items():
            if name not in versions:  # a commit whose ledger copy is not written yet: the table's log says
                found = part.find_batch_commit(self.app_id, batch_id)
                if found is None:
                    raise ProtocolError(f"the {name} table {part.uri} no longer lists the commit of batch {batch_id} "
                                        f"in its history (log cleanup): its version is not known")
                versions[name] = found[0]
            out[name] = {"table": self.layout.table(name), "version": int(versions[name])}
        return out

    def staged_attempt(self, batch_id: int) -> str | None:
        """An attempt of the batch that is STAGED (its stage summary written, no abort decided),
        the newest try's first (``t<try>-...``); None when there is none. What a run that carries
        several batches verifies instead of staging the batch again."""
        def order(attempt: str) -> tuple[int, str]:
            head = attempt.split("-", 1)[0]
            return (int(head[1:]) if head[:1] == "t" and head[1:].isdigit() else 0), attempt
        for a in sorted(self.ledger.attempts(batch_id), key=order, reverse=True):
            if self.ledger.stage_summary(batch_id, a) is not None and self.ledger.aborted_info(batch_id, a) is None:
                return a
        return None

    def is_abandoned(self, batch_id: int) -> bool:
        """Was batch ``batch_id`` ABANDONED (its record decided put-if-absent)?"""
        return self.ledger.abandoned(batch_id) is not None

    def prev_live(self, batch_id: int) -> int:
        """The batch the tables must hold before ``batch_id`` commits (``state.prev_live``)."""
        return st.prev_live(batch_id, self.is_abandoned)

    def undecided_ids(self, latest: int, versions: dict[str, int]) -> list[int]:
        """The batches still to decide, oldest first (``state.undecided_ids``); none when the newest
        batch ``latest`` is decided (``state.undecided``)."""
        if not st.undecided(latest, versions, bool(latest) and self.is_abandoned(latest)):
            return []
        return st.undecided_ids(latest, versions, self.is_abandoned)

    def check_consistent(self, latest: int, versions: dict[str, int]) -> None:
        """LedgerMismatch unless the ledger (newest batch ``latest``) and the tables (``versions``)
        agree (``state.check_consistent``)."""
        need = st.need_held(self.ledger.require_plan(latest) if latest else None, self.is_abandoned)
        st.check_consistent(self.app_id, {p: self.layout.table(p) for p in versions}, self.layout.ledger, latest,
                            need, versions)

    def check_config(self, batch_id: int, versions: dict[str, int] | None = None,
                     plan: BatchPlan | None = None) -> None:
        """A configuration edit is an event of the protocol (``config.contract``): refuse
        (ConfigChanged) a TABLE key that differs from batch ``batch_id``'s plan, and a PENDING key
        when that batch is not decided yet (``plan`` given: it is, for verify and commit); and a
        sink of another kind than the plan's (``config_check.check_config``)."""
        config_check.check_config(self, batch_id, versions, plan)

    def sink_record(self) -> str | None:
        """The plan's ``sink``: None for an append sink (as plans written before merge sinks)."""
        contract = self.cfg.sink_contract
        return None if contract == LEGACY_CONTRACT else contract

    def read_so_far(self, pending_rewind: RewindRecord | None = None, hist: History | None = None) -> ReadSoFar:
        """The plans whose ranges count as read (``state.read_so_far``), from the newest usable
        checkpoint and the plans after it; ``pending_rewind``: a rewind being planned now,
        counted as if recorded."""
        hist = hist or self.ledger.history(pending_rewind=pending_rewind)

        def every_record() -> list[BatchPlan]:
            rewinds: list[RewindRecord] = self.ledger.rewinds() + ([pending_rewind] if pending_rewind else [])
            return st.read_so_far(self.ledger.plans(), rewinds, self.is_abandoned, self.start_marker)

        void: dict[str, str] | None = None
        held: list[tuple[str, str]] = []  # replay lineages that cannot be read: skipped by the plan

        def void_file(path: str) -> str | None:  # read once, when a landing-files planner first asks
            nonlocal void
            if void is None:
                void = void_files(self.cfg, self.layout, self.rewinds_in_effect(hist=hist), held)
            return void.get(path)

        reads = hist.read_so_far(self.start_marker, every_record, void_file)
        reads.skipped_inputs = held
        reads.kept_discovery = lambda: self.ledger.discovery(hist.newest_digest)
        return reads

    def rewinds_in_effect(self, hist: History | None = None) -> list[RewindKey]:
        """Every rewind recorded (with the one being planned now, when ``hist`` counts it), and the
        rewind that reserved the newest batch and died before its record (``Repairs.complete_rewinds``
        records it): what undoes batches (``state.undoing``), from the moment its reservation is
        written. From ``hist`` when given (no listing: what a plan reads anyway)."""
        if hist is not None:
            keys, latest = set(hist.rewinds), hist.latest
            reserved = hist.plan(latest) if latest else None
        else:
            keys, latest = set(self.ledger.rewind_keys()), self.ledger.latest_batch_id()
            reserved = self.ledger.plan(latest) if latest else None
        if reserved is not None and reserved.rewind:
            key = RewindKey(int(reserved.rewind["after_batch"]), int(reserved.rewind["to_batch"]))
            if key not in self.ledger.cancelled_rewinds():
                keys.add(key)
        return sorted(keys)

    @staticmethod
    def start_marker(k: BatchPlan) -> BatchPlan | None:
        """Batch ``k``'s start as an empty range of its source kind (``state.start_marker``)."""
        return st.start_marker(k, kind_for(k.source_kind).start_marker(k.range))


__all__ = ["Protocol", "Recovery"]  # Recovery: what recover hands back (recovery.py)
