"""Spark DDL record schemas (``schema:`` of a pipeline YAML) parsed without Spark: the columns,
their types checked against what the stage job supports (pure Python)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

SIMPLE_TYPES = {
    "STRING", "VARCHAR", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "TINYINT",
    "BYTE", "DOUBLE", "FLOAT", "REAL", "BOOLEAN", "DATE", "TIMESTAMP", "BINARY",
}
PARTITION_TYPES = {"STRING", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "DATE", "BOOLEAN"}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # upper-cased Spark SQL type text, e.g. DOUBLE, DECIMAL(10,2), ARRAY<STRING>
    not_null: bool = False


def _split_top(s: str, sep: str = ",") -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    quote: str | None = None
    for ch in s:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"`":
            quote = ch
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _check_type(t: str) -> bool:
    t = t.strip().upper()
    if t in SIMPLE_TYPES:
        return True
    if re.fullmatch(r"DECIMAL\s*\(\s*\d+\s*(,\s*\d+\s*)?\)", t) or t == "DECIMAL":
        return True
    m = re.fullmatch(r"(ARRAY|MAP|STRUCT)\s*<(.*)>", t, re.S)
    if not m:
        return False
    kind, inner = m.group(1), m.group(2)
    if kind == "ARRAY":
        return _check_type(inner)
    if kind == "MAP":
        kv = _split_top(inner)
        return len(kv) == 2 and all(_check_type(x) for x in kv)
    for f in _split_top(inner):
        fm = re.fullmatch(r"`?([A-Za-z_][A-Za-z0-9_]*)`?\s*:?\s*(.+)", f, re.S)
        if not fm or not _check_type(fm.group(2)):
            return False
    return True


def parse_schema(ddl: str, file: str = "<schema>", key: str = "schema") -> tuple[Column, ...]:
    """Parse a Spark DDL record schema ("a STRING, b DOUBLE NOT NULL") without Spark."""
    if not isinstance(ddl, str) or not ddl.strip():
        raise ConfigError(file, key, "must be a non-empty Spark DDL string such as 'id STRING, amount DOUBLE'")
    cols: list[Column] = []
    for part in _split_top(ddl):
        m = re.fullmatch(r"`?([A-Za-z_][A-Za-z0-9_]*)`?\s+(.+?)(\s+NOT\s+NULL)?(\s+COMMENT\s+'[^']*')?",
                         part, re.S | re.I)
        if not m:
            raise ConfigError(file, key, f"cannot parse column definition {part!r} (expected 'name TYPE')")
        name, typ, nn = m.group(1), re.sub(r"\s+", " ", m.group(2).strip()).upper(), bool(m.group(3))
        if not _check_type(typ):
            raise ConfigError(file, key, f"column {name!r}: unknown or unsupported type {m.group(2).strip()!r}")
        if name.lower() in {c.name.lower() for c in cols}:
            raise ConfigError(file, key, f"column {name!r} is declared twice")
        if name.startswith("_"):
            raise ConfigError(file, key, f"column {name!r}: names starting with '_' are reserved")
        cols.append(Column(name, typ, nn))
    return tuple(cols)


# How long a file's partition folders may be (eobatch.core.formats.partition_path writes them):
# a folder name is at most 255 bytes on local filesystems, an S3 key at most 1024 bytes.
PARTITION_SEGMENT_MAX_BYTES = 200  # one "<column>=<escaped value>" folder
PARTITION_PATH_MAX_BYTES = 512  # all partition folders of one file, with their "/"
PARTITION_DIGEST_BYTES = 34  # "~h" and 32 hex digits: what a shortened folder keeps of its value at least


def partition_min_bytes(columns) -> int:
    """The fewest bytes the partition folders of ``columns`` can take (each value shortened to its
    digest): more than PARTITION_PATH_MAX_BYTES and no file of the table has a path (refused at load)."""
    cols = list(columns)
    return sum(len(c.encode()) + 1 + PARTITION_DIGEST_BYTES for c in cols) + max(0, len(cols) - 1)
