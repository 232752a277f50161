"""Arrow schemas of staged files as the ledger records carry them (base64 Arrow IPC: the stage
summary, PREPARED) and as verify and the sinks compare them (``normalize_type``: Arrow's
large/view variants and UTC spellings alike). Pure Python and pyarrow: shared with the Spark job.
"""

from __future__ import annotations

import base64

import pyarrow as pa


def schema_from_b64(s: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(s)))


def schema_to_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def normalize_type(t: pa.DataType) -> str:
    """A type name that treats Arrow's large/view variants and UTC spellings alike."""
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_timestamp(t):
        tz = "UTC" if t.tz in ("UTC", "Etc/UTC", "+00:00", "Z") else t.tz
        return f"timestamp[{t.unit},{tz}]"
    if pa.types.is_large_list(t) or pa.types.is_list(t) or pa.types.is_list_view(t):
        return f"list<{normalize_type(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{normalize_type(f.type)}" for f in t) + ">"
    if pa.types.is_map(t):
        return f"map<{normalize_type(t.key_type)},{normalize_type(t.item_type)}>"
    return str(t)


def schema_signature(schema: pa.Schema, drop: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    return [(f.name, normalize_type(f.type)) for f in schema if f.name not in drop]


__all__ = ["schema_from_b64", "schema_to_b64", "normalize_type", "schema_signature"]
