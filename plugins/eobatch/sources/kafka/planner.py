"""Kafka planner: exact offset ranges per partition, from a real broker.

A batch's range is ``{"topic": t, "partitions": {"<p>": [from, to)}}`` for every partition of
the topic, ``from`` being the previous batch's ``to`` (a partition new to the pipeline starts at
offset 0, i.e. at its first record). ``to`` is at most the partition's end as a
``read_committed`` consumer sees it (the last stable offset), so every transaction inside the
range is decided: committed records are read, aborted ones and transaction markers are not.
The record limit is spread over the partitions in proportion to their backlog.

Records deleted by retention before they were read are data loss: planning fails with an error
naming topic, partition and the missing range, unless the pipeline says
``on_data_loss: accept``; then the plan starts at the first available offset and records the
lost range in its notes and in the range itself (``lost``), so the ledger shows it.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from ..base import BacklogAsk
from . import intervals  # intervals.Broker, looked up at each plan (the topic model stands in for it)
from .client import servers_of, settings
from .offsets import DataLossError, partition_offsets, spread, start_offsets

log = logging.getLogger(__name__)


class KafkaSource:
    kind = "kafka"

    def __init__(self, cfg):
        self.cfg = cfg
        self.src = cfg.source
        self.late: list = []  # late records are told in the plan's notes (intervals.plan_interval)
        self.skipped: list = []  # a topic's records are never left out (lost ones are the range's ``lost``)

    @functools.cached_property
    def client(self) -> dict:
        """The client settings (from the pipeline's connection when it names one), read once."""
        return settings(self.src)

    def describe(self) -> str:
        return self.src.describe()

    def begin_run(self) -> None:
        """``Planner.begin_run``: nothing to read once for a run (each plan asks the source again)."""

    def discovered(self) -> dict | None:
        """``Planner.discovered``: nothing (each plan starts from the newest plan's range)."""
        return None

    def check_readable(self, timeout: float = 10.0) -> str:
        """``Planner.check_readable``: the topic's partitions and offsets, as a plan reads them."""
        offsets = partition_offsets(self.client, self.src.topic, self.src.isolation_level, timeout=timeout)
        held = sum(end - low for low, end in offsets.values())
        return (f"kafka {servers_of(self.client)}: topic {self.src.topic!r}, {len(offsets)} partition(s), "
                f"{held:,} offset(s) held ({self.src.isolation_level})")

    def next_range(self, previous_plans, limit: int) -> tuple[dict | None, int | None, list[str]]:
        topic = self.src.topic
        prev = previous_plans[-1].range if previous_plans else None
        if prev is not None and prev.get("topic") != topic:
            raise DataLossError(f"the last batch read topic {prev.get('topic')!r}, the pipeline now names "
                                f"{topic!r}; changing the topic of a pipeline needs a new pipeline name")
        offsets = partition_offsets(self.client, topic, self.src.isolation_level)
        start, lost, notes = start_offsets(self.src, topic, offsets, prev["partitions"] if prev is not None else None,
                                           "skip the lost records")
        backlog = {p: offsets[p][1] - start[p] for p in offsets}
        if prev is None and self.src.starting_offsets == "latest":
            # The first batch of a pipeline that starts at the latest offsets records where it
            # starts, even when it reads nothing: later batches continue from there.
            notes.append(f"first batch: starting at the latest offsets of topic {topic!r} "
                         f"{ {str(p): high for p, (_low, high) in offsets.items()} }")
            return ({"topic": topic, "isolation_level": self.src.isolation_level,
                     "partitions": {str(p): [start[p], start[p]] for p in sorted(offsets)}}, None, notes)
        if sum(backlog.values()) == 0 and not lost:
            return None, None, notes
        take = spread(limit, backlog)
        rng = {"topic": topic, "isolation_level": self.src.isolation_level,
               "partitions": {str(p): [start[p], start[p] + take[p]] for p in sorted(offsets)}}
        if lost:
            rng["lost"] = lost
        return rng, None, notes

    def backlog(self, previous_plans, unpublished: dict | None, ask: BacklogAsk) -> dict[str, Any]:
        """``Planner.backlog``: per partition, the end offset minus where the newest plan stopped
        (its ``scan`` in interval mode); no age (a record's timestamp is known only by reading it)."""
        src = self.src
        offsets = partition_offsets(self.client, src.topic, src.isolation_level, timeout=ask.timeout)
        prev = previous_plans[-1].range if previous_plans else None
        parts = {}
        for p, (low, high) in sorted(offsets.items()):
            if prev is not None and prev.get("topic") == src.topic:
                start = int((prev.get("scan") or prev.get("partitions", {})).get(str(p), [0, 0])[1])
            else:
                start = low if src.starting_offsets == "earliest" else high
            parts[str(p)] = max(0, high - max(start, low))
        notes = [f"records: end offsets of topic {src.topic!r} minus where the newest plan stopped"]
        pending = (prev or {}).get("pending") or {}
        if pending:  # interval mode: records read already, kept for intervals that have not run
            notes.append(f"{sum(c.get('records') or 0 for c in pending.values())} record(s) read for "
                         f"{len(pending)} interval(s) that have not run yet are waiting for their runs")
        notes.append("age of the oldest unpublished record: not known (a Kafka record's timestamp is only "
                     "known by reading it, which this page does not do)")
        return {"partitions": parts, "records": sum(parts.values()), "notes": notes}

    def interval_range(self, start_ms: int, end_ms: int, limit: int, earlier=None, *, previous=None,
                       holder=None, first_start_ms: int | None = None, cron: str | None = None,
                       now_ms: int | None = None) -> tuple[dict | None, int | None, list[str]]:
        """Interval mode: the records whose own timestamps fall in [start_ms, end_ms), by reading
        them (``intervals``: never from Kafka's time index, which non-monotonic timestamps and
        transaction markers contradict). ``previous``: the newest live plan; ``holder(name)``: the
        newest committed live plan that published interval slice ``name``; ``cron``: the schedule."""
        if cron is None:
            raise ValueError("interval_range of a Kafka source needs the pipeline's schedule (cron)")
        broker = intervals.Broker(self.client, self.src.topic, self.src.isolation_level,
                        float(self.src.consumer_timeout_seconds))
        return intervals.plan_interval(self.src, broker, cron, start_ms, end_ms, limit, previous,
                             holder or (lambda _name: None), first_start_ms,
                             int(time.time() * 1000) if now_ms is None else now_ms)
