"""Where every offset of a Kafka range went: one definition for the stage job's reader and verify.

An offset of a planned range ``[from, to)`` is exactly one of:

* ``delivered``: a record the reader received and handed to Spark (published or quarantined);
* ``aborted``: a record of an aborted transaction: a ``read_committed`` consumer does not deliver
  it, a ``read_uncommitted`` view of the same offsets does (the range ends at or before the last
  stable offset, so its transaction is decided; a committed one is delivered to both views);
* ``control``: a transaction marker (commit or abort): delivered to neither view. librdkafka
  skips nothing else without an error: a record it cannot read is reported at its offset, an
  offset deleted by retention is out of range. (On a compacted topic, records the compaction
  removed are gaps of the same kind.)
* ``unreadable``: a record the broker holds but the reader cannot read however often it asks
  (its batch is larger than the consumer's ``receive.message.max.bytes``, or fails its CRC): one
  row per offset with a null value and the reason, which the job quarantines at its position.

So, per partition: ``delivered + aborted + control + unreadable == to - from`` and the rows the
job read of that partition (``records``) are ``delivered + unreadable``. The reader checks each
slice it read before it hands in its account (``Account.problems``); the job records the
accounts per partition in the stage summary (``source_positions``), and verify checks them
against the plan with ``problems`` below. Any offset not accounted for fails.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

CATEGORIES = ("delivered", "aborted", "control", "unreadable")


@dataclass
class Account:
    """The offsets ``[start, end)`` of one partition read by one read task, by category."""

    start: int
    end: int
    delivered: int = 0
    aborted: int = 0
    control: int = 0
    unreadable: int = 0

    def accounted(self) -> int:
        return sum(getattr(self, c) for c in CATEGORIES)

    def problems(self, partition) -> list[str]:
        n = self.end - self.start
        if self.accounted() == n and min(getattr(self, c) for c in CATEGORIES) >= 0:
            return []
        return [f"partition {partition}: offsets [{self.start}, {self.end}) hold {n} offsets, the read accounts for "
                f"{self.accounted()} ({self.describe()})"]

    def describe(self) -> str:
        return ", ".join(f"{getattr(self, c)} {c}" for c in CATEGORIES)

    def to_json(self) -> dict:
        return asdict(self)


def partition_entry(records: int, lo: int | None, hi: int | None, accounts: list[Account], outside: int = 0) -> dict:
    """What the stage summary records of one partition: the rows the job read of it (``records``,
    lowest and highest offset), the reader's accounts of the slices it read and (interval mode)
    the rows read that no interval slice of the batch holds (``outside``: left out, not counted
    in ``records``)."""
    entry: dict = {"records": records, "lo": lo, "hi": hi,
                   "slices": sorted([a.start, a.end] for a in accounts)}
    if outside:
        entry["outside"] = outside
    for c in CATEGORIES:
        entry[c] = sum(getattr(a, c) for a in accounts)
    return entry


def problems(partition: str, planned: tuple[int, int], entry) -> list[str]:
    """Problems of one partition's ``partition_entry`` against its planned ``[from, to)``
    (``entry`` None: the job read nothing of it)."""
    f, t = int(planned[0]), int(planned[1])
    if entry is None:
        return [] if t == f else [f"partition {partition}: offsets [{f}, {t}) were not read (no account of them)"]
    if not isinstance(entry, dict):  # [records, lo, hi]: a stage job from before the accounting
        return [f"partition {partition}: the stage summary has no account of the offsets (staged by an older job); "
                f"the attempt is aborted and the batch staged again"]
    out = [f"partition {partition}: two reads of slice {c} accounted differently: {entry['conflicts'][c]}"
           for c in sorted(entry.get("conflicts") or {})]
    records, lo, hi = entry.get("records", 0), entry.get("lo"), entry.get("hi")
    if records and (lo is None or hi is None or lo < f or hi >= t):
        out.append(f"partition {partition}: read offsets {lo}..{hi}, outside the planned [{f}, {t})")
    at = f
    for s, e in entry.get("slices") or []:
        if s != at:
            out.append(f"partition {partition}: the read slices do not cover the planned [{f}, {t}) once: "
                       f"{entry.get('slices')}")
            break
        at = e
    else:
        if at != t and t > f:
            out.append(f"partition {partition}: the read slices end at {at}, the plan at {t}")
    got = Account(f, t, **{c: int(entry.get(c, 0)) for c in CATEGORIES})
    out += got.problems(partition)
    outside = int(entry.get("outside", 0))
    if records + outside != got.delivered + got.unreadable:
        out.append(f"partition {partition}: {records} records reached the job"
                   f"{f' and {outside} of no interval of the batch' if outside else ''}, the reader delivered "
                   f"{got.delivered} and {got.unreadable} unreadable")
    return out
