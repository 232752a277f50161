"""Issue 41 ("never stuck") in the model-based test: the machine of ``test_protocol_model.py`` (the
REAL verbs on REAL local storage and delta-rs tables, every rule, race, crash, zombie and foreign
writer of it) with DAG RUNS among its actors, driven the way the Airflow tasks drive them: through
``eobatch.protocol.batch_run.BatchRun``.

DAG runs (slots r1 and r2; r0 stays the plain actor of ``ProtocolModel``, with its rewinds and
``stage_ahead``)
    ``BatchRun.recover`` -> ``BatchRun.plan`` (a run of one to three batches) -> the stage task:
    ``BatchRun.stage_attempts`` (a kept STAGED attempt is verified as it is, every other batch gets
    a new attempt ``t<try>-...``), then its job stages the batches it was given, in order -> the
    verify sensor (``BatchRun.verify``, batch after batch, as ``verify_run``) -> ``BatchRun.commit``
    of each batch, in order. A failed stage task is retried (a new try: ``stage_attempts`` again,
    at most three tries) or the run ends with the abort task: ``BatchRun.fail_run`` over the run's
    batches and the attempts of the stage task's last try (its XCom; none when that try failed
    before choosing them). A verify that fails ends the run with the abort task too.

The stage job's limits and waits, as actors
    ``stage_limit``     the job of batches b1..bk stages b1..bj (j < k) and dies at a resource limit
                        (open files, memory): batch b(j+1) is left with some files and manifests
                        and no stage summary, or with nothing at all; the stage task fails.
    ``stage_killed``    the stage task passes ``retries.stage_timeout_seconds`` while its job is in
                        the middle of a batch: the task is killed (its try fails). Sometimes the
                        job itself lives on (cluster mode): a ZOMBIE JOB that goes on staging the
                        batches it was given, one per ``zombie_job`` step, with the plans and the
                        pipeline file it read when it started, long after the run's abort and
                        later runs.
    ``limit_run``       a DAG run goes from where it is (recover, a plan of up to three batches) to a
                        ``stage_limit`` or ``stage_killed`` and its abort task at once (invariants
                        after each verb): the issue's scenario, common in every example.
    ``replan_pending``  an operator triggers a run with ``RunParams(replan_pending=True)`` at any
                        time: between two verbs, while another run acts at one of its interleave
                        points, or acting at one of another run's interleave points (a stage, an
                        abort, a commit or a recover in flight; a zombie attempt of a batch it
                        forgets stages and verifies late), a verify or a plan of several batches
                        among them (the two product bugs this model found, ``test_replan_pending_*``).

Invariants (after every step, on top of those of ``ProtocolModel``; independent readers only)
    7. every batch a table holds published exactly the records of its planned range (read from
       the raw plan record and the Parquet files its commit added): a kept STAGED attempt that
       verifies publishes its plan's range, and only while that plan is the one it staged;
    8. an attempt that verify rejected is never kept: the abort task keeps only an attempt with a
       stage summary and no decision, and a VerifyFailed leaves the decision "abort" (the stage
       task of every later run then gives the batch a new attempt);
    9. at the end of each example, clean DAG runs (no faults, three batches each) finish what is
       left: a clean run fails only on an attempt some earlier run staged (each such failure
       decides it "abort", so the next clean run goes on), ``find_stuck`` is then None, and every
       landed record is published once (``ProtocolModel``'s drain and checks).
   10. the raw plan records are batches 1..latest, none missing.

Settings: the CI profile runs ``EOBATCH_MODEL_LIMITS_CI_EXAMPLES`` (default 60) derandomized
examples of up to 30 steps (about 30 s on 2 cores); ``EOBATCH_MODEL_EXAMPLES=<n>`` (``make
model-check``) runs n random examples of up to 50 steps.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import uuid
from pathlib import Path
from typing import cast

import pyarrow.parquet as pq
import pytest
from hypothesis import event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from eobatch.core import faults
from eobatch.core.stuck import find_stuck
from eobatch.protocol import BatchInFlight, CommitBlocked, ConcurrentPlan, ConfigChanged, Protocol, ProtocolError
from eobatch.protocol.batch_run import BatchRun, RunParams
from eobatch.protocol.verify import NotReady, VerifyFailed
from model.test_protocol_model import (
    APP,
    MAX_RECORDS,
    SLOTS,
    Actor,
    Crash,
    PlanPinned,
    ProtocolModel,
    _read_json_dir,
)
from support.pyarrow_stager import JobRefused, stage

DAG_SLOTS = (1, 2)
STAGE_TRIES = 3  # the stage task's tries (retries.stage + 1) in the model


class RunActor(Actor):
    """A DAG run: its batches, the attempts its stage task's last try chose (XCom), its tries."""

    def __init__(self, machine, slot: int, incarnation: int, params: RunParams | None = None):
        super().__init__(machine, slot, incarnation)
        self.run_id = f"dag-{slot}-{incarnation}"
        self.params = params or RunParams()
        self.batches: list[int] = []
        self.attempts: dict[int, str] = {}
        self.tries = 0
        self.stage_failed = False

    def run(self) -> BatchRun:
        return BatchRun(self.proto, run_id=self.run_id, params=self.params)

    def __repr__(self):
        return (f"<{self.name} dag {self.run_id} {self.phase} batches={self.batches} attempts={self.attempts}"
                f"{' replan' if self.params.replan_pending else ''}{' zombie' if self.zombie else ''}>")


class RunLimitsModel(ProtocolModel):
    def __init__(self) -> None:
        self.by_file: dict[str, tuple[set[str], list[str]]] = {}  # landing file -> (good order_ids, bad lines)
        self.kept: dict[tuple[int, str], str | None] = {}  # (batch, attempt) kept by an abort -> its plan digest then
        self.zombie_jobs: list[dict] = []  # jobs that outlived their killed stage task
        self.range_checked: set[tuple[str, int]] = set()  # (participant, batch) whose published range was checked
        self.replans = 0
        self.replanning: list[str] = []  # the replan_pending runs whose recover runs now
        super().__init__()

    # -- actors ----------------------------------------------------------------------------------
    def _new_actor(self, slot: int) -> Actor:
        if slot not in DAG_SLOTS:
            return super()._new_actor(slot)
        self.incarnations[slot] += 1
        return RunActor(self, slot, self.incarnations[slot])

    @staticmethod
    def _dag(a: Actor) -> bool:
        return isinstance(a, RunActor) and not a.zombie

    def _verbs(self, a: Actor) -> list[str]:
        if not self._dag(a):
            return super()._verbs(a)
        assert isinstance(a, RunActor)
        return {
            "idle": ["recover"],
            "ready": ["plan"],
            "planned": ["stage", "stage", "stage_limit", "stage_killed"],
            "staged": ["verify"],
            "failed": ["abort", "stage"] if a.stage_failed and a.tries < STAGE_TRIES else ["abort"],
            "prepared": ["commit"],
        }[a.phase]

    def _landed(self, path: str) -> tuple[set[str], list[str]]:
        """(good order_ids, bad lines) of a landing file, read from the file (cached)."""
        if path not in self.by_file:
            bad = set(self.bad)
            goods, bads = set(), []
            for line in Path(path).read_text().splitlines():
                if line in bad:
                    bads.append(line)
                elif line.strip():
                    goods.add(json.loads(line)["order_id"])
            self.by_file[path] = (goods, bads)
        return self.by_file[path]

    # -- repairs: the operator's, with the pipeline paused ------------------------------------------
    def _config_refused(self, a: Actor | None, e: ConfigChanged, verb: str) -> None:
        if self.replanning:
            # Not explored: the operator's repair (a reset-batch) while a replan_pending run's reset is
            # half done; repairs run with the pipeline paused (docs/site/operations.md). The run fails;
            # the repair is made when the refusal meets a run again.
            event("config edit refused inside a replan: the repair waits")
            note(f"  {verb} refused the configuration inside a replan's reset: {e}")
            if a is not None:
                self._drop(a, f"{verb} refused the configuration")
            return
        try:
            super()._config_refused(a, e, verb)
        except ProtocolError as stale:
            # two runs met the same refusal, one inside the other's step: the operator follows the
            # second message after the first repair was made (the batch it names is forgotten already)
            if "is not in the ledger" not in str(stale):
                raise
            event("config edit refused: the repair was made already")
            if a is not None and self.actors[a.slot] is a:
                self._drop(a, f"{verb} refused the configuration")

    def _blocked(self, a: Actor, e: CommitBlocked) -> None:
        if self.replanning:  # as above: the reset-batch it names waits for a run after the replan
            event("CommitBlocked inside a replan: the repair waits")
            note(f"  CommitBlocked inside a replan's reset: {e}")
            return
        super()._blocked(a, e)

    # -- the verbs of a DAG run ------------------------------------------------------------------
    def _do_recover(self, a: Actor, pick: int) -> None:
        if not self._dag(a):
            return super()._do_recover(a, pick)
        assert isinstance(a, RunActor)
        if a.params.replan_pending:
            self.replanning.append(a.name)
        try:
            r = a.run().recover()
        except CommitBlocked as e:
            self._blocked(a, e)
            self._drop(a, "the recover task failed (CommitBlocked, repaired)")
            return
        except ProtocolError as e:
            if not a.params.replan_pending or isinstance(e, ConfigChanged):
                raise
            assert any(why in str(e) for why in ("replan_pending", "resetting would publish them twice",
                                                 "was decided for PREPARE by a verify")), str(e)
            event("replan_pending: refused" + (" (PREPARED)" if "is PREPARED" in str(e) else " (held)"))
            note(f"  replan_pending refused: {e}")
            self._drop(a, "replan_pending refused: the run fails")
            return
        finally:
            if a.params.replan_pending:
                self.replanning.remove(a.name)
        forgot = [line for line in r.lines if line.startswith("replan_pending: batches")]
        if a.params.replan_pending:
            event("replan_pending: forgot batches" if forgot else "replan_pending: nothing pending")
        note("  " + "; ".join(r.lines[1:]))
        a.phase = "ready"

    def _do_plan(self, a: Actor, pick: int) -> None:
        if not self._dag(a):
            return super()._do_plan(a, pick)
        assert isinstance(a, RunActor)
        run = BatchRun(a.proto, run_id=a.run_id,
                       params=RunParams(max_batches_per_run=a.params.max_batches_per_run or 3 - pick % 3))
        try:
            r = run.plan()
        except (ConcurrentPlan, BatchInFlight) as e:
            event(f"dag plan: {type(e).__name__}")
            note(f"  {e}")
            self._drop(a, "the plan task failed")
            return
        except ProtocolError as e:
            if "of this run is PREPARED" not in str(e):
                raise
            event("dag plan: own run's batch PREPARED")
            self._drop(a, "plan failed: clear the run from its recover task")
            return
        if r.skip:
            self._drop(a, "nothing new: the run ends")
            return
        a.batches = list(cast(list, r.value))
        a.batch, a.attempt, a.attempts, a.group = a.batches[0], None, {}, []
        a.phase = "planned"
        event(f"dag plan: {len(a.batches)} batch(es)" + ("" if r.detail.get("new") else " handed back"))
        note(f"  planned {a.batches}")

    def _do_stage(self, a: Actor, pick: int, dies: bool = False) -> None:
        if not self._dag(a):
            return super()._do_stage(a, pick, dies)
        self._stage_task(a, pick, "dies" if dies else "full")

    def _do_stage_limit(self, a: Actor, pick: int) -> None:
        self._stage_task(a, pick, "limit")

    def _do_stage_killed(self, a: Actor, pick: int) -> None:
        self._stage_task(a, pick, "killed")

    def _stage_task(self, a: Actor, pick: int, how: str) -> None:
        """One try of the stage task: ``stage_attempts`` (the attempts pushed to XCom before the
        job starts), then the job: all of its batches (``full``), the first j and part of the next
        (``limit``: a resource limit; ``killed``: the task's time bound, the job maybe living on),
        or part of the first and a kill -9 of everything (``dies``: the crash rule)."""
        assert isinstance(a, RunActor)
        a.tries += 1
        a.attempts = {}  # a new try: the XCom of the last one is gone
        chosen = a.run().stage_attempts(a.batches, lambda: f"t{a.tries}-{uuid.uuid4().hex[:12]}")
        a.attempts = dict(cast(dict, chosen.value))
        todo = dict(sorted(chosen.detail["stage"].items()))
        if a.attempts:  # what the rules of one batch take (a third party's abort of "the run's attempt")
            a.batch = min(a.attempts)
            a.attempt = a.attempts[a.batch]
        for b, att in a.attempts.items():  # (8) a kept attempt is STAGED with no decision
            if b not in todo:
                d = self._raw_decision(b, att)
                assert self._raw_summary(b, att) and (d is None or d["decision"] == "prepare"), \
                    f"(8) stage_attempts kept batch {b} attempt {att}: summary {self._raw_summary(b, att)}, decision {d}"
                event("dag stage: a kept STAGED attempt taken as it is")
        note(f"  try {a.tries}: attempts {a.attempts}, job stages {sorted(todo)}")
        order = list(todo)
        parts = 1 + pick % 2
        stop = (len(order) if how == "full" else 0 if how == "dies"
                else max(len(order) - 1 - (pick // 2) % max(len(order), 1), 0))  # most often: all but the last
        if how != "full" and not order:
            how = "full"  # no job: nothing to kill
        cfg = self.cfg
        pinned = {b: (a.proto.ledger.plan(b), a.proto.ledger.plan_digest(b)) for b in order}
        for i, b in enumerate(order):
            if pinned[b][0] is None:  # forgotten since (a replan, a reset): the job fails on it
                event("dag stage: the job found no plan")
                note(f"  batch {b} has no plan: the job fails")
                a.phase, a.stage_failed = "failed", True
                return
            if i == stop:
                break
            try:
                stage(a.proto, b, todo[b], partitions=parts)
            except JobRefused as e:
                event("dag stage: the job refused")
                note(f"  {e}")
                a.phase, a.stage_failed = "failed", True
                return
        if how == "full":
            a.phase = "staged" if a.attempts else "prepared"  # every batch PREPARED already: on to the commit
            return
        # the job dies in batch order[stop] (with some of its files, or none) or is killed there
        b = order[stop]
        partial = how in ("killed", "dies") or pick % 3 != 0
        if partial:
            stage(a.proto, b, todo[b], partitions=parts, write_summary=False)
        event(f"dag stage: {how} after {stop} of {len(order)} batch(es)" + (" mid-batch" if partial else ""))
        if how == "dies":
            raise Crash("stage.after_first_file (the run's worker died)")
        if how == "killed" and pick % 4 >= 2:  # cluster mode: the job lives on past its task
            self.zombie_jobs.append({"who": a.run_id, "parts": parts, "cfg": cfg,
                                     "todo": [(x, todo[x], *pinned[x]) for x in order[stop:]]})
            event("dag stage: the killed job lives on (zombie job)")
        a.phase, a.stage_failed = "failed", True

    def _do_verify(self, a: Actor, pick: int) -> None:
        if not self._dag(a):
            return super()._do_verify(a, pick)
        assert isinstance(a, RunActor)
        run = a.run()
        for b in sorted(a.attempts):  # BatchRun.verify_run, one batch at a time to know which one failed
            att = a.attempts[b]
            try:
                run.verify(b, att)
            except (VerifyFailed, NotReady) as e:
                self._verify_rejected(b, att, e)
                a.phase, a.stage_failed = "failed", False
                return
            except ProtocolError as e:
                if "has no plan" not in str(e):
                    raise
                event("dag verify: no plan")
                a.phase, a.stage_failed = "failed", False
                return
        event("dag verify: PREPARED")
        a.phase = "prepared"

    def _verify_rejected(self, b: int, att: str, e: Exception) -> None:
        """(8) a VerifyFailed leaves the decision "abort" (unless a reset archived the attempt)."""
        note(f"  verify of batch {b} attempt {att}: {type(e).__name__}: {e}")
        if isinstance(e, NotReady):
            event("dag verify: NotReady (the sensor times out)")
            return
        event("dag verify: VerifyFailed")
        d = self._raw_decision(b, att)
        archived = not (self._attempt_dir(b, att)).is_dir()
        assert archived or (d is not None and d["decision"] == "abort"), \
            f"(8) verify rejected batch {b} attempt {att} ({e}) but its decision is {d}"

    def _do_commit(self, a: Actor, pick: int) -> None:
        if not self._dag(a):
            return super()._do_commit(a, pick)
        assert isinstance(a, RunActor)
        run = a.run()
        for b in a.batches:
            try:
                run.commit(b)
            except CommitBlocked as e:
                self._blocked(a, e)
                self._drop(a, "the commit task failed (CommitBlocked, repaired)")
                return
            except (faults.InjectedFault, BatchInFlight) as e:
                event(f"dag commit: {type(e).__name__} (retried)")
                note(f"  {e}")
                return
            except ProtocolError as e:
                if "is not PREPARED" not in str(e):
                    raise
                event("dag commit: batch forgotten")
                self._drop(a, "the commit task failed: batch forgotten")
                return
        event(f"dag commit: {len(a.batches)} batch(es)")
        self._drop(a, "the run is done")

    def _do_abort(self, a: Actor, pick: int) -> None:
        if not self._dag(a):
            return super()._do_abort(a, pick)
        assert isinstance(a, RunActor)
        rejected = {(b, att) for b, att in a.attempts.items()
                    if (self._raw_decision(b, att) or {}).get("decision") == "abort"}
        r = a.run().fail_run(a.batches, a.attempts, "the task failed")
        note("  abort: " + "; ".join(r.lines + r.warnings))
        for line in r.lines:
            if "is STAGED and no verify rejected it: kept" not in line:
                continue
            b, att = int(line.split()[1]), line.split()[3]
            assert (b, att) not in rejected, f"(8) the abort kept batch {b} attempt {att}, which verify rejected"
            assert self._raw_summary(b, att) and self._raw_decision(b, att) is None, f"(8) kept {b}/{att}"
            self.kept[(b, att)] = self._plan_digest(b)
            event("abort: kept a STAGED attempt")
        self._drop(a, "the run failed after its abort")

    @rule(slot=st.sampled_from(DAG_SLOTS), pick=st.integers(0, 11), killed=st.booleans())
    def limit_run(self, slot, pick, killed):
        """A DAG run of several batches whose job meets its limit (or its task's time bound), then its
        abort task: the run in ``slot`` goes on from where it is (recover, a plan of up to three
        batches) to a stage that dies, then ``fail_run``; invariants after each verb."""
        for verb in ("recover", "plan", "stage_killed" if killed else "stage_limit", "abort"):
            a = self.actors[slot]
            if not self._dag(a):
                return
            if verb not in self._verbs(a) and not (verb == "abort" and a.phase == "failed"):
                if verb in ("recover", "plan"):
                    continue
                return
            self._advance(a, 0 if verb == "plan" else pick, verb=verb)
            self.check_now()

    # -- the operator's replan_pending and the zombie jobs ------------------------------------------
    def _replan_actor(self, slot: int, batches: int) -> RunActor:
        self.replans += 1
        self.incarnations[slot] += 1
        a = RunActor(self, slot, self.incarnations[slot],
                     RunParams(replan_pending=True, max_batches_per_run=batches))
        a.run_id = f"replan-{self.replans}"
        return a

    @rule(slot=st.integers(0, SLOTS - 1), batches=st.integers(1, 3),
          during=st.sampled_from(["none", "none", "other-at-replan", "replan-at-other"]),
          other=st.integers(0, SLOTS - 1), at=st.integers(1, 3), pick=st.integers(0, 11))
    def replan_pending(self, slot, batches, during, other, at, pick):
        """An operator's run with the param replan_pending: its recover task, now, in a free slot
        when there is one (else it takes ``slot``: the run there is gone). ``other-at-replan``:
        run ``other``'s next verb acts at the replan's ``at``-th interleave point (between its
        check of the pending batches and the reset's writes); ``replan-at-other``: the replan's
        recover acts at run ``other``'s ``at``-th interleave point (a verify or commit in flight)."""
        free = [s for s in range(SLOTS) if self.actors[s].phase == "idle" and s != other]
        dst = free[0] if free else slot
        if dst == other:
            during = "none"
        a = self._replan_actor(dst, batches)
        b = self.actors[other]
        note(f"replan_pending run {a.run_id} in slot {dst} ({during})")
        self.actors[dst] = a
        if during == "other-at-replan" and b is not a:
            self.pending_race = {"actor": a.name, "at": at, "other": lambda: self._advance(b, pick), "count": 0,
                                 "label": f"actor {b!r}"}
        elif during == "replan-at-other" and b is not a:
            self.pending_race = {"actor": b.name, "at": at, "other": lambda: self._advance(a, 0), "count": 0,
                                 "label": "replan_pending recover"}
            try:
                self._advance(b, pick)
            finally:
                self.pending_race = None
            if self.actors[dst] is a and a.phase == "idle":
                self._advance(a, 0)  # it did not meet the point: its recover now
            return
        try:
            self._advance(a, 0)
        finally:
            self.pending_race = None

    @precondition(lambda self: self.zombie_jobs)
    @rule(i=st.integers(0, 3))
    def zombie_job(self, i):
        """A killed stage task's job that lives on stages its next batch (the plan and pipeline file
        it read when it started), whatever happened since."""
        job = self.zombie_jobs[i % len(self.zombie_jobs)]
        b, att, plan, digest = job["todo"].pop(0)
        if not job["todo"]:
            self.zombie_jobs.remove(job)
        proto = self.protocol("zombie-job", job["cfg"])
        note(f"zombie job of {job['who']}: stages batch {b} attempt {att}")
        try:
            stage(PlanPinned(proto, plan, digest, job["cfg"]), b, att, partitions=job["parts"])
        except JobRefused as e:
            note(f"  {e}")
        event("zombie job: staged a batch" + (" (its run aborted it)" if self._raw_decision(b, att) else ""))

    # -- raw ledger readers ------------------------------------------------------------------------
    def _attempt_dir(self, b: int, att: str) -> Path:
        return self.sink / "_eo_ledger" / "attempts" / f"{b:010d}" / att

    def _raw_decision(self, b: int, att: str) -> dict | None:
        f = self._attempt_dir(b, att) / "decision.json"
        return json.loads(f.read_text()) if f.is_file() else None

    def _raw_summary(self, b: int, att: str) -> bool:
        return (self._attempt_dir(b, att) / "stage.json").is_file()

    def _plan_digest(self, b: int) -> str | None:
        import hashlib

        f = self.sink / "_eo_ledger" / "plans" / f"{b:010d}.json"
        return hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else None

    # -- invariants --------------------------------------------------------------------------------
    def check_now(self) -> None:
        super().check_now()
        self.published_batches_are_their_planned_range()
        self.plans_have_no_gap()

    @invariant()
    def plans_have_no_gap(self):
        """(10) the raw plan records are batches 1..latest, none missing (a reset forgets a tail)."""
        ids = sorted(_read_json_dir(self.sink / "_eo_ledger" / "plans"))
        assert ids == list(range(1, len(ids) + 1)), f"(10) the ledger's plan records have a gap: {ids}"

    @invariant()
    def published_batches_are_their_planned_range(self):
        """(7) each batch a table holds: exactly the records of its planned files; one published by
        a kept attempt, only while that attempt's plan is the batch's plan."""
        views = self._views()
        plans = None
        prepared = None
        for part, col in (("sink", "order_id"), ("quarantine", "raw")):
            v = views[part]
            table = self.sink if part == "sink" else self.quarantine
            for lv, b, _info in v.our_txns():
                if (part, b) in self.range_checked:
                    continue
                self.range_checked.add((part, b))
                if plans is None:
                    plans = _read_json_dir(self.sink / "_eo_ledger" / "plans")
                    prepared = _read_json_dir(self.sink / "_eo_ledger" / "prepared")
                plan = plans.get(b)
                assert plan is not None, f"(7) {part} holds batch {b}, which has no plan record"
                assert prepared is not None
                att = (prepared.get(b) or {}).get("attempt")
                if (b, att) in self.kept:
                    assert self.kept[(b, att)] == self._plan_digest(b), \
                        f"(7) batch {b} was published from attempt {att}, kept under another plan of the batch"
                    event(f"kept attempt published ({part})")
                files = [f["path"] for f in plan["range"].get("files", []) if not f.get("skipped")]
                want = collections.Counter()
                for f in files:
                    goods, bads = self._landed(f)
                    want.update(goods if part == "sink" else bads)
                adds = [table / add["path"] for add in v.commits[lv]["adds"]]
                if not all(p.is_file() for p in adds):
                    event("(7) not checked: files gone")
                    continue
                got = collections.Counter(x for p in adds for x in pq.read_table(p, columns=[col]).column(col)
                                          .to_pylist())
                assert got == want, (f"(7) {part} batch {b} (attempt {att}) published {sorted(got - want)[:5]} "
                                     f"beyond and lacks {sorted(want - got)[:5]} of its planned files {files}")

    # -- the final drain: clean DAG runs, then not stuck ---------------------------------------------
    def _drain(self):
        self.zombie_jobs.clear()
        ours: set[tuple[int, str]] = set()
        clean = Actor(self, 9, 0)
        clean.name = "clean"
        for i in range(40):
            run = BatchRun(self.protocol("clean"), run_id=f"clean-{i}", params=RunParams(max_batches_per_run=3))
            clean.proto = run.proto
            try:
                run.recover()
                r = run.plan()
                if r.skip:
                    break
                chosen = run.stage_attempts(r.value, lambda: f"t1-{uuid.uuid4().hex[:12]}")
                for b, att in sorted(chosen.detail["stage"].items()):
                    stage(run.proto, b, att)
                    ours.add((b, att))
                failed = None
                for b in sorted(chosen.value):
                    try:
                        run.verify(b, chosen.value[b])
                    except VerifyFailed as e:
                        failed = (b, chosen.value[b])
                        assert failed not in ours, f"(9) a clean run's own attempt {failed} failed verify: {e}"
                        self._verify_rejected(b, chosen.value[b], e)
                        event("clean run: a kept attempt failed verify")
                        break
                if failed:
                    run.fail_run(r.value, chosen.value)
                    continue
                for b in r.value:
                    run.commit(b)
            except CommitBlocked as e:
                self._blocked(clean, e)
            except ConfigChanged as e:
                self._config_refused(None, e, "clean run")
            self.check_now()
        else:
            raise AssertionError("(9) 40 clean runs did not finish the pipeline")
        stuck = find_stuck(Protocol(self.cfg).ledger, self.cfg)
        assert stuck is None, "(9) stuck after the clean runs: " + " | ".join(stuck.lines())
        super()._drain()


RunLimitsModel.TestCase.settings = (
    settings(ProtocolModel.TestCase.settings, max_examples=int(os.environ["EOBATCH_MODEL_EXAMPLES"]))
    if os.environ.get("EOBATCH_MODEL_EXAMPLES") else
    settings(ProtocolModel.TestCase.settings,
             max_examples=int(os.environ.get("EOBATCH_MODEL_LIMITS_CI_EXAMPLES", "60")),
             stateful_step_count=int(os.environ.get("EOBATCH_MODEL_STEPS", "30")))
)
TestRunLimitsModel = RunLimitsModel.TestCase


@pytest.fixture
def limits(monkeypatch):
    mod = sys.modules[__name__]
    base = sys.modules[ProtocolModel.__module__]
    for m in (mod, base):  # outside a hypothesis test
        monkeypatch.setattr(m, "note", lambda *_a, **_k: None)
        monkeypatch.setattr(m, "event", lambda *_a, **_k: None)
    m = RunLimitsModel()
    try:
        yield m
        m.check_now()
        m._drain()
    finally:
        m._release()


def test_a_run_whose_job_met_a_limit_keeps_what_it_staged_and_the_next_run_publishes_it(limits):
    """The DAG run r1 carries batches 1..3; its job stages 1 and dies in 2 (a limit); the abort task
    keeps batch 1's attempt; the next run verifies it as it is and publishes all three, once."""
    m = limits
    for _ in range(3):
        m.land(MAX_RECORDS, 0, False)
    m.step(1, 0)  # recover
    m.step(1, 0)  # plan: 3 batches
    assert m.actors[1].batches == [1, 2, 3]
    a = m.actors[1]
    m._advance(a, 2, verb="stage_limit")  # the job stops in batch 2 (3 - 1 - pick // 2 % 3 == 1), mid-batch
    assert a.phase == "failed" and m._raw_summary(1, a.attempts[1]) and not m._raw_summary(2, a.attempts[2])
    kept = a.attempts[1]
    m._advance(a, 0, verb="abort")
    assert (1, kept) in m.kept
    m.check_now()
    m.run(2, [0, 0, 0, 0, 0])  # recover, plan 1..3, stage (1 kept), verify, commit
    m.check_now()
    assert m._views()["sink"].txn == 3 and ("sink", 1) in m.range_checked
    assert _read_json_dir(m.sink / "_eo_ledger" / "prepared")[1]["attempt"] == kept
    assert APP  # the drain: nothing left, not stuck


# -- the product bugs this model found, each fixed since ----------------------------------------------
@pytest.fixture
def quiet(monkeypatch):
    for m in (sys.modules[__name__], sys.modules[ProtocolModel.__module__]):  # outside a hypothesis test
        monkeypatch.setattr(m, "note", lambda *_a, **_k: None)
        monkeypatch.setattr(m, "event", lambda *_a, **_k: None)


def test_replan_pending_during_a_verify_in_flight_never_prepares_a_forgotten_batch(quiet):
    """The reset wins the decision of every attempt of the batches it forgets ("abort", put-if-absent,
    kept in place), or is refused when a verify won one first: a verify in flight loses, and nothing
    is PREPARED without its plan and files. Found by this model (the CI profile, shrunk by hand): run r1 carries batch 1 and its job staged
    it (attempt A); r1's verify sensor has checked A against plan 1 (a zombie poke, or any verify in
    flight) when an operator's run with replan_pending=true starts: ``BatchRun._replan_pending`` finds
    no batch PREPARED and ``Protocol.reset(1)`` archives plan 1 and A's records and deletes A's staged
    files; then the verify goes on: it wins A's decision ("prepare", put-if-absent in the attempt
    folder the reset just emptied) and writes PREPARED batch 1, naming files that are gone, for a
    batch with no plan. The batch planned again as 1 then finds that PREPARED record (verify returns
    it for any attempt) and its commit raises CommitBlocked: the pipeline waits for a manual
    reset-batch. Invariant (3) fails: a PREPARED batch lost its files without a VACUUM. (The check
    and the reset are check-then-act across processes; the plain ``reset-batch`` runs with the
    pipeline paused, ``replan_pending`` is a run's recover task.) Fixed: ``Repairs._decide_forgotten``."""
    m = RunLimitsModel()
    try:
        m.land(3, 0, False)
        m.step(1, 0)  # r1: recover
        m.step(1, 0)  # r1: plan batch 1
        m.step(1, 0)  # r1: the stage task, its job stages batch 1 (attempt A)
        assert m.actors[1].phase == "staged"
        # r1's verify; at its first ledger write (A's decision) the replan_pending run's recover runs
        m.replan_pending(slot=2, batches=1, during="replan-at-other", other=1, at=1, pick=0)
        m.check_now()
    finally:
        m._release()


def test_replan_pending_during_a_plan_of_several_batches_leaves_no_gap(quiet):
    """Found by this model (the CI profile, shrunk by hand): run r1 plans a run of three batches
    (``plan_batches``: put-if-absent plan 1, then plan 2 from where plan 1 ends, ...). Between its
    record of plan 1 and that of plan 2, an operator's run with replan_pending=true starts (the plan
    task of a run still in flight, a zombie): batch 1 is not PREPARED, so ``Protocol.reset(1)``
    archives plan 1; then r1 writes plans 2 and 3. The ledger holds plans 2 and 3 and no plan 1:
    every later run's recover fails with "batch 1 has no plan" (a ProtocolError that names no
    repair), ``find_stuck`` says nothing (``first_open`` reads the missing plan as one forgotten
    while it looked), and a later replan_pending or reset-batch fails with a raw FileNotFoundError.
    Invariant (10) failed: the plan records had a gap. Fixed: plan 2 names plan 1's record (``base``);
    written after plan 1 was forgotten, it is void, and the run forgets it (``Ledger.is_void``,
    ``Repairs.forget_void``)."""
    m = RunLimitsModel()
    try:
        for _ in range(3):
            m.land(3, 0, False)  # three batches of one file each
        m.step(1, 0)  # r1: recover
        # r1 plans three batches; at its third interleave point (before the put-if-absent of plan 2)
        # the replan_pending run's recover runs
        m.replan_pending(slot=2, batches=1, during="replan-at-other", other=1, at=3, pick=0)
        m.check_now()
        BatchRun(Protocol(m.cfg), run_id="next").recover()
    finally:
        m._release()
