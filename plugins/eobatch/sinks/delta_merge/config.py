"""``sink.mode: merge``: what the ``sink.merge`` keys load to (``MergeConfig``; the keys and their
checks: ``section.MergeSection``) and their roles in the configuration contract."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base import PENDING, TABLE, SinkConfig


@dataclass(frozen=True, kw_only=True)
class MergeConfig(SinkConfig):
    """``sink.mode: merge``: one row per ``keys`` in the sink, in one of two ways.

    * **upsert** (``sequence_by``): of the records of one key, the one with the highest
      ``sequence_by`` is its latest version (ties: see ``job``); a record for which
      ``delete_when`` is true deletes its key. A record never replaces or deletes a version of its
      key with a higher or equal ``sequence_by``, in the batch or in the table, nor one that was
      deleted by a higher ``sequence_by`` (``participants.TombstoneParticipant``).
    * **accumulate** (``accumulate``: column -> sum | min | max): the row of a key is a running
      aggregate; each batch folds its rows of the key into it (a sum adds, a min keeps the
      smaller, a max the larger), e.g. the ``running_totals`` transform's per-key partials. In
      interval mode each interval's partials are kept (``interval_partials``) and
      the key's row is their fold, so a re-run of an interval replaces its partials."""
    kind: str = "delta_merge"
    keys: tuple[str, ...]
    sequence_by: str | None = None
    delete_when: str | None = None
    accumulate: tuple[tuple[str, str], ...] = ()
    # the sink table writes the Change Data Feed (delta.enableChangeDataFeed), so that a downstream
    # pipeline (source kind: delta, change_feed: true) reads its updates and deletes; rows unchanged
    change_data_feed: bool = False

    @property
    def upsert(self) -> bool:
        return not self.accumulate

    def interval_partials(self, mode: str) -> bool:
        """Running aggregates in interval mode (pipeline ``mode``): the sink is recomputed from each
        interval's per-key partials (``participants.PartialsParticipant``), so that a re-run
        replaces its interval's."""
        return mode == "interval" and not self.upsert

    def contract(self, mode: str) -> str:
        """One row per key: an upsert's latest version, or running aggregates."""
        if self.upsert:
            return f"merge upsert keys={','.join(self.keys)}"
        return (f"merge accumulate keys={','.join(self.keys)} " + ",".join(f"{c}:{f}" for c, f in self.accumulate)
                + (" from interval partials" if self.interval_partials(mode) else ""))

    def fingerprint_dict(self) -> dict:
        return {"merge": [list(self.keys), self.sequence_by, self.delete_when, [list(a) for a in self.accumulate]]}

    def job(self) -> dict:
        """What the Spark job's step needs (``job.step``)."""
        return {"keys": list(self.keys), "sequence_by": self.sequence_by, "delete_when": self.delete_when,
                "accumulate": [list(a) for a in self.accumulate]}


def _accumulate_value(m: MergeConfig) -> Any:
    return [list(a) for a in m.accumulate]


# config.contract: the roles of the sink.merge keys (a pipeline of another sink records None for them)
CONTRACT: dict[str, tuple[str, Any]] = {
    "sink.merge.keys": (TABLE, lambda m: list(m.keys)),
    # the tombstones table's columns are the keys and the sequence (participants.TombstoneParticipant)
    "sink.merge.sequence_by": (TABLE, lambda m: m.sequence_by),
    "sink.merge.accumulate": (TABLE, _accumulate_value),
    "sink.merge.delete_when": (PENDING, lambda m: m.delete_when),
}
HARMLESS: dict[str, str] = {
    "sink.merge.change_data_feed": "whether the sink's commits also write change data; its rows are the same",
}
