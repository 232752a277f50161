"""The batch ledger: one put-if-absent file per batch and phase (see formats.Layout)."""

from __future__ import annotations

import json
import re

from .errors import ProtocolError
from .formats import (
    BatchPlan,
    CommittedBatch,
    Layout,
    PartitionManifest,
    PreparedBatch,
    RewindRecord,
    StageSummary,
    bid,
)
from .storage import join, storage_for

_BATCH_FILE = re.compile(r"^(\d{10})\.json$")


class Ledger:
    def __init__(self, layout: Layout, storage=None):
        self.layout = layout
        self.fs = storage or storage_for(layout.sink_table)

    # -- reading -------------------------------------------------------------------
    def _read(self, path: str, cls):
        try:
            return cls.from_json(self.fs.read_bytes(path))
        except FileNotFoundError:
            return None

    def plan(self, batch_id: int) -> BatchPlan | None:
        return self._read(self.layout.plan(batch_id), BatchPlan)

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
        import hashlib

        try:
            return hashlib.sha256(self.fs.read_bytes(self.layout.plan(batch_id))).hexdigest()
        except FileNotFoundError:
            return None

    def _decision(self, batch_id: int) -> dict | None:
        try:
            return json.loads(self.fs.read_bytes(self.layout.prepared(batch_id)))
        except FileNotFoundError:
            return None

    def prepared(self, batch_id: int) -> PreparedBatch | None:
        d = self._decision(batch_id)
        if d is None or d.get("abandoned"):
            return None
        return PreparedBatch.from_json(json.dumps(d))

    def abandoned(self, batch_id: int) -> dict | None:
        """Interval mode: the batch was given up (its interval can simply run again)."""
        d = self._decision(batch_id)
        return d if d is not None and d.get("abandoned") else None

    def put_abandoned(self, batch_id: int, info: dict) -> bool:
        """Decide ABANDONED, put-if-absent on the PREPARED record's path: exactly one of
        PREPARED or ABANDONED can ever be decided for a batch."""
        body = json.dumps({"abandoned": True, "batch_id": batch_id, **info}, sort_keys=True).encode()
        return self.fs.put_if_absent(self.layout.prepared(batch_id), body)

    def rewinds(self) -> list[RewindRecord]:
        out = []
        for f in self.fs.list_files(self.layout.rewinds_dir(), recursive=False):
            if f.path.endswith(".json"):
                out.append(RewindRecord.from_json(self.fs.read_bytes(f.path)))
        return sorted(out, key=lambda r: (r.after_batch, -r.to_batch))

    def put_rewind(self, rec: RewindRecord) -> bool:
        return self.fs.put_if_absent(self.layout.rewind(rec.after_batch, rec.to_batch), rec.to_json())

    def rewound_ids(self) -> set[int]:
        out: set[int] = set()
        for r in self.rewinds():
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
        ids = self.batch_ids()
        return ids[-1] if ids else 0

    def plans(self) -> list[BatchPlan]:
        return [p for p in (self.plan(i) for i in self.batch_ids()) if p is not None]

    def live_plans(self) -> list[BatchPlan]:
        """Plans whose ranges count as read: all but REWOUND and ABANDONED batches."""
        gone = self.rewound_ids()
        return [p for p in self.plans() if p.batch_id not in gone and self.abandoned(p.batch_id) is None]

    def attempts(self, batch_id: int) -> list[str]:
        return self.fs.list_dirs(self.layout.attempts_dir(batch_id))

    def decision(self, batch_id: int, attempt: str) -> dict | None:
        """The attempt's one decision, ``{"decision": "prepare" | "abort", ...}``, or None."""
        for path, legacy in ((self.layout.decision(batch_id, attempt), False),
                             (self.layout.aborted(batch_id, attempt), True)):
            try:
                d = json.loads(self.fs.read_bytes(path))
            except FileNotFoundError:
                continue
            return {"decision": "abort", **d} if legacy else d
        return None

    def aborted_info(self, batch_id: int, attempt: str) -> dict | None:
        d = self.decision(batch_id, attempt)
        return d if d is not None and d["decision"] == "abort" else None

    # -- writing -------------------------------------------------------------------
    def put_plan(self, plan: BatchPlan) -> bool:
        return self.fs.put_if_absent(self.layout.plan(plan.batch_id), plan.to_json())

    def put_prepared(self, prepared: PreparedBatch) -> bool:
        return self.fs.put_if_absent(self.layout.prepared(prepared.batch_id), prepared.to_json())

    def put_committed(self, committed: CommittedBatch) -> bool:
        return self.fs.put_if_absent(self.layout.committed(committed.batch_id), committed.to_json())

    def decide(self, batch_id: int, attempt: str, decision: str, info: dict) -> dict:
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

    def _held_decision(self, batch_id: int, attempt: str) -> dict:
        """The decision another process made first; it was just seen to exist."""
        d = self.decision(batch_id, attempt)
        if d is None:
            raise ProtocolError(f"{self.describe(batch_id)}: the decision of attempt {attempt} was removed while "
                                f"it was being decided (a concurrent reset-batch archived it?); run the verb again")
        return d

    def describe(self, batch_id: int) -> str:
        return f"batch {batch_id} ({join(self.layout.ledger, 'plans', bid(batch_id) + '.json')})"
