"""Ledger checkpoints: planning batch 100,000 reads what planning batch 10 reads.

Without them every plan reads every plan record and every PREPARED (or ABANDONED) record of
the ledger. A checkpoint, like Delta's log checkpoints and Spark's compactible metadata logs,
holds what planning needs to know of batches ``1..K``; a reader takes the newest usable one
and reads only the records of the batches after ``K`` (at most ``INTERVAL`` of them, give or
take the batch in flight).

What is in one (``Checkpoint``), all derived from the immutable records of batches ``1..K``:

* the rewinds it applied (those to a batch ``<= K``: a rewind record written later that reaches
  into ``1..K`` makes it stale; readers then ignore it and use an older one, or the records);
  the ABANDONED batches; the digest of plan ``K`` (a ledger reset after a table was recreated,
  or restored from an older copy, no longer has that plan: the checkpoint is ignored);
* the newest batch whose range counts as read (Kafka: where the next batch starts);
* the first interval planned (interval mode's look-back starts there), the link and skip notes made;
* a sorted index, in content-addressed chunks (``index/<sha256>.json``), of
  ``f:<path>`` -> [size, mtime_ms, reported]: the landing files consumed (files, parquet);
  ``s:<slice>`` -> [[batch ids], [[path, size, mtime_ms], ...]]: the live batches that published
  each interval slice, and the files of the newest (late files, slice replace);
  ``e:<interval end>`` -> the newest live batch of the interval ending then.
  A plan reads only the chunks whose key range holds a key it asks for: a landing file newer
  than everything consumed needs none. Chunk boundaries depend on the keys only (a key whose
  hash is 0 modulo ``CHUNK`` ends a chunk), so a checkpoint rewrites only the chunks its
  batches changed and shares the others with the previous one.

Which batches: ``K`` is the batch every table holds (``min`` of the tables' txn versions) when
it is written, so every batch ``<= K`` is final: committed, ABANDONED or REWOUND. Neither
reset-batch (refused for a batch a table holds) nor abandon (decided once, put-if-absent) can
change one of them; a rewind can, which the rewind list above detects. It is written by
``Protocol.plan`` (which has just read everything it needs) once ``K`` is ``INTERVAL`` batches
past the checkpoint it read, put-if-absent: two writers of the same checkpoint write the same
thing, or the second is ignored. Any checkpoint that cannot be read, or whose chunks cannot,
is skipped for an older one or for the whole history, with a warning: never a wrong answer.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple, Protocol, TypeVar, overload

from ..storage.fs import Storage
from .formats import JSON, BatchPlan, PreparedBatch, PublishedFile, RewindRecord, planned_files

log = logging.getLogger("eobatch")

FORMAT = 1
INTERVAL = 10  # a checkpoint once the tables hold this many batches more than the newest one read
CHUNK = 512  # index entries per chunk, on average
KEEP = 3  # newest checkpoints kept (plus, per power of ten, the newest of the last two buckets)
GC_MIN_AGE_S = 3600.0  # index chunks no kept checkpoint names are removed only when this old

LINK_NOTE = "ignored symbolic link "
SKIP_NOTE = "skipped "  # sources.files.planner.SKIP_NOTE: a landing input left out of a plan
ONCE_NOTES = (LINK_NOTE, SKIP_NOTE)  # notes each made in one plan only (``ReadSoFar.link_noted``)
_END_OFFSET = 10 ** 18  # interval ends as sortable keys, before 1970 too
# the index's rows and entries, as JSON holds them: [first key, last key, entries, chunk name]
# and [key, value] (a value as ``_combine`` makes it for its key's prefix)
IndexRow = list[Any]
Entry = list[Any]


class CheckpointUnusable(Exception):
    """A checkpoint, or a chunk of its index, is missing or damaged (``damaged``: its bytes can
    never be read, so it may be removed), or of a format this code does not know: use an older
    one, or the records."""

    def __init__(self, message: str, damaged: bool = True):
        super().__init__(message)
        self.damaged = damaged


class RewindKey(NamedTuple):
    """A rewind as its record's name gives it: batches ``to_batch..after_batch`` are REWOUND."""

    after_batch: int
    to_batch: int


def undoing(batch_id: int, rewinds: Iterable[RewindKey]) -> RewindKey | None:
    """The rewind (after, to) that undid batch ``batch_id`` (the oldest such), or None while the
    batch counts. Batch ids are never reused (a rewind's batches go on with new ids), so an id
    names one incarnation of a range: a quarantine replay whose origin batch a rewind undid is
    void (``eobatch.protocol.replay``): the records it took are read again, from their own landing files,
    by the batches after the rewind, and its file is never read."""
    return min((r for r in rewinds if r.to_batch <= batch_id <= r.after_batch), default=None)


def ms(iso_or_dt: str | _dt.datetime) -> int:
    """Milliseconds since the epoch of an ISO text or a datetime (naive = UTC)."""
    if isinstance(iso_or_dt, str):
        iso_or_dt = _dt.datetime.fromisoformat(iso_or_dt)
    if iso_or_dt.tzinfo is None:
        iso_or_dt = iso_or_dt.replace(tzinfo=_dt.timezone.utc)
    return int(iso_or_dt.timestamp() * 1000)


T = TypeVar("T")


def changed_paths(notes: Iterable[str]) -> list[str]:
    """The landing files a plan's notes report as changed after they were consumed (files kinds)."""
    return [n[len("changed "):].split(" after it was consumed", 1)[0] for n in notes if n.startswith("changed ")]


def _end_key(end_ms: int) -> str:
    return f"e:{end_ms + _END_OFFSET:020d}"


# -- the sorted index, in content-addressed chunks -----------------------------------------------
def _ends_chunk(key: str, chunk: int) -> bool:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % chunk == 0


def chunk_bytes(entries: list[Entry]) -> bytes:
    return json.dumps({"format": FORMAT, "entries": entries}, separators=(",", ":"), ensure_ascii=False).encode()


def _cut(entries: list[Entry], chunk: int) -> list[list[Entry]]:
    out: list[list[Entry]] = []
    cur: list[Entry] = []
    for e in entries:
        cur.append(e)
        if _ends_chunk(e[0], chunk):
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def merge_index(rows: list[IndexRow], updates: dict[str, Any], combine: Callable[[str, Any, Any], Any],
                load: Callable[[str], list[Entry]], chunk: int) -> tuple[list[IndexRow], dict[str, bytes]]:
    """The index ``rows`` ([first key, last key, entries, chunk name]) with ``updates`` merged in
    (``combine(key, old value or None, update)``): the new rows and the chunks to write. Only the
    chunks whose key range receives an update are read and rewritten."""
    groups: dict[int, dict[str, Any]] = {}
    firsts = [r[0] for r in rows]
    for key, upd in updates.items():
        groups.setdefault(max(bisect.bisect_right(firsts, key) - 1, 0), {})[key] = upd
    out: list[IndexRow] = []
    new: dict[str, bytes] = {}

    def emit(entries: dict[str, Any]) -> None:
        for piece in _cut(sorted([k, v] for k, v in entries.items()), chunk):
            data = chunk_bytes(piece)
            name = hashlib.sha256(data).hexdigest()
            new[name] = data
            out.append([piece[0][0], piece[-1][0], len(piece), name])

    if not rows:
        if updates:
            emit({k: combine(k, None, u) for k, u in updates.items()})
        return out, new
    for i, row in enumerate(rows):
        if i not in groups:
            out.append(list(row))
            continue
        entries = {k: v for k, v in load(row[3])}
        for key, upd in groups[i].items():
            entries[key] = combine(key, entries.get(key), upd)
        emit(entries)
    return out, new


class IndexReader:
    """Lookups in a checkpoint's index; chunks are read on first use, and only those needed."""

    def __init__(self, rows: list[IndexRow], load: Callable[[str], list[Entry]]):
        self.rows = rows
        self.firsts = [r[0] for r in rows]
        self._load = load
        self._chunks: dict[int, tuple[list[str], list[Any]]] = {}
        self.loaded = 0

    def _chunk(self, i: int) -> tuple[list[str], list[Any]]:
        if i not in self._chunks:
            entries = self._load(self.rows[i][3])
            self._chunks[i] = ([e[0] for e in entries], [e[1] for e in entries])
            self.loaded += 1
        return self._chunks[i]

    def get(self, key: str) -> Any:
        i = bisect.bisect_right(self.firsts, key) - 1
        if i < 0 or key > self.rows[i][1]:
            return None  # before the first key, or between two chunks: not there, nothing read
        keys, values = self._chunk(i)
        j = bisect.bisect_left(keys, key)
        return values[j] if j < len(keys) and keys[j] == key else None

    def floor(self, key: str, prefix: str) -> tuple[str, Any] | None:
        """The greatest entry whose key is <= ``key`` and starts with ``prefix`` (``key`` does too)."""
        i = bisect.bisect_right(self.firsts, key) - 1
        if i < 0:
            return None
        keys, values = self._chunk(i)
        j = bisect.bisect_right(keys, key) - 1
        if j < 0 or not keys[j].startswith(prefix):
            return None
        return keys[j], values[j]


# -- the record -----------------------------------------------------------------------------
@dataclass
class Checkpoint:
    """What batches 1..``batch_id`` mean for planning (see the module docstring)."""

    batch_id: int
    plan_digest: str  # Ledger.plan_digest(batch_id) when it was written
    rewinds: list[list[int]]  # [[after, to]] of every rewind record with to <= batch_id, sorted
    abandoned: list[list[int]]  # [[first, last]] ranges of ABANDONED batches
    last_kept: JSON | None  # the newest plan whose range counts as read (its record's JSON)
    first_interval_start_ms: int | None  # the earliest interval start of any plan
    link_notes: list[str]  # the "ignored symbolic link" and "skipped" notes made (each is made once)
    index: list[IndexRow]  # [[first key, last key, entries, chunk name]]
    pipeline: str = ""
    entries: int = 0
    format: int = FORMAT

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Checkpoint:
        d = json.loads(data)
        if not isinstance(d, dict):
            raise CheckpointUnusable(f"not a checkpoint: {type(d).__name__}")
        if d.get("format") != FORMAT:
            raise CheckpointUnusable(f"checkpoint format {d.get('format')!r}, this code reads {FORMAT}", damaged=False)
        try:
            ck = cls(**{k: d[k] for k in ("batch_id", "plan_digest", "rewinds", "abandoned", "last_kept",
                                          "first_interval_start_ms", "link_notes", "index")},
                     pipeline=d.get("pipeline", ""), entries=d.get("entries", 0))
        except KeyError as e:
            raise CheckpointUnusable(f"checkpoint without {e}") from None
        if not ck._well_formed():
            raise CheckpointUnusable("checkpoint with a malformed field")
        return ck

    def _well_formed(self) -> bool:
        def ints(x: object, n: int) -> bool:
            return isinstance(x, list) and len(x) == n and all(type(i) is int for i in x)

        try:
            if self.last_kept is not None:
                BatchPlan.from_json(json.dumps(self.last_kept))
        except (TypeError, ValueError):
            return False
        return (type(self.batch_id) is int and self.batch_id > 0 and isinstance(self.plan_digest, str)
                and isinstance(self.rewinds, list) and all(ints(r, 2) for r in self.rewinds)
                and isinstance(self.abandoned, list) and all(ints(r, 2) for r in self.abandoned)
                and isinstance(self.link_notes, list) and all(isinstance(n, str) for n in self.link_notes)
                and (self.first_interval_start_ms is None or type(self.first_interval_start_ms) is int)
                and isinstance(self.index, list)
                and all(isinstance(r, list) and len(r) == 4 and isinstance(r[0], str) and isinstance(r[1], str)
                        and isinstance(r[3], str) for r in self.index))

    def rewind_keys(self) -> list[RewindKey]:
        return sorted(RewindKey(int(a), int(t)) for a, t in self.rewinds)

    def is_abandoned(self, batch_id: int) -> bool:
        i = bisect.bisect_right(self.abandoned, [batch_id, float("inf")]) - 1
        return i >= 0 and self.abandoned[i][0] <= batch_id <= self.abandoned[i][1]


def _ranges(ranges: list[list[int]], ids: Iterable[int]) -> list[list[int]]:
    """``ranges`` ([[first, last]], sorted) with ``ids`` (all after them) added."""
    out: list[list[int]] = [list(r) for r in ranges]
    for b in sorted(set(ids)):
        if out and out[-1][1] == b - 1:
            out[-1][1] = b
        else:
            out.append([b, b])
    return out


def _combine(key: str, old: Any, new: Any) -> Any:
    if key.startswith("f:"):  # [size, mtime_ms, reported]: the newest consumer's size and mtime
        o = old or [None, None, False]
        return [new[0] if new[0] is not None else o[0], new[1] if new[0] is not None else o[1],
                bool(o[2]) or bool(new[2])]
    if key.startswith("s:"):  # [[live batch ids], files of the newest]
        return [(old[0] if old else []) + new[0], new[1]]
    if key.startswith("e:"):
        return max(old or 0, new)
    raise ValueError(f"unknown index key {key!r}")


# -- what the ledger says, from a checkpoint and the records after it -----------------------------
class ReadSoFar(Sequence[BatchPlan]):
    """The plans whose ranges count as read (``state.read_so_far``), as the planners use them:
    ``[-1]`` (the newest: Kafka's next start) and, for the landing-file kinds, which files were
    consumed. Those come from the checkpoint and the newer plans; the whole list (any other
    index, ``len``, iteration: what a kind written for plain lists may use) is read from every
    record of the ledger on first use, as before checkpoints."""

    def __init__(self, last: BatchPlan | None, consumed: Callable[[str], JSON | None],
                 reported: Callable[[str], bool], link_noted: Callable[[str], bool],
                 full: Callable[[], list[BatchPlan]], void: Callable[[str], str | None] | None = None):
        self.last = last
        self._consumed, self._reported, self._link_noted, self._full = consumed, reported, link_noted, full
        self._void = void
        # landing inputs left out while ``void`` was answered (a replay lineage that cannot be read):
        # (path, why), filled when ``void`` is first asked; the planner skips them (its notes, ``skipped``)
        self.skipped_inputs: list[tuple[str, str]] = []
        self._all: list[BatchPlan] | None = None
        # the discovery state an idle plan kept after the newest plan (``Planner.discovered``), set by
        # the protocol: read when a planner first asks
        self.kept_discovery: Callable[[], JSON | None] = lambda: None
        self._kept: list[JSON | None] | None = None

    @classmethod
    def from_plans(cls, plans: Sequence[BatchPlan]) -> ReadSoFar:
        """The view of a plain list of plans (anything with ``range`` and ``notes``)."""
        plans = list(plans)
        consumed: dict[str, JSON] = {}
        reported: set[str] = set()
        links: set[str] = set()
        for p in plans:
            for f in planned_files(p.range) or ():
                consumed[f.path] = f.entry
            reported.update(changed_paths(p.notes))
            links.update(n for n in p.notes if n.startswith(ONCE_NOTES))
        view = cls(plans[-1] if plans else None, consumed.get, reported.__contains__, links.__contains__,
                   lambda: plans)
        return view

    def consumed(self, path: str) -> JSON | None:
        """The planned entry ({"path", "size", "mtime_ms", ...}) of the newest batch that read ``path``."""
        return self._consumed(path)

    def void(self, path: str) -> str | None:
        """Why the landing file ``path`` must never be read (the file of a void quarantine replay,
        ``eobatch.protocol.replay``), or None."""
        return self._void(path) if self._void is not None else None

    def discovery(self) -> JSON | None:
        """``{"listed_after", "full_listing_ms"}`` that a plan which planned nothing kept after the
        newest plan (``Ledger.discovery``), or None."""
        if self._kept is None:
            self._kept = [self.kept_discovery()]
        return self._kept[0]

    def reported(self, path: str) -> bool:
        """Whether a plan's notes already reported ``path`` as changed after it was consumed."""
        return self._reported(path)

    def link_noted(self, note: str) -> bool:
        return self._link_noted(note)

    def plans(self) -> list[BatchPlan]:
        if self._all is None:
            self._all = list(self._full())
        return self._all

    def __bool__(self) -> bool:
        return self.last is not None

    def __len__(self) -> int:
        return len(self.plans())

    @overload
    def __getitem__(self, i: int) -> BatchPlan: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[BatchPlan]: ...

    def __getitem__(self, i: int | slice) -> BatchPlan | Sequence[BatchPlan]:
        if isinstance(i, int) and i == -1 and self.last is not None:
            return self.last
        return self.plans()[i]

    def __iter__(self) -> Iterator[BatchPlan]:
        return iter(self.plans())


class LedgerReader(Protocol):
    """What a ``History`` reads of its ledger: ``eobatch.core.ledger.Ledger`` is one. Declared here,
    where it is used: the ledger module imports this one, never the other way round."""

    fs: Storage

    def plan(self, batch_id: int) -> BatchPlan | None: ...

    def prepared(self, batch_id: int) -> PreparedBatch | None: ...

    def abandoned(self, batch_id: int) -> JSON | None: ...

    def batch_ids(self) -> list[int]: ...

    def read_plans(self, ids: Iterable[int]) -> tuple[list[BatchPlan], dict[int, str]]: ...

    def load_chunk(self, name: str) -> list[Entry]: ...

    def history(self, max_checkpoint: int | None = None, pending_rewind: RewindRecord | RewindKey | None = None,
                use_checkpoints: bool = True) -> History: ...


@dataclass
class History:
    """The ledger of one pipeline as planning reads it: the newest usable checkpoint (``base``,
    batches 1..K) and every plan after it (``tail``), with the rewinds (``rewinds``: the
    records, plus a rewind being planned now). Every answer equals the one computed from all
    records (``state``'s functions over ``Ledger.plans()``); made by ``Ledger.history``."""

    ledger: LedgerReader
    base: Checkpoint | None
    tail: list[BatchPlan]
    latest: int
    recorded: list[RewindKey]
    pending: RewindKey | None = None
    digests: dict[int, str] = field(default_factory=dict)  # tail batch -> sha256 of its plan record
    base_path: str | None = None
    _abandoned: dict[int, bool] = field(default_factory=dict)
    _prepared: dict[int, PreparedBatch | None] = field(default_factory=dict)
    _kept: list[BatchPlan] | None = None
    # (the marker it was made with, consumed, reported, link notes): ``_tail_overlay``
    _overlay: tuple[BatchPlan | None, dict[str, JSON], set[str], set[str]] | None = None
    _reader: IndexReader | None = None

    def __post_init__(self) -> None:
        self._reader = IndexReader(self.base.index, self.ledger.load_chunk) if self.base else None

    def __repr__(self) -> str:
        return (f"History(checkpoint of batch {self.checkpoint_id}, {len(self.tail)} plans after it, "
                f"latest {self.latest}, rewinds {self.rewinds})")

    # -- facts ---------------------------------------------------------------------------
    @property
    def checkpoint_id(self) -> int:
        return self.base.batch_id if self.base else 0

    @property
    def rewinds(self) -> list[RewindKey]:
        return self.recorded + ([self.pending] if self.pending else [])

    @property
    def newest_digest(self) -> str | None:
        """sha256 of the newest plan's record (None: no plan yet): what names "after the newest plan"
        for a record kept beside the plans (``Ledger.discovery``): any plan, rewind or reset since
        changes it."""
        if not self.latest:
            return None
        if self.base is not None and self.base.batch_id == self.latest:
            return self.base.plan_digest
        return self.digests.get(self.latest)

    def gone(self, batch_id: int) -> bool:
        return any(r.to_batch <= batch_id <= r.after_batch for r in self.rewinds)

    def is_abandoned(self, batch_id: int) -> bool:
        if self.base is not None and batch_id <= self.base.batch_id:
            return self.base.is_abandoned(batch_id)
        if batch_id not in self._abandoned:
            self._abandoned[batch_id] = self.ledger.abandoned(batch_id) is not None
        return self._abandoned[batch_id]

    def plan(self, batch_id: int) -> BatchPlan | None:
        if batch_id > self.checkpoint_id:
            return next((p for p in self.tail if p.batch_id == batch_id), None)
        return self.ledger.plan(batch_id)

    def prepared(self, batch_id: int) -> PreparedBatch | None:
        if batch_id not in self._prepared:
            self._prepared[batch_id] = self.ledger.prepared(batch_id)
        return self._prepared[batch_id]

    def kept_tail(self) -> list[BatchPlan]:
        """The plans after the checkpoint whose ranges count as read (not REWOUND, not ABANDONED)."""
        if self._kept is None:
            self._kept = [p for p in self.tail if not self.gone(p.batch_id) and not self.is_abandoned(p.batch_id)]
        return self._kept

    def with_plan(self, plan: BatchPlan) -> History:
        """This history with ``plan``, just written as the batch after ``latest``, as its newest
        plan (a run that plans several batches reads on from the one it planned last)."""
        if plan.batch_id != self.latest + 1:
            raise ValueError(f"batch {plan.batch_id} does not follow batch {self.latest}")
        return replace(self, tail=[*self.tail, plan], latest=plan.batch_id,
                       digests={**self.digests, plan.batch_id: hashlib.sha256(plan.to_json()).hexdigest()},
                       _abandoned=dict(self._abandoned), _prepared=dict(self._prepared), _kept=None, _overlay=None)

    def bound(self, held: int) -> History:
        """This history, or one from an older checkpoint when this one's batch is beyond ``held``
        (the batch every table holds: only batches <= held are final)."""
        if self.checkpoint_id <= held:
            return self
        log.warning("ledger checkpoint of batch %s is ahead of the tables (they hold %s): not used",
                    self.checkpoint_id, held)
        return self.ledger.history(max_checkpoint=held, pending_rewind=self.pending)

    # -- the fallback ------------------------------------------------------------------------
    def _index(self, fn: Callable[[IndexReader], Any]) -> Any:
        """A lookup in the checkpoint's index (None without one); raises CheckpointUnusable."""
        return fn(self._reader) if self._reader is not None else None

    def _query(self, fn: Callable[[], T]) -> T:
        """``fn()``, answered again from every record when the checkpoint turns out unusable."""
        try:
            return fn()
        except CheckpointUnusable as e:
            log.warning("ledger checkpoint of batch %s is unusable (%s): reading every record instead%s",
                        self.checkpoint_id, e, "; it is removed (the next plan writes another)" if e.damaged else "")
            if e.damaged and self.base_path:
                self.ledger.fs.delete(self.base_path)  # derived data: never read again, made again
            self._drop_checkpoint()
            return fn()

    def _drop_checkpoint(self) -> None:
        """Go on from every record, as if there were no checkpoint (same answers, more reads)."""
        k = self.checkpoint_id
        older, digests = self.ledger.read_plans(b for b in self.ledger.batch_ids() if b <= k)
        self.base, self._reader, self.base_path = None, None, None
        self.tail = older + self.tail
        self.digests.update(digests)
        self._kept, self._overlay = None, None
        self._abandoned = {}

    # -- read so far (continuous mode) ---------------------------------------------------------
    def read_so_far(self, start_marker: Callable[[BatchPlan], BatchPlan | None],
                    full: Callable[[], list[BatchPlan]], void: Callable[[str], str | None] | None = None) -> ReadSoFar:
        """``state.read_so_far`` over every plan, from the checkpoint and the newer plans;
        ``full()`` gives the whole list from every record, for a use that needs all of it;
        ``void``: ``ReadSoFar.void``."""
        marker = self._query(lambda: self._marker(start_marker))
        last = marker if marker is not None else self._query(self._last_kept)
        return ReadSoFar(last, lambda p: self._query(lambda: self._consumed(p, marker)),
                         lambda p: self._query(lambda: self._reported(p, marker)),
                         lambda n: self._link_noted(n, marker), full, void)

    def _last_kept(self) -> BatchPlan | None:
        kept = self.kept_tail()
        if kept:
            return kept[-1]
        if self.base is not None and self.base.last_kept is not None:
            return BatchPlan.from_json(json.dumps(self.base.last_kept))
        return None

    def _marker(self, start_marker: Callable[[BatchPlan], BatchPlan | None]) -> BatchPlan | None:
        """Right after the newest rewind (to K): K's start marker, when its kind has one."""
        if not self.rewinds:
            return None
        last = max(self.rewinds, key=lambda r: (r.after_batch, -r.to_batch))
        newest = self._last_kept()
        if newest is not None and newest.batch_id > last.after_batch:
            return None
        k = self.plan(last.to_batch)
        return start_marker(k) if k is not None else None

    def _tail_overlay(self, marker: BatchPlan | None) -> tuple[dict[str, JSON], set[str], set[str]]:
        if self._overlay is None or self._overlay[0] is not marker:
            consumed: dict[str, JSON] = {}
            reported: set[str] = set()
            links: set[str] = set()
            for p in self.kept_tail() + ([marker] if marker is not None else []):
                for f in planned_files(p.range) or ():
                    consumed[f.path] = f.entry
                reported.update(changed_paths(p.notes))
                links.update(n for n in p.notes if n.startswith(ONCE_NOTES))
            self._overlay = (marker, consumed, reported, links)
        return self._overlay[1], self._overlay[2], self._overlay[3]

    def _consumed(self, path: str, marker: BatchPlan | None) -> JSON | None:
        hit = self._tail_overlay(marker)[0].get(path)
        if hit is not None:
            return hit
        v = self._index(lambda ix: ix.get("f:" + path))
        if v is None or v[0] is None:
            return None
        return {"path": path, "size": v[0], "mtime_ms": v[1]}

    def _reported(self, path: str, marker: BatchPlan | None) -> bool:
        if path in self._tail_overlay(marker)[1]:
            return True
        v = self._index(lambda ix: ix.get("f:" + path))
        return bool(v and v[2])

    def _link_noted(self, note: str, marker: BatchPlan | None) -> bool:
        return note in self._tail_overlay(marker)[2] or bool(self.base and note in self.base.link_notes)

    # -- interval mode ----------------------------------------------------------------------
    def first_interval_start_ms(self) -> int | None:
        """The earliest interval start of any plan (the look-back never goes before it)."""
        vals = [ms(p.interval["start"]) for p in self.tail if p.interval]
        if self.base is not None and self.base.first_interval_start_ms is not None:
            vals.append(self.base.first_interval_start_ms)
        return min(vals, default=None)

    def published(self, names: Iterable[str], held: int) -> dict[str, set[PublishedFile]]:
        """``state.published_slices`` for the slices ``names``: what the newest committed live
        batch that published each one published."""
        wanted = set(names)
        return self._query(lambda: self._published(wanted, held))

    def _published(self, names: set[str], held: int) -> dict[str, set[PublishedFile]]:
        out: dict[str, set[PublishedFile]] = {}
        for p in reversed(self.kept_tail()):
            if p.batch_id > held:
                continue
            for name, files in p.slices().items():
                if name in names:
                    out.setdefault(name, {(f["path"], f["size"], f["mtime_ms"]) for f in files})
        for name in sorted(names - out.keys()):
            key = "s:" + name
            v = self._index(lambda ix: ix.get(key))  # noqa: B023 - called right here
            if v is not None:
                out[name] = {tuple(f) for f in v[1]}
        return out

    def last_interval_before(self, start: str | _dt.datetime) -> BatchPlan | None:
        """``state.last_interval_before``: the newest live batch of the latest interval that ends
        at or before ``start``."""
        return self._query(lambda: self._last_interval_before(ms(start)))

    def _last_interval_before(self, s: int) -> BatchPlan | None:
        best: tuple[int, int] | None = None
        for p in self.kept_tail():
            if p.interval and ms(p.interval["end"]) <= s:
                cand = (ms(p.interval["end"]), p.batch_id)
                best = cand if best is None or cand > best else best
        hit = self._index(lambda ix: ix.floor(_end_key(s), "e:"))
        if hit is not None:
            cand = (int(hit[0][2:]) - _END_OFFSET, int(hit[1]))
            best = cand if best is None or cand > best else best
        return self.plan(best[1]) if best is not None else None

    def replace_sources(self, plan: BatchPlan, held: int) -> list[tuple[BatchPlan, PreparedBatch]]:
        """For ``state.replaced_files``: per slice of ``plan``, the newest committed live batch
        before it that published the slice and has a PREPARED record, with that record."""
        return self._query(lambda: self._replace_sources(plan, held))

    def _replace_sources(self, plan: BatchPlan, held: int) -> list[tuple[BatchPlan, PreparedBatch]]:
        chosen: dict[int, tuple[BatchPlan, PreparedBatch]] = {}
        for name in sorted(plan.slices()):
            found = self._publisher(name, min(held, plan.batch_id - 1))
            if found is not None:
                chosen.setdefault(found[0].batch_id, found)
        return list(chosen.values())

    def slice_holder(self, name: str, held: int) -> BatchPlan | None:
        """The plan of the newest committed live batch up to ``held`` that published slice
        ``name`` (interval mode: what a re-run or a late record republishes from); None if none."""
        found = self._query(lambda: self._publisher(name, held))
        return found[0] if found is not None else None

    def _publisher(self, name: str, upto: int) -> tuple[BatchPlan, PreparedBatch] | None:
        ids = {p.batch_id for p in self.kept_tail() if name in p.slices()}
        key = "s:" + name
        v = self._index(lambda ix: ix.get(key))
        if v is not None:
            ids.update(int(b) for b in v[0])
        for b in sorted((b for b in ids if b <= upto), reverse=True):
            prepared = self.prepared(b)
            held_plan = self.plan(b) if prepared is not None else None
            if prepared is not None and held_plan is not None:
                return held_plan, prepared
        return None

    # -- writing the next checkpoint ---------------------------------------------------------
    def next_checkpoint(self, held: int) -> tuple[Checkpoint, dict[str, bytes]] | None:
        """The checkpoint of batches 1..``held`` (every table holds them: all are final), built
        from this one and the plans after it; None when it is not due yet or cannot be made
        from what was read (a gap in the plans, an unrecorded rewind, a rewind being planned)."""
        k = self.checkpoint_id
        if self.pending is not None or held - k < INTERVAL or held > self.latest:
            return None
        upto = [p for p in self.tail if p.batch_id <= held]
        if [p.batch_id for p in upto] != list(range(k + 1, held + 1)) or held not in self.digests:
            return None
        recorded = set(self.recorded)
        for p in upto:
            if p.rewind and RewindKey(p.rewind["after_batch"], p.rewind["to_batch"]) not in recorded:
                return None  # a rewind that died before its record: recover writes it first
        kept = [p for p in upto if not self.gone(p.batch_id) and not self.is_abandoned(p.batch_id)]
        updates: dict[str, Any] = {}
        for p in kept:
            for f in planned_files(p.range) or ():
                e = updates.setdefault("f:" + f.path, [None, None, False])
                e[0], e[1] = f.size, f.mtime_ms
            for path in changed_paths(p.notes):
                updates.setdefault("f:" + path, [None, None, False])[2] = True
            if p.interval:
                key = _end_key(ms(p.interval["end"]))
                updates[key] = max(updates.get(key, 0), p.batch_id)
                for name, files in p.slices().items():
                    e = updates.setdefault("s:" + name, [[], None])
                    e[0].append(p.batch_id)
                    e[1] = [[f["path"], f["size"], f["mtime_ms"]] for f in files]
        base = self.base
        rows, chunks = merge_index(base.index if base else [], updates, _combine, self.ledger.load_chunk, CHUNK)
        firsts = [ms(p.interval["start"]) for p in upto if p.interval]
        if base is not None and base.first_interval_start_ms is not None:
            firsts.append(base.first_interval_start_ms)
        last = kept[-1] if kept else None
        ck = Checkpoint(
            batch_id=held, plan_digest=self.digests[held],
            rewinds=[[r.after_batch, r.to_batch] for r in sorted(r for r in recorded if r.to_batch <= held)],
            abandoned=_ranges(base.abandoned if base else [], [p.batch_id for p in upto if self.is_abandoned(p.batch_id)]),
            last_kept=json.loads(last.to_json()) if last is not None else (base.last_kept if base else None),
            first_interval_start_ms=min(firsts, default=None),
            link_notes=sorted(set(base.link_notes if base else [])
                              | {n for p in kept for n in p.notes if n.startswith(ONCE_NOTES)}),
            index=rows, pipeline=upto[-1].pipeline, entries=sum(r[2] for r in rows))
        return ck, chunks


def retained(found: list[tuple[int, int]], keep: int = KEEP) -> set[tuple[int, int]]:
    """Which checkpoints (batch, rewinds) to keep: the ``keep`` newest, and for every power of ten
    from 100 the newest of each of the last two full buckets of that size (so a rewind far back
    still finds one not far before it)."""
    if not found:
        return set()
    ordered = sorted(found, reverse=True)
    out = set(ordered[:keep])
    newest = ordered[0][0]
    size = 100
    while size <= newest:
        for bucket in (newest // size - 1, newest // size - 2):
            inside = [c for c in ordered if c[0] // size == bucket]
            if inside:
                out.add(inside[0])
        size *= 10
    return out
