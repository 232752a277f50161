"""``sink.mode: merge``: the ``sink.merge`` keys (``MergeConfig``), parsed and checked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...config import PENDING, TABLE, ConfigError, refuse_unknown, require
from ..base import SinkConfig, SinkContext


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
KEYS = frozenset({"merge"})  # under sink:
MERGE_KEYS = {"keys", "sequence_by", "delete_when", "accumulate"}  # under sink.merge:
ACCUMULATE_FUNCTIONS = ("sum", "min", "max")
MERGE_KEY_TYPES = {"STRING", "VARCHAR", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "TINYINT",
                   "BYTE", "DATE", "TIMESTAMP", "BOOLEAN"}
SEQUENCE_TYPES = {"INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "TINYINT", "BYTE", "DATE",
                  "TIMESTAMP", "STRING", "VARCHAR", "DOUBLE", "FLOAT", "REAL"}


def parse(section: dict, ctx: SinkContext) -> MergeConfig:
    """``sink.merge`` of ``sink.mode: merge``. The key and sequence columns are
    columns of the transform's output: with ``passthrough`` (the schema's columns) they must be
    declared NOT NULL, so records without them are quarantined; with another transform the stage
    job and verify check them (a null key or sequence fails the attempt)."""
    file, transform, columns = ctx.file, ctx.transform, ctx.columns
    m = section.get("merge")
    if not isinstance(m, dict):
        raise ConfigError(file, "sink.merge", "sink.mode: merge needs a mapping {keys: [...], sequence_by: "
                          "<column>, delete_when: <optional SQL>} (an upsert), or {keys: [...], accumulate: "
                          "{<column>: sum|min|max, ...}} (running aggregates), e.g. {keys: [order_id], "
                          "sequence_by: updated_at}")
    refuse_unknown(m, MERGE_KEYS, file, "sink.merge.")
    keys = require(m, "keys", file, "sink.merge.")
    if isinstance(keys, str):
        keys = [keys]
    if (not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys)
            or len(set(keys)) != len(keys)):
        raise ConfigError(file, "sink.merge.keys", f"must be a non-empty list of distinct column names, got {keys!r}")
    if ("sequence_by" in m) == ("accumulate" in m):
        raise ConfigError(file, "sink.merge", "needs either sequence_by (an upsert: the latest record of each key) "
                          "or accumulate (running aggregates of each key), not both")
    checked: list[tuple[str, list[str], set[str]]] = [("sink.merge.keys", keys, MERGE_KEY_TYPES)]
    seq, delete_when, accumulate = None, None, []
    if "sequence_by" in m:
        seq, delete_when = _parse_upsert(m, keys, file)
        checked.append(("sink.merge.sequence_by", [seq], SEQUENCE_TYPES))
    else:
        accumulate = _parse_accumulate(m, keys, file)
    if any(c.startswith("_") for c in [*keys, *([seq] if seq else []), *(c for c, _ in accumulate)]):
        raise ConfigError(file, "sink.merge", "key, sequence and aggregate columns are published columns: their "
                          "names cannot start with '_'")
    if transform == "passthrough":
        _check_merge_columns(checked, accumulate, columns, file)
    return MergeConfig(keys=tuple(keys), sequence_by=seq,
                       delete_when=delete_when.strip() if delete_when is not None else None,
                       accumulate=tuple(accumulate))


def _parse_upsert(m: dict, keys: list[str], file: str) -> tuple[str, str | None]:
    """(sequence column, delete_when or None) of an upsert's ``sink.merge``."""
    seq = m["sequence_by"]
    if not isinstance(seq, str) or not seq:
        raise ConfigError(file, "sink.merge.sequence_by", f"must be a column name, got {seq!r}")
    if seq in keys:
        raise ConfigError(file, "sink.merge.sequence_by", f"{seq!r} is a key column; it must be another column "
                          f"(the version of a key's record: a number, date or timestamp that grows)")
    delete_when = m.get("delete_when")
    if delete_when is not None and (not isinstance(delete_when, str) or not delete_when.strip() or ";" in delete_when):
        raise ConfigError(file, "sink.merge.delete_when", f"must be one Spark SQL boolean expression over the "
                          f"published columns, e.g. \"op = 'd'\", got {delete_when!r}")
    return seq, delete_when


def _parse_accumulate(m: dict, keys: list[str], file: str) -> list[tuple[str, str]]:
    """(column, function) pairs of a running-aggregates ``sink.merge.accumulate``."""
    acc = m["accumulate"]
    if not isinstance(acc, dict) or not acc:
        raise ConfigError(file, "sink.merge.accumulate", f"must be a mapping {{<column>: sum|min|max}}, got {acc!r}")
    for col, fn in acc.items():
        if fn not in ACCUMULATE_FUNCTIONS:
            raise ConfigError(file, f"sink.merge.accumulate.{col}", f"{fn!r} must be one of "
                              f"{', '.join(ACCUMULATE_FUNCTIONS)}")
        if col in keys:
            raise ConfigError(file, f"sink.merge.accumulate.{col}", "is a key column")
    if "delete_when" in m:
        raise ConfigError(file, "sink.merge.delete_when", "is for an upsert (sequence_by): running aggregates "
                          "are never deleted")
    return [(str(c), str(f)) for c, f in acc.items()]


NUMERIC_TYPES = {"INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "TINYINT", "BYTE", "DOUBLE", "FLOAT",
                 "REAL"}


def _check_merge_columns(checked: list[tuple[str, list[str], set[str]]], accumulate: list[tuple[str, str]],
                         columns: tuple, file: str) -> None:
    """With ``passthrough`` the published columns are the schema's: keys and sequence are NOT NULL
    columns of a fitting type (a record without them is quarantined, since it cannot be merged);
    and a transform-less pipeline accumulates only the schema's columns."""
    cols = {c.name: c for c in columns}
    for key, names, types in checked:
        for n in names:
            c = cols.get(n)
            if c is None:
                raise ConfigError(file, key, f"{n!r} is not a column of the schema")
            if c.type not in types:
                raise ConfigError(file, key, f"{n!r} has type {c.type}; it must be one of {sorted(types)}")
            if not c.not_null:
                raise ConfigError(file, key, f"{n!r} must be declared NOT NULL in the schema (e.g. "
                                  f"'{n} {c.type} NOT NULL'): a record without it is then quarantined, "
                                  f"since it cannot be merged")
    for n, fn in accumulate:
        c = cols.get(n)
        if c is None:
            raise ConfigError(file, f"sink.merge.accumulate.{n}", f"{n!r} is not a column of the schema")
        if c.type not in (NUMERIC_TYPES if fn == "sum" else NUMERIC_TYPES | SEQUENCE_TYPES):
            raise ConfigError(file, f"sink.merge.accumulate.{n}", f"{n!r} has type {c.type}: {fn} needs a "
                              f"{'number' if fn == 'sum' else 'number, date, timestamp or string'}")
    keys = {n for _, names, _ in checked[:1] for n in names}
    rest = [c.name for c in columns if c.name not in keys and c.name not in dict(accumulate)]
    if accumulate and rest:
        raise ConfigError(file, "sink.merge.accumulate", f"every published column that is not a key needs an "
                          f"aggregate; {', '.join(rest)} have none")
