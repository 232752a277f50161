"""Interval mode under hypothesis: the slices of an hourly pipeline against everything that
rewrites or replaces their files.

Files land in three hours; any hour runs (again) at any time, its commit dying at any named
point (the next run's recover finishes it); maintenance passes compact the tables one slice at a
time (``eobatch.sinks.delta.compaction``) and VACUUM at retention 0; a compaction lands between a batch
commit's snapshot and its Delta commit (the commit is then retried, as its task would); a
compaction built on a stale snapshot loses; one dies between its record and its commit; the
sweep of dead compactions runs. Real protocol, real delta-rs tables, the pyarrow stager.

Checked after every step: no record is published twice, none is published that did not land;
the pipeline's txn in each table is a batch the ledger planned. At the end of every example,
every hour runs once more, and then the sink publishes exactly the records that landed.

``EOBATCH_MODEL_EXAMPLES=<n>`` (``make model-check``) runs n examples of 40 steps;
``make test`` runs EOBATCH_MODEL_INTERVAL_CI_EXAMPLES (default 15) of 30 steps.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import deltalake
import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from eobatch.core import faults
from eobatch.pipelines.loader import load_pipeline
from eobatch.protocol import Protocol
from eobatch.protocol.maintenance import maintain
from eobatch.sinks import CommitConflict
from eobatch.sinks.delta import DeltaParticipant, compaction
from support.protocol_runs import T0, H, iv, land, published
from support.pyarrow_stager import stage

HOURS = st.integers(0, 2)
COMMIT_POINTS = (None, "commit.before_delta_commit", "commit.after_first_participant", "commit.after_delta_commit")


class Died(BaseException):
    """A process that died at a crash point (nothing after it runs)."""


@contextlib.contextmanager
def patched(owner, name: str, value):
    """``owner.name`` is ``value`` inside the block (a process of the model that behaves so)."""
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield old
    finally:
        setattr(owner, name, old)


def folder(h: int) -> str:
    t = dt.datetime.fromtimestamp(T0 + h * H, dt.timezone.utc)
    return f"dt={t:%Y-%m-%d}/hour={t:%H}"


class IntervalModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="eobatch-ivmodel-"))
        doc = {
            "name": "orders", "mode": "interval", "schedule": "@hourly",
            "source": {"kind": "files", "path": str(self.root / "landing"), "max_records_per_batch": 1000,
                       "interval_prefix": "dt={ds}/hour={hh}", "settle_seconds": 0},
            "schema": "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP",
            "sink": {"table": str(self.root / "lake" / "orders")},
            "quarantine": {"table": str(self.root / "lake" / "orders_quarantine")},
            "maintenance": {"vacuum_retention_hours": 0},
        }
        (self.root / "landing").mkdir()
        (self.root / "pipelines").mkdir()
        path = self.root / "pipelines" / "orders.yaml"
        path.write_text(yaml.safe_dump(doc))
        self.cfg = load_pipeline(str(path))
        self.proto = Protocol(self.cfg)
        self.landed: collections.Counter = collections.Counter()
        self.files = 0
        self.runs = 0

    def teardown(self) -> None:
        try:
            for h in range(3):  # every hour once more: each publishes what it holds now
                self._run(h)
            if any(self.landed.values()):
                assert published(self.proto) == self.landed, "after every hour ran once more"
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- the steps ---------------------------------------------------------------------------------
    @rule(h=HOURS, n=st.integers(1, 3))
    def land_file(self, h: int, n: int) -> None:
        self.files += 1
        ids = [f"f{self.files}-{j}" for j in range(n)]
        land(self.cfg, f"{folder(h)}/f{self.files}.jsonl", ids)
        self.landed.update(ids)

    @rule(h=HOURS, n=st.integers(0, 3), point=st.sampled_from(COMMIT_POINTS))
    def run_hour(self, h: int, n: int, point: str | None) -> None:
        """Hour ``h`` runs (again), after ``n`` more records landed in it (0: a plain re-run)."""
        if n:
            self.land_file(h, n)
        self._run(h, point)

    @rule(h=HOURS, before_snapshot=st.booleans())
    def run_hour_while_a_compaction_lands(self, h: int, before_snapshot: bool = False) -> None:
        """A maintenance pass lands between the first table's snapshot and its Delta commit, or
        (``before_snapshot``) between the commit's computation of the files it replaces and that
        snapshot."""
        cfg = self.cfg
        begin = DeltaParticipant._begin

        def begin_then_maintain(part, *a, **kw):
            DeltaParticipant._begin = begin  # once
            if before_snapshot:
                maintain(Protocol(cfg))
                return begin(part, *a, **kw)
            got = begin(part, *a, **kw)
            maintain(Protocol(cfg))
            return got
        with patched(DeltaParticipant, "_begin", begin_then_maintain):
            self._run(h)

    @rule()
    def maintenance(self) -> None:
        maintain(self.proto)

    @rule(h=HOURS)
    def stale_compaction(self, h: int) -> None:
        """A pass built before a batch landed: it loses (and undoes what it wrote)."""
        stale = {p: self._table(p) for p in ("sink", "quarantine")}
        self._run(h)
        for p, dt_ in stale.items():
            if dt_ is not None:
                compaction.compact_slices(self.proto, p, dt_, 1 << 20)

    @rule()
    def compaction_dies_before_its_commit(self) -> None:
        def dies(*a, **kw):
            raise Died("a maintenance pass died before its Delta commit")
        with patched(deltalake.DeltaTable, "create_write_transaction", dies):
            try:
                maintain(self.proto)
            except Died:
                pass

    @rule()
    def sweep_dead_compactions(self) -> None:
        for p in ("sink", "quarantine"):
            dt_ = self._table(p)
            if dt_ is not None:
                compaction.sweep_dead(self.proto, p, dt_, older_than_s=0)

    # -- what holds after every step -----------------------------------------------------------------
    @invariant()
    def nothing_twice_nothing_invented(self) -> None:
        if not deltalake.DeltaTable.is_deltatable(self.cfg.sink_table):
            return
        got = published(self.proto)
        assert not [k for k, v in got.items() if v > 1], f"published twice: {got}"
        assert set(got) <= set(self.landed), f"published without landing: {set(got) - set(self.landed)}"
        latest = self.proto.ledger.latest_batch_id()
        assert all(v <= latest for v in self.proto.committed_versions().values())

    # -- helpers ----------------------------------------------------------------------------------------
    def _table(self, participant: str):
        part: Any = self.proto.participants[participant]
        return part._table()

    def _run(self, h: int, point: str | None = None) -> None:
        """The run of hour ``h``: recover, plan, stage, verify, commit (dying at ``point``); a
        commit that lost to a racing compaction is retried once, as the commit task would, and so
        is a recover whose commit of an earlier PREPARED batch lost to it (the recover task
        retries as the commit task does)."""
        self.runs += 1
        rid = f"r{self.runs}"
        try:
            self.proto.recover(run_id=rid)
        except CommitConflict:
            self.proto.recover(run_id=rid)
        plan, _ = self.proto.plan(interval=iv(h), run_id=rid)
        if plan is None:
            return
        self.proto.verify(plan.batch_id, stage(self.proto, plan.batch_id))
        def dies_at(name: str) -> None:
            if name == point:
                raise Died(f"the commit died at {point}")
        try:
            with patched(faults, "crash_point", dies_at):
                self.proto.commit(plan.batch_id)
        except Died:
            return  # PREPARED, maybe partly committed: the next run's recover finishes it
        except CommitConflict:
            self.proto.commit(plan.batch_id)


IntervalModel.TestCase.settings = (
    settings(max_examples=int(os.environ["EOBATCH_MODEL_EXAMPLES"]), stateful_step_count=40, deadline=None,
             suppress_health_check=[HealthCheck.too_slow])
    if os.environ.get("EOBATCH_MODEL_EXAMPLES") else
    settings(max_examples=int(os.environ.get("EOBATCH_MODEL_INTERVAL_CI_EXAMPLES", "15")), stateful_step_count=30,
             deadline=None, suppress_health_check=[HealthCheck.too_slow]))
TestIntervalModel = IntervalModel.TestCase


def test_a_recover_that_loses_to_a_compaction_is_retried_and_commits():
    """Found by the machine: a commit dies before its Delta commit (PREPARED), then the next
    run's recover commits that batch while a compaction lands on the table: the recover loses
    (CommitConflict) and its retry commits the batch in that run, each record once."""
    state = IntervalModel()
    try:
        state.run_hour_while_a_compaction_lands(h=0)
        state.land_file(h=0, n=2)
        state.run_hour_while_a_compaction_lands(h=0)
        state.run_hour(h=0, n=0, point="commit.before_delta_commit")
        died = state.proto.ledger.latest_batch_id()
        assert state.proto.ledger.prepared(died) is not None and state.proto.ledger.committed(died) is None
        state.run_hour_while_a_compaction_lands(h=0)
        assert state.proto.ledger.committed(died) is not None  # by the recover's retry, in that run
        state.nothing_twice_nothing_invented()
        state.run_hour(h=0, n=0, point=None)
        state.nothing_twice_nothing_invented()
    finally:
        state.teardown()


def test_a_compaction_between_the_commits_computation_of_removes_and_its_snapshot_is_recomputed():
    """Was: ``make maintain`` compacted a slice after the commit had named the files its batch
    replaces and before the commit's snapshot: the commit raised a terminal SliceRewritten (with
    reset-batch advice). The replaced files are now computed again and the batch commits, each
    record once."""
    state = IntervalModel()
    try:
        state.land_file(h=0, n=2)
        state.run_hour(h=0, n=0, point=None)
        state.land_file(h=0, n=1)
        state.land_file(h=0, n=1)
        state.run_hour(h=0, n=0, point=None)  # two files in the slice: a compaction rewrites them
        state.land_file(h=0, n=1)
        state.run_hour_while_a_compaction_lands(h=0, before_snapshot=True)
        latest = state.proto.ledger.latest_batch_id()
        assert state.proto.ledger.committed(latest) is not None
        state.nothing_twice_nothing_invented()
        assert published(state.proto) == state.landed
    finally:
        state.teardown()
