"""The protocol's decisions as pure functions: values in, a value (or an error) out, no I/O.

The verbs (``verbs.py``) and the repairs (``repairs.py``) read the ledger and the tables, call
these to decide, and write what was decided. Everything here can be tested, and reasoned about,
with plain values: which state a batch is in, which batch must be pending, whether ledger and
tables agree, which ranges count as read, what an interval batch replaces.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from croniter import croniter

from ..core.checkpoint import ms  # one definition, shared with the ledger's checkpoints
from ..core.formats import JSON, BatchPlan, BatchState, PreparedBatch, PublishedFile, RewindRecord, slice_of
from ..errors import LedgerMismatch


def interval_of(start: str | _dt.datetime, end: str | _dt.datetime) -> dict[str, str]:
    """{"start", "end"} as ISO UTC text, from datetimes or ISO strings."""
    def iso(x: str | _dt.datetime) -> str:
        if isinstance(x, str):
            x = _dt.datetime.fromisoformat(x)
        if x.tzinfo is None:
            x = x.replace(tzinfo=_dt.timezone.utc)
        return x.astimezone(_dt.timezone.utc).isoformat()
    return {"start": iso(start), "end": iso(end)}


@dataclass(frozen=True)
class BatchFacts:
    """What the ledger says of one batch (the inputs of ``batch_state``)."""

    planned: bool
    abandoned: bool
    prepared: bool
    staged: bool  # an attempt with a stage summary and not aborted
    rewound: bool


def batch_state(facts: BatchFacts, held: int, batch_id: int) -> BatchState | None:
    """The state of a batch, given the lowest batch id every table holds (``held``)."""
    if not facts.planned:
        return None
    if facts.abandoned:
        return "ABANDONED"
    if held >= batch_id:
        return "REWOUND" if facts.rewound else "COMMITTED"
    if facts.prepared:
        return "PREPARED"
    return "STAGED" if facts.staged else "PLANNED"


def prev_live(batch_id: int, is_abandoned: Callable[[int], bool]) -> int:
    """The batch the tables must hold before ``batch_id`` commits: the newest earlier batch that
    was not ABANDONED (0 when none)."""
    b = batch_id - 1
    while b > 0 and is_abandoned(b):
        b -= 1
    return b


def undecided(latest: int, versions: dict[str, int], latest_abandoned: bool) -> bool:
    """Is the newest batch still to be decided (planned, not in every table, not abandoned)?
    Batches are decided in order, so this says whether any batch is."""
    return bool(latest) and min(versions.values()) < latest and not latest_abandoned


def undecided_ids(latest: int, versions: dict[str, int], is_abandoned: Callable[[int], bool]) -> list[int]:
    """The batches still to be decided, oldest first: those after the batch every table holds,
    up to the newest, that are not ABANDONED. One run planned them (a run plans only when every
    batch is decided), and they commit in this order."""
    return [b for b in range(min(versions.values()) + 1, latest + 1) if not is_abandoned(b)]


def need_held(latest: BatchPlan | None, is_abandoned: Callable[[int], bool]) -> int:
    """The batch every table must hold at least, given the newest plan: the live batch before the
    first batch of its run (the tables held it when that run planned; 0 without plans)."""
    return prev_live(latest.first_of_run, is_abandoned) if latest is not None else 0


def check_consistent(app_id: str, tables: dict[str, str], ledger_uri: str, latest: int, need: int,
                     versions: dict[str, int]) -> None:
    """Ledger and tables agree: no table is ahead of the ledger, none behind the batch the
    tables held when the newest run planned (``need``, from ``need_held``). LedgerMismatch says
    which repair applies."""
    for p, v in versions.items():
        if v > latest:
            raise LedgerMismatch(
                f"{p} table {tables[p]} holds batch {v} of {app_id!r} but the ledger ({ledger_uri}) only "
                f"knows batches up to {latest}. The ledger was lost or belongs to another table. Repair: "
                f"restore the ledger folder (_eo_ledger/), or restore the table to a version before that "
                f"batch. Nothing was published.")
        if v < need:
            raise LedgerMismatch(
                f"gap: the ledger planned batch {latest} but the {p} table {tables[p]} holds only up to "
                f"batch {v}; batches {ranges(range(v + 1, need + 1))} are missing from the table (was it restored or "
                f"rewritten?). Repair: `make reset-batch PIPELINE={app_id} BATCH={v + 1}` so those ranges "
                f"are planned and published again. Nothing was published.")


def read_so_far(plans: Sequence[BatchPlan], rewinds: Sequence[RewindRecord], is_abandoned: Callable[[int], bool],
                start_marker: Callable[[BatchPlan], BatchPlan | None]) -> list[BatchPlan]:
    """The plans whose ranges count as read, in order: all but REWOUND (and ABANDONED) ones.

    Right after the newest rewind to K, the last of them is a marker of K's start (an empty range
    at K's first positions, from ``start_marker``; None for a source without positions), so a
    position-based source (Kafka) restarts exactly where K started, even when K was the first
    batch or started after a loss it accepted. Once the batch after the rewind is planned, its
    range carries on.
    """
    gone = {b for r in rewinds for b in range(r.to_batch, r.after_batch + 1)}
    kept = [p for p in plans if p.batch_id not in gone and not is_abandoned(p.batch_id)]
    if rewinds:
        last = max(rewinds, key=lambda r: (r.after_batch, -r.to_batch))
        k = next((p for p in plans if p.batch_id == last.to_batch), None)
        marker = start_marker(k) if k is not None else None
        if marker is not None and not any(p.batch_id > last.after_batch for p in kept):
            kept = [p for p in kept if p.batch_id < last.to_batch] + [marker]
    return kept


def start_marker(k: BatchPlan, rng: JSON | None) -> BatchPlan | None:
    """Batch ``k``'s plan with ``rng`` as its range: its source kind's empty range at ``k``'s
    first positions (``SourceKind.start_marker``); None for a kind without positions."""
    if rng is None:
        return None
    return BatchPlan(pipeline=k.pipeline, batch_id=k.batch_id, source_kind=k.source_kind, range=rng, rows_in=0,
                     config_fingerprint=k.config_fingerprint, planned_at=k.planned_at)


def lookback(cron: str, n: int, first_start_ms: int | None, start: str | _dt.datetime) -> list[tuple[int, int]]:
    """Interval mode: the ``n`` intervals of ``cron`` before ``start`` checked for late files,
    newest first, none before the first interval this ledger planned (``first_start_ms``: a
    pipeline is not answerable for what landed before it started)."""
    if not n or first_start_ms is None:
        return []
    ticks = croniter(cron, _dt.datetime.fromtimestamp(ms(start) / 1000, _dt.timezone.utc))
    out: list[tuple[int, int]] = []
    end = ms(start)
    for _ in range(n):
        lo = int(ticks.get_prev(_dt.datetime).timestamp() * 1000)
        if lo < first_start_ms:
            break
        out.append((lo, end))
        end = lo
    return out


def published_slices(live_plans: Iterable[BatchPlan], held: int) -> dict[str, set[PublishedFile]]:
    """Interval mode: slice name -> {(path, size, mtime)} its newest committed live batch
    published (what a late file is judged against); ``held``: the batch every table holds."""
    out: dict[str, set[PublishedFile]] = {}
    for plan in sorted(live_plans, key=lambda p: -p.batch_id):
        if plan.batch_id > held:
            continue
        for name, files in plan.slices().items():
            out.setdefault(name, {(f["path"], f["size"], f["mtime_ms"]) for f in files})
    return out


def last_interval_before(live_plans: Iterable[BatchPlan], start: str | _dt.datetime) -> BatchPlan | None:
    """Interval mode: the newest live batch of the latest interval that ends at or before
    ``start``: where this interval's records begin, as the ledger recorded it."""
    earlier = [(ms(p.interval["end"]), p) for p in live_plans if p.interval and ms(p.interval["end"]) <= ms(start)]
    newest = max(earlier, key=lambda e: (e[0], e[1].batch_id), default=None)
    return newest[1] if newest is not None else None


def replaced_files(plan: BatchPlan, committed: Iterable[tuple[BatchPlan, PreparedBatch]],
                   current: Callable[[int, str, str, set[str]], set[str]] | None = None,
                   ) -> dict[str, dict[str, set[str]]]:
    """Interval mode: slice name -> participant -> the table paths ``plan``'s commit removes to
    replace that slice: the files the newest batch of ``committed`` (committed live batches
    before ``plan``, with their PREPARED records) that published the slice staged for it. Those
    are its files under the slice's folder, or all its files when it published that slice
    alone (a Kafka range, a batch staged before slices existed). Named one by one, never
    matched by a path pattern: a file another writer rewrote is missing, not silently kept.
    ``current(batch, participant, slice, published)``: the files that hold that slice now, when
    a compaction of the slice alone rewrote them (``compaction.current_slice_files``)."""
    out: dict[str, dict[str, set[str]]] = {}
    wanted = set(plan.slices())
    for held, prepared in sorted(committed, key=lambda c: -c[0].batch_id):
        if held.batch_id >= plan.batch_id:
            continue
        own = set(held.slices())
        for name in sorted((wanted & own) - out.keys()):
            out[name] = {part: {f.path for f in files if len(own) == 1 or slice_of(f.path) == name}
                         for part, files in prepared.adds.items()}
            if current is not None:
                out[name] = {part: current(held.batch_id, part, name, paths) for part, paths in out[name].items()}
    return out


def ranges(ids: Iterable[int]) -> str:
    """[1, 2, 3, 5] -> '1..3, 5'."""
    out, s = [], sorted(ids)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}..{s[j]}")
        i = j + 1
    return ", ".join(out)
