"""The commit phase (commit, in Flink's two-phase commit): a PREPARED batch published in every
table, then the ledger's COMMITTED record.

``Committing.commit`` checks the prepared files are all still there before the first table's
commit (a batch is published in all its tables or in none), then commits each table in commit
order, one Delta transaction carrying the batch's txn version and fingerprint (a table that
holds the batch already is checked, not committed again), strictly after the batch before it;
``write_committed`` the ledger's copy, which ``recovery`` also completes after a crash.

``verbs.Protocol`` builds one ``Committing`` (``proto.committing``) and its ``commit`` hands over
to it. It reads the protocol through its public queries (``queries.Queries``).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ..config.schemas import schema_from_b64
from ..core import faults
from ..core.formats import SINK, BatchPlan, CommittedBatch, PreparedBatch, commit_metadata, utcnow
from ..errors import BatchInFlight, CommitBlocked, LedgerMismatch, ProtocolError, SliceRewritten
from ..sinks import CommitConflict, FingerprintMismatch, Replace, sink_for
from ..sources import compact_offsets
from .verify import recheck_files, void_text

if TYPE_CHECKING:
    from .queries import Queries
    from .repairs import Repairs, Sweeper
    from .replacing import Replacing

log = logging.getLogger("eobatch")
SLICE_RECOMPUTES = 3  # a commit's replaced files computed again after compactions rewrote them (see _commit_replacing)


class Committing:
    """The commit phase of one pipeline: ``commit``, and ``write_committed`` (its ledger record)."""

    def __init__(self, proto: Queries, repairs: Repairs, sweeper: Sweeper, replacing: Replacing) -> None:
        self.proto = proto  # its queries; the rest is what it holds:
        self.cfg, self.app_id, self.layout, self.ledger = proto.cfg, proto.app_id, proto.layout, proto.ledger
        self.participants, self.names = proto.participants, proto.names
        self.repairs, self.sweeper, self.replacing = repairs, sweeper, replacing

    def commit(self, batch_id: int, recovered: bool = False) -> CommittedBatch:
        """Commit PREPARED batch ``batch_id``, as ``Protocol.commit`` says: its configuration and
        files checked, each table committed in order (``_commit_tables``), the ledger's COMMITTED
        record written, then what other attempts of the batch staged swept."""
        t0 = time.time()
        plan = self.ledger.plan(batch_id)
        prepared = self.ledger.prepared(batch_id)
        if plan is None or prepared is None:
            raise ProtocolError(f"batch {batch_id} is not PREPARED; nothing to commit")
        # a batch every table holds (a late commit task, after a recover or a rewind) is decided:
        # an edit of a PENDING key since its plan is no reason to refuse (its advice, putting the old
        # value back, would make the next batches fail against the tables' new columns)
        self.proto.check_config(batch_id, self.proto.committed_versions(), plan=plan)
        self.repairs.complete_rewinds()
        self._check_files(batch_id, prepared)
        versions = self._commit_tables(plan, prepared)
        faults.crash_point("commit.after_delta_commit")
        rec = self.write_committed(batch_id, recovered, versions, time.time() - t0)
        try:  # the batch is decided: what its losing and dead attempts left can go now
            swept = self.sweeper.sweep_batch(batch_id)
            if swept:
                log.info("batch %s: swept %d staged file(s) of other attempts", batch_id, len(swept))
        except Exception as e:  # noqa: BLE001 - clean-up only; the next run's sweep retries it
            log.warning("batch %s committed; sweeping other attempts' files failed (%s); the next run "
                        "retries", batch_id, e)
        return rec

    def _check_files(self, batch_id: int, prepared: PreparedBatch) -> None:
        """CommitBlocked when a prepared file of a table that does not hold the batch yet is gone
        or changed. Every such table is checked before the first Delta commit: a batch is
        published in all its tables or in none (a VACUUM that removed the quarantine's staged
        files must not leave the sink holding the batch alone)."""
        inputs = self.proto.inputs
        todo = {inputs(p): prepared.adds[inputs(p)] for p in self.names
                if self.participants[p].committed_batch(self.app_id) < batch_id}
        problems = recheck_files(self.layout, self.proto.fs_for, todo)
        if problems:
            held = [p for p in self.names if self.participants[p].committed_batch(self.app_id) >= batch_id]
            repair = (f"`make reset-batch PIPELINE={self.app_id} BATCH={batch_id}` to plan and stage it again"
                      if not held else
                      f"the {', '.join(held)} table already holds it, so it cannot be planned again: restore the "
                      f"missing files from a backup (or the table to the version before batch {batch_id} and then "
                      f"reset-batch)")
            raise CommitBlocked(f"PREPARED batch {batch_id} cannot be committed: " + "; ".join(problems) +
                                f". Its staged files were removed (VACUUM or by hand). Repair: {repair}.")

    def _commit_tables(self, plan: BatchPlan, prepared: PreparedBatch) -> dict[str, int]:
        """Each table's Delta commit of the batch, in commit order: {participant: its version}. A
        table that holds the batch already is checked (same fingerprint), not committed again; a
        table is committed only when it holds the batch before it (``prev_live``)."""
        batch_id = plan.batch_id
        versions: dict[str, int] = {}
        done_now = 0
        replaces = self.replacing.replaces(plan)
        for participant in self.names:
            part = self.participants[participant]
            staged = self.proto.inputs(participant)
            v = part.committed_batch(self.app_id)
            if v >= batch_id:
                versions[participant] = self._check_committed(participant, batch_id, prepared)
                log.info("%s: batch %s already committed at version %s (fingerprint checked): no-op",
                         participant, batch_id, versions[participant])
                continue
            prev = self.proto.prev_live(batch_id)
            if v < prev and plan.first_of_run <= prev:  # an earlier batch of its run: strictly in order
                raise BatchInFlight(f"batch {batch_id} commits after batch {prev} of its run, which the "
                                    f"{participant} table does not hold yet (it holds batch {v}): batch "
                                    f"{v + 1} commits first")
            if v != prev:
                raise LedgerMismatch(f"{participant} table is at batch {v}; batch {batch_id} cannot be "
                                     f"committed after it (it needs batch {prev})")
            if self.ledger.is_void(plan):  # the table holds batch prev: its plan can no longer change
                raise ProtocolError(void_text(batch_id) + ": it is never committed")
            faults.fail_point("commit.before_delta_commit")
            faults.crash_point("commit.before_delta_commit")
            try:
                versions[participant], replaces = self._commit_replacing(plan, prepared, participant, prev, replaces)
            except CommitConflict as e:
                log.info("%s", e)
                if part.committed_batch(self.app_id) >= batch_id:
                    versions[participant] = self._check_committed(participant, batch_id, prepared)
                    log.info("%s: a concurrent committer published batch %s first (same fingerprint)",
                             participant, batch_id)
                    continue
                raise
            done_now += 1
            log.info("%s: committed batch %s as Delta version %s (%d staged files)", participant, batch_id,
                     versions[participant], len(prepared.adds[staged]))
            if done_now == 1:
                faults.crash_point("commit.after_first_participant")
        return versions

    def _check_committed(self, participant: str, batch_id: int, prepared: PreparedBatch) -> int:
        """The version of ``participant``'s table that holds the batch, checked: FingerprintMismatch
        when it holds another file set for it; -1 when its commit info is no longer in the log."""
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

    def _commit_replacing(self, plan: BatchPlan, prepared: PreparedBatch, participant: str, prev: int,
                          replaces: dict[str, Replace] | None) -> tuple[int, dict[str, Replace] | None]:
        """``participant``'s Delta commit of the batch; (its version, the replaces it used).

        Interval mode: the files the batch replaces were computed before the commit's snapshot. A
        compaction of the pipeline's own (``make maintain``) that lands in between rewrote some of
        them: they are computed again (the compaction's record names the new ones) and the commit
        is built again, up to ``SLICE_RECOMPUTES`` times (then CommitConflict: the task retries).
        SliceRewritten only when the computation, done again, still names files that are gone:
        another writer rewrote them."""
        staged = self.proto.inputs(participant)
        part = self.participants[participant]
        for n in range(SLICE_RECOMPUTES + 1):
            try:
                v = part.commit(self.app_id, plan.batch_id, prepared.adds[staged],
                                schema_from_b64(prepared.arrow_schema[staged]),
                                list(prepared.partition_by.get(staged, [])),
                                commit_metadata(plan, prepared, participant, compact_offsets(plan)), expected_prev=prev,
                                replace=(replaces or {}).get(participant))
                return v, replaces
            except SliceRewritten as e:
                fresh = self.replacing.replaces(plan)
                if (fresh or {}).get(participant) == (replaces or {}).get(participant):
                    held = [p for p in self.names if self.participants[p].committed_batch(self.app_id) >= plan.batch_id]
                    raise SliceRewritten(self.replacing.rewritten_message(plan, str(e), "commit", held)) from e
                if n == SLICE_RECOMPUTES:
                    raise CommitConflict(f"{participant}: the files batch {plan.batch_id} replaces were rewritten "
                                         f"by a compaction {n + 1} times while it was committed; the commit is "
                                         f"retried") from e
                log.info("%s: a compaction rewrote files batch %s replaces after they were computed; computed "
                         "again, the commit is built again", participant, plan.batch_id)
                replaces = fresh
        raise AssertionError("unreachable")

    def write_committed(self, batch_id: int, recovered: bool, versions: dict[str, int] | None = None,
                        seconds: float = 0.0, actions: list[str] | None = None) -> CommittedBatch:
        """The ledger's COMMITTED record of a batch every table holds (put-if-absent).

        Its fingerprint is the PREPARED record's, checked against each table's commit info. A
        batch whose PREPARED record is missing (lost by a crash after the commit started, or a
        ledger copied without it) is completed from the tables' Delta commit info instead, only
        when every table holds this pipeline's commit of the batch with one and the same
        fingerprint; otherwise LedgerMismatch, and nothing is written."""
        prepared = self.ledger.prepared(batch_id)
        fingerprint: str | None
        if prepared is not None:
            fingerprint = prepared.fingerprint
            if versions is None:
                versions = {p: self._check_committed(p, batch_id, prepared) for p in self.names}
        else:
            found = {p: self.participants[p].find_batch_commit(self.app_id, batch_id) for p in self.names}
            prints = {p: (f[1].get("eo.fingerprint") if f else None) for p, f in found.items()}
            fingerprint = prints[SINK]
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
                versions = {p: f[0] for p, f in found.items() if f is not None}  # every one (checked above)
            note = (f"PREPARED record of batch {batch_id} was missing (lost by a crash?); completed from the "
                    f"Delta commit info (fingerprint {fingerprint}, versions {versions})")
            log.warning("%s", note)
            if actions is not None:
                actions.append(note)
        sink_commit = self.participants[SINK].find_batch_commit(self.app_id, batch_id)
        changes = sink_for(self.cfg).changes(sink_commit[1], prepared.rows_published if prepared else None) \
            if sink_commit else {}
        rec = CommittedBatch(pipeline=self.cfg.name, batch_id=batch_id, fingerprint=fingerprint,
                             delta_versions=versions, committed_at=utcnow(),
                             commit_seconds=round(seconds, 3), recovered=recovered, changes=changes)
        if not self.ledger.put_committed(rec):
            first = self.ledger.committed(batch_id)
            if first is None:
                raise ProtocolError(f"batch {batch_id} has no COMMITTED record at {self.layout.committed(batch_id)}, "
                                    f"though another process wrote it first; run again")
            rec = first
        return rec
