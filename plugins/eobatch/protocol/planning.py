"""The plan phase (begin, in Flink's two-phase commit): a batch's exact source range, recorded
put-if-absent before any data is written.

``Planning.plan_batches`` hands back the batches still to decide (never planning past them), or
plans new ones, each range starting where the one before ends, each recorded before the next is
planned. Interval mode plans one batch, its run's data interval, once the interval settled;
it looks back at earlier intervals for late files, and its plan names the files it replaces
(``replacing``). A plan writes the ledger's checkpoint when one is due.

``verbs.Protocol`` builds one ``Planning`` (``proto.planning``) and its ``plan`` and
``plan_batches`` hand over to it. It reads the protocol through its public queries and sets
what the last plan found on it (``Facade``: a structural type, so this module imports nothing
of ``verbs``, which imports it).
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from typing import TYPE_CHECKING, Protocol

from ..core import faults
from ..core.checkpoint import ms as _ms
from ..core.formats import JSON, BatchPlan, PublishedFile, planned_files, slice_name, utcnow
from ..errors import BatchInFlight, ConcurrentPlan, EobatchError, IntervalNotSettled, ProtocolError
from ..pipelines.loader import config_values
from ..sources import kind_for, source_for
from ..sources.base import LateFilesConfig, Planner, consumed_skip
from . import state as st
from .queries import Queries

if TYPE_CHECKING:
    from ..core.checkpoint import History
    from .replacing import Replacing

log = logging.getLogger("eobatch")


class Facade(Queries, Protocol):
    """What planning uses of the pipeline's protocol besides its queries: the repair of void
    plans, and where it leaves what the last plan found (read by the plan task and the backlog)."""

    last_late: list[JSON]
    last_skipped: list[JSON]
    last_warnings: list[str]
    last_planner: Planner | None
    last_reading: tuple[History, BatchPlan | None] | None

    def forget_void(self, after: int, probe: int | None = None) -> list[int]: ...


class Planning:
    """The plan phase of one pipeline: ``plan`` and ``plan_batches``."""

    def __init__(self, proto: Facade, replacing: Replacing) -> None:
        self.proto = proto  # its queries, and where the last plan's findings go; the rest is what it holds:
        self.cfg, self.app_id, self.layout, self.ledger = proto.cfg, proto.app_id, proto.layout, proto.ledger
        self.replacing = replacing

    def plan(self, max_records: int | None = None, interval: dict[str, str] | None = None,
             run_id: str | None = None) -> tuple[BatchPlan | None, bool]:
        """(plan, is_new): ``plan_batches`` of one batch."""
        plans, new = self.plan_batches(max_records=max_records, interval=interval, run_id=run_id)
        return (plans[0] if plans else None), new

    def plan_batches(self, max_records: int | None = None, interval: dict[str, str] | None = None,
                     run_id: str | None = None, max_batches: int = 1) -> tuple[list[BatchPlan], bool]:
        """(plans, are_new), as ``Protocol.plan_batches`` says: check that the ledger and the tables
        agree and that the pipeline's file says what the newest plan recorded; then hand back the
        batches still to decide, or plan new ones (``_plan_run``). Sets the facade's ``last_*``."""
        t0 = time.time()
        proto = self.proto
        proto.last_reading = None
        hist = self.ledger.history()  # the newest usable checkpoint and the plans after it
        versions = proto.committed_versions()
        if proto.forget_void(min(versions.values()), probe=hist.latest):
            hist = self.ledger.history()
        latest = hist.latest
        proto.check_config(latest, versions)
        proto.check_consistent(latest, versions)
        undecided = proto.undecided_ids(latest, versions)
        if undecided:
            return self._pending_plans(undecided, versions, run_id), False
        if max_batches < 1:
            raise ProtocolError(f"a run plans at least one batch, not {max_batches}")
        if self.cfg.mode == "interval" and max_batches > 1:
            raise ProtocolError("interval mode: a run's batch is its data interval; it plans one batch")
        held = min(versions.values())
        hist = hist.bound(held)
        proto.last_late, proto.last_skipped, proto.last_warnings = [], [], []
        source = proto.last_planner = source_for(self.cfg)
        source.begin_run()  # it may read its source once for the run's batches, and the backlog after them
        plans, reading = self._plan_run(source, hist, held, max_records, interval, run_id, t0, max_batches,
                                        run_first=latest + 1 if max_batches > 1 else None)
        if reading is not None:
            proto.last_reading = (reading, plans[0] if plans else None)
        if not plans:
            self._keep_discovery(source, hist)
        self._checkpoint(hist, held)
        # each batch's planning says what it left out: the run's inputs skipped, each once
        proto.last_skipped = list({(s["path"], s["reason"]): s for s in proto.last_skipped}.values())
        return plans, bool(plans)

    def _plan_run(self, source: Planner, hist: History, held: int, max_records: int | None,
                  interval: dict[str, str] | None, run_id: str | None, t0: float, max_batches: int,
                  run_first: int | None) -> tuple[list[BatchPlan], History | None]:
        """Up to ``max_batches`` new batches after ``hist.latest``, each recorded (put-if-absent)
        before the next is planned, until the source has nothing more: (the plans, the history
        read with them). The history is None when a reset forgot batches of this run while it
        planned them (it holds those)."""
        plans: list[BatchPlan] = []
        reading = hist
        while len(plans) < max_batches:
            try:
                plan = self._plan_next(source, reading, held, max_records, interval, run_id, t0, run_first=run_first)
            except EobatchError as e:
                if not plans:
                    raise
                self.proto.last_warnings.append(self._stopped_text(reading.latest + 1, plans, e))
                log.warning(self.proto.last_warnings[-1])
                break
            if plan is None:
                break
            if plans:  # planned after this run's previous batch: void if a reset forgets that one
                plan.base = self.ledger.record_digest(plans[-1])
            if not self.ledger.put_plan(plan) and not (self.proto.forget_void(plan.batch_id - 1)
                                                       and self.ledger.put_plan(plan)):
                if not plans:
                    raise ConcurrentPlan(f"another planner wrote batch {plan.batch_id} first "
                                         f"({self.layout.plan(plan.batch_id)}); this run planned nothing")
                log.warning("another planner wrote batch %s first: this run carries batches %s", plan.batch_id,
                            st.ranges(p.batch_id for p in plans))
                break
            faults.crash_point("plan.after_record")
            if self.ledger.is_void(plan):  # a reset forgot the batch before it since: so is this one
                return self._forgotten_while_planned(plan, plans), None
            plans.append(plan)
            reading = reading.with_plan(plan)
            t0 = time.time()
        return plans, reading

    def _pending_plans(self, undecided: list[int], versions: dict[str, int], run_id: str | None) -> list[BatchPlan]:
        """The plans of the batches still to decide (a plan never plans past them), or BatchInFlight
        when the first belongs to another run that is deciding it (PREPARED; interval mode)."""
        first = undecided[0]
        pending = self.ledger.require_plan(first)
        if self.ledger.prepared(first) is not None:
            if pending.run_id == run_id:
                raise ProtocolError(f"batch {first} of this run is PREPARED and must be committed before "
                                    f"a new plan: clear the run from its `recover` (or `commit`) task")
            # another run's batch between its verify and the end of its commit (runs overlap:
            # interval mode, backfills): wait. A batch whose committer died is committed by
            # the commit task's retries or the next run's recover.
            raise BatchInFlight(f"batch {first} of run {pending.run_id} is PREPARED and not yet committed "
                                f"everywhere ({versions}); batches are strictly ordered, so this run waits "
                                f"for its commit (a run's recover commits it if its run is gone)")
        if self.cfg.mode == "interval" and pending.run_id != run_id:
            raise BatchInFlight(f"batch {first} (interval {pending.interval_key}) of run {pending.run_id} "
                                f"is not decided yet; batches are strictly ordered, so this run waits. "
                                f"If that run is gone without its abort (marked failed or deleted by "
                                f"hand), clear it so it finishes or abandons its batch, or pause the "
                                f"pipeline and forget the batch: `make reset-batch PIPELINE={self.app_id} BATCH={first}`")
        return [pending] + [self.ledger.require_plan(b) for b in undecided[1:]]

    def _forgotten_while_planned(self, plan: BatchPlan, plans: list[BatchPlan]) -> list[BatchPlan]:
        """``plan`` was written after a reset (an operator's, a run's replan_pending) forgot the
        batch before it: forget it, and keep the run's batches the reset left (a prefix), or
        raise ConcurrentPlan when it left none."""
        self.proto.forget_void(plan.batch_id - 1)
        kept: list[BatchPlan] = []
        for p in plans:
            if self.ledger.plan_digest(p.batch_id) != self.ledger.record_digest(p):
                break
            kept.append(p)
        text = (f"a reset forgot batch {plan.batch_id - 1} while this run planned the batches after it: batches "
                f"{st.ranges(p.batch_id for p in plans[len(kept):])}{' and ' if len(plans) > len(kept) else ''}"
                f"{plan.batch_id} of this run are forgotten")
        if not kept:
            raise ConcurrentPlan(text + "; this run planned nothing (the next run plans their range again)")
        self.proto.last_warnings.append(text + f"; this run carries batches {st.ranges(p.batch_id for p in kept)}")
        log.warning(self.proto.last_warnings[-1])
        return kept

    def _keep_discovery(self, source: Planner, hist: History) -> None:
        """A plan that planned nothing keeps where its discovery got to, when it moved
        (``Planner.discovered``): the next plan starts there (``Ledger.discovery``)."""
        state = source.discovered()
        if state is None:
            return
        try:
            self.ledger.put_discovery(hist.newest_digest, state)
        except Exception as e:  # noqa: BLE001 - advisory: the next plan lists from the newest plan's range
            log.warning("discovery state not kept (%s: %s)", type(e).__name__, e)

    @staticmethod
    def _stopped_text(batch_id: int, plans: list[BatchPlan], e: EobatchError) -> str:
        """Why a run carries fewer batches than it could: planning batch ``batch_id`` raised ``e``
        (a refusal, a store that is down) after ``plans`` were planned (and recorded)."""
        return (f"batch {batch_id} was not planned: {e} (this run carries batch"
                f"{'es' if len(plans) > 1 else ''} {st.ranges(p.batch_id for p in plans)}, planned before it; the "
                f"next run plans batch {batch_id} again and meets this {e.kind} error first if it still holds)")

    def _plan_next(self, source: Planner, hist: History, held: int, max_records: int | None,
                   interval: dict[str, str] | None, run_id: str | None, t0: float,
                   run_first: int | None) -> BatchPlan | None:
        """The plan of the batch after ``hist.latest`` (not written yet), or None: nothing to read."""
        limit = max_records or self.cfg.source.max_records_per_batch
        if self.cfg.mode == "interval":
            if interval is None:
                raise ProtocolError("interval mode: the run has no data interval")
            if _ms(interval["end"]) <= _ms(interval["start"]):
                raise ProtocolError(f"interval mode needs a data interval of non-zero length, got "
                                    f"[{interval['start']}, {interval['end']}) (use a cron schedule, whose "
                                    f"runs cover the time between two ticks)")
            self._check_settled(interval)
            kw: JSON = {}
            kind = kind_for(self.cfg.source.kind)
            if kind.checks_late_files:  # look back at the intervals already planned
                lookback = self.lookback(interval["start"], hist)
                kw = {"lookback": lookback, "published": self._published_slices(hist, held, lookback)}
            if kind.interval_by_record_time:  # scans on from the newest live plan (sources/kafka/intervals.py)
                reads = self.proto.read_so_far(hist=hist)
                kw = {"previous": reads[-1] if reads else None, "cron": self.cfg.require_interval_cron(),
                      "holder": lambda name: hist.slice_holder(name, held),
                      "first_start_ms": hist.first_interval_start_ms()}
            rng, n, notes = source.interval_range(_ms(interval["start"]), _ms(interval["end"]), limit,
                                                  earlier=self._last_interval_before(interval["start"], hist), **kw)
        else:
            interval = None
            rng, n, notes = source.next_range(self.proto.read_so_far(hist=hist), limit)  # may raise DataLossError
        late, skipped = list(source.late), list(source.skipped)
        self.proto.last_late += late  # for the task's log and metrics
        self.proto.last_skipped += skipped  # for the task's metric and alert
        if rng is None:
            if interval is not None:
                notes += self._emptied(interval, hist, held)
            for msg in notes:
                log.warning(msg)
            return None
        plan = BatchPlan(
            pipeline=self.cfg.name, batch_id=hist.latest + 1, source_kind=self.cfg.source.kind, range=rng,
            rows_in=n, config_fingerprint=self.cfg.fingerprint(), planned_at=utcnow(),
            plan_seconds=round(time.time() - t0, 3), notes=notes, interval=interval, run_id=run_id,
            late=late, sink=self.proto.sink_record(), config=config_values(self.cfg), run_first=run_first,
        )
        self.replacing.check_replaceable(plan, self.replacing.replaces(plan, hist, held), "plan")
        # the task's gauge and alert: the planned files the kind will not read
        self.proto.last_skipped += [consumed_skip(f.entry) for f in planned_files(rng) or () if f.skipped]
        return plan

    def _checkpoint(self, hist: History, held: int) -> None:
        """Write the ledger checkpoint of batches 1..``held`` when one is due (``Ledger.write_checkpoint``).
        An optimisation only: when it fails, the next plan reads a few more records and tries again."""
        try:
            ck = self.ledger.write_checkpoint(hist, held)
        except Exception as e:  # noqa: BLE001 - see above; the batch plan is not affected
            log.warning("ledger checkpoint of batches 1..%s not written (%s); the next plan tries again", held, e)
            return
        if ck is not None:
            log.info("ledger checkpoint: batches 1..%s (%d index entries)", ck.batch_id, ck.entries)

    def _check_settled(self, interval: dict[str, str]) -> None:
        """Interval mode: plan an interval only ``source.settle_seconds`` after its end, so that
        files and records still arriving for it (renames, clock skew, slow uploads) are on time."""
        ready = _ms(interval["end"]) + 1000 * self.cfg.source.settle_seconds
        wait = ready - int(time.time() * 1000)
        if wait > 0:
            raise IntervalNotSettled(f"interval {interval['start']}/{interval['end']} is planned "
                                     f"{self.cfg.source.settle_seconds}s after its end (source.settle_seconds): "
                                     f"{wait / 1000:.0f}s to go")

    def lookback(self, start: str | _dt.datetime, hist: History | None = None) -> list[tuple[int, int]]:
        """Interval mode: the intervals before ``start`` checked for late files (``state.lookback``)."""
        source = self.cfg.source
        if not isinstance(source, LateFilesConfig):  # only kinds that check late files look back
            raise ProtocolError(f"source kind {source.kind!r} has no late_lookback_intervals: it does not "
                                f"check late files")
        first = (hist or self.ledger.history()).first_interval_start_ms()
        return st.lookback(self.cfg.require_interval_cron(), source.late_lookback_intervals, first, start)

    def _emptied(self, interval: dict[str, str], hist: History, held: int) -> list[str]:
        """Interval mode, nothing planned: what to say when the interval was published before
        (its files were all taken out of the landing zone since): its rows stay published."""
        name = slice_name(_ms(interval["start"]))
        files = hist.published({name}, held).get(name) or set()
        if not files:
            return []
        return [f"interval {interval['start']}/{interval['end']} was published with {len(files)} file(s) and none "
                f"is in the landing zone now: nothing was planned, so the rows it published stay (a run publishes "
                f"what its interval holds; an emptied interval has nothing to read). To take them back, land the "
                f"corrected records in the interval's folder and run it again, or rewind the pipeline "
                f"(`make rewind`) to before that interval's batch"]

    def _published_slices(self, hist: History, held: int,
                          lookback: list[tuple[int, int]]) -> dict[str, set[PublishedFile]]:
        """``state.published_slices`` for the look-back intervals' slices."""
        return hist.published({slice_name(lo) for lo, _hi in lookback}, held)

    def _last_interval_before(self, start: str | _dt.datetime, hist: History | None = None) -> BatchPlan | None:
        return (hist or self.ledger.history()).last_interval_before(start)
