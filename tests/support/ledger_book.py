"""A ledger written record by record as the protocol writes it (``Book``), with the batch every
table holds beside it: plans, PREPARED, ABANDONED, rewinds (the reservation plan, then the
record), resets (an undecided batch's records removed), checkpoints. Real files on local disk
(``LocalStorage``), no tables: for the unit tests of ``eobatch.core.checkpoint`` and ``eobatch.core.ledger``."""

from __future__ import annotations

import json
import random
from pathlib import Path

from eobatch.core.formats import BatchPlan, Layout, PreparedBatch, RewindRecord, StagedFile, fingerprint_of, slice_name
from eobatch.core.ledger import Ledger
from eobatch.protocol import state as st
from eobatch.storage.fs import LocalStorage

H = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
STARTS = [T0 + i * H for i in range(6)]  # the interval starts of the batches of interval mode


def iso_of(ms: int) -> str:
    """The ISO time of epoch milliseconds ``ms``, spelled as interval bounds are (UTC)."""
    return st.interval_of(_dt(ms), _dt(ms + H))["start"]


def _dt(ms: int):
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


class Book:
    """A ledger written as the protocol writes it, with the batch every table holds."""

    def __init__(self, root: Path):
        self.layout = Layout(str(root / "lake" / "orders"), str(root / "lake" / "orders_q"))
        self.ledger = Ledger(self.layout, LocalStorage())
        self.held = 0  # every table holds batches 1..held
        self.latest = 0
        self.pending: int | None = None  # planned, not decided

    def plan(self, files=(), notes=(), interval_start: int | None = None, extra_slices=(), rewind=None) -> int:
        assert self.pending is None
        b = self.latest + 1
        interval = None
        rng: dict = {"files": [dict(f) for f in files]}
        if interval_start is not None:
            interval = {"start": iso_of(interval_start), "end": iso_of(interval_start + H)}
            own = slice_name(interval_start)
            for f in rng["files"]:
                f["slice"] = own
            for lo in extra_slices:  # a late interval published again by this batch
                rng["files"].append({"path": f"/landing/late/{lo}.jsonl", "size": b, "mtime_ms": lo, "records": 1,
                                     "slice": slice_name(lo)})
        plan = BatchPlan(pipeline="orders", batch_id=b, source_kind="files", range=rng, rows_in=1,
                         config_fingerprint="f", planned_at="t", notes=list(notes), interval=interval, rewind=rewind)
        assert self.ledger.put_plan(plan)
        self.latest, self.pending = b, b
        return b

    def commit(self) -> None:
        b = self.pending
        assert b is not None
        plan = self.ledger.require_plan(b)
        adds = {"sink": [StagedFile(f"eo_batches/b{b:010d}/a1/{name}/part-0.parquet", 10, {}, 0, "{}")
                         for name in (plan.slices() or {"": []})], "quarantine": []}
        assert self.ledger.put_prepared(PreparedBatch(
            pipeline="orders", batch_id=b, attempt="a1", adds=adds, arrow_schema={}, partition_by={},
            fingerprint=fingerprint_of(adds), rows_in=1, rows_valid=1, rows_quarantined=0, rows_published=1,
            bytes=10, files=1, prepared_at="t", verify_seconds=0.0, stage_seconds=0.0))
        self.held, self.pending = b, None

    def abandon(self) -> None:
        assert self.pending is not None and self.ledger.put_abandoned(self.pending, {"reason": "test"})
        self.pending = None

    def rewind(self, to: int) -> RewindRecord:
        """Protocol.rewind's ledger writes: the reservation plan of L+1, then the record."""
        assert self.pending is None and self.held == self.latest and 1 <= to <= self.latest
        rec = RewindRecord(pipeline="orders", after_batch=self.latest, to_batch=to, restore_versions={},
                           requested_at="t")
        self.plan(rewind=json.loads(rec.to_json()))
        assert self.ledger.put_rewind(rec)
        return rec

    def reset(self) -> None:
        """reset-batch of the undecided batch: its records go (no table holds it)."""
        b = self.pending
        assert b is not None
        for path in (self.layout.plan(b), self.layout.prepared(b)):
            self.ledger.fs.delete(path)
        self.latest, self.pending = b - 1, None

    def checkpoint(self):
        hist = self.ledger.history().bound(self.held)
        return self.ledger.write_checkpoint(hist, self.held)


def commit_batches(book: Book, n: int, rnd: random.Random | None = None, interval: bool = False) -> None:
    """``n`` batches of one landing file each, planned and committed (``interval``: hourly ones)."""
    rnd = rnd or random.Random(n)
    for _ in range(n):
        b = book.latest + 1
        book.plan([{"path": f"/landing/c/{b:05d}.jsonl", "size": b, "mtime_ms": b, "records": 1}],
                  interval_start=STARTS[b % len(STARTS)] if interval else None)
        book.commit()
