"""The ``sink:`` keys of ``sink.mode: merge`` as a typed model (``sink.merge``: ``MergeSection``;
``MergeConfig`` is what it loads to). Pydantic: imported where YAML is read, never by the Spark job.

The key and sequence columns are columns of the transform's output: with ``passthrough`` (the
schema's columns) they must be declared NOT NULL, so records without them are quarantined; with
another transform the stage job and verify check them (a null key or sequence fails the attempt).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import ValidationInfo, model_validator

from ...config import sql_guard
from ...config.model import Bool, Check, Invalid, Section, required, validate
from ..base import SinkContext
from .config import MergeConfig

ACCUMULATE_FUNCTIONS = ("sum", "min", "max")
MERGE_KEY_TYPES = {"STRING", "VARCHAR", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "TINYINT",
                   "BYTE", "DATE", "TIMESTAMP", "BOOLEAN"}
SEQUENCE_TYPES = {"INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "TINYINT", "BYTE", "DATE",
                  "TIMESTAMP", "STRING", "VARCHAR", "DOUBLE", "FLOAT", "REAL"}
NUMERIC_TYPES = {"INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "TINYINT", "BYTE", "DOUBLE", "FLOAT",
                 "REAL"}


def _keys(v: Any) -> tuple[str, ...]:
    keys = [v] if isinstance(v, str) else v
    if (not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys)
            or len(set(keys)) != len(keys)):
        raise Invalid(f"must be a non-empty list of distinct column names, got {keys!r}")
    return tuple(keys)


def _column(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise Invalid(f"must be a column name, got {v!r}")
    return v


def _delete_when(v: Any) -> str | None:
    if v is not None and (not isinstance(v, str) or not v.strip() or ";" in v):
        raise Invalid(f"must be one Spark SQL boolean expression over the published columns, e.g. \"op = 'd'\", "
                      f"got {v!r}")
    refused = sql_guard.refusal(v or "")
    if refused:  # the stage job refuses it too, on Spark's own parse
        raise Invalid(f"{str(v).strip()!r} {refused}")
    text = re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", v or "")  # its string literals left out
    hidden = sorted(set(re.findall(r"(?<![\w.])`?(_\w+)", text)))
    if hidden:
        raise Invalid(f"names {', '.join(hidden)}: a column whose name starts with '_' (a source's metadata, e.g. "
                      f"the Change Data Feed's _change_type) is never published, and delete_when is evaluated on "
                      f"the published columns. Publish it with the transform (a Delta table's changes: transform: "
                      f"change_rows, with sequence_by: change_seq and delete_when: \"change_type = 'delete'\")")
    return v.strip() if v is not None else None


def _accumulate(v: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(v, dict) or not v:
        raise Invalid(f"must be a mapping {{<column>: sum|min|max}}, got {v!r}")
    for col, fn in v.items():
        if fn not in ACCUMULATE_FUNCTIONS:
            raise Invalid(f"{fn!r} must be one of {', '.join(ACCUMULATE_FUNCTIONS)}", at=str(col))
    return tuple((str(c), str(f)) for c, f in v.items())


class MergeSection(Section):
    """``sink.merge``: ``keys`` and either ``sequence_by`` (with an optional ``delete_when``: an
    upsert) or ``accumulate`` (running aggregates)."""
    NULL = "invalid"
    NOT_A_MAPPING = ("sink.mode: merge needs a mapping {keys: [...], sequence_by: <column>, delete_when: <optional "
                     "SQL>} (an upsert), or {keys: [...], accumulate: {<column>: sum|min|max, ...}} (running "
                     "aggregates), e.g. {keys: [order_id], sequence_by: updated_at}")
    keys: Annotated[Any, Check(required(_keys), {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                                                    "minItems": 1, "uniqueItems": True}]})]
    sequence_by: Annotated[Any, Check(_column, {"type": "string", "description": "an upsert: the version of a key's record"})] = None
    delete_when: Annotated[Any, Check(_delete_when, {"type": "string", "description": "an upsert: a Spark SQL boolean "
                                        "expression; true deletes the key"})] = None
    accumulate: Annotated[Any, Check(_accumulate, {"type": "object", "additionalProperties": {"enum": list(ACCUMULATE_FUNCTIONS)},
                                      "description": "running aggregates: <column>: sum|min|max"})] = ()
    change_data_feed: Bool = False  # the sink table writes the Change Data Feed (for a downstream kind: delta)

    @model_validator(mode="before")
    @classmethod
    def _upsert_or_accumulate(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("sequence_by" in data) == ("accumulate" in data):
            raise Invalid("needs either sequence_by (an upsert: the latest record of each key) or accumulate "
                          "(running aggregates of each key), not both")
        return data

    @model_validator(mode="after")
    def _columns(self, info: ValidationInfo) -> MergeSection:
        if self.sequence_by in self.keys:
            raise Invalid(f"{self.sequence_by!r} is a key column; it must be another column (the version of a key's "
                          f"record: a number, date or timestamp that grows)", at="sequence_by")
        for col, _ in self.accumulate:
            if col in self.keys:
                raise Invalid("is a key column", at=f"accumulate.{col}")
        if self.accumulate and "delete_when" in self.model_fields_set:
            raise Invalid("is for an upsert (sequence_by): running aggregates are never deleted", at="delete_when")
        if any(c.startswith("_") for c in [*self.keys, *([self.sequence_by] if self.sequence_by else []),
                                           *(c for c, _ in self.accumulate)]):
            raise Invalid("key, sequence and aggregate columns are published columns: their names cannot start "
                          "with '_'")
        context = info.context or {}
        if context.get("transform") == "passthrough":
            self._check_columns(context["columns"])
        return self

    def _check_columns(self, columns: tuple) -> None:
        """With ``passthrough`` the published columns are the schema's: keys and sequence are NOT NULL
        columns of a fitting type (a record without them is quarantined, since it cannot be merged);
        and a transform-less pipeline accumulates only the schema's columns."""
        cols = {c.name: c for c in columns}
        checked_columns = [("keys", self.keys, MERGE_KEY_TYPES)]
        if self.sequence_by:
            checked_columns.append(("sequence_by", (self.sequence_by,), SEQUENCE_TYPES))
        for key, names, types in checked_columns:
            for n in names:
                c = cols.get(n)
                if c is None:
                    raise Invalid(f"{n!r} is not a column of the schema", at=key)
                if c.type not in types:
                    raise Invalid(f"{n!r} has type {c.type}; it must be one of {sorted(types)}", at=key)
                if not c.not_null:
                    raise Invalid(f"{n!r} must be declared NOT NULL in the schema (e.g. '{n} {c.type} NOT NULL'): a "
                                  f"record without it is then quarantined, since it cannot be merged", at=key)
        for n, fn in self.accumulate:
            c = cols.get(n)
            if c is None:
                raise Invalid(f"{n!r} is not a column of the schema", at=f"accumulate.{n}")
            if c.type not in (NUMERIC_TYPES if fn == "sum" else NUMERIC_TYPES | SEQUENCE_TYPES):
                raise Invalid(f"{n!r} has type {c.type}: {fn} needs a "
                              f"{'number' if fn == 'sum' else 'number, date, timestamp or string'}", at=f"accumulate.{n}")
        rest = [c.name for c in columns if c.name not in self.keys and c.name not in dict(self.accumulate)]
        if self.accumulate and rest:
            raise Invalid(f"every published column that is not a key needs an aggregate; {', '.join(rest)} have none",
                          at="accumulate")

    def value(self) -> MergeConfig:
        return MergeConfig(keys=self.keys, sequence_by=self.sequence_by, delete_when=self.delete_when,
                           change_data_feed=self.change_data_feed,
                           accumulate=self.accumulate)


class MergeSinkSection(Section):
    """The keys ``sink.mode: merge`` adds under ``sink:`` (the others are every pipeline's)."""
    merge: MergeSection

    @classmethod
    def parse(cls, section: dict, ctx: SinkContext) -> MergeConfig:
        context = {"transform": ctx.transform, "columns": ctx.columns}
        return validate(MergeSection, section.get("merge"), ctx.file, "sink.merge", context).value()


MERGE_KEYS = MergeSection.yaml_keys()  # under sink.merge:
