"""Recovery: what the start of every run finishes of the runs before it (Flink's commit issued
again on restore).

``Recovering.recover`` checks that the ledger and the tables agree (LedgerMismatch when they do
not), forgets void plans, finishes a rewind, completes the ledger's COMMITTED record of a batch
every table holds, commits the PREPARED batches (finishing a PREPARE that a verify decided and
died before writing), hands back the first batch still to decide for re-staging, and sweeps
the staged files of dead or zombie attempts. ``Recovery`` is what it found and did.

``verbs.Protocol`` builds one ``Recovering`` (``proto.recovering``) and its ``recover`` hands over
to it. It reads the protocol through its public queries and drives its phases through the
facade's verbs (``Facade``: a structural type, so this module imports nothing of ``verbs``,
which imports it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..core.formats import BatchPlan, CommittedBatch, PreparedBatch
from ..errors import LedgerMismatch
from . import state as st
from .queries import Queries
from .verify import NotReady, VerifyFailed

if TYPE_CHECKING:
    from ..core.ledger import Ledger
    from .committing import Committing
    from .repairs import Repairs


@dataclass
class Recovery:
    """What ``Protocol.recover`` found and did."""

    latest: int  # highest planned batch id (0: none)
    committed: int  # highest batch committed in every participant
    pending: int | None  # the first batch still to decide (PLANNED/STAGED, to re-stage), if any
    actions: list[str]  # what recovery did, for the task log
    in_flight: BatchPlan | None = None  # interval mode: another run's batch being staged
    # every batch still to decide, from ``pending`` on (a run that planned several: some may be
    # STAGED or PREPARED already, and commit after the ones before them)
    pending_batches: list[int] = field(default_factory=list)


class Facade(Queries, Protocol):
    """What recovery uses of the pipeline's protocol besides its queries: the phases it finishes
    (verify, commit), the forgetting of void plans and the sweep."""

    def verify(self, batch_id: int, attempt: str, dry_run: bool = False) -> PreparedBatch: ...

    def commit(self, batch_id: int, recovered: bool = False) -> CommittedBatch: ...

    def forget_void(self, after: int, probe: int | None = None) -> list[int]: ...

    def sweep(self, recent: int | None = 5, skip: int | None = None) -> list[str]: ...


def decided_for_prepare(ledger: Ledger, batch_id: int) -> Iterator[str]:
    """The attempts of ``batch_id`` that a verify decided for PREPARE (put-if-absent), in the
    ledger's order, each read when asked for."""
    for attempt in ledger.attempts(batch_id):
        d = ledger.decision(batch_id, attempt)
        if d is not None and d["decision"] == "prepare":
            yield attempt


def prepare_decided(ledger: Ledger, batch_id: int) -> str | None:
    """The attempt of ``batch_id`` that a verify decided for PREPARE (put-if-absent), if any: the
    batch is being committed (when it has no PREPARED record yet, a recover finishes it)."""
    return next(decided_for_prepare(ledger, batch_id), None)


class Recovering:
    """The start of every run, for one pipeline: ``recover``."""

    def __init__(self, proto: Facade, repairs: Repairs, committing: Committing) -> None:
        self.proto = proto  # its queries and its phases' verbs; the rest is what it holds:
        self.cfg, self.ledger = proto.cfg, proto.ledger
        self.repairs, self.committing = repairs, committing

    def recover(self, sweep: bool = True, run_id: str | None = None, commit_prepared: bool = True) -> Recovery:
        """What ``Protocol.recover`` says, in order: void plans forgotten, configuration and
        consistency checked, rewinds finished, a missing COMMITTED record completed, the undecided
        batches decided up to the first that must be staged again (``_first_to_stage``), the sweep."""
        proto = self.proto
        latest = self.ledger.latest_batch_id()
        versions = proto.committed_versions()
        void = proto.forget_void(min(versions.values()), probe=latest)
        if void:
            latest = self.ledger.latest_batch_id()
        proto.check_config(latest, versions)
        proto.check_consistent(latest, versions)
        actions: list[str] = self.repairs.complete_rewinds()
        if void:
            actions.append(f"batches {st.ranges(void)} were planned after a batch that a reset forgot (void plans): "
                           f"forgotten, nothing of them was published; their range is planned again")
        undecided = proto.undecided_ids(latest, versions)
        # the newest batch every table holds (the newest batch, or one of the run still deciding)
        held = min(versions.values()) if latest else 0
        if held and (held == latest or (undecided and held >= self.ledger.require_plan(latest).first_of_run)) \
                and self.ledger.committed(held) is None and self.ledger.abandoned(held) is None:
            self.committing.write_committed(held, recovered=True, actions=actions)
            actions.append(f"batch {held} was committed in every table but its ledger entry was missing "
                           f"(crash after the Delta commit): ledger completed")
        pending, in_flight = self._first_to_stage(undecided, versions, run_id, commit_prepared, actions)
        if sweep:
            removed = proto.sweep(skip=in_flight.batch_id if in_flight else None)
            if removed:
                actions.append(f"swept {len(removed)} orphan file(s) of dead or zombie attempts")
        committed = min(proto.committed_versions().values()) if latest else 0
        return Recovery(latest=latest, committed=committed, pending=pending, actions=actions,
                        in_flight=in_flight, pending_batches=[b for b in undecided if pending and b >= pending])

    def _first_to_stage(self, undecided: list[int], versions: dict[str, int], run_id: str | None,
                        commit_prepared: bool, actions: list[str]) -> tuple[int | None, BatchPlan | None]:
        """The batches still to decide, in order: the PREPARED ones committed (not when
        ``commit_prepared`` is False: then the first is handed back) until the first that is not:
        (pending: that batch, to stage again; in_flight: interval mode, that batch when another
        run is deciding it). (None, None) when every one was committed."""
        for b in undecided:
            prepared = self.ledger.prepared(b)
            if prepared is None and commit_prepared:
                prepared = self._finish_decided_prepare(b, actions)
            if prepared is not None and not commit_prepared:
                actions.append(f"batch {b} is PREPARED and waits for its commit (not done in a dry run)")
                return b, None
            if prepared is not None:
                actions.append(f"batch {b} was PREPARED but not committed everywhere "
                               f"({versions}): committing it now")
                self.proto.commit(b, recovered=True)
                continue
            ahead = [p for p, v in versions.items() if v >= b]
            if ahead:
                raise LedgerMismatch(f"batch {b} is committed in {ahead} but was never PREPARED; "
                                     f"this ledger was not written by this pipeline's commit path")
            plan = self.ledger.require_plan(b)
            if self.cfg.mode == "interval" and plan.run_id != run_id:
                actions.append(f"batch {b} (interval {plan.interval_key}) is "
                               f"{self.proto.state(b, versions)} by run {plan.run_id}")
                return None, plan
            later = [x for x in undecided if x > b]
            actions.append(f"batch {b} is {self.proto.state(b, versions)}: it will be re-staged with the same "
                           f"source range" + (f", with batches {st.ranges(later)} of its run after it"
                                              if later else ""))
            return b, None
        return None, None

    def _finish_decided_prepare(self, batch_id: int, actions: list[str]) -> PreparedBatch | None:
        """A verify that won an attempt's "prepare" decision and died before writing PREPARED:
        the attempt's files are kept (abort can no longer remove them), so verify it again and
        write PREPARED now. None when no such attempt verifies."""
        for attempt in decided_for_prepare(self.ledger, batch_id):
            try:
                prepared = self.proto.verify(batch_id, attempt)
            except (VerifyFailed, NotReady) as e:
                actions.append(f"batch {batch_id} attempt {attempt} was decided for PREPARE but does not verify "
                               f"any more ({e}); the batch is staged again")
                continue
            actions.append(f"batch {batch_id} attempt {attempt} was decided for PREPARE by a verify that did not "
                           f"finish: PREPARED now")
            return prepared
        return None
