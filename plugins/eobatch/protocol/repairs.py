"""The operator's repairs beside the protocol's phases, as objects the protocol holds.

``Repairs``: rewind (read again from a batch), reset (forget batches no table holds) and the
void plans a reset leaves behind (``forget_void``); ``Sweeper``: the staged files no commit
will reference. They move the pipeline's position explicitly, through the ledger, never by
editing a table behind its back.

``verbs.Protocol`` builds one of each (``proto.repairs``, ``proto.sweeper``) and its verbs
``rewind``, ``reset``, ``forget_void`` and ``sweep`` hand over to them. ``Repairs`` reads the
protocol only through its public queries (``queries.Queries``: a structural type, so this module
imports nothing of ``verbs``, which imports it); ``Sweeper`` needs no query, only the ledger
and the tables.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..core import faults
from ..core.checkpoint import RewindKey
from ..core.formats import DECISION_FILE, STAGED, BatchPlan, RewindRecord, utcnow
from ..errors import ConcurrentPlan, LedgerMismatch, ProtocolError
from ..pipelines.loader import config_values
from ..sources import kind_for, range_summary, source_for
from ..storage.fs import join, relpath
from . import state as st
from .replay import void_files

log = logging.getLogger("eobatch")

if TYPE_CHECKING:
    from ..core.formats import Layout
    from ..core.ledger import Ledger
    from ..sinks import Participant
    from ..storage.fs import Storage
    from .queries import Queries


def rewind_mark(app_id: str, key: str) -> str:
    """The txn appId a table's RESTORE for rewind ``key`` carries (version 1): its durable record."""
    return f"{app_id}.rewind.{key}"


class Repairs:
    """The operator's repairs of one pipeline: ``rewind``, ``reset``, ``forget_void``, and
    ``complete_rewinds``, which recover, verify and commit run first."""

    def __init__(self, proto: Queries, sweeper: Sweeper) -> None:
        self.proto = proto  # its queries (``Queries``); the rest is what it holds:
        self.cfg, self.app_id, self.layout, self.ledger = proto.cfg, proto.app_id, proto.layout, proto.ledger
        self.participants, self.names, self.sweeper = proto.participants, proto.names, sweeper

    # -- rewind ----------------------------------------------------------------------
    def rewind(self, to_batch: int, run_id: str | None = None, dry_run: bool = False,
               max_records: int | None = None, accept_loss: bool = False) -> list[str]:
        """Bring the tables back to before batch ``to_batch`` and read again from its start.

        Delta's RESTORE alone is not enough: it keeps the txn ids, so replayed batches with their
        old ids would be skipped as "already committed". Instead the rewind is recorded first
        (put-if-absent, ``rewinds/<after>-<to>.json``), each table is restored to the version
        before ``to_batch``'s commit, and batches ``to_batch``..``after`` become REWOUND: their
        ranges no longer count as read, and the next batch, with the next new id, starts at
        ``to_batch``'s start. Continuous mode only (in interval mode, run the intervals again).
        Refused when landing files of those batches are gone (their rows would be taken back for
        good), unless ``accept_loss``: then the ledger records the loss (``_gone``).
        """
        if self.cfg.mode != "continuous":
            raise ProtocolError("rewind_to_batch is for continuous mode; in interval mode run the intervals "
                                "again (a manual run with that logical date, or a backfill with reprocessing)")
        asked = [self.ledger.rewind(k.after_batch, k.to_batch) for k in self.ledger.rewind_keys()
                 if run_id and k.to_batch == to_batch]
        done = [r for r in asked if r is not None and r.run_id == run_id]
        if done:  # this run asked for it before (a retried or cleared run): once is enough
            return [f"the rewind to before batch {to_batch} was already done by run {run_id}"] + \
                self.complete_rewinds()
        latest = self.ledger.latest_batch_id()
        versions = self.proto.committed_versions()
        self.proto.check_config(latest, versions)
        self.proto.check_consistent(latest, versions)
        rewound = self.ledger.rewound_ids()
        live = [b for b in range(1, latest + 1) if b not in rewound and not self.proto.is_abandoned(b)]
        if to_batch not in live:
            raise ProtocolError(f"cannot rewind to batch {to_batch}: the committed batches that can be rewound "
                                f"are {st.ranges(live) or 'none'}")
        newest = self.proto.prev_live(latest + 1)  # an ABANDONED newest batch (a cancelled rewind's) holds nothing
        if min(versions.values()) < newest or self.ledger.committed(newest) is None:
            # the first batch still to decide (a run may have planned several): reset from it forgets them all
            first = next(iter(self.proto.undecided_ids(latest, versions)), newest)
            which = (f"batch {first} is {self.proto.state(first, versions)}" if first == newest else
                     f"batches {first}..{newest} of a run are not all committed (batch {first} is "
                     f"{self.proto.state(first, versions)})")
            raise ProtocolError(f"cannot rewind while {which}: let a normal run commit "
                                f"{'it' if first == newest else 'them'} first, or `make reset-batch "
                                f"PIPELINE={self.app_id} BATCH={first}`")
        restore = self._restore_points(to_batch)
        gone = [b for b in live if b >= to_batch]
        prepared = [self.ledger.prepared(b) for b in gone]
        rows = sum(p.rows_published for p in prepared if p is not None)
        what = (f"rewind to before batch {to_batch}: tables restored to versions {restore}, batches "
                f"{st.ranges(gone)} ({rows} published rows) become REWOUND and batch {latest + 1} reads again "
                f"from batch {to_batch}'s start")
        # the files of the replays this rewind voids are not read again, so nothing of theirs is lost
        voided = void_files(self.cfg, self.layout, sorted({*self.proto.rewinds_in_effect(), RewindKey(latest, to_batch)}))
        lost = self._gone(gone, "rewind", accept_loss or dry_run, f"BATCH={to_batch}",
                          "their published rows would be taken back and never published again", set(voided))
        if dry_run:
            return [f"dry run: would {what}"] + ([f"dry run: {len(lost)} landing file(s) of those batches are gone "
                                                  f"(the rewind needs ACCEPT_LOSS=1): {', '.join(lost[:20])}"]
                                                 if lost else [])
        rec = RewindRecord(pipeline=self.cfg.name, after_batch=latest, to_batch=to_batch,
                           restore_versions=restore, requested_at=utcnow(), run_id=run_id)
        # The rewind and every plan are exclusive through the ledger itself: the rewind reserves
        # batch latest+1 put-if-absent, as the first batch that reads again from to_batch's start.
        # A run that planned latest+1 from the old position first wins; this rewind then did nothing.
        plan = self._replay_plan(rec, max_records, run_id)
        if lost:
            plan.notes.append(self._record_loss("rewind", gone, lost, run_id, write=False))
        if not self.ledger.put_plan(plan):
            other = self.ledger.plan(plan.batch_id)
            raise ConcurrentPlan(f"cannot rewind now: batch {plan.batch_id} was planned by run "
                                 f"{other.run_id if other else '?'} while this rewind was being checked; "
                                 f"nothing was rewound. Ask again once that batch is committed")
        self.ledger.put_rewind(rec)
        if lost:
            self._record_loss("rewind", gone, lost, run_id)
        faults.crash_point("rewind.before_restore")
        restores = self.complete_rewinds()
        cancelled = self.ledger.rewind_cancelled(rec.after_batch, rec.to_batch)
        if cancelled is not None:
            raise ProtocolError(f"the rewind to before batch {to_batch} was cancelled: {cancelled['why']}")
        return [what + f"; batch {plan.batch_id} is planned: {range_summary(plan)}"] + restores

    def _restore_points(self, to_batch: int) -> dict[str, int]:
        """Each table's version before batch ``to_batch``'s commit, checked to be restorable."""
        restore = {}
        for p in self.names:
            point = self.participants[p].restore_point(self.app_id, to_batch)
            if point is None:
                raise ProtocolError(f"cannot rewind: the {p} table's history no longer has batch {to_batch}'s "
                                    f"commit (log cleaned up)")
            restore[p] = point
            missing = self.participants[p].missing_files_at(restore[p], self.proto.fs_for(p))
            if missing:
                raise ProtocolError(f"cannot rewind to batch {to_batch}: the {p} table's version {restore[p]} "
                                    f"(before that batch) can no longer be restored: {len(missing)} of its files "
                                    f"were removed (VACUUM, e.g. after a compaction), such as {missing[0]}; "
                                    f"nothing was rewound")
        return restore

    def _replay_plan(self, rec: RewindRecord, max_records: int | None, run_id: str | None) -> BatchPlan:
        """Batch ``rec.after_batch + 1``: the first range read again from ``rec.to_batch``'s start."""
        t0 = time.time()
        source = source_for(self.cfg)
        rng, n, notes = source.next_range(self.proto.read_so_far(pending_rewind=rec),
                                          max_records or self.cfg.source.max_records_per_batch)
        if rng is None:  # nothing to read again (e.g. the landing files are gone): an empty batch
            k = self.ledger.plan(rec.to_batch)
            if k is None:
                raise LedgerMismatch(f"cannot rewind to batch {rec.to_batch}: its plan is gone from the ledger "
                                     f"({self.ledger.describe(rec.to_batch)}); nothing was rewound")
            marker = self.proto.start_marker(k)
            rng, n = (marker.range, None) if marker is not None else ({"files": []}, 0)
        return BatchPlan(
            pipeline=self.cfg.name, batch_id=rec.after_batch + 1, source_kind=self.cfg.source.kind, range=rng,
            rows_in=n, config_fingerprint=self.cfg.fingerprint(), planned_at=utcnow(),
            plan_seconds=round(time.time() - t0, 3), run_id=run_id, rewind=json.loads(rec.to_json()),
            sink=self.proto.sink_record(), config=config_values(self.cfg),
            notes=[f"rewind after batch {rec.after_batch} to before batch {rec.to_batch}: reads again from batch "
                   f"{rec.to_batch}'s start"] + notes,
        )

    def complete_rewinds(self) -> list[str]:
        """Finish a recorded rewind whose RESTORE did not happen yet in some table (a crash), or
        cancel it when it cannot happen any more (``_cancel_rewind``).

        Only a table still holding the rewind's newest live batch (``after_batch``, or the batch
        before it when that one was ABANDONED) can be missing it: every commit completes pending
        rewinds first.
        """
        done: list[str] = []
        keys = self.ledger.rewind_keys()  # names only: a record is read when its table needs it
        latest_id = self.ledger.latest_batch_id()
        latest = self.ledger.plan(latest_id) if latest_id else None
        if latest is not None and latest.rewind:  # a rewind that died between its reservation and its record
            rec = RewindRecord.from_json(json.dumps(latest.rewind))
            key = RewindKey(rec.after_batch, rec.to_batch)
            if key in self.ledger.cancelled_rewinds():  # a crash between the cancellation and the abandon
                self._abandon_reserved(rec)
            elif key not in keys:
                self.ledger.put_rewind(rec)
                keys = self.ledger.rewind_keys()
        if not keys:
            return done
        cancelled: set[RewindKey] = set()
        for p in self.names:
            part = self.participants[p]
            held = part.committed_batch(self.app_id)
            for key in keys:
                if key in cancelled or self.proto.prev_live(key.after_batch + 1) != held:
                    continue
                found = self.ledger.rewind(key.after_batch, key.to_batch)
                if found is None:
                    continue
                rec = found
                if self._restored_for(part, rec):
                    continue
                try:
                    v = part.roll_back(rec.restore_versions[p], {"eo.pipeline": self.app_id,
                                                                 "eo.rewind": f"{self.app_id}:{rec.key}"},
                                       rewind_mark(self.app_id, rec.key))
                except Exception as e:  # noqa: BLE001 - a Delta error: cancel, or say what it blocks
                    why = self._cancel_rewind(rec, p, e)
                    if why is not None:
                        cancelled.add(key)
                        done.append(why)
                        continue
                    raise LedgerMismatch(
                        f"the rewind {rec.key} (to before batch {rec.to_batch}) cannot restore the {p} table "
                        f"{self.layout.table(p)} to version {rec.restore_versions[p]}: {e}. Files of that "
                        f"version were removed after the rewind was checked (a VACUUM), and another table was "
                        f"restored already. Repair: put the missing files back from a backup, then run again; "
                        f"nothing is published until then") from e
                done.append(f"{p}: restored to version {rec.restore_versions[p]} (as version {v}) for the "
                            f"rewind to before batch {rec.to_batch}")
                faults.crash_point("rewind.after_first_restore")
        return done

    def _restored_for(self, part: Participant, rec: RewindRecord) -> bool:
        """Was ``part``'s table restored for the rewind ``rec``? The restore's own txn says so (a
        rewind restored before restores carried it is looked for in the table's history instead)."""
        return part.rolled_back(rewind_mark(self.app_id, rec.key)) or \
            part.find_commit("eo.rewind", f"{self.app_id}:{rec.key}") is not None

    def _cancel_rewind(self, rec: RewindRecord, table: str, error: Exception) -> str | None:
        """Cancel the rewind ``rec`` whose RESTORE of ``table`` failed with ``error``, when it can
        never happen: files of the version it restores ``table`` to are gone (another tool's VACUUM
        after a compaction, between the rewind's check and its RESTORE; no RESTORE to that version
        can succeed from then on) and no table was restored for it yet. Decided put-if-absent
        (``rewinds/cancelled/``); the batch it reserved becomes ABANDONED (never PREPARED: verify
        completes a batch's rewind first), so the pipeline goes on from the batches the rewind
        would have undone, as if it had never been asked. Returns what was done, or None when the
        rewind cannot be cancelled (the caller stops with the repair)."""
        missing = self.participants[table].missing_files_at(rec.restore_versions[table], self.proto.fs_for(table))
        restored = [p for p in self.names if self._restored_for(self.participants[p], rec)]
        if not missing or restored:
            return None
        reserved = rec.after_batch + 1
        why = (f"the {table} table's version {rec.restore_versions[table]} (before batch {rec.to_batch}) can no "
               f"longer be restored: {len(missing)} of its files were removed after the rewind was checked (another "
               f"tool's VACUUM after a compaction), such as {missing[0]}. Nothing was rewound: batch {reserved}, "
               f"which the rewind reserved, is ABANDONED and the next batch reads on after batch "
               f"{self.proto.prev_live(reserved)}. Ask again for a rewind to a batch whose version is whole, or restore "
               f"the files from a backup first")
        self.ledger.put_rewind_cancelled(rec.after_batch, rec.to_batch,
                                         {"why": why, "table": table, "error": str(error)[:2000],
                                          "missing": missing[:100], "cancelled_at": utcnow()})
        self._abandon_reserved(rec)
        log.error("pipeline %s: %s", self.app_id, why)
        return f"rewind to before batch {rec.to_batch} cancelled: {why}"

    def _abandon_reserved(self, rec: RewindRecord) -> None:
        """The batch a cancelled rewind reserved is ABANDONED (idempotent: the first decision stays)."""
        reserved = rec.after_batch + 1
        if self.ledger.put_abandoned(reserved, {"reason": f"rewind {rec.key} cancelled", "abandoned_at": utcnow()}):
            return
        if self.ledger.abandoned(reserved) is None:
            raise LedgerMismatch(f"the rewind {rec.key} was cancelled, but batch {reserved} that it reserved is "
                                 f"PREPARED: it reads again from batch {rec.to_batch}'s start and must not commit. "
                                 f"Stop and inspect")

    # -- reset -----------------------------------------------------------------------
    def reset(self, from_batch: int, accept_loss: bool = False) -> list[int]:
        """Forget batches ``from_batch``.. that no table holds, so their ranges are planned again.

        The repair for a PREPARED batch whose staged files are gone, and for a gap between
        ledger and tables (a table restored to an older version): the ledger records of those
        batches move to ``_eo_ledger/archive/<time>/``; the next run plans from the end of
        batch ``from_batch - 1`` and the sweep removes their staged files. Refused when any
        table holds one of those batches (that would publish it twice), and when landing files of
        those batches are gone (nothing would publish their records), unless ``accept_loss``: then
        the ledger records the loss.
        """
        versions = self.proto.committed_versions()
        if max(versions.values()) >= from_batch:
            raise ProtocolError(f"cannot reset to batch {from_batch}: the tables hold batches up to {versions}; "
                                f"resetting would publish them twice")
        latest = self.ledger.latest_batch_id()
        if from_batch < 1 or from_batch > latest:
            raise ProtocolError(f"batch {from_batch} is not in the ledger (batches 1..{latest})")
        forgotten = list(range(from_batch, latest + 1))
        lost = self._gone(forgotten, "reset-batch", accept_loss, f"BATCH={from_batch}",
                          "the next plan would not find them, and their records would never be published")
        self._decide_forgotten(forgotten)
        if lost:
            self._record_loss("reset-batch", forgotten, lost, None)
        moved = self.forget(from_batch, latest)
        # A run of several batches may write the plan after ``latest`` while this reset forgets the
        # ones before it: that plan is void (``Ledger.is_void``) and goes too (the run, checking
        # its plan after writing it, forgets it as well when it wrote it after this look).
        moved += self.forget_void(from_batch - 1, probe=latest + 1)
        return sorted(moved)

    def forget(self, from_batch: int, latest: int) -> list[int]:
        """Move the ledger records of batches ``from_batch``..``latest`` to
        ``_eo_ledger/archive/<time>/`` (an attempt's decision stays in place) and remove their
        staged files. Their attempts are decided already (``_decide_forgotten``,
        ``forget_void``). Returns the batches whose plan was moved."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        archive = join(self.layout.ledger, "archive", stamp)
        fs = self.ledger.fs
        # Checkpoints of those batches go first (only possible when a table went back below
        # them, e.g. recreated): a checkpoint never summarises a batch that is not there.
        for k, _n, path in self.ledger.checkpoint_files():
            if k >= from_batch:
                fs.delete(path)
        moved = []
        for b in range(latest, from_batch - 1, -1):  # newest first: a crash leaves a consistent prefix
            for path, name in ((self.layout.committed(b), "committed"), (self.layout.prepared(b), "prepared")):
                self._archive(path, join(archive, name, path.rsplit("/", 1)[-1]))
            for folder in (self.layout.attempts_dir(b), self.layout.run_tries_dir(b)):
                for f in list(fs.list_files(folder)):
                    # an attempt's decision stays in place: a late verify of it finds "abort"
                    self._archive(f.path, join(archive, relpath(f.path, self.layout.ledger)),
                                  keep=f.path.rsplit("/", 1)[-1] == DECISION_FILE)
                fs.remove_empty_dirs(folder)
            plan = self.layout.plan(b)
            if self._archive(plan, join(archive, "plans", plan.rsplit("/", 1)[-1])):
                moved.append(b)
        for b in self.sweeper.staged_batches():
            if b >= from_batch:
                self.sweeper.sweep_batch(b, everything=True)
        self.sweeper.sweep(recent=None)
        return sorted(moved)

    def _decide_forgotten(self, batches: list[int]) -> None:
        """Before a reset forgets ``batches``: win the decision of each of their attempts ("abort",
        put-if-absent), so that a verify still in flight (a zombie poke, a run's sensor) can never
        PREPARE an attempt of a forgotten plan, and keep those decisions where they are (a late
        verify of the attempt finds "abort"; a batch planned again under the same id has attempts
        of other ids). Refused when a verify won an attempt first and has not written PREPARED yet:
        that batch is being committed (the next recover finishes a verify that died there)."""
        for b in batches:
            for attempt in self.ledger.attempts(b):
                held = self.ledger.decide(b, attempt, "abort", {"reason": "reset-batch: the batch is forgotten",
                                                                "aborted_at": utcnow()})
                if held["decision"] == "prepare" and self.ledger.prepared(b) is None:
                    raise ProtocolError(f"cannot reset to batch {batches[0]}: batch {b} attempt {attempt} was "
                                        f"decided for PREPARE by a verify that has not written PREPARED yet; it "
                                        f"is committed first (a run's recover finishes it). Nothing was forgotten")

    def _archive(self, path: str, to: str, keep: bool = False) -> bool:
        """Copy ``path`` to ``to`` and delete it (unless ``keep``); False when it is gone (another
        process forgetting the same batch: a reset and a void plan's run)."""
        try:
            self.ledger.fs.write_atomic(to, self.ledger.fs.read_bytes(path))
        except FileNotFoundError:
            return False
        if not keep:
            self.ledger.fs.delete(path)
        return True

    def forget_void(self, after: int, probe: int | None = None) -> list[int]:
        """Forget the first void plan after batch ``after`` and every plan after it; returns
        those batches (none: the plans after ``after`` are one chain).

        A plan is void when the record it was planned after is not the batch before it any more
        (``Ledger.is_void``), or when the batch before it has no plan (a gap: a reset forgot it
        while a run planned on, or a crash between the two). Its range starts where no live plan
        ends, so it is never verified or committed (both check), and nothing of it is published:
        its attempts are decided "abort" (a verify that won "prepare" first still cannot commit
        it) and its records are archived like a reset's. The walk reads the plans after ``after``
        until the first missing one, then ``probe`` (a batch id the caller saw, e.g. the newest
        listed) and the one after the gap; a void plan further on is found by the plan that would
        take its id (``plan_batches``)."""
        first = self._first_void(after, probe)
        if first is None:
            return []
        last = first
        while self.ledger.fs.exists(self.layout.plan(last + 1)):
            last += 1
        for b in range(first, last + 1):
            for attempt in self.ledger.attempts(b):
                self.ledger.decide(b, attempt, "abort", {"reason": "its plan is void (planned after a batch a "
                                                                   "reset forgot)", "aborted_at": utcnow()})
        log.warning("batches %s were planned after a batch that a reset forgot (void plans): forgotten, nothing "
                    "of them was published; their range is planned again", st.ranges(range(first, last + 1)))
        return self.forget(first, last)

    def _first_void(self, after: int, probe: int | None) -> int | None:
        b, before = after + 1, None  # the digest of the plan before b, once the walk has read it
        while (got := self.ledger.plan_and_digest(b)) is not None:
            plan, digest = got
            if self.ledger.is_void(plan, before):  # each plan read once
                return b
            b, before = b + 1, digest
        for p in (probe, b + 1):  # batch b has no plan: any plan after it is void
            if p is not None and p > b and self.ledger.fs.exists(self.layout.plan(p)):
                while p - 1 > b and self.ledger.fs.exists(self.layout.plan(p - 1)):
                    p -= 1
                return p
        return None

    # -- a repair over expired landing files -------------------------------------------
    def _gone(self, batches: list[int], verb: str, accept: bool, args: str, consequence: str,
              not_read: set[str] | frozenset[str] = frozenset()) -> list[str]:
        """The recorded source positions of ``batches`` that are gone from the source (landing
        files expired since: ``SourceKind.gone``), but ``not_read`` (never read again anyway). A
        repair that would read them again is refused (ProtocolError naming them) unless ``accept``."""
        lost: list[str] = []
        for b in batches:
            plan = self.ledger.plan(b)
            if plan is not None and not self.proto.is_abandoned(b):
                lost += kind_for(plan.source_kind).gone(plan.range)
        lost = sorted(set(lost) - not_read)
        if lost and not accept:
            raise ProtocolError(
                f"{verb} of {self.app_id!r} refused: {len(lost)} landing file(s) of batches {st.ranges(batches)} are "
                f"gone from the landing zone (expired or moved since they were planned): {', '.join(lost[:20])}"
                f"{' ...' if len(lost) > 20 else ''}; {consequence}. Nothing was changed. Repair: put the files back "
                f"(same content) and ask again, or accept the loss: `make {verb} PIPELINE={self.app_id} {args} "
                f"ACCEPT_LOSS=1`{' (or the run param accept_loss=true)' if verb == 'rewind' else ''} (the ledger "
                f"records it under {join(self.layout.ledger, 'losses')}/)")
        return lost

    def _record_loss(self, verb: str, batches: list[int], files: list[str], run_id: str | None,
                     write: bool = True) -> str:
        """The ledger's record of a loss an operator accepted (``_eo_ledger/losses/``, when
        ``write``); its note for the task log and the batch plan."""
        note = (f"{verb} of batches {st.ranges(batches)} accepted the loss of {len(files)} landing file(s) gone from "
                f"the landing zone: {', '.join(files[:20])}{' ...' if len(files) > 20 else ''}")
        if write:
            rec = {"pipeline": self.app_id, "verb": verb, "batches": batches, "files": files,
                   "accepted_at": utcnow(), "run_id": run_id}
            stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
            self.ledger.fs.put_if_absent(join(self.layout.ledger, "losses", f"{stamp}-{verb}.json"),
                                         json.dumps(rec, indent=1).encode())
            log.warning("%s", note)
        return note



class Sweeper:
    """The sweep of one pipeline's staged files: what no commit will ever reference goes."""

    def __init__(self, app_id: str, layout: Layout, ledger: Ledger, participants: Mapping[str, Participant],
                 fs_for: Callable[[str], Storage]) -> None:
        self.app_id, self.layout, self.ledger = app_id, layout, ledger
        self.participants, self.fs_for = participants, fs_for

    def sweep(self, recent: int | None = 5, skip: int | None = None) -> list[str]:
        """Delete staged files no commit will ever reference.

        Looks at the ``recent`` newest batches (all when None), and only at what is decided,
        so a sweep never races a live attempt (another run's, or a zombie's that may still be
        PREPARED): for a PREPARED (or committed) batch every file outside its prepared set goes
        (failed attempts, zombies that finished late); for an ABANDONED batch everything goes;
        for an undecided batch only ABORTED attempts go. The dead attempts of an undecided batch
        stay until it is decided: the commit removes them (``sweep_batch``).
        """
        latest = self.ledger.latest_batch_id()
        removed: list[str] = []
        first = max(latest - recent, 1) if recent is not None else None
        for b in self.staged_batches(after=first - 1 if first and first > 1 else None):
            if b > latest or b == skip or (recent is not None and b < latest - recent):
                continue  # planned after this sweep began (a live run's), or out of scope
            removed += self.sweep_batch(b)
        return removed

    def staged_batches(self, after: int | None = None) -> list[int]:
        """Batches with a staging folder (``b<id>``) in some table; only those after batch
        ``after`` when given (a start-after listing: not every batch the table ever held)."""
        ids = set()
        start = f"b{after:010d}" if after else None
        for participant in STAGED:
            for d in self.fs_for(participant).list_dirs(self.layout.staging_root(participant), start_after=start):
                if d.startswith("b") and d[1:].isdigit():
                    ids.add(int(d[1:]))
        return sorted(ids)

    def _consumed(self, staged: str, b: int) -> bool:
        """Whether the PREPARED files ``staged`` wrote for batch ``b`` are of no use any more: no
        table adds them as its own files (they are a merge's input), and every table that reads
        them holds the batch."""
        readers = [p for p, part in self.participants.items() if (part.reads_from or p) == staged]
        return (all(not self.participants[p].keeps_staged_files for p in readers)
                and all(self.participants[p].committed_batch(self.app_id) >= b for p in readers))

    def sweep_batch(self, b: int, everything: bool = False) -> list[str]:
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
        for participant in STAGED:
            fs = self.fs_for(participant)
            table = self.layout.table(participant)
            keep = {f.path for f in prepared.adds.get(participant, [])} if prepared else set()
            if keep and self._consumed(participant, b):
                keep = set()  # a merge's staged rows, applied by every table that reads them: no longer needed
            folder = join(table, self.layout.batch_staging_rel(b))
            for f in list(fs.list_files(folder)):
                rel = relpath(f.path, table)
                if rel in keep or (dead is not None and rel.split("/")[2] not in dead):  # eo_batches/b../<attempt>/
                    continue
                fs.delete(f.path)
                removed.append(f.path)
            fs.remove_empty_dirs(folder)
        return removed
