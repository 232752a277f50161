"""The batch ledger: one put-if-absent file per batch and phase (see formats.Layout), and its
checkpoints (``eobatch.core.checkpoint``): what planning reads is ``history()``, the newest usable
checkpoint plus the plans after it, so its cost does not grow with the ledger's age."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Iterable
from typing import TypeVar

from ..errors import ProtocolError
from ..storage.fs import Storage, join, storage_for
from . import checkpoint as ckpt
from .checkpoint import Checkpoint, CheckpointUnusable, Entry, History, RewindKey
from .formats import (
    JSON,
    BatchPlan,
    CommittedBatch,
    InvalidId,
    Layout,
    PartitionManifest,
    PreparedBatch,
    Record,
    RewindRecord,
    StageSummary,
    bid,
    utcnow,
)

_BATCH_FILE = re.compile(r"^(\d{10})\.json$")
_REWIND_FILE = re.compile(r"^(\d{10})-(\d{10})\.json$")
_CHECKPOINT_FILE = re.compile(r"^(\d{10})-r(\d+)\.json$")
_CHUNK_FILE = re.compile(r"^([0-9a-f]{64})\.json$")
log = logging.getLogger("eobatch")
R = TypeVar("R", bound=Record)


class Ledger:
    def __init__(self, layout: Layout, storage: Storage | None = None):
        self.layout = layout
        self.fs = storage or storage_for(layout.sink_table)

    # -- reading -------------------------------------------------------------------
    def _read(self, path: str, cls: type[R]) -> R | None:
        try:
            return cls.from_json(self.fs.read_bytes(path))
        except FileNotFoundError:
            return None

    def plan(self, batch_id: int) -> BatchPlan | None:
        return self._read(self.layout.plan(batch_id), BatchPlan)

    def has_plan(self, batch_id: int) -> bool:
        """Whether batch ``batch_id`` has a plan record (a stat: its record, which can be large, is not read)."""
        return self.fs.stat(self.layout.plan(batch_id)) is not None

    def require_plan(self, batch_id: int) -> BatchPlan:
        """The plan of a batch the ledger lists; ProtocolError when its record is gone (archived by
        a concurrent reset-batch)."""
        plan = self.plan(batch_id)
        if plan is None:
            raise ProtocolError(f"batch {batch_id} has no plan at {self.layout.plan(batch_id)}")
        return plan

    def plan_digest(self, batch_id: int) -> str | None:
        """sha256 of the plan record's bytes: which plan of ``batch_id`` an attempt staged (a
        batch that ``reset`` forgot is planned again under the same id, with another record)."""
        try:
            return hashlib.sha256(self.fs.read_bytes(self.layout.plan(batch_id))).hexdigest()
        except FileNotFoundError:
            return None

    @staticmethod
    def record_digest(plan: BatchPlan) -> str:
        """sha256 of the record ``put_plan`` writes for ``plan`` (what ``plan_digest`` reads back)."""
        return hashlib.sha256(plan.to_json()).hexdigest()

    def is_void(self, plan: BatchPlan, before: str | None = None) -> bool:
        """A plan planned after a record that is no longer the batch before it (``BatchPlan.base``):
        a reset forgot that batch while the run that planned this one went on. A void plan is never
        verified or committed, and the next recover or plan forgets it (``Repairs.forget_void``).
        ``before``: the digest of the plan before it, when the caller has just read it."""
        return plan.base is not None and (before or self.plan_digest(plan.batch_id - 1)) != plan.base

    def _decision(self, batch_id: int) -> JSON | None:
        try:
            d: JSON = json.loads(self.fs.read_bytes(self.layout.prepared(batch_id)))
        except FileNotFoundError:
            return None
        return d

    def prepared(self, batch_id: int) -> PreparedBatch | None:
        d = self._decision(batch_id)
        if d is None or d.get("abandoned"):
            return None
        return PreparedBatch.from_json(json.dumps(d))

    def abandoned(self, batch_id: int) -> JSON | None:
        """Interval mode: the batch was given up (its interval can simply run again)."""
        d = self._decision(batch_id)
        return d if d is not None and d.get("abandoned") else None

    def put_abandoned(self, batch_id: int, info: JSON) -> bool:
        """Decide ABANDONED, put-if-absent on the PREPARED record's path: exactly one of
        PREPARED or ABANDONED can ever be decided for a batch."""
        body = json.dumps({"abandoned": True, "batch_id": batch_id, **info}, sort_keys=True).encode()
        return self.fs.put_if_absent(self.layout.prepared(batch_id), body)

    def rewinds(self) -> list[RewindRecord]:
        """Every rewind in effect (recorded and not cancelled), sorted like ``rewind_keys()``."""
        out = []
        for k in self.rewind_keys():
            rec = self.rewind(k.after_batch, k.to_batch)
            if rec is not None:
                out.append(rec)
        return out

    def rewind_keys(self) -> list[RewindKey]:
        """(after, to) of every rewind in effect, from the records' names (one listing of rewinds/
        and its cancelled/ folder, no record read): the rewinds recorded, but those cancelled
        (``put_rewind_cancelled``), sorted by after_batch, then to_batch descending."""
        recorded, cancelled = self._rewind_names()
        return sorted(recorded - cancelled, key=lambda r: (r.after_batch, -r.to_batch))

    def cancelled_rewinds(self) -> set[RewindKey]:
        """The rewinds decided not to happen: their restore became impossible before any table was
        restored (``Repairs.complete_rewinds``)."""
        return self._rewind_names()[1]

    def _rewind_names(self) -> tuple[set[RewindKey], set[RewindKey]]:
        """(recorded, cancelled) rewind keys: one recursive listing of rewinds/."""
        recorded: set[RewindKey] = set()
        cancelled: set[RewindKey] = set()
        for f in self.fs.list_files(self.layout.rewinds_dir(), recursive=True):
            *_, grandparent, parent, name = ["", ""] + f.path.rstrip("/").split("/")
            m = _REWIND_FILE.match(name)
            if not m:
                continue
            key = RewindKey(int(m.group(1)), int(m.group(2)))
            if parent == "rewinds":
                recorded.add(key)
            elif (grandparent, parent) == ("rewinds", "cancelled"):
                cancelled.add(key)
        return recorded, cancelled

    def rewind_cancelled(self, after_batch: int, to_batch: int) -> JSON | None:
        path = self.layout.rewind_cancelled(after_batch, to_batch)
        d: JSON | None = json.loads(self.fs.read_bytes(path)) if self.fs.exists(path) else None
        return d

    def put_rewind_cancelled(self, after_batch: int, to_batch: int, info: JSON) -> bool:
        """Decide that the rewind (after_batch, to_batch) did not happen, put-if-absent: from then
        on it undoes nothing, as if it had never been asked for."""
        body = json.dumps({"after_batch": after_batch, "to_batch": to_batch, **info}, sort_keys=True).encode()
        return self.fs.put_if_absent(self.layout.rewind_cancelled(after_batch, to_batch), body)

    def rewind(self, after_batch: int, to_batch: int) -> RewindRecord | None:
        return self._read(self.layout.rewind(after_batch, to_batch), RewindRecord)

    def put_rewind(self, rec: RewindRecord) -> bool:
        return self.fs.put_if_absent(self.layout.rewind(rec.after_batch, rec.to_batch), rec.to_json())

    def rewound_ids(self) -> set[int]:
        out: set[int] = set()
        for r in self.rewind_keys():
            out.update(range(r.to_batch, r.after_batch + 1))
        return out

    def committed(self, batch_id: int) -> CommittedBatch | None:
        return self._read(self.layout.committed(batch_id), CommittedBatch)

    def stage_summary(self, batch_id: int, attempt: str) -> StageSummary | None:
        return self._read(self.layout.stage_summary(batch_id, attempt), StageSummary)

    def manifest(self, batch_id: int, attempt: str, participant: str, partition: int) -> PartitionManifest | None:
        return self._read(self.layout.manifest(batch_id, attempt, participant, partition), PartitionManifest)

    def batch_ids(self) -> list[int]:
        out = []
        for f in self.fs.list_files(self.layout.plans_dir(), recursive=False):
            m = _BATCH_FILE.match(f.path.rsplit("/", 1)[-1])
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def latest_batch_id(self) -> int:
        """The newest planned batch. With a checkpoint of batch K: the last of the plans K+1, K+2,
        ... that exist (batch ids have no gaps: a plan is only written as latest + 1, reset-batch
        removes the newest batches first), so no listing of every plan; without one, the listing."""
        for k, _n, _path in self.checkpoint_files():
            if self.fs.exists(self.layout.plan(k)):
                b = k
                while self.fs.exists(self.layout.plan(b + 1)):
                    b += 1
                return b
        ids = self.batch_ids()
        return ids[-1] if ids else 0

    def plans(self) -> list[BatchPlan]:
        """Every plan of the ledger (inspection, and the answer when no checkpoint can be used)."""
        return [p for p in (self.plan(i) for i in self.batch_ids()) if p is not None]

    def live_plans(self) -> list[BatchPlan]:
        """Plans whose ranges count as read: all but REWOUND and ABANDONED batches."""
        gone = self.rewound_ids()
        return [p for p in self.plans() if p.batch_id not in gone and self.abandoned(p.batch_id) is None]

    def attempts(self, batch_id: int) -> list[str]:
        return self.fs.list_dirs(self.layout.attempts_dir(batch_id))

    def decision(self, batch_id: int, attempt: str) -> JSON | None:
        """The attempt's one decision, ``{"decision": "prepare" | "abort", ...}``, or None."""
        for path, legacy in ((self.layout.decision(batch_id, attempt), False),
                             (self.layout.aborted(batch_id, attempt), True)):
            try:
                d: JSON = json.loads(self.fs.read_bytes(path))
            except FileNotFoundError:
                continue
            return {"decision": "abort", **d} if legacy else d
        return None

    def attempt_started(self, batch_id: int, attempt: str) -> JSON | None:
        """When and by which run the stage task started ``attempt`` (None: started before these
        records existed, or not by a stage task)."""
        return self._json(self.layout.attempt_started(batch_id, attempt))

    def run_tries(self, batch_id: int) -> list[JSON]:
        """The runs that took up ``batch_id`` after the run that planned it, or were refused while
        it was pending (``put_run_try``), in no particular order."""
        out = []
        for f in self.fs.list_files(self.layout.run_tries_dir(batch_id), recursive=False):
            if f.path.endswith(".json"):
                d = self._json(f.path)
                if d is not None:
                    out.append(d)
        return out

    def _json(self, path: str) -> JSON | None:
        try:
            d: JSON = json.loads(self.fs.read_bytes(path))
        except FileNotFoundError:
            return None
        return d

    def aborted_info(self, batch_id: int, attempt: str) -> JSON | None:
        d = self.decision(batch_id, attempt)
        return d if d is not None and d["decision"] == "abort" else None

    # -- checkpoints ---------------------------------------------------------------
    def checkpoint_files(self) -> list[tuple[int, int, str]]:
        """(batch, rewinds, path) of every checkpoint, newest first (one listing of a folder
        that retention keeps small)."""
        out = []
        for f in self.fs.list_files(self.layout.checkpoints_dir(), recursive=False):
            m = _CHECKPOINT_FILE.match(f.path.rsplit("/", 1)[-1])
            if m:
                out.append((int(m.group(1)), int(m.group(2)), f.path))
        return sorted(out, reverse=True)

    def load_checkpoint(self, path: str) -> Checkpoint:
        """Raises CheckpointUnusable when it is gone or damaged."""
        try:
            return Checkpoint.from_json(self.fs.read_bytes(path))
        except FileNotFoundError:
            raise CheckpointUnusable(f"{path} is gone") from None
        except (ValueError, TypeError) as e:
            raise CheckpointUnusable(f"{path} is damaged: {e}") from None

    def load_chunk(self, name: str) -> list[Entry]:
        """The entries of one index chunk; raises CheckpointUnusable when it is gone or damaged."""
        try:
            path = self.layout.checkpoint_chunk(name)
        except InvalidId as e:
            raise CheckpointUnusable(str(e)) from None
        try:
            data = self.fs.read_bytes(path)
        except FileNotFoundError:
            raise CheckpointUnusable(f"index chunk {path} is gone") from None
        if hashlib.sha256(data).hexdigest() != name:
            raise CheckpointUnusable(f"index chunk {path} is damaged (its digest is not its name)")
        try:
            entries: list[Entry] = json.loads(data)["entries"]
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointUnusable(f"index chunk {path} is damaged: {e}") from None
        return entries

    def history(self, max_checkpoint: int | None = None, pending_rewind: RewindRecord | RewindKey | None = None,
                use_checkpoints: bool = True) -> History:
        """What planning reads of the ledger: the newest checkpoint that is still true (no rewind
        recorded since reaches into its batches, its last plan is the one it summarised, and its
        batch is at most ``max_checkpoint``), and every plan after it. Without one: every plan,
        exactly as before checkpoints existed. ``pending_rewind``: a rewind being planned now,
        counted as if recorded."""
        recorded = self.rewind_keys()
        pending = RewindKey(pending_rewind.after_batch, pending_rewind.to_batch) if pending_rewind else None
        everything = set(recorded) | ({pending} if pending else set())
        base = base_path = None
        for k, _n, path in (self.checkpoint_files() if use_checkpoints else []):
            if max_checkpoint is not None and k > max_checkpoint:
                continue
            try:
                ck = self.load_checkpoint(path)
            except CheckpointUnusable as e:
                log.warning("ledger checkpoint skipped: %s%s", e, "; removed (derived data)" if e.damaged else "")
                if e.damaged:
                    self.fs.delete(path)
                continue
            if ck.batch_id != k or ck.rewind_keys() != sorted(r for r in everything if r.to_batch <= k):
                continue  # a rewind into its batches came later: stale
            if self.plan_digest(k) != ck.plan_digest:
                log.warning("ledger checkpoint %s skipped: plan %s is not the one it summarised (reset?)", path, k)
                continue
            base, base_path = ck, path
            break
        tail: list[BatchPlan] = []
        digests: dict[int, str] = {}
        if base is not None:
            b = base.batch_id + 1
            while (got := self.plan_and_digest(b)) is not None:  # ids have no gaps: the first missing ends them
                tail.append(got[0])
                digests[b] = got[1]
                b += 1
            latest = b - 1
        else:
            ids = self.batch_ids()
            tail, digests = self.read_plans(ids)
            latest = ids[-1] if ids else 0
        return History(self, base, tail, latest, recorded, pending, digests, base_path)

    def read_plans(self, ids: Iterable[int]) -> tuple[list[BatchPlan], dict[int, str]]:
        """The plans of ``ids`` that exist, and the sha256 of each one's record."""
        plans: list[BatchPlan] = []
        digests: dict[int, str] = {}
        for b in ids:
            got = self.plan_and_digest(b)
            if got is not None:
                plans.append(got[0])
                digests[b] = got[1]
        return plans, digests

    def plan_and_digest(self, batch_id: int) -> tuple[BatchPlan, str] | None:
        """The plan of ``batch_id`` and the sha256 of its record, or None when it has none."""
        try:
            data = self.fs.read_bytes(self.layout.plan(batch_id))
        except FileNotFoundError:
            return None
        return BatchPlan.from_json(data), hashlib.sha256(data).hexdigest()

    def write_checkpoint(self, hist: History, held: int) -> Checkpoint | None:
        """Write the checkpoint of batches 1..``held`` (every table holds them) when one is due
        (``checkpoint.INTERVAL`` batches after ``hist``'s), put-if-absent, then drop the ones
        retention no longer keeps. Returns it, or None when none was due or it could not be made."""
        try:
            made = hist.next_checkpoint(held)
        except CheckpointUnusable as e:
            log.warning("ledger checkpoint of batch %s not written: %s", held, e)
            return None
        if made is None:
            return None
        ck, chunks = made
        for name, data in chunks.items():
            self.fs.put_if_absent(self.layout.checkpoint_chunk(name), data)  # same name, same bytes
        path = self.layout.checkpoint(ck.batch_id, len(ck.rewinds))
        if not self.fs.put_if_absent(path, ck.to_json()):
            log.info("ledger checkpoint %s was written by another process first", path)
        self.retain_checkpoints()
        return ck

    def retain_checkpoints(self) -> list[str]:
        """Remove the checkpoints ``checkpoint.retained`` does not keep, and the index chunks that
        none of the kept ones names (only chunks older than ``checkpoint.GC_MIN_AGE_S``: a
        checkpoint being written now may name a chunk it found already there). Returns the paths."""
        found = self.checkpoint_files()
        keep = ckpt.retained([(k, n) for k, n, _p in found])
        removed = []
        named: set[str] = set()
        for k, n, path in found:
            if (k, n) not in keep:
                self.fs.delete(path)
                removed.append(path)
                continue
            try:
                named.update(r[3] for r in self.load_checkpoint(path).index)
            except CheckpointUnusable:
                pass
        now_ms = time.time() * 1000
        for f in self.fs.list_files(self.layout.checkpoint_index_dir(), recursive=False):
            m = _CHUNK_FILE.match(f.path.rsplit("/", 1)[-1])
            if m and m.group(1) not in named and now_ms - f.mtime_ms >= ckpt.GC_MIN_AGE_S * 1000:
                self.fs.delete(f.path)
                removed.append(f.path)
        return removed

    # -- writing -------------------------------------------------------------------
    def put_plan(self, plan: BatchPlan) -> bool:
        return self.fs.put_if_absent(self.layout.plan(plan.batch_id), plan.to_json())

    def put_prepared(self, prepared: PreparedBatch) -> bool:
        return self.fs.put_if_absent(self.layout.prepared(prepared.batch_id), prepared.to_json())

    def put_committed(self, committed: CommittedBatch) -> bool:
        return self.fs.put_if_absent(self.layout.committed(committed.batch_id), committed.to_json())

    def put_attempt_started(self, batch_id: int, attempt: str, run_id: str | None) -> bool:
        """Record that the stage task starts ``attempt`` now, put-if-absent (a retry is a new attempt)."""
        body = {"batch_id": batch_id, "attempt": attempt, "run_id": run_id, "started_at": utcnow()}
        return self.fs.put_if_absent(self.layout.attempt_started(batch_id, attempt),
                                     json.dumps(body, sort_keys=True).encode())

    def discovery(self, after: str | None) -> JSON | None:
        """The discovery state an idle plan kept (``put_discovery``) when it was kept after the plan
        whose record's digest is ``after`` (``History.newest_digest``; None: before any plan), else
        None: a plan, rewind or reset since then makes it stale. Advisory: one that cannot be read
        is None (the plan starts from the newest plan's range, as it would without it)."""
        try:
            d = json.loads(self.fs.read_bytes(self.layout.discovery))
        except FileNotFoundError:
            return None
        except Exception as e:  # noqa: BLE001 - advisory: never a reason to fail a plan
            log.warning("ledger discovery state %s not used (%s: %s)", self.layout.discovery, type(e).__name__, e)
            return None
        state = d.get("state") if isinstance(d, dict) and d.get("after") == after else None
        if (not isinstance(state, dict) or type(state.get("full_listing_ms")) is not int
                or not isinstance(state.get("listed_after"), str | None)
                or not isinstance(state.get("events"), dict | None)):
            return None
        return state

    def put_discovery(self, after: str | None, state: JSON) -> None:
        """Keep where an idle plan's discovery got to (``Planner.discovered``) after the plan whose
        record's digest is ``after``: overwritten by the next idle plan, ignored once any plan
        follows. Advisory, never a range: a lost or stale one costs a plan a longer listing (or
        a late file waits for the next full listing), never a record."""
        self.fs.write_atomic(self.layout.discovery, json.dumps({"after": after, "state": state}, sort_keys=True).encode())

    def put_run_try(self, batch_id: int, run_id: str, error: str | None = None, error_type: str | None = None) -> bool:
        """Record, once per run (put-if-absent), that run ``run_id`` took up batch ``batch_id``, which
        another run planned, or was refused while it was pending (``error``: why, ``error_type``: its class). The
        record names the plan it tried (its digest): a batch that reset-batch forgot and planned again starts anew."""
        body = {"batch_id": batch_id, "run_id": run_id, "at": utcnow(), "plan_digest": self.plan_digest(batch_id),
                "error": error, "error_type": error_type}
        return self.fs.put_if_absent(self.layout.run_try(batch_id, run_id), json.dumps(body, sort_keys=True).encode())

    def decide(self, batch_id: int, attempt: str, decision: str, info: JSON) -> JSON:
        """Decide an attempt's fate once, put-if-absent: verify must win "prepare" before it may
        write PREPARED, abort must win "abort" before it may remove files. Returns the decision
        that holds: this one, or the one another process made first."""
        if decision not in ("prepare", "abort"):
            raise ValueError(f"unknown attempt decision {decision!r}")
        if decision == "abort" and self.fs.exists(self.layout.aborted(batch_id, attempt)):
            return self._held_decision(batch_id, attempt)  # aborted before decisions existed
        body = {"decision": decision, "batch_id": batch_id, "attempt": attempt, **info}
        if self.fs.put_if_absent(self.layout.decision(batch_id, attempt), json.dumps(body, sort_keys=True).encode()):
            return body
        return self._held_decision(batch_id, attempt)

    def _held_decision(self, batch_id: int, attempt: str) -> JSON:
        """The decision another process made first; it was just seen to exist."""
        d = self.decision(batch_id, attempt)
        if d is None:
            raise ProtocolError(f"{self.describe(batch_id)}: the decision of attempt {attempt} was removed while "
                                f"it was being decided (a concurrent reset-batch archived it?); run the verb again")
        return d

    def describe(self, batch_id: int) -> str:
        return f"batch {batch_id} ({join(self.layout.ledger, 'plans', bid(batch_id) + '.json')})"
