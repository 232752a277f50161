"""Forge a real Parquet file's footer: its row count (``FileMetaData.num_rows``) and those of its
row groups, re-encoded in Thrift's compact protocol (the footer's encoding). The file is written
by pyarrow first; only the footer changes (and its length, in the file's last 8 bytes)."""

from __future__ import annotations

import struct
from pathlib import Path

STRUCT, LIST, SET, MAP, BINARY, DOUBLE, TRUE, FALSE = 12, 9, 10, 11, 8, 7, 1, 2


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = out = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return out, i


def _put_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _unzig(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _zig(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _read(buf: bytes, i: int, t: int):
    if t in (TRUE, FALSE):  # a bool inside a list: one byte
        return buf[i] == TRUE, i + 1
    if t == 3:
        return buf[i], i + 1
    if t in (4, 5, 6):
        n, i = _varint(buf, i)
        return _unzig(n), i
    if t == DOUBLE:
        return buf[i:i + 8], i + 8
    if t == BINARY:
        n, i = _varint(buf, i)
        return buf[i:i + n], i + n
    if t in (LIST, SET):
        h = buf[i]
        i += 1
        size, et = h >> 4, h & 0x0F
        if size == 15:
            size, i = _varint(buf, i)
        items = []
        for _ in range(size):
            v, i = _read(buf, i, et)
            items.append(v)
        return (et, items), i
    if t == MAP:
        size, i = _varint(buf, i)
        if not size:
            return (0, 0, []), i
        kv = buf[i]
        i += 1
        pairs = []
        for _ in range(size):
            k, i = _read(buf, i, kv >> 4)
            v, i = _read(buf, i, kv & 0x0F)
            pairs.append((k, v))
        return (kv >> 4, kv & 0x0F, pairs), i
    if t == STRUCT:
        fields: list[list] = []
        fid = 0
        while True:
            h = buf[i]
            i += 1
            if h == 0:
                return fields, i
            delta, ft = h >> 4, h & 0x0F
            if delta:
                fid += delta
            else:
                n, i = _varint(buf, i)
                fid = _unzig(n)
            if ft in (TRUE, FALSE):
                fields.append([fid, ft, ft == TRUE])
                continue
            v, i = _read(buf, i, ft)
            fields.append([fid, ft, v])
    raise ValueError(f"unknown compact type {t}")


def _write(t: int, v) -> bytes:
    if t in (TRUE, FALSE):
        return bytes([TRUE if v else FALSE])
    if t == 3:
        return bytes([v])
    if t in (4, 5, 6):
        return _put_varint(_zig(v) & ((1 << 64) - 1))
    if t == DOUBLE:
        return bytes(v)
    if t == BINARY:
        return _put_varint(len(v)) + bytes(v)
    if t in (LIST, SET):
        et, items = v
        head = bytes([(len(items) << 4) | et]) if len(items) < 15 else bytes([0xF0 | et]) + _put_varint(len(items))
        return head + b"".join(_write(et, x) for x in items)
    if t == MAP:
        kt, vt, pairs = v
        if not pairs:
            return b"\x00"
        return _put_varint(len(pairs)) + bytes([(kt << 4) | vt]) + b"".join(_write(kt, k) + _write(vt, x)
                                                                             for k, x in pairs)
    out, last = bytearray(), 0
    for fid, ft, fv in v:
        wt = (TRUE if fv else FALSE) if ft in (TRUE, FALSE) else ft
        out += bytes([((fid - last) << 4) | wt]) if 0 < fid - last <= 15 else bytes([wt]) + _put_varint(_zig(fid))
        last = fid
        if ft not in (TRUE, FALSE):
            out += _write(ft, fv)
    return bytes(out + b"\x00")


def _field(fields: list, fid: int) -> list:
    return next(f for f in fields if f[0] == fid)


def forge_rows(path: Path, num_rows: int, row_groups: list[int] | None = None) -> None:
    """Set the footer's ``num_rows`` (and, given, each row group's) of the Parquet file ``path``."""
    data = Path(path).read_bytes()
    assert data[-4:] == b"PAR1"
    n = struct.unpack("<I", data[-8:-4])[0]
    footer = data[-8 - n:-8]
    meta, end = _read(footer, 0, STRUCT)
    assert end == len(footer) and _write(STRUCT, meta) == footer, "the footer does not re-encode to itself"
    _field(meta, 3)[2] = num_rows  # FileMetaData.num_rows
    for rg, rows in zip(_field(meta, 4)[2][1], row_groups or []):
        _field(rg, 3)[2] = rows  # RowGroup.num_rows
    new = _write(STRUCT, meta)
    Path(path).write_bytes(data[:-8 - n] + new + struct.pack("<I", len(new)) + b"PAR1")
