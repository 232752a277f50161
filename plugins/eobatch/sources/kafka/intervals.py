"""Interval mode of the Kafka kind: a record belongs to the interval its own timestamp falls in.

Why not Kafka's offsets-for-times: that index answers "the first offset whose timestamp is at
least t", which cuts a partition into intervals only when timestamps grow with offsets. They do
not with CreateTime from a backfilling producer, several producers, retries, and a
transaction's commit marker carries the broker's time, later than its records': the index then
gives the same offset for several interval ends, and records are published by the wrong
interval or by none. So no offset here is derived from a time index:

* **scan**: per partition, the offsets never scanned before, ``[cursor, last stable offset)``;
  the cursor is where the previous live batch's scan ended (a pipeline's first batch starts at
  the earliest or latest offset). The plan reads their timestamps (a ``read_committed``
  consumer; values are discarded) and groups them by the schedule's intervals. Every offset is
  scanned by exactly one live batch.
* **slices**: the intervals the batch publishes, each one whole: per partition a covering range
  ``[lo, hi)`` holding every record of that interval scanned so far, and how many there are. The
  stage job reads the hull of those ranges and keeps, for each slice, the records of its ranges
  whose timestamp falls in its interval (``slice_column``; ``owner`` is the same rule in Python).
  The commit replaces the slice, so a record is published by the newest batch of its interval,
  once. A batch publishes its own interval, every earlier interval its scan or the pending ones
  hold records of (late records: the interval is published again, whole), and every interval
  already published whose records it scanned (late again).
* **pending**: records scanned for intervals not published yet (later intervals, or intervals
  before the pipeline's first), carried from plan to plan until their own run (or a run after
  them) publishes them.
* **open transactions**: the scan ends at the last stable offset. While a partition's first
  open transaction holds a record whose timestamp is before the interval's end, the plan waits
  (``IntervalNotSettled``: the sensor reschedules); ``source.open_transaction_wait_seconds``
  after the interval's end (and ``settle_seconds``) it fails naming the partition and the
  transaction's first offset. Records of a transaction opened later are late records, published
  by a later run.

A record without a timestamp counts as the epoch's (1970-01-01); timestamps are clamped to
[epoch, 9999-12-31] here and in the stage job alike.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any, NoReturn

from ...core.formats import slice_name
from ...errors import IntervalNotSettled, ProtocolError, TerminalError
from ..base import IntervalTooLarge
from .offsets import DataLossError, judge_loss, partition_offsets, start_offsets
from .read import read_range

MAX_TS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def clamp(ts: int | None) -> int:
    return 0 if ts is None or ts < 0 else min(ts, MAX_TS)


class Schedule:
    """The intervals of a cron schedule (consecutive ticks), asked by timestamp."""

    def __init__(self, cron: str):
        self.cron = cron
        self._last: tuple[int, int] = (1, 0)

    def interval(self, ts: int) -> tuple[int, int]:
        """[start, end) in epoch ms of the interval holding ``ts``."""
        lo, hi = self._last
        if lo <= ts < hi:
            return self._last
        # croniter: not needed by the Spark job, which loads this module
        from croniter import croniter

        utc = _dt.timezone.utc
        prev = croniter(self.cron, _dt.datetime.fromtimestamp((ts + 1) / 1000, utc)).get_prev(_dt.datetime)
        nxt = croniter(self.cron, prev).get_next(_dt.datetime)
        self._last = (int(prev.timestamp() * 1000), int(nxt.timestamp() * 1000))
        return self._last


# -- a slice's covering ranges -----------------------------------------------------------------------
def cover(start: int, end: int) -> dict:
    return {"start": start, "end": end, "records": 0, "partitions": {}}


def add(c: dict, part: str, offset: int) -> None:
    lo_hi = c["partitions"].get(part)
    c["partitions"][part] = [offset, offset + 1] if lo_hi is None else [min(lo_hi[0], offset),
                                                                        max(lo_hi[1], offset + 1)]
    c["records"] += 1


def merged(*covers: dict | None) -> dict | None:
    """The union of covers of one interval (None when all are None)."""
    out: dict | None = None
    for c in covers:
        if c is None:
            continue
        if out is None:
            out = {**c, "partitions": {p: list(r) for p, r in c["partitions"].items()}}
            continue
        for p, (lo, hi) in c["partitions"].items():
            old = out["partitions"].get(p)
            out["partitions"][p] = [lo, hi] if old is None else [min(old[0], lo), max(old[1], hi)]
        out["records"] = None if out["records"] is None or c["records"] is None else out["records"] + c["records"]
    return out


# -- the stage job's rule, in Python and in Spark ------------------------------------------------------
def owner(rng: dict, partition: int, offset: int, ts: int | None) -> str | None:
    """The slice of ``rng`` that publishes the record at ``partition``/``offset`` with timestamp
    ``ts``, or None (read as part of the hull, published by another interval's batch)."""
    t = clamp(ts)
    for name, c in rng.get("slices", {}).items():
        lo_hi = c["partitions"].get(str(partition))
        if lo_hi and lo_hi[0] <= offset < lo_hi[1] and c["start"] <= t < c["end"]:
            return name
    return None


def slice_column(rng: dict):
    """``owner`` as a Spark column over the read's ``_kafka_partition``, ``_kafka_offset`` and
    ``_kafka_timestamp`` (null where no slice of this batch publishes the record)."""
    # pyspark: the Spark job only (the Airflow side imports this module)
    from pyspark.sql import functions as F

    ts = F.least(F.greatest(F.coalesce(F.unix_millis(F.col("_kafka_timestamp")), F.lit(0)), F.lit(0)),
                 F.lit(MAX_TS))
    out = None
    for name, c in sorted(rng.get("slices", {}).items()):
        for p, (lo, hi) in sorted(c["partitions"].items()):
            cond = ((F.col("_kafka_partition") == int(p)) & (F.col("_kafka_offset") >= lo)
                    & (F.col("_kafka_offset") < hi) & (ts >= c["start"]) & (ts < c["end"]))
            out = F.when(cond, F.lit(name)) if out is None else out.when(cond, F.lit(name))
    return F.lit(None).cast("string") if out is None else out


# -- the broker's answers the plan needs (one class, so the model can stand in for a broker) ----------
class Broker:
    """The Kafka topic as the plan reads it: offsets, timestamps of a range, an open transaction's
    first record."""

    def __init__(self, client: dict, topic: str, isolation_level: str, timeout: float):
        self.client, self.topic, self.iso, self.timeout = client, topic, isolation_level, timeout

    def offsets(self, isolation_level: str | None = None) -> dict[int, tuple[int, int]]:
        return partition_offsets(self.client, self.topic, isolation_level or self.iso)

    def timestamps(self, partition: int, start: int, end: int, isolation_level: str | None = None):
        """(offset, timestamp or None) of each record of [start, end) a consumer of that
        isolation level reads."""
        for cols in read_range(self.client, self.topic, partition, start, end, isolation_level or self.iso,
                               timeout=self.timeout):
            yield from zip(cols.offsets, cols.timestamps)


# -- the plan --------------------------------------------------------------------------------------
def plan_interval(src, broker: Broker, cron: str, start_ms: int, end_ms: int, limit: int, previous,
                  holder: Callable[[str], Any], first_start_ms: int | None,
                  now_ms: int) -> tuple[dict | None, int | None, list[str]]:
    """The range of the run of interval [start_ms, end_ms) (see the module docstring).
    ``previous``: the newest live plan of the pipeline (None for its first batch); ``holder(name)``:
    the newest committed live plan that published slice ``name`` (None if none)."""
    topic = broker.topic
    sched = Schedule(cron)
    if sched.interval(start_ms) != (start_ms, end_ms):
        raise ProtocolError(f"interval [{start_ms}, {end_ms}) is not one interval of the schedule {cron!r}")
    prev = previous.range if previous is not None else None
    if prev is not None and prev.get("topic") != topic:
        raise DataLossError(f"the last batch read topic {prev.get('topic')!r}, the pipeline now names "
                            f"{topic!r}; changing the topic of a pipeline needs a new pipeline name")
    offsets = broker.offsets()
    # 1. the cursor: where this batch's scan starts (the newest live batch's scan end)
    cursor, lost, notes = start_offsets(src, topic, offsets,
                                        (prev.get("scan") or prev["partitions"]) if prev is not None else None,
                                        "publish what is left")

    # 2. a transaction still open that holds records of this interval (or earlier): wait for it
    if src.isolation_level == "read_committed":
        _wait_for_open_transactions(src, broker, offsets, end_ms, now_ms)

    # 3. the scan: the timestamps of the offsets never read before
    scanned: dict[str, dict] = {}
    for p, (_low, lso) in offsets.items():
        for off, ts in broker.timestamps(p, cursor[p], lso):
            lo, hi = sched.interval(clamp(ts))
            add(scanned.setdefault(slice_name(lo), cover(lo, hi)), str(p), off)

    # 4. what this batch publishes, what stays pending
    pending_before: dict[str, dict] = dict(prev.get("pending", {})) if prev is not None else {}
    first = start_ms if first_start_ms is None else min(first_start_ms, start_ms)
    own = slice_name(start_ms)
    slices: dict[str, dict] = {}
    pending: dict[str, dict] = {}
    for name in sorted(set(scanned) | set(pending_before) | {own}):
        new = merged(pending_before.get(name), scanned.get(name))
        iv_start = (new or {"start": start_ms})["start"]
        held = holder(name) if (name == own or name in scanned) else None
        if held is not None and "slices" not in held.range:
            _refuse_republish(held, name, new)
        before = held.range["slices"].get(name) if held is not None else None
        c = merged(before, new)
        if c is None:
            continue
        if held is not None or (first <= iv_start < end_ms):
            slices[name] = c
            if held is not None and before is not None and new is not None:
                notes.append(f"late records: {new['records']} record(s) of interval {_iso(c['start'])}/"
                             f"{_iso(c['end'])}, published by batch {held.batch_id}, arrived since; the interval "
                             f"is published again, whole, by this batch")
            elif name != own:
                notes.append(f"late records: interval {_iso(c['start'])}/{_iso(c['end'])} ({c['records']} record(s)) "
                             f"had not run or was empty; published by this batch")
        else:
            pending[name] = c
    notes += _kept_back(scanned, pending)

    _judge_retention(src, topic, slices, offsets, notes)  # 5. retention against what must be read again

    scan = {str(p): [cursor[p], offsets[p][1]] for p in sorted(offsets)}
    hull = _hull(slices, offsets)
    counts = [c["records"] for c in slices.values()]
    n = None if None in counts else sum(counts)
    if not slices and not lost and all(a == b for a, b in scan.values()) and pending == pending_before:
        return None, None, notes
    if (n if n is not None else sum(b - a for a, b in hull.values())) > limit:
        raise IntervalTooLarge(f"topic {topic!r}: the batch of interval {_iso(start_ms)}/{_iso(end_ms)} publishes "
                               f"{n} records ({', '.join(sorted(slices))}), more than max_records_per_batch={limit}; "
                               f"an interval is published as one batch: raise the limit (YAML or the run's "
                               f"max_records_per_batch param)")
    rng = {"topic": topic, "isolation_level": src.isolation_level, "partitions": hull, "scan": scan,
           "slices": slices, "pending": pending}
    if lost:
        rng["lost"] = lost
    return rng, n, notes


def _kept_back(scanned: dict[str, dict], pending: dict[str, dict]) -> list[str]:
    """The note of the records scanned for intervals that have not run yet (kept for their runs)."""
    kept_back = sum(scanned[n]["records"] for n in pending if n in scanned)
    return [f"{kept_back} record(s) scanned for intervals that have not run are kept for their runs "
            f"({len(pending)} interval(s) pending)"] if kept_back else []


def _hull(slices: dict[str, dict], offsets: dict[int, tuple[int, int]]) -> dict[str, list[int]]:
    """Per partition, the offsets from the first to the last that ``slices`` publish (an empty
    range at the partition's end when they publish none of it)."""
    hull: dict[str, list[int]] = {}
    for p in sorted(offsets):
        rs = [c["partitions"][str(p)] for c in slices.values() if str(p) in c["partitions"]]
        hull[str(p)] = ([min(r[0] for r in rs), max(r[1] for r in rs)] if rs else [offsets[p][1], offsets[p][1]])
    return hull


def _refuse_republish(held, name: str, new: dict | None) -> NoReturn:
    """Interval ``name`` was published by ``held``, a plan of the planner before intervals were
    assigned by record timestamps: it cannot be published again exactly."""
    if new is None:  # a re-run of an interval published before this planner: as it was then
        raise ProtocolError(
            f"interval {name} was published by batch {held.batch_id}, planned by offsets-for-times (a "
            f"planner before intervals were assigned by record timestamps); it cannot be republished "
            f"exactly: its records stay as published")
    raise ProtocolError(
        f"records of interval {name} arrived after batch {held.batch_id} published it by offsets-for-times "
        f"(a planner before intervals were assigned by record timestamps): it cannot be republished "
        f"exactly. Rewind the pipeline to before that batch (make rewind) to publish it again")


def _judge_retention(src, topic: str, slices: dict[str, dict], offsets: dict[int, tuple[int, int]],
                     notes: list[str]) -> None:
    """Offsets of ``slices`` that retention deleted before they could be read: the source's
    ``on_data_loss`` decides (``judge_loss``); the slice then starts at the low watermark."""
    for name, c in slices.items():
        for p, (lo, hi) in c["partitions"].items():
            low = offsets[int(p)][0]
            if lo < low:
                judge_loss(src, f"data loss: topic {topic!r} partition {p}: offsets [{lo}, {min(hi, low)}) of interval {name} "
                     f"were deleted (retention) before the interval could be published (again) whole",
                           "publish what is left", notes)
                c["partitions"][p] = [low, max(low, hi)]
                c["records"] = None


def _wait_for_open_transactions(src, broker: Broker, offsets: dict[int, tuple[int, int]], end_ms: int,
                                now_ms: int) -> None:
    ends = broker.offsets("read_uncommitted")
    for p, (_low, lso) in sorted(offsets.items()):
        if ends.get(p, (0, lso))[1] <= lso:
            continue  # nothing past the last stable offset: no open transaction
        first = next(iter(broker.timestamps(p, lso, lso + 1, "read_uncommitted")), None)
        ts = first[1] if first is not None else None
        if ts is not None and clamp(ts) >= end_ms:
            continue  # opened after the interval: its records are later ones (or late ones, published later)
        bound = end_ms + 1000 * (src.settle_seconds + src.transaction_wait_seconds)
        what = (f"topic {broker.topic!r} partition {p}: an open transaction from offset {lso} (its first record's "
                f"timestamp {_iso(ts) if ts is not None else 'unknown'}) may hold records of this interval")
        if now_ms > bound:
            raise TerminalError(
                f"topic {broker.topic!r} partition {p}: an open transaction (first offset {lso}) still holds records "
                f"before the interval's end {_iso(end_ms)}, {src.transaction_wait_seconds}s after the interval "
                f"settled (source.open_transaction_wait_seconds); nothing was planned. Have its producer commit or "
                f"abort it (or wait for the broker's transaction.max.timeout.ms to abort it), then run the interval "
                f"again; raise open_transaction_wait_seconds for producers that commit more slowly")
        raise IntervalNotSettled(f"{what}; the plan waits until it is committed or aborted (up to "
                                 f"{_iso(bound)}, source.open_transaction_wait_seconds)")


def _iso(ms: int) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
