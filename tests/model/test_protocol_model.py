"""A model-based test of the exactly-once protocol: hypothesis explores interleavings of the
REAL verbs of ``eobatch.protocol.Protocol`` on REAL local storage and REAL delta-rs tables,
without Spark (the stage job is ``tests/support/pyarrow_stager.py``, which writes the job's layout).

Actors
    Three "runs" (slots r0..r2), each a small state machine with its own ``Protocol`` object (as
    separate Airflow task processes would have): ``idle`` -recover-> ``ready`` -plan-> ``planned``
    -stage-> ``staged`` -verify-> ``prepared`` -commit-> ``idle``. From ``ready`` a run may ask for a
    ``rewind(to_batch=K)`` instead of planning; from ``staged`` it may ``abort`` its attempt
    instead of verifying; a failed verify leads to ``abort``. A plan asks for one to three batches
    (``plan_batches``: a run that carries several); the actor goes on with the first, may stage
    (and verify) any later one of them ahead of it (``stage_ahead``, as the run's one Spark job and
    its sensor do), and each later one is the first undecided batch of a later plan. A run that hits CommitBlocked
    follows the repair its message names (``reset(batch)``) at once, and checks that it works.
    A ZOMBIE is a second attempt of an actor's batch in another slot: its "Spark job" read the
    batch plan when it was spawned and stages it (under a new attempt id) whenever it is picked,
    possibly long after, then verifies and commits late (a verify after the batch was PREPARED by
    another attempt, a commit of a batch that a recover already committed, ...).

Rules (each one step; the invariants run after every step)
    ``land``            a new JSON-lines landing file: good records with unique order_ids, unique
                        bad lines (not JSON, wrong type, missing required field), blank lines;
                        sometimes "late" (an old modification time, so it sorts first).
    ``step``, ``run``   advance one actor by one verb (its phase gives the verb), or a few in a row.
    ``race``            advance actor A, but let another party act exactly at A's n-th
                        "interleave point" (just before one of A's ledger writes, or at a named
                        fault point): actor B's next verb (a verify racing a verify, a commit racing
                        a recover's commit, ...), a third party's abort of A's attempt, or a foreign
                        VACUUM / compaction / append.
    ``contend``         two runs go for the next batch: A plans or asks for a rewind, B plans right
                        before A's plan record / rewind reservation (ConcurrentPlan, rewind vs plan).
    ``verify_vs_abort`` a staged attempt's verify and a third party's abort of it, in both orders,
                        the second one acting right before the first one's decision or PREPARED.
    ``crash``           one verb of a run that can reach the chosen crash point, with the crash
                        armed: a named point of ``eobatch.core.faults.POINTS`` (``crash_point`` and
                        ``fail_point`` are patched to raise a private ``Crash(BaseException)``:
                        nothing after the point runs, like kill -9; ``stage.after_first_file`` is a
                        stage that dies before its summary), or "right after the run's n-th ledger
                        write" (a kill anywhere else). The run is dropped; a later run's recover must
                        finish its work.
    ``disturb``         a run dies between two verbs; a ZOMBIE attempt of its batch appears; a
                        third party aborts its attempt (task marked failed); its commit hits a
                        transient ``InjectedFault`` at ``commit.before_delta_commit`` (and retries).
    ``replay``          (``ReplayProtocolModel``) an operator's ``make replay`` of a batch the quarantine table holds (all its
                        records, or those whose reason names JSON: overlapping selections), between two
                        verbs of the runs: its landing file is read by a later batch (the lines are
                        still bad: quarantined again, from the replay file), and rewinds may undo the
                        batch it replayed from, the batch that read its file, or both
                        (``rewind_after_replay``: a run's rewind, then a replay again).
    ``foreign``         FOREIGN WRITERS on the tables: delta-rs ``optimize.compact()`` of the sink, a
                        blind append of ``foreign-*`` rows to the sink, and a VACUUM (retention 0,
                        full) of the sink or the quarantine table, which may delete the staged files
                        of a PREPARED batch: its commit must then raise CommitBlocked naming the
                        repair, and that repair (``reset``) must work.

Invariants (after every step, read with independent readers: delta-rs ``to_pyarrow_table`` and
``transaction_version``, the raw ``_delta_log`` JSON and the raw ledger files; never the product's
own classes)
    1. no good record of ours is published twice (foreign rows excluded); no bad line is twice
       in the quarantine table from the landing files, no source position twice; a line quarantined
       from a replay file has its origin (the replay record's batch, source and position) still in
       the quarantine table: a replay whose origin batch a rewind undid is never read (its lines
       would be there twice, as the re-read original and as the replay's);
    2. every published record of ours was landed, with its values (nothing invented);
    3. every PREPARED batch not yet held by a table has all its files there with their sizes,
       unless a foreign VACUUM ran after the file was staged; a commit that finds them gone must
       raise CommitBlocked and must not have published the batch in any table;
    4. each table's txn version never decreases (a rewind keeps it) and the txn actions in the raw
       log strictly increase (after a rewind, batches continue with new ids);
    5. ledger and tables agree (every table holds batch F-1 to L where L is the newest plan and F
       the first batch of the run that planned it, L when a run plans one batch; a
       COMMITTED record implies every table holds it; every committed batch in the log has the
       fingerprint of its PREPARED record), or else ``recover()`` (on a copy) raises a
       ProtocolError subclass whose message names the repair;
    6. the newest usable ledger checkpoint and the plans after it say the same landing files were
       consumed as the raw plan, PREPARED/ABANDONED and rewind records (checkpoints every
       ``CHECKPOINTS["INTERVAL"]`` batches here, so rewinds, resets and crashes meet them).
Teardown drains: recover -> plan -> stage -> verify -> commit with no faults until nothing is left
(CommitBlocked -> ``reset`` as its message says), then: published good records == every good
record landed, once each; quarantine from the landing files == every bad line landed, once; from
each replay file, its lines once when its origin batch counts, none when a rewind undid it (read
from the raw replay and rewind records); every table holds the newest
batch; ``sweep(recent=None)`` leaves no staged file that no commit ever referenced.

After the machine, fixed sequences of the same rules (each drained and checked the same way):
a run killed at each named crash point (whatever the random draw reached), and the three product
bugs this model found, fixed in 5315b82 (``test_found_*``). Where the model deliberately stays
away from a state, the comment says why ("Not a bug: ...").

Settings: a fixed, derandomized CI profile (200 examples of up to 35 steps, about 2 minutes on
2 cores, 40 of ``MergeProtocolModel``, the same machine over a merge sink, about 45 s, and 60
of ``ReplayProtocolModel``, with quarantine replays among the rules);
``EOBATCH_MODEL_EXAMPLES=<n>`` (``make model-check EXAMPLES=<n> [SEED=<s>]``) runs n random
examples of up to 50 steps of each (``--hypothesis-seed`` repeats one run).
"""

from __future__ import annotations

import collections
import copy
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pyarrow as pa
import pytest
import yaml
from hypothesis import HealthCheck, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from eobatch.core import checkpoint as ckpt
from eobatch.core import faults
from eobatch.core.formats import BatchPlan
from eobatch.errors import UsageError
from eobatch.pipelines.loader import load_pipeline
from eobatch.protocol import (
    AttemptPrepared,
    BatchInFlight,
    CommitBlocked,
    ConcurrentPlan,
    ConfigChanged,
    Protocol,
    ProtocolError,
)
from eobatch.protocol.replay import replay as replay_records
from eobatch.protocol.verify import NotReady, VerifyFailed
from support.pyarrow_stager import JobRefused, stage

APP = "orders"
SCHEMA = "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"
MAX_RECORDS = 5
SLOTS = 3
NAMED_POINTS = tuple(faults.POINTS)
CRASHES = NAMED_POINTS + ("ledger-write-1", "ledger-write-2", "ledger-write-3")
REPAIR = re.compile(r"make reset-batch PIPELINE=\S+ BATCH=(\d+)")
SHM = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
# Ledger checkpoints every 2 batches, index chunks of about 4 entries, unnamed chunks removed at once:
# the plans of the model write, read, outdate (rewinds) and lose (races with the removal) checkpoints.
CHECKPOINTS = {"INTERVAL": 2, "CHUNK": 4, "GC_MIN_AGE_S": 0.0}


class Race(TypedDict):
    """Another party (``other``, described by ``label``) acts at ``actor``'s ``at``-th interleave
    point; ``count`` is how many of them ``actor`` has reached so far."""

    actor: str
    at: int
    other: Callable[[], None]
    count: int
    label: str


class Crash(BaseException):
    """The process died here (kill -9): nothing after this point runs."""


# -- the fault points, patched for the whole test (the machine of the running example decides) --
_MACHINE: list = [None]


def _crash_point(name: str) -> None:
    m = _MACHINE[0]
    if m is not None:
        m.fault_point(name, "crash")


def _fail_point(name: str) -> None:
    m = _MACHINE[0]
    if m is not None:
        m.fault_point(name, "fail")


class EventFS:
    """The ledger storage of one actor: reports each write to the machine (before: a race
    can run there; after: a crash can happen there), delegates everything to the real storage."""

    def __init__(self, real, machine, actor: str):
        self._real, self._m, self._actor = real, machine, actor

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _write(self, op: str, *args):
        self._m.ledger_write(self._actor, "before", op, args[0])
        out = getattr(self._real, op)(*args)
        self._m.ledger_write(self._actor, "after", op, args[0])
        return out

    def put_if_absent(self, path, data):
        return self._write("put_if_absent", path, data)

    def write_atomic(self, path, data):
        return self._write("write_atomic", path, data)

    def delete(self, path):
        return self._write("delete", path)


class ReadOnlyFS:
    """A storage for the invariants' readers: deletes (of a damaged checkpoint) do nothing."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def delete(self, path):
        pass


class PlanPinned:
    """What the stager needs of a Protocol, with the plan (and its record's digest) the job read
    when it started, and the pipeline file its task read then (the job's spec)."""

    def __init__(self, proto: Protocol, plan, digest: str | None, cfg):
        self.cfg, self.layout = cfg, proto.layout
        self.ledger = type("L", (), {"plan": staticmethod(lambda _b: plan),
                                     "plan_digest": staticmethod(lambda _b: digest), "fs": proto.ledger.fs})()


class Actor:
    def __init__(self, machine, slot: int, incarnation: int):
        self.slot, self.name = slot, f"r{slot}"
        self.run_id = f"run-{slot}-{incarnation}"
        self.proto = machine.protocol(self.name)
        self.phase = "idle"
        self.batch: int | None = None
        self.attempt: str | None = None
        # zombies: the plan their job read when it started, and the configuration its spec was built from
        self.pinned_plan: tuple[BatchPlan, str | None, Any] | None = None
        self.zombie = False
        self.group: list[int] = []  # the later batches its plan handed it (a run that carries several)

    def __repr__(self):
        z = " zombie" if self.zombie else ""
        return f"<{self.name}{z} {self.run_id} {self.phase} b={self.batch} a={self.attempt}>"


# -- independent readers -----------------------------------------------------------------------
class TableView:
    """One Delta table read with delta-rs (rows, txn) and the raw _delta_log (commits), cached by
    the newest log file so that unchanged tables are not read again."""

    def __init__(self, path: Path, columns: list[str]):
        self.path, self.columns = path, columns
        self.commits: dict[int, dict] = {}
        self.key: tuple[int, str | None] | None = None
        self.rows: list[dict] = []
        self.txn = 0

    def refresh(self) -> None:
        log = self.path / "_delta_log"
        names = sorted(n for n in os.listdir(log) if n.endswith(".json")) if log.is_dir() else []
        key = (len(names), names[-1] if names else None)
        if key == self.key:
            return
        for n in names:
            v = int(n.split(".")[0])
            if v not in self.commits:
                self.commits[v] = _parse_commit(log / n)
        if names:
            from deltalake import DeltaTable

            dt = DeltaTable(str(self.path))
            self.txn = dt.transaction_version(APP) or 0
            self.rows = dt.to_pyarrow_table(columns=self.columns).to_pylist()
        self.key = key

    def our_txns(self) -> list[tuple[int, int, dict]]:
        """(log version, txn version, commitInfo) of every commit carrying our appId's txn."""
        out = []
        for v in sorted(self.commits):
            c = self.commits[v]
            for t in c["txns"]:
                if t.get("appId") == APP:
                    out.append((v, int(t["version"]), c["commitInfo"]))
        return out

    def ever_added(self) -> set[str]:
        return {a["path"] for c in self.commits.values() for a in c["adds"]}


def _parse_commit(f: Path) -> dict:
    entry: dict[str, Any] = {"commitInfo": {}, "adds": [], "removes": [], "txns": []}
    for line in f.read_text().splitlines():
        if line.strip():
            a = json.loads(line)
            for k, dest in (("add", "adds"), ("remove", "removes"), ("txn", "txns")):
                if k in a:
                    entry[dest].append(a[k])
            if "commitInfo" in a:
                entry["commitInfo"] = a["commitInfo"]
    return entry


def _read_json_dir(d: Path) -> dict[int, dict]:
    out = {}
    if d.is_dir():
        for f in d.iterdir():
            if re.fullmatch(r"\d{10}\.json", f.name):
                out[int(f.name[:10])] = json.loads(f.read_text())
    return out


def _rewind_names(d: Path) -> set[tuple[int, int]]:
    out = set()
    if d.is_dir():
        for f in d.iterdir():
            m = re.fullmatch(r"(\d{10})-(\d{10})\.json", f.name)
            if m:
                out.add((int(m.group(1)), int(m.group(2))))
    return out


def _cancelled_rewinds(ledger: Path) -> set[tuple[int, int]]:
    """(after, to) of the rewinds decided not to happen (raw records: ``rewinds/cancelled/``)."""
    return _rewind_names(ledger / "rewinds" / "cancelled")


def _rewinds(ledger: Path) -> list[tuple[int, int]]:
    """(after, to) of the rewinds in effect, from the raw records: recorded, not cancelled."""
    return sorted(_rewind_names(ledger / "rewinds") - _cancelled_rewinds(ledger))


class ProtocolModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="eo-model-", dir=SHM))
        self.landing = self.root / "landing"
        self.landing.mkdir()
        self.sink = self.root / "lake" / "orders"
        self.quarantine = self.root / "lake" / "orders_quarantine"
        self.docs = [self._doc()]  # the pipeline file's versions: edits, undone when refused (the last is in use)
        self.cfg = self._config(self.root / "lake", "pipeline.yaml")
        self.good: dict[str, dict] = {}  # order_id -> landed record
        self.bad: list[str] = []  # every bad line landed
        self.files = 0
        self.vacuum_exposed: set[tuple[str, str]] = set()  # (participant, rel path) there at a VACUUM
        self.incarnations: collections.Counter[int] = collections.Counter()
        self.arm: tuple[str, str, str] | None = None  # (actor, kind, point) of a crash or transient failure to inject
        # another party acts at A's n-th interleave point (an attribute apart from the rule ``race``)
        self.pending_race: Race | None = None
        self.writes: collections.Counter[str] = collections.Counter()  # ledger writes per actor in the current step
        self.seen_txn = {"sink": 0, "quarantine": 0}
        self.views = {"sink": TableView(self.sink, ["order_id", "customer", "amount"]),
                      "quarantine": TableView(self.quarantine, ["raw", "source", "position", "batch_id"])}
        self.copies = 0
        self.edits = 0
        self.foreign_rows = 0
        self.compactions = 0
        self._stack: list[str] = []  # the actor whose code runs now (nested in a race)
        self._log_level = logging.getLogger("eobatch").level
        logging.getLogger("eobatch").setLevel(logging.ERROR)  # the product's warnings are expected here
        self._patched = (faults.crash_point, faults.fail_point)
        faults.crash_point, faults.fail_point = _crash_point, _fail_point
        self._checkpoints = {k: getattr(ckpt, k) for k in CHECKPOINTS}
        for k, v in CHECKPOINTS.items():
            setattr(ckpt, k, v)
        _MACHINE[0] = self
        self.actors = [self._new_actor(s) for s in range(SLOTS)]

    # -- set-up ------------------------------------------------------------------------------
    def _doc(self) -> dict:
        return {
            "name": APP, "description": "model-based test", "mode": "continuous", "schedule": None,
            "source": {"kind": "files", "path": str(self.landing), "max_records_per_batch": MAX_RECORDS},
            "schema": SCHEMA, "transform": "passthrough", "sink": {"partition_by": []}, "quarantine": {},
        }

    def _config(self, lake: Path, name: str):
        """The pipeline file in use (``docs[-1]``), over the tables under ``lake``."""
        doc = copy.deepcopy(self.docs[-1])
        doc["sink"]["table"], doc["quarantine"]["table"] = str(lake / "orders"), str(lake / "orders_quarantine")
        (self.root / "pipelines").mkdir(exist_ok=True)
        p = self.root / "pipelines" / name
        p.write_text(yaml.safe_dump(doc, sort_keys=False))
        return load_pipeline(str(p))

    def protocol(self, actor: str, cfg=None) -> Protocol:
        proto = Protocol(cfg or self.cfg)
        ledger = getattr(proto, "ledger", None)
        if ledger is not None and hasattr(ledger, "fs"):
            ledger.fs = EventFS(ledger.fs, self, actor)
        return proto

    def _new_actor(self, slot: int) -> Actor:
        self.incarnations[slot] += 1
        return Actor(self, slot, self.incarnations[slot])

    def _drop(self, a: Actor, why: str) -> None:
        note(f"{a!r} dropped: {why}")
        self.actors[a.slot] = self._new_actor(a.slot)

    # -- fault and interleave points ---------------------------------------------------------
    def _current(self) -> str | None:
        return self._stack[-1] if self._stack else None

    def fault_point(self, name: str, kind: str) -> None:
        who = self._current()
        self._maybe_race(who, f"point {name}")
        if self.arm and self.arm[0] == who and self.arm[2] == name:
            _, arm_kind, _ = self.arm
            self.arm = None
            if arm_kind == "transient" and kind == "fail":
                raise faults.InjectedFault(f"injected transient storage error at {name}")
            if arm_kind == "crash":
                raise Crash(name)

    def ledger_write(self, actor: str, when: str, op: str, path: str) -> None:
        if actor != self._current():
            return
        if when == "before":
            self._maybe_race(actor, f"{op} {path.rsplit('_eo_ledger/', 1)[-1]}")
            return
        self.writes[actor] += 1
        point = f"ledger-write-{self.writes[actor]}"
        if self.arm and self.arm[0] == actor and self.arm[2] == point:
            self.arm = None
            raise Crash(f"{point} ({op} {path.rsplit('_eo_ledger/', 1)[-1]})")

    def _maybe_race(self, who: str | None, where: str) -> None:
        r = self.pending_race
        if r is None or r["actor"] != who:
            return
        r["count"] += 1
        if r["count"] == r["at"]:
            self.pending_race = None
            note(f"  race: at {where} of {who}, {r['label']} runs")
            event(f"race: {r['label'].split(' ')[0]} at {where.split(' ')[0]} {where.split(' ')[1].split('/')[0]}")
            r["other"]()

    def _run(self, a: Actor, fn):
        self._stack.append(a.name)
        self.writes[a.name] = 0
        try:
            return fn()
        finally:
            self._stack.pop()

    # -- the verbs of one actor ---------------------------------------------------------------
    def _verbs(self, a: Actor) -> list[str]:
        verbs = {
            "idle": ["recover"],
            "ready": ["plan", "plan", "plan", "rewind"],
            "planned": ["stage", "stage", "stage", "stage_dies"],
            "staged": ["verify", "verify", "verify", "abort"],
            "failed": ["abort"],
            "prepared": ["commit"],
        }[a.phase]
        # a run that carries several batches stages (and verifies) them all before it commits the
        # first: any of its later batches may be staged or PREPARED ahead of the one it is on
        return verbs + ["stage_ahead"] if a.group and a.phase in ("planned", "staged", "prepared") else verbs

    def _advance(self, a: Actor, pick: int, verb: str | None = None) -> None:
        if verb is None or verb not in self._verbs(a):
            verbs = self._verbs(a)
            verb = verbs[pick % len(verbs)]
        note(f"{a!r}: {verb}")
        try:
            self._run(a, lambda: getattr(self, "_do_" + verb)(a, pick))
        except Crash as c:
            event(f"crash at {str(c).split(' ')[0]}")
            self._drop(a, f"crashed at {c}")
            return
        except ConfigChanged as e:
            self._config_refused(a, e, verb)
            return
        if a.zombie and a.phase == "idle" and self.actors[a.slot] is a:
            self._drop(a, "the zombie's task is over")  # a zombie is one late attempt, not a run

    def _do_recover(self, a: Actor, pick: int) -> None:
        try:
            rec = a.proto.recover(run_id=a.run_id)
        except CommitBlocked as e:
            self._blocked(a, e)
            return
        note(f"  recover: {rec.actions}")
        a.phase = "ready"

    def _do_plan(self, a: Actor, pick: int) -> None:
        try:
            plans, new = a.proto.plan_batches(MAX_RECORDS, run_id=a.run_id, max_batches=1 + pick % 3)
        except ConcurrentPlan as e:
            event("plan: ConcurrentPlan")
            note(f"  {e}")
            a.phase = "idle"
            return
        except BatchInFlight as e:
            event("plan: BatchInFlight")
            note(f"  {e}")
            a.phase = "idle"
            return
        except ProtocolError as e:
            # The plan (the batch's owner) names this run, and the batch is PREPARED: by design the
            # plan task fails fast and says to clear the run from its recover task, which commits
            # it. Reached here when another run PREPARED the batch that this run's rewind reserved.
            if "of this run is PREPARED" not in str(e):
                raise
            assert "clear the run" in str(e), f"no repair named: {e}"
            event("plan: own run's batch PREPARED (by another run): the run fails")
            note(f"  {e}")
            self._drop(a, "plan failed: clear the run from its recover task")
            return
        if not plans:
            a.phase = "idle"
            return
        plan = plans[0]
        event((f"plan: new ({len(plans)} batches)" if new else "plan: pending batch again")
              + (" of a run of several" if plan.run_first else ""))
        a.phase, a.batch, a.attempt, a.group = "planned", plan.batch_id, None, [p.batch_id for p in plans[1:]]
        note(f"  planned batches {[p.batch_id for p in plans]} ({plan.rows_in} records in the first, new={new})")

    def _do_rewind(self, a: Actor, pick: int) -> None:
        latest = max(_read_json_dir(self.sink / "_eo_ledger" / "plans"), default=0)
        to = latest - (pick // 4) % 3
        a.phase = "idle"
        if to < 1:
            return
        try:
            out = a.proto.rewind(to, run_id=a.run_id)
        except ConcurrentPlan as e:
            event("rewind: refused (ConcurrentPlan)")
            note(f"  rewind to {to} refused: {e}")
            return
        except ProtocolError as e:
            event("rewind: cancelled" if "was cancelled" in str(e) else
                  "rewind: refused" + (" (files vacuumed)" if "can no longer be restored" in str(e) else ""))
            note(f"  rewind to {to} refused: {e}")
            return
        event("rewind: done")
        note(f"  rewind to {to}: {out}")

    def _do_stage(self, a: Actor, pick: int, dies: bool = False) -> None:
        batch = a.batch
        assert batch is not None, f"{a!r} is planned without a batch"
        proto = a.proto
        if a.pinned_plan is not None:
            proto = PlanPinned(a.proto, *a.pinned_plan)
        elif a.proto.check_stage(batch) is None:  # reset since it was planned: the job fails
            note(f"  batch {batch} has no plan any more")
            self._drop(a, "stage found no plan")
            return
        # the task checked the pipeline file against the plan (ConfigChanged, its repair); the job
        # checks its spec again (a zombie's was built from the file its task read, long ago)
        a.attempt = f"t1-{uuid.uuid4().hex[:12]}"
        try:
            if dies:
                stage(proto, batch, a.attempt, partitions=1 + pick % 2, write_summary=False)
                raise Crash("stage.after_first_file (no stage summary)")
            stage(proto, batch, a.attempt, partitions=1 + pick % 2)
        except JobRefused as e:
            event("stage: the job refused another configuration than its plan's")
            note(f"  {e}")
            assert "is not staged" in str(e) and f"when batch {batch} was planned" in str(e), str(e)
            a.phase = "failed"  # the stage task failed (its retry would be a new attempt): abort
            return
        a.phase = "staged"

    def _do_stage_dies(self, a: Actor, pick: int) -> None:
        self._do_stage(a, pick, dies=True)

    def _do_stage_ahead(self, a: Actor, pick: int) -> None:
        """Stage a later batch of the actor's run, and verify it when ``pick`` is odd (the run's job
        stages every batch, its sensor verifies each one). The actor stays on its own batch."""
        b = a.group[pick % len(a.group)]
        if a.proto.check_stage(b) is None:
            note(f"  batch {b} has no plan any more")
            a.group.remove(b)
            return
        try:
            attempt = stage(a.proto, b, partitions=1 + pick % 2)
        except JobRefused as e:
            event("stage ahead: the job refused")
            note(f"  {e}")
            return
        if pick % 2 == 0:
            event("stage ahead: staged")
            return
        try:
            prepared = a.proto.verify(b, attempt)
        except (VerifyFailed, NotReady) as e:
            event("stage ahead: verify failed")
            note(f"  {e}")
            return
        except ProtocolError as e:  # a reset forgot the batch while this stage ran: as for _do_verify
            if "has no plan" not in str(e):
                raise
            event("stage ahead: no plan")
            note(f"  {e}")
            a.group.remove(b)
            return
        event("stage ahead: PREPARED" if prepared.attempt == attempt else "stage ahead: another attempt won")

    def _do_verify(self, a: Actor, pick: int) -> None:
        try:
            prepared = a.proto.verify(a.batch, a.attempt)
        except VerifyFailed as e:
            event("verify: VerifyFailed")
            note(f"  {e}")
            a.phase = "failed"
            return
        except NotReady as e:  # only after a reset archived the attempt
            event("verify: NotReady")
            note(f"  {e}")
            self._drop(a, "verify: not ready")
            return
        except ProtocolError as e:  # the batch was reset and is not planned again
            if "has no plan" not in str(e):
                raise
            event("verify: no plan")
            note(f"  {e}")
            self._drop(a, "verify: no plan")
            return
        event("verify: prepared" if prepared.attempt == a.attempt else "verify: another attempt won")
        a.phase = "prepared"

    def _do_abort(self, a: Actor, pick: int) -> None:
        try:
            removed = a.proto.abort(a.batch, a.attempt, "the task failed")
            event("abort: done")
            note(f"  aborted: removed {len(removed)} file(s)")
        except AttemptPrepared as e:
            event("abort: AttemptPrepared")
            note(f"  {e}")
        self._drop(a, "the run failed after its abort")

    def _do_commit(self, a: Actor, pick: int) -> None:
        try:
            rec = a.proto.commit(a.batch)
        except CommitBlocked as e:
            self._blocked(a, e)
            return
        except faults.InjectedFault as e:
            event("commit: transient failure (retried later)")
            note(f"  {e}")
            return  # the commit task retries
        except BatchInFlight as e:  # a batch before it, of its run, is not committed yet
            event("commit: waits for the batch before it")
            note(f"  {e}")
            return  # the commit task retries
        except ProtocolError as e:
            if "is not PREPARED" in str(e):  # reset by another run since (after CommitBlocked)
                event("commit: batch forgotten by a reset")
                note(f"  {e}")
                a.phase = "idle"
                return
            raise
        event("commit: done" + (" (recovered)" if rec.recovered else ""))
        a.phase = "idle"

    def _config_refused(self, a: Actor | None, e: ConfigChanged, verb: str) -> None:
        """A verb refused an edit of the pipeline file: the message names each key with its old
        and new value and the repair; the operator follows it: put back the values those keys had
        when the batch was planned (read from its plan record), or reset the pending batch when
        the message offers it and nothing of it is published."""
        msg = str(e)
        note(f"  {verb} refused the configuration: {msg}")
        named = re.findall(r"(?:: |; )([a-z_.]+) was .+? when batch (\d+) was planned and is now ", msg)
        assert named, f"no key, old and new value: {msg}"
        assert "Repair: " in msg, f"no repair named: {msg}"
        m = REPAIR.search(msg)
        self.pending_race = None  # the repair runs with the pipeline paused (docs/site/operations.md): no other run acts during it
        if m and self.edits % 2 and all(v.txn < int(m.group(1)) for v in self._views().values()):
            b = int(m.group(1))
            event(f"config edit refused at {verb} -> reset-batch")
            moved = self.protocol("operator").reset(b)
            assert b in moved, f"reset({b}) as ConfigChanged said forgot {moved}"
        else:  # put back the values the refused keys had when the batch was planned (from its record)
            event(f"config edit refused at {verb} -> old values put back")
            planned = _read_json_dir(self.sink / "_eo_ledger" / "plans")[int(named[0][1])]["config"]
            doc = copy.deepcopy(self.docs[-1])
            for key, _b in named:
                *path, last = key.split(".")
                node = doc
                for k in path:
                    node = node[k]
                node[last] = planned[key]
            self.docs.append(doc)
            self._use_config()
        if a is not None:
            self._drop(a, f"{verb} refused the configuration")

    def _use_config(self) -> None:
        """``docs[-1]`` written to the pipeline file; every run's next task reads it (each task
        loads the file when it starts)."""
        self.cfg = self._config(self.root / "lake", "pipeline.yaml")
        for a in self.actors:
            a.proto = self.protocol(a.name)

    def _blocked(self, a: Actor, e: CommitBlocked) -> None:
        """CommitBlocked: only after a foreign VACUUM took files; nothing published; follow the repair."""
        event("CommitBlocked -> reset")
        msg = str(e)
        note(f"  CommitBlocked: {msg}")
        m = REPAIR.search(msg)
        assert m, f"CommitBlocked does not name the repair: {msg}"
        b = int(m.group(1))
        prepared = _read_json_dir(self.sink / "_eo_ledger" / "prepared").get(b)
        assert prepared is not None, f"CommitBlocked for batch {b}, which has no PREPARED record: {msg}"
        missing = self._missing(prepared)
        assert missing, f"CommitBlocked for batch {b} but all its prepared files are there: {msg}"
        assert missing <= self.vacuum_exposed, \
            f"prepared files of batch {b} are gone without a VACUUM: {sorted(missing - self.vacuum_exposed)}"
        held = {p: v.txn for p, v in self._views().items()}
        # never publish partially: a blocked batch is in no table
        assert all(t < b for t in held.values()), \
            f"CommitBlocked for batch {b} after it was published in part: txn versions {held}; {msg}"
        self.pending_race = None  # the repair runs with the pipeline paused (docs/site/operations.md): no other run acts during it
        moved = a.proto.reset(b)
        assert b in moved, f"reset({b}) as CommitBlocked said forgot {moved}"
        note(f"  reset({b}) forgot {moved}")
        a.phase = "idle"

    # -- rules ----------------------------------------------------------------------------------
    @precondition(lambda self: self.files < 12)
    @rule(good=st.integers(0, 4), bad=st.integers(0, 2), blank=st.booleans(),
          late=st.sampled_from([False, False, False, True]))
    def land(self, good, bad, blank, late=False):
        """A landing file, renamed into place; ``late``: copied with an old modification time
        (older than every file before it), so the planner sorts it first among the unread."""
        self.files += 1
        k = self.files
        lines, recs = [], []
        for i in range(good):
            r = self.record(k, i)
            recs.append(r)
            lines.append(json.dumps(r))
        kinds = [f"not json {k}-{{}}", '{{"order_id": "bad-%d-{}", "amount": "not a number"}}' % k,
                 '{{"customer": "missing-id-%d-{}"}}' % k]
        bads = [kinds[(k + j) % 3].format(j) for j in range(bad)]
        lines += bads
        if blank:
            lines.insert(len(lines) // 2, "   ")
        path = self.landing / f"land-{k:04d}.jsonl"
        tmp = self.landing / f".land-{k:04d}.jsonl.tmp"
        tmp.write_text("\n".join(lines) + ("\n" if lines else ""))
        mtime = (1_600_000_000 if late else 1_700_000_000) + k
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, path)
        for r in recs:
            self.good[r["order_id"]] = r
        self.bad += bads
        note(f"landed {path.name}: {good} good, {bad} bad{', late (old mtime)' if late else ''}")

    def record(self, k: int, i: int) -> dict:
        """Good record ``i`` of landing file ``k``."""
        return {"order_id": f"o{k:03d}-{i}", "customer": f"c{i % 3}" if i % 4 else None,
                "amount": k + i / 10, "ts": "2026-01-02T03:04:05Z" if i % 2 else None}

    @initialize(n=st.integers(1, 3))
    def first_files(self, n):
        for i in range(n):
            self.land(3 - i, i % 2, False)

    @rule(slot=st.integers(0, SLOTS - 1), pick=st.integers(0, 11))
    def step(self, slot, pick):
        self._advance(self.actors[slot], pick)

    @rule(slot=st.integers(0, SLOTS - 1), pick=st.integers(0, 11))
    def step_b(self, slot, pick):  # steps are the main thing: twice the weight
        self._advance(self.actors[slot], pick)

    @rule(slot=st.integers(0, SLOTS - 1), picks=st.lists(st.integers(0, 11), min_size=2, max_size=5))
    def run(self, slot, picks):
        """A few verbs of one run in a row (nobody interrupts it); invariants after each."""
        for i, pick in enumerate(picks):
            a = self.actors[slot]
            if i:
                self.check_now()
            self._advance(a, pick)
            if self.actors[slot] is not a:
                break

    def _busy(self, want=lambda a: a.phase != "idle") -> list[Actor]:
        return [a for a in self.actors if want(a)]

    # the verb that reaches each named crash point, and the phases it starts from
    CRASH_VERBS = {
        "plan.after_record": ("plan", ("ready",)),
        "stage.after_first_file": ("stage", ("planned",)),
        "verify.after_prepared": ("verify", ("staged",)),
        "commit.before_delta_commit": ("commit", ("prepared", "idle")),
        "commit.after_first_participant": ("commit", ("prepared", "idle")),
        "commit.after_delta_commit": ("commit", ("prepared", "idle")),
        "rewind.before_restore": ("rewind", ("ready", "idle")),
        "rewind.after_first_restore": ("rewind", ("ready", "idle")),
    }

    @rule(i=st.integers(0, SLOTS - 1), pick=st.integers(0, 11), point=st.sampled_from(CRASHES))
    def crash(self, i, pick, point):
        """One verb of a run that dies at ``point`` (a run that can reach it, when there is one)."""
        verb, phases = self.CRASH_VERBS.get(point, (None, ("idle", "ready", "planned", "staged", "failed",
                                                           "prepared")))
        able = (self._busy(lambda a: a.phase == phases[0]) or self._busy(lambda a: a.phase in phases)
                or self.actors)  # prefer the phase whose verb reaches the point
        a = able[i % len(able)]
        if verb == "rewind" and a.phase == "idle":
            self._advance(a, 0)  # the run's recover, then its rewind
        self.arm = (a.name, "crash", point)
        try:
            if point == "stage.after_first_file":
                if a.phase != "planned":
                    return
                note(f"{a!r}: stage, dies before its summary")
                try:
                    self._run(a, lambda: self._do_stage(a, pick, dies=True))
                except Crash as c:
                    event("crash at stage.after_first_file")
                    self._drop(a, f"crashed at {c}")
                except ConfigChanged as e:  # the stage task refused the file before its job started
                    self._config_refused(a, e, "stage")
                return
            self._advance(a, pick, verb=verb)
        finally:
            self.arm = None

    @rule(slot=st.integers(0, SLOTS - 1), shift=st.integers(1, SLOTS - 1), what=st.sampled_from(["plan", "rewind"]),
          back=st.integers(0, 2), at=st.integers(1, 2))
    def contend(self, slot, shift, what, back, at):
        """Two runs go for the next batch at once: run A plans (or asks for a rewind to ``back``
        batches before the newest) and run B plans right before A's ``at``-th ledger write (the
        batch plan's put-if-absent; a rewind's reservation or record)."""
        for s_ in (slot, (slot + shift) % SLOTS):
            if self.actors[s_].phase == "idle":
                self._advance(self.actors[s_], 0)  # its run's recover
        a, b = self.actors[slot], self.actors[(slot + shift) % SLOTS]
        if a.phase != "ready" or b.phase != "ready":
            return
        self.check_now()
        self.pending_race = {"actor": a.name, "at": at, "other": lambda: self._advance(b, 0, verb="plan"), "count": 0,
                             "label": f"actor {b!r} plan"}
        try:
            self._advance(a, back * 4, verb=what)
        finally:
            self.pending_race = None

    @rule(slot=st.integers(0, SLOTS - 1), pick=st.integers(0, 11),
          other=st.sampled_from(["actor", "actor", "actor", "abort", "vacuum-sink", "vacuum-quarantine",
                                 "compact", "append"]),
          other_slot=st.integers(1, SLOTS - 1), other_pick=st.integers(0, 11), at=st.integers(1, 3))
    def race(self, slot, pick, other, other_slot, other_pick, at):
        """Actor A's next verb; at A's ``at``-th interleave point another party acts."""
        a = self.actors[slot]
        if other == "actor":
            b = self.actors[(slot + other_slot) % SLOTS]
            fn, label = (lambda: self._advance(b, other_pick)), f"actor {b!r}"
        elif other == "abort":
            if a.attempt is None:
                return
            batch, attempt = a.batch, a.attempt
            fn, label = (lambda: self._third_party_abort(batch, attempt)), f"abort of {batch}/{attempt}"
        elif other.startswith("vacuum"):
            if a.phase in ("idle", "prepared"):
                # Not inside a commit (recover commits too): a retention-0 VACUUM that lists the
                # files between the commit's last check and its Delta commit breaks any Delta writer
                # (the reason for VACUUM's retention period); no protocol can survive it.
                return
            part = other.split("-", 1)[1]
            fn, label = (lambda: self._vacuum(part)), other
        elif other == "compact":
            fn, label = self._compact, "compaction"
        else:
            fn, label = (lambda: self._append(3)), "foreign append"
        self.pending_race = {"actor": a.name, "at": at, "other": fn, "count": 0, "label": label}
        try:
            self._advance(a, pick)
        finally:
            self.pending_race = None

    @precondition(lambda self: self._busy(lambda a: a.phase == "staged"))
    @rule(i=st.integers(0, SLOTS - 1), verify_first=st.booleans(), at=st.integers(1, 2))
    def verify_vs_abort(self, i, verify_first, at):
        """A staged attempt's verify and a third party's abort of it (a task marked failed while
        it still runs) interleave: the other one acts right before the first one's ``at``-th
        ledger write (the attempt's decision, then PREPARED)."""
        staged = self._busy(lambda a: a.phase == "staged")
        a = staged[i % len(staged)]
        batch, attempt = a.batch, a.attempt
        if verify_first:
            self.pending_race = {"actor": a.name, "at": at, "other": lambda: self._third_party_abort(batch, attempt),
                                 "count": 0, "label": f"abort of {batch}/{attempt}"}
            try:
                self._advance(a, 0, verb="verify")
            finally:
                self.pending_race = None
            return
        self._stack.append("third-party")
        self.pending_race = {"actor": "third-party", "at": at, "other": lambda: self._advance(a, 0, verb="verify"),
                             "count": 0, "label": f"verify of {batch}/{attempt}"}
        try:
            self._third_party_abort(batch, attempt)
        finally:
            self.pending_race = None
            self._stack.pop()

    @rule(kind=st.sampled_from(["abandon", "zombie", "zombie", "abort", "transient"]), i=st.integers(0, SLOTS - 1),
          shift=st.integers(1, SLOTS - 1))
    def disturb(self, kind, i, shift):
        """Something happens to a run: it dies between two verbs (``abandon``), a ZOMBIE second
        attempt of its batch appears in another slot, a third party aborts its attempt (the task
        was marked failed), or its commit hits a transient storage error (the task retries)."""
        if kind == "abandon":
            busy = self._busy()
            if busy:
                a = busy[i % len(busy)]
                event("actor abandoned between verbs")
                self._drop(a, "abandoned between verbs")
        elif kind == "zombie":
            busy = self._busy(lambda a: a.batch is not None and a.phase != "idle")
            if busy:
                self._zombie(busy[i % len(busy)], shift)
        elif kind == "abort":
            busy = self._busy(lambda a: a.attempt is not None)
            if busy:
                a = busy[i % len(busy)]
                self._third_party_abort(a.batch, a.attempt)
        else:
            busy = self._busy(lambda a: a.phase == "prepared")
            if busy:
                a = busy[i % len(busy)]
                self.arm = (a.name, "transient", "commit.before_delta_commit")
                try:
                    self._advance(a, 0)
                finally:
                    self.arm = None

    def _zombie(self, a: Actor, shift: int) -> None:
        dst = (a.slot + shift) % SLOTS
        digest, plan = a.proto.ledger.plan_digest(a.batch), a.proto.ledger.plan(a.batch)
        if plan is None:
            return
        z = self._new_actor(dst)
        z.run_id, z.phase, z.batch, z.pinned_plan, z.zombie = a.run_id, "planned", a.batch, (plan, digest, self.cfg), True
        self.actors[dst] = z
        event("zombie spawned")
        note(f"zombie of {a!r} in slot {dst}")

    def _third_party_abort(self, batch: int, attempt: str) -> None:
        try:
            removed = self.protocol("third-party").abort(batch, attempt, "task marked failed")
            event("third-party abort: done")
            note(f"  third-party abort of {batch}/{attempt}: removed {len(removed)}")
        except AttemptPrepared as e:
            event("third-party abort: AttemptPrepared")
            note(f"  third-party abort of {batch}/{attempt}: {e}")

    # edits of the pipeline file: harmless ones, and keys that a pending batch (or the tables) depend on
    EDITS: dict[str, Callable[[dict, int], Any]] = {
        "description": lambda doc, n: doc.update(description=f"edit {n}"),
        "retries": lambda doc, n: doc.update(retries={"commit": 1 + n % 5}),
        "max_records_per_batch": lambda doc, n: doc["source"].update(max_records_per_batch=MAX_RECORDS + n % 3),
        "max_record_bytes": lambda doc, n: doc.update(max_record_bytes=(1 << 20) + n),
        "schema": lambda doc, n: doc.update(schema=doc["schema"] + f", note{n} STRING"),  # a new column
    }

    @rule(edit=st.sampled_from(sorted(EDITS)))
    def edit_config(self, edit):
        """The pipeline file is edited between two verbs (of any runs): each run's next task reads
        the new file. A pending batch must commit under the configuration that planned it, or the
        edit be refused (``_config_refused``), never be stuck PREPARED."""
        self.edits += 1
        doc = copy.deepcopy(self.docs[-1])
        self.EDITS[edit](doc, self.edits)
        self.docs.append(doc)
        self._use_config()
        event(f"config edit: {edit}")
        note(f"config edit {self.edits}: {edit}")

    def replay(self, pick, by_reason):
        """``make replay`` of a batch the quarantine table holds now (all its records, or those whose
        reason names JSON), between two verbs of the runs; refused when nothing is left to replay,
        or when a rewind (recorded, or only reserved by a rewind that died) undid the batch. A rule
        of ``ReplayProtocolModel``."""
        batches = sorted({r["batch_id"] for r in self._views()["quarantine"].rows})
        if not batches:
            return
        b = batches[pick % len(batches)]
        try:
            done = replay_records(Protocol(self.cfg), b, "JSON" if by_reason else None)
        except UsageError as e:
            event("replay: refused" + (" (rewound)" if "was rewound" in str(e) else ""))
            note(f"replay of batch {b} refused: {e}")
            return
        event("replay: done" + (" (some already replayed)" if done["already"] else ""))
        note(f"replay of batch {b}: replay {done['replay']}, {done['records']} record(s), {done['already']} skipped")

    def _replays(self) -> dict[str, dict]:
        """The raw replay records of the ledger, by their landing file."""
        return {r["file"]: r for r in _read_json_dir(self.sink / "_eo_ledger" / "replays").values()}

    @precondition(lambda self: (self.sink / "_delta_log").is_dir())
    @rule(kind=st.sampled_from(["compact", "append", "vacuum-sink", "vacuum-quarantine"]), n=st.integers(1, 3))
    def foreign(self, kind, n):
        """A foreign writer on the tables: compaction, a blind append of foreign rows, a VACUUM."""
        if kind == "compact":
            self._compact()
        elif kind == "append":
            self._append(n)
        else:
            self._vacuum(kind.split("-", 1)[1])

    def _compact(self):
        from deltalake import DeltaTable

        if (self.sink / "_delta_log").is_dir():
            note("foreign compaction of the sink")
            event("foreign compaction")
            self.compactions += 1
            DeltaTable(str(self.sink)).optimize.compact()

    def _append(self, n: int):
        from deltalake import DeltaTable, write_deltalake

        if not (self.sink / "_delta_log").is_dir():
            return
        self.foreign_rows += 1
        schema = pa.schema(DeltaTable(str(self.sink)).schema().to_arrow())
        rows = [{f.name: (f"foreign-{self.foreign_rows}-{i}" if f.name == "order_id" else None) for f in schema}
                for i in range(n)]
        note(f"foreign append of {n} row(s) to the sink")
        event("foreign append")
        write_deltalake(str(self.sink), pa.Table.from_pylist(rows, schema=schema), mode="append")

    def _vacuum(self, part: str):
        from deltalake import DeltaTable

        table = self.sink if part == "sink" else self.quarantine
        if not (table / "_delta_log").is_dir():
            return
        staged = table / "eo_batches"
        if part == "quarantine":
            views = self._views()
            held = views["quarantine"].txn
            if views["sink"].txn > held:
                # Not a bug: a commit died between its two participants (the sink holds a batch the
                # quarantine does not); a VACUUM now would delete files that only a backup can
                # bring back (CommitBlocked then names that manual repair), which the model cannot do.
                return
        if staged.is_dir():
            self.vacuum_exposed |= {(part, str(f.relative_to(table))) for f in staged.rglob("*") if f.is_file()}
        if part == "sink" and self.compactions and self._rewind_unfinished():
            event("foreign vacuum while a rewind is not restored")  # the rewind is then cancelled
        gone = DeltaTable(str(table)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False,
                                             full=True)
        event(f"foreign vacuum of {part}")
        note(f"foreign VACUUM of the {part} table deleted {len(gone)} file(s)")

    def _rewind_unfinished(self) -> bool:
        """A rewind (record, or reservation in a plan) whose RESTORE the sink's log does not hold."""
        ledger = self.sink / "_eo_ledger"
        keys = set(_rewinds(ledger))
        keys |= {(p["rewind"]["after_batch"], p["rewind"]["to_batch"])
                 for p in _read_json_dir(ledger / "plans").values() if p.get("rewind")}
        keys -= _cancelled_rewinds(ledger)
        done = {c["commitInfo"].get("eo.rewind") for c in self._views()["sink"].commits.values()}
        return any(f"{APP}:{after}-{to}" not in done for after, to in keys)

    # -- invariants -----------------------------------------------------------------------------
    def _views(self) -> dict[str, TableView]:
        for v in self.views.values():
            v.refresh()
        return self.views

    def _missing(self, prepared: dict, only: set | None = None) -> set[tuple[str, str]]:
        out = set()
        for part, adds in prepared["adds"].items():
            if only is not None and part not in only:
                continue
            table = self.sink if part == "sink" else self.quarantine
            for add in adds:
                f = table / add["path"]
                if not f.is_file() or f.stat().st_size != add["size"]:
                    out.add((part, add["path"]))
        return out

    def check_now(self) -> None:
        for name in ("exactly_once_so_far", "txn_versions_only_grow", "prepared_batches_stay_committable",
                     "ledger_and_tables_agree", "checkpoints_agree_with_the_records"):
            getattr(self, name)()

    @invariant()
    def exactly_once_so_far(self):
        views = self._views()
        ours = [r for r in views["sink"].rows if not str(r["order_id"]).startswith("foreign-")]
        dup = {k: n for k, n in collections.Counter(r["order_id"] for r in ours).items() if n > 1}
        assert not dup, f"(1) published twice: {dup}"
        for r in ours:  # (2) nothing invented
            want = self.good.get(r["order_id"])
            assert want is not None, f"(2) published a record that was never landed: {r}"
            assert (r["customer"], r["amount"]) == (want["customer"], want["amount"]), \
                f"(2) published {r}, landed {want}"
        rows, replays = views["quarantine"].rows, self._replays()
        raws = collections.Counter(r["raw"] for r in rows if r["source"] not in replays)
        dup = {k: n for k, n in raws.items() if n > 1}
        assert not dup, f"(1) quarantined twice: {dup}"
        dup = {k: n for k, n in collections.Counter((r["source"], r["position"]) for r in rows).items() if n > 1}
        assert not dup, f"(1) a source position quarantined twice: {dup}"
        held = {(r["source"], r["position"], r["batch_id"]): r["raw"] for r in rows}
        for r in rows:
            if r["source"] in replays:  # (1) read from a replay file: its origin is still quarantined
                rec = replays[r["source"]]
                o = {x["line"]: x for x in rec["records"]}[r["position"]]
                assert held.get((o["source"], o["position"], o["batch_id"])) == r["raw"], (
                    f"(1) line {r['position']} of replay {rec['replay']} ({r['raw']!r}) was read by batch "
                    f"{r['batch_id']} but its origin, {o['source']}:{o['position']} of batch {o['batch_id']}, is "
                    f"not in the quarantine table (a rewind undid that batch): the line counts twice")
        landed_bad = set(self.bad)
        assert set(held.values()) <= landed_bad, f"(2) quarantined lines never landed: {set(held.values()) - landed_bad}"

    @invariant()
    def txn_versions_only_grow(self):
        for part, v in self._views().items():
            assert v.txn >= self.seen_txn[part], f"(4) {part} txn went back from {self.seen_txn[part]} to {v.txn}"
            self.seen_txn[part] = v.txn
            seq = [t for _lv, t, _ci in v.our_txns()]
            assert seq == sorted(set(seq)), f"(4) {part} log txn versions do not strictly increase: {seq}"
            assert v.txn == (seq[-1] if seq else 0), f"(4) {part}: delta-rs txn {v.txn}, raw log {seq[-1:]}"

    @invariant()
    def prepared_batches_stay_committable(self):
        views = self._views()
        for b, prepared in _read_json_dir(self.sink / "_eo_ledger" / "prepared").items():
            if prepared.get("abandoned"):
                continue
            waiting = {p for p, v in views.items() if v.txn < b}
            missing = self._missing(prepared, only=waiting)
            assert missing <= self.vacuum_exposed, \
                f"(3) PREPARED batch {b} lost files without a VACUUM: {sorted(missing - self.vacuum_exposed)}"

    @invariant()
    def ledger_and_tables_agree(self):
        views = self._views()
        ledger = self.sink / "_eo_ledger"
        plans = _read_json_dir(ledger / "plans")
        latest = max(plans, default=0)
        # the tables held the batch before the newest run's first batch when that run planned, or the
        # newest before it that holds something: an ABANDONED batch (a cancelled rewind's) holds nothing
        first = (plans[latest].get("run_first") or latest) if latest else 0
        prepared = _read_json_dir(ledger / "prepared")
        floor = first - 1
        while floor > 0 and prepared.get(floor, {}).get("abandoned"):
            floor -= 1
        problems = []
        for part, v in views.items():
            if not floor <= v.txn <= latest and not (latest == 0 and v.txn == 0):
                problems.append(f"{part} holds batch {v.txn}, the newest plan is {latest} (its run's first: {first})")
            for _lv, b, info in v.our_txns():
                p = prepared.get(b)
                if p is None or info.get("eo.fingerprint") != p.get("fingerprint"):
                    problems.append(f"{part} committed batch {b} with fingerprint {info.get('eo.fingerprint')}, "
                                    f"PREPARED record says {p and p.get('fingerprint')}")
        for b in _read_json_dir(ledger / "committed"):
            lagging = {p: v.txn for p, v in views.items() if v.txn < b}
            if lagging:
                problems.append(f"batch {b} is COMMITTED in the ledger but {lagging} do not hold it")
        if not problems:
            return
        # (5) they disagree: recover must refuse and name the repair (run on a copy: no side effects)
        self.copies += 1
        lake = self.root / f"copy-{self.copies}" / "lake"
        shutil.copytree(self.root / "lake", lake)
        try:
            Protocol(self._config(lake, f"copy-{self.copies}.yaml")).recover(run_id="check")
        except ProtocolError as e:
            assert "Repair" in str(e) or "make " in str(e), f"(5) {problems}; recover refused without a repair: {e}"
            note(f"(5) ledger and tables disagree ({problems}); recover says: {e}")
            return
        finally:
            shutil.rmtree(lake.parent, ignore_errors=True)
        raise AssertionError(f"(5) ledger and tables disagree and recover() did not refuse: {problems}")

    @invariant()
    def checkpoints_agree_with_the_records(self) -> None:
        """(6) What a plan reads from the newest usable ledger checkpoint and the plans after it
        says the same landing files were consumed as the raw records (plans not REWOUND, not
        ABANDONED; the newest one that read a file wins)."""
        ledger = self.sink / "_eo_ledger"
        if not (ledger / "checkpoints").is_dir():
            return
        plans = _read_json_dir(ledger / "plans")
        prepared = _read_json_dir(ledger / "prepared")
        gone = {b for after, to in _rewinds(ledger) for b in range(to, after + 1)}
        want: dict[str, tuple] = {}
        for b in sorted(plans):
            if b not in gone and not prepared.get(b, {}).get("abandoned"):
                want.update({f["path"]: (f["size"], f["mtime_ms"]) for f in plans[b]["range"].get("files", [])})
        held = min(v.txn for v in self._views().values())
        proto = Protocol(self.cfg)
        proto.ledger.fs = ReadOnlyFS(proto.ledger.fs)  # a damaged checkpoint is skipped, not removed, here
        hist = proto.ledger.history().bound(held)
        read = hist.read_so_far(lambda _k: None, lambda: [])
        landed = [str(f) for f in self.landing.rglob("*.jsonl")]
        got = {p: (c["size"], c["mtime_ms"]) for p in set(landed) | set(want) if (c := read.consumed(p)) is not None}
        assert got == want, (f"(6) the ledger checkpoint of batch {hist.checkpoint_id} and the plans after it say "
                             f"{sorted(set(got) ^ set(want))[:5]} differently from the records")
        if hist.checkpoint_id:
            event("ledger checkpoint used")

    # -- the final drain --------------------------------------------------------------------------
    def teardown(self):
        try:
            self.arm = self.pending_race = None
            if sys.exc_info()[0] is None:  # a failed step is reported as it is, without a drain
                self._drain()
        finally:
            self._release()

    def _release(self):
        """Undo what __init__ did to the process, whatever happened (later tests read the warnings)."""
        self.arm = self.pending_race = None
        _MACHINE[0] = None
        faults.crash_point, faults.fail_point = self._patched
        for k, v in self._checkpoints.items():
            setattr(ckpt, k, v)
        logging.getLogger("eobatch").setLevel(self._log_level)
        shutil.rmtree(self.root, ignore_errors=True)

    def _drain(self):
        a = Actor(self, 9, 0)
        a.name, a.run_id = "drain", "drain-run"
        committed = 0
        for _ in range(40):
            try:
                a.proto.recover(run_id=a.run_id)
                plan, _new = a.proto.plan(MAX_RECORDS, run_id=a.run_id)
                if plan is None:
                    break
                attempt = stage(a.proto, plan.batch_id)
                a.proto.verify(plan.batch_id, attempt)
                a.proto.commit(plan.batch_id)
                committed += 1
            except CommitBlocked as e:
                self._blocked(a, e)
            except ConfigChanged as e:
                self._config_refused(None, e, "drain")
                a.proto = self.protocol(a.name)
            self.exactly_once_so_far()
            self.txn_versions_only_grow()
        else:
            raise AssertionError("the drain did not finish in 40 cycles")
        a.proto.sweep(recent=None)
        views = self._views()
        ours = collections.Counter(r["order_id"] for r in views["sink"].rows
                                   if not str(r["order_id"]).startswith("foreign-"))
        lost = sorted(set(self.good) - set(ours))
        assert not lost, f"lost after the drain: {lost[:10]} ({len(lost)} of {len(self.good)})"
        assert all(n == 1 for n in ours.values()) and set(ours) == set(self.good)
        replays = self._replays()
        raws = collections.Counter(r["raw"] for r in views["quarantine"].rows if r["source"] not in replays)
        assert raws == collections.Counter(self.bad), \
            f"quarantine after the drain: missing {sorted(set(self.bad) - set(raws))[:5]}, extra {raws - collections.Counter(self.bad)}"
        ledger = self.sink / "_eo_ledger"
        rewound = {b for after, to in _rewinds(ledger) for b in range(to, after + 1)}
        read = collections.Counter(r["source"] for r in views["quarantine"].rows if r["source"] in replays)
        for file, rec in replays.items():  # each line of a replay once while its origin counts; never after
            want = 0 if rec["batch_id"] in rewound else len(rec["records"])
            assert read[file] == want, (f"replay {rec['replay']} of batch {rec['batch_id']} (rewound: "
                                        f"{rec['batch_id'] in rewound}): {read[file]} of its lines quarantined "
                                        f"again after the drain, expected {want}")
            event("drain: a void replay" if want == 0 else "drain: a replay read")
        latest = max(_read_json_dir(self.sink / "_eo_ledger" / "plans"), default=0)
        for part, v in views.items():
            assert v.txn == latest, f"{part} holds batch {v.txn} after the drain, newest plan {latest}"
            table = self.sink if part == "sink" else self.quarantine
            ever = v.ever_added()
            staged = table / "eo_batches"
            orphans = sorted(str(f.relative_to(table)) for f in staged.rglob("*") if f.is_file()
                             and str(f.relative_to(table)) not in ever) if staged.is_dir() else []
            assert not orphans, f"sweep(recent=None) left staged files no commit referenced in {part}: {orphans[:5]}"
        event(f"drain: {committed} batch(es)")


ProtocolModel.TestCase.settings = (
    settings(max_examples=int(os.environ["EOBATCH_MODEL_EXAMPLES"]), stateful_step_count=int(
        os.environ.get("EOBATCH_MODEL_STEPS", "50")), deadline=None, database=None,
        suppress_health_check=list(HealthCheck))
    if os.environ.get("EOBATCH_MODEL_EXAMPLES") else
    settings(max_examples=int(os.environ.get("EOBATCH_MODEL_CI_EXAMPLES", "200")),
             stateful_step_count=int(os.environ.get("EOBATCH_MODEL_STEPS", "35")), deadline=None,
             derandomize=True, database=None, suppress_health_check=list(HealthCheck))
)
TestProtocolModel = ProtocolModel.TestCase


class MergeProtocolModel(ProtocolModel):
    """The same machine with a merge sink (``sink.mode: merge``, keys ``order_id``, sequence
    ``seq``): every interleaving, crash, zombie, race and foreign writer above now goes through the
    MERGE commits, the tombstones participant and the sweep of consumed staged rows. Each landed
    record has a key of its own, so the invariants stay the same (published once, as landed;
    every PREPARED batch committable; nothing left staged after the drain)."""

    EDITS = {**ProtocolModel.EDITS,
             # a key of the tables' meaning (the tombstones' columns): refused once a batch is planned
             "sequence_by": lambda doc, n: doc["sink"]["merge"].update(
                 sequence_by="seq2" if doc["sink"]["merge"]["sequence_by"] == "seq" else "seq")}

    def _doc(self) -> dict:
        doc = super()._doc()
        doc["schema"] = SCHEMA + ", seq BIGINT NOT NULL, seq2 BIGINT NOT NULL"
        doc["sink"].update(mode="merge", merge={"keys": ["order_id"], "sequence_by": "seq"})
        return doc

    def record(self, k: int, i: int) -> dict:
        return {**super().record(k, i), "seq": k * 100 + i, "seq2": k * 100 + i}


class ReplayProtocolModel(ProtocolModel):
    """The same machine with an operator's ``make replay`` among the rules, and a rule that makes
    rewinds meet replays often (its own CI budget, so that the draws of ``ProtocolModel`` stay as
    they are). Schema edits are left out here (drawn as a description edit): ``ProtocolModel``
    draws them, with the stage and verify checks that keep a batch under its plan's schema
    (``test_found_a_batch_staged_under_an_edit_that_is_then_put_back_is_never_committed``)."""

    EDITS = {**ProtocolModel.EDITS, "schema": ProtocolModel.EDITS["description"]}

    @precondition(lambda self: (self.quarantine / "_delta_log").is_dir())
    @rule(pick=st.integers(0, 11), by_reason=st.booleans())
    def replay_quarantined(self, pick, by_reason):
        self.replay(pick, by_reason)

    @precondition(lambda self: (self.quarantine / "_delta_log").is_dir() and (self.sink / "_eo_ledger" / "replays").is_dir())
    @rule(slot=st.integers(0, SLOTS - 1), back=st.integers(0, 2), pick=st.integers(0, 11))
    def rewind_after_replay(self, slot, back, pick):
        """Once a replay was made: a run rewinds (to the newest batch, or one or two before it),
        then the operator replays again, so that rewinds meet replays often (their origin batch
        undone, or only the batch that read their file)."""
        a = self.actors[slot]
        if a.phase == "idle":
            self._advance(a, 0)  # its recover
        if a.phase != "ready":
            return
        self._advance(a, 3 + 4 * back)  # a rewind to the newest plan minus ``back``
        self.replay(pick, False)


ReplayProtocolModel.TestCase.settings = settings(
    ProtocolModel.TestCase.settings,
    max_examples=int(os.environ.get("EOBATCH_MODEL_EXAMPLES") or os.environ.get("EOBATCH_MODEL_REPLAY_CI_EXAMPLES", "60")))
TestReplayProtocolModel = ReplayProtocolModel.TestCase


MergeProtocolModel.TestCase.settings = settings(
    ProtocolModel.TestCase.settings,
    max_examples=int(os.environ.get("EOBATCH_MODEL_EXAMPLES") or os.environ.get("EOBATCH_MODEL_MERGE_CI_EXAMPLES", "40")))
TestMergeProtocolModel = MergeProtocolModel.TestCase





# -- every named crash point, once each, whatever the CI profile's draw -----------------------------
@pytest.mark.parametrize("point", NAMED_POINTS)
def test_a_run_killed_at_each_named_crash_point_is_finished_by_a_later_run(machine, point):
    """The run r0 dies at ``point`` (with another attempt of its batch already staged by r1 for
    the commit points); the fixture's drain, a later run, must finish its work exactly once."""
    m = machine
    m.land(3, 1, False)
    m.land(2, 0, False)
    m.land(1, 1, False)
    _committed_batches(m, 1)
    verb, phases = ProtocolModel.CRASH_VERBS[point]
    if verb == "rewind":
        _committed_batches(m, 1)
    path = {"plan": [0], "stage": [0, 0], "verify": [0, 0, 0], "commit": [0, 0, 0, 0], "rewind": [0]}[verb]
    for pick in path:  # recover, then the verbs up to the one that reaches the point
        m.step(0, pick)
    if verb == "commit":
        m._zombie(m.actors[0], 1)
        m.step(1, 0)  # a zombie's attempt of the same batch, staged late
    assert m.actors[0].phase == phases[0], m.actors[0]
    before = m.actors[0].run_id
    m.crash(0, 0, point)
    assert m.actors[0].run_id != before, f"the crash at {point} did not happen"


# -- the bugs this model found (fixed in 5315b82), as fixed sequences of its own rules ----------
@pytest.fixture
def machine(monkeypatch):
    mod = sys.modules[__name__]
    monkeypatch.setattr(mod, "note", lambda *_a, **_k: None)  # outside a hypothesis test
    monkeypatch.setattr(mod, "event", lambda *_a, **_k: None)
    m = ProtocolModel()
    try:
        yield m
        m.check_now()
        m._drain()  # then exactly once: everything landed is published, once
    finally:
        m._release()


def _committed_batches(m: ProtocolModel, n: int) -> None:
    for _ in range(n):
        m.run(0, [0, 0, 0, 0, 0])  # recover, plan, stage, verify, commit
        m.check_now()


def test_found_a_vacuum_of_the_quarantine_blocks_a_prepared_batch_in_every_table(machine):
    """Was: the sink took batch 2, then its commit found the quarantine's files gone
    (CommitBlocked), and the reset-batch it named was refused (the sink held the batch)."""
    m = machine
    m.land(3, 0, False)
    m.land(2, 1, False)  # batch 2 has a quarantined line
    _committed_batches(m, 1)
    m.run(0, [0, 0, 0, 0])  # batch 2 PREPARED
    m.foreign("vacuum-quarantine", 1)
    m.step(0, 0)  # commit: CommitBlocked in no table, then reset(2) as it says (asserted in _blocked)
    assert m._views()["sink"].txn == 1 and m.actors[0].phase == "idle"


def test_found_a_rewind_to_a_version_a_vacuum_emptied_is_refused_before_it_changes_anything(machine):
    """Was: the rewind reserved batch 3 and recorded itself, then RESTORE failed with a raw
    DeltaError ("Find missing file") at that and every later recover: the pipeline was stuck."""
    m = machine
    m.land(3, 0, False)
    m.land(3, 0, False)
    _committed_batches(m, 2)
    m.foreign("compact", 1)
    m.foreign("vacuum-sink", 1)
    m.step(0, 0)  # recover
    m.step(0, 3)  # rewind to batch 2: refused (ProtocolError), nothing reserved or recorded
    ledger = m.sink / "_eo_ledger"
    assert max(_read_json_dir(ledger / "plans")) == 2 and not list((ledger / "rewinds").glob("*.json"))


def test_found_a_rewind_whose_version_a_vacuum_emptied_after_its_check_is_cancelled_not_stuck(machine):
    """Was (seed 11, 1000 examples): another tool compacted the sink, a rewind checked that the
    version it restores to was whole and reserved batch 3, and a VACUUM at retention 0 removed
    that version's files before the RESTORE: every recover then raised LedgerMismatch ("put the
    missing files back from a backup") and nothing was published again. Now the rewind is
    cancelled (put-if-absent), batch 3 is ABANDONED and the pipeline goes on from batch 2: the
    fixture's drain publishes every record once."""
    m = machine
    m.land(3, 0, False)
    m.land(3, 1, False)
    _committed_batches(m, 2)
    m.foreign("compact", 1)
    m.crash(0, 3, "rewind.before_restore")  # the rewind to batch 2 reserved batch 3, recorded, died
    ledger = m.sink / "_eo_ledger"
    assert _rewinds(ledger) == [(2, 2)] and max(_read_json_dir(ledger / "plans")) == 3
    m.foreign("vacuum-sink", 1)  # the files of the version before batch 2 are gone
    m.step(1, 0)  # another run's recover: cancels the rewind, abandons batch 3
    assert _cancelled_rewinds(ledger) == {(2, 2)} and _rewinds(ledger) == []
    assert _read_json_dir(ledger / "prepared")[3]["abandoned"]
    assert m._views()["sink"].txn == 2  # nothing was restored
    m.land(2, 0, False)  # and the pipeline goes on (the drain: batches 4.., every record once)


def test_found_a_rewind_to_before_a_replayed_batch_reads_the_replay_file_again(machine):
    """Was: batch 1 quarantined two lines, a replay wrote them back, batch 2 quarantined them again
    from the replay file; a rewind to batch 1 read land-0001 and the replay file once more, so the
    lines counted twice (a fixed rule would have published them twice) with no origin left."""
    m = machine
    m.land(3, 2, False)
    _committed_batches(m, 1)
    m.replay(0, False)
    _committed_batches(m, 1)  # batch 2 reads the replay file
    (file,) = m._replays()
    assert sorted(r["batch_id"] for r in m._views()["quarantine"].rows if r["source"] == file) == [2, 2]
    m.step(0, 0)  # recover
    m.step(0, 7)  # rewind to batch 1 (the newest plan minus one)
    m.check_now()
    assert (m.sink / "_eo_ledger" / "rewinds" / "0000000002-0000000001.json").exists()
    _committed_batches(m, 2)  # batch 3: land-0001 again; never the void replay's file


def test_found_a_zombie_of_a_reset_batch_does_not_publish_the_old_range(machine):
    """Was: after reset-batch planned batch 2 again (a late file sorts first), a zombie attempt
    that had read the old plan 2 verified (same record count) and committed: land-0002 was
    published twice and land-0003 never."""
    m = machine
    m.land(3, 0, False)
    m.land(3, 0, False)
    _committed_batches(m, 1)
    m.run(0, [0, 0])  # recover, plan batch 2 = [land-0002]
    m._zombie(m.actors[0], 1)  # a second attempt whose job read plan 2 now
    m.run(0, [0, 0])  # stage, verify: batch 2 PREPARED
    m.foreign("vacuum-sink", 1)
    m.step(0, 0)  # commit: CommitBlocked -> reset(2), as the message says
    m.land(3, 0, False, late=True)  # a late file (old mtime): plan 2 is now [land-0003]
    m.run(2, [0, 0])
    m.run(1, [0, 0])  # the zombie stages the old plan 2; its verify fails (another plan)
    assert m.actors[1].phase == "failed"



def test_found_a_changed_sequence_by_never_leaves_a_batch_prepared_and_uncommittable(monkeypatch):
    """Issue 27: ``sink.merge.sequence_by`` was not in the sink contract; the edit was accepted and
    the next batch was PREPARED and never committed (ArrowInvalid: No match for FieldRef.Name(seq2):
    the tombstones table has the old column), every recover failing alike. Now its recover refuses
    the edit (``_config_refused`` checks the message and undoes it) and the batch commits."""
    mod = sys.modules[__name__]
    monkeypatch.setattr(mod, "note", lambda *_a, **_k: None)
    monkeypatch.setattr(mod, "event", lambda *_a, **_k: None)
    m = MergeProtocolModel()
    try:
        m.land(3, 0, False)
        _committed_batches(m, 1)
        m.edit_config("sequence_by")
        m.land(2, 0, False)
        m.run(0, [0, 0, 0, 0, 0])  # recover refuses the edit; the operator puts the old value back
        assert m.docs[-1] == m.docs[0] and m.actors[0].phase == "idle"
        _committed_batches(m, 1)
        assert m._views()["sink"].txn == 2
        m._drain()
    finally:
        m._release()


def test_found_a_batch_staged_under_an_edit_that_is_then_put_back_is_never_committed(machine):
    """Was (``--hypothesis-seed=7``, 300 examples): batch 2 was staged while a ``schema`` edit (a
    new column) was in place; another run's recover refused the edit and the operator put the old
    schema back, as it advised; the attempt staged under the edit then verified and committed, so
    the sink took the edited column, and every later batch failed verify ("the table's column(s)
    note2 are not in this batch's schema"). A batch is staged and verified only under its plan's
    configuration: the stage refuses the edit, or verify aborts what was staged under another."""
    m = machine
    m.land(3, 0, False)
    _committed_batches(m, 1)
    m.land(2, 0, False)
    m.run(0, [0, 0])  # r0: recover, plan batch 2
    m.edit_config("description")
    m.edit_config("schema")  # a new column note2 while batch 2 is PLANNED
    m.step(0, 0)  # r0 stages batch 2
    m.step(1, 0)  # r1's recover refuses the edit; the operator puts the old schema back
    assert m.docs[-1]["schema"] == SCHEMA
    for _ in range(3):  # r0 goes on with whatever it holds
        m.step(0, 0)
        m.check_now()
    from deltalake import DeltaTable

    assert "note2" not in DeltaTable(str(m.sink)).schema().to_arrow().names
    m.land(1, 0, False)  # the drain's next batch must verify and commit
