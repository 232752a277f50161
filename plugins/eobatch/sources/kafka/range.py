"""The recorded range of the Kafka kind: per partition, the offsets [from, to) of one batch.

Ledger JSON: ``{"topic", "isolation_level", "partitions": {"<p>": [from, to)}, "lost"?}``;
``lost`` (``{"<p>": [from, to)}``) is what ``on_data_loss: accept`` skipped. Interval mode adds
``scan`` (``{"<p>": [from, to)}``: the offsets this batch read first), ``slices`` and ``pending``
(``{"iv=...": {"start", "end", "records", "partitions"}}``), see ``intervals``; ``partitions`` is
then the hull the stage job reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import LedgerMismatch
from ..base import RangeDetail
from . import account

if TYPE_CHECKING:
    from ...core.formats import StageSummary


INTERVAL_KEYS = ("scan", "slices", "pending")


@dataclass(frozen=True)
class KafkaRange:
    topic: str
    partitions: dict[str, tuple[int, int]]
    isolation_level: str | None = None  # None: not recorded (read as read_committed)
    lost: dict[str, tuple[int, int]] | None = None  # None: not recorded; {}: recorded empty
    intervals: dict | None = None  # interval mode: {"scan", "slices", "pending"} as recorded (None: none)

    @classmethod
    def from_json(cls, data: dict) -> KafkaRange:
        def pairs(d):
            return {p: (f, t) for p, (f, t) in d.items()}

        topic = data.get("topic")
        if topic is None:
            raise LedgerMismatch(f"a kafka range without a topic: {sorted(data)}")
        lost = data.get("lost")
        iv = {k: data[k] for k in INTERVAL_KEYS if k in data}
        return cls(topic, pairs(data.get("partitions", {})), data.get("isolation_level"),
                   None if lost is None else pairs(lost), iv or None)

    def to_json(self) -> dict:
        d: dict = {"topic": self.topic, "partitions": {p: [f, t] for p, (f, t) in self.partitions.items()}}
        if self.isolation_level is not None:
            d["isolation_level"] = self.isolation_level
        if self.lost is not None:
            d["lost"] = {p: [f, t] for p, (f, t) in self.lost.items()}
        d.update(self.intervals or {})
        return d

    def summary(self) -> str:
        n = sum(t - f for f, t in self.partitions.values())
        shown = " ".join(f"p{p}[{f},{t})" for p, (f, t) in sorted(self.partitions.items(), key=lambda x: int(x[0]))
                         if t > f)
        lost = f" LOST {self.to_json()['lost']}" if self.lost else ""
        iv = ""
        if self.intervals:
            slices = self.intervals.get("slices", {})
            iv = (f"; slices {' '.join(sorted(slices)) or '-'}"
                  + (f", {len(self.intervals['pending'])} pending" if self.intervals.get("pending") else ""))
        return f"{self.topic}: {n} offsets {shown}{lost}{iv}"

    def commit_offsets(self) -> dict:
        out = self.to_json()
        out.pop("isolation_level", None)
        out.pop("slices", None), out.pop("pending", None)  # in the ledger; the commit carries the offsets
        if not self.lost:
            out.pop("lost", None)
        return out

    def locations(self) -> list[str]:
        return []

    def detail(self) -> RangeDetail:
        return RangeDetail(partitions=tuple((self.topic, p, f, t) for p, (f, t) in
                                            sorted(self.partitions.items(), key=lambda x: int(x[0]))))

    def start_marker(self) -> KafkaRange:
        """An empty range at this range's first offsets: where a rewind to it reads again from."""
        return KafkaRange(self.topic, {p: (f, f) for p, (f, _t) in self.partitions.items()}, self.isolation_level, {})

    def check_stage(self, summary: StageSummary) -> list[str]:
        """Every offset of every planned partition accounted for (``account.problems``: delivered,
        aborted, control or unreadable), the records read inside the range, none of another partition."""
        problems = []
        seen = summary.source_positions or {}
        problems += [f"read partition {p}, which is not in the plan" for p in sorted(set(seen) - set(self.partitions))]
        for p, planned in sorted(self.partitions.items(), key=lambda x: int(x[0])):
            problems += account.problems(p, planned, seen.get(p))
        total = sum(e["records"] if isinstance(e, dict) else e[0] for p, e in seen.items() if p in self.partitions)
        if total != summary.rows_in:
            problems.append(f"records per partition add up to {total}, the job counted {summary.rows_in}")
        return problems

def range_summary(rng: dict) -> str:
    return KafkaRange.from_json(rng).summary()
