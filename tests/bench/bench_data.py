"""Generated landing data of `make bench`: JSON-lines orders, cached under .bench/data.

    order_id STRING, customer STRING, amount DOUBLE, ts TIMESTAMP

One line in 1000 is bad, alternately malformed JSON (a cut-off object) and a wrong type (the
amount as a word). A data set is a folder holding only its ``*.jsonl`` files plus ``_bench.json``
(what was generated, written last: a folder without it is generated again). Spark's file
sources and the product's files source both skip names starting with ``_`` or ``.``, so every
contender can read the folder itself. Files are written under a ``.``-name and renamed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

# Bumped whenever the generated text changes: a cached data set of another version is regenerated.
GENERATOR_VERSION = 1
DDL = "order_id STRING, customer STRING, amount DOUBLE, ts TIMESTAMP"
BAD_EVERY = 1000  # one line in 1000 is bad (0.1 %)
CHUNK = 200_000  # lines formatted and written at once
_GOOD = '{"order_id":"%s-%d","customer":"c%d","amount":%d.%02d,"ts":"2026-01-01T%02d:%02d:%02dZ"}\n'
_MALFORMED = '{"order_id":"%s-%d","customer":"c%d","amount":\n'
_WRONG_TYPE = '{"order_id":"%s-%d","customer":"c%d","amount":"n/a","ts":"2026-01-01T00:00:00Z"}\n'


def files_for(records: int) -> int:
    """Files of a data set: 1 for 1k, 10 for 1M, 20 for 5M; about 250k records a file beyond."""
    return max(1, min(math.ceil(records / 100_000), max(10, math.ceil(records / 250_000))))


def _line(prefix: str, i: int) -> str:
    if i % BAD_EVERY == BAD_EVERY - 1:
        return (_MALFORMED if (i // BAD_EVERY) % 2 == 0 else _WRONG_TYPE) % (prefix, i, i % 997)
    return _GOOD % (prefix, i, i % 997, (i * 7919) % 100_000, i % 100, (i // 3600) % 24, (i // 60) % 60, i % 60)


def _chunks(prefix: str, start: int, stop: int):
    for lo in range(start, stop, CHUNK):
        yield "".join([_line(prefix, i) for i in range(lo, min(stop, lo + CHUNK))]).encode()


def _write(path: Path, prefix: str, start: int, stop: int) -> int:
    tmp = path.parent / f".{path.name}.tmp"
    with open(tmp, "wb") as f:
        for block in _chunks(prefix, start, stop):
            f.write(block)
    os.replace(tmp, path)
    return path.stat().st_size


def _cached(folder: Path, key: dict) -> dict | None:
    try:
        meta = json.loads((folder / "_bench.json").read_text())
    except (OSError, ValueError):
        return None
    if {k: meta.get(k) for k in key} != key:
        return None
    if not all((folder / f).is_file() for f in meta.get("names", [])):
        return None
    return meta


def _fresh(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)


def dataset(cache: Path, records: int) -> dict:
    """The data set of ``records`` lines (bad ones included) in ``files_for(records)`` files:
    {"path", "records", "files", "bytes", "names", "bad"}; generated once, then reused."""
    folder = cache / f"orders-{records}"
    key = {"version": GENERATOR_VERSION, "records": records}
    meta = _cached(folder, key)
    if meta is not None:
        return {**meta, "path": str(folder)}
    _fresh(folder)
    n_files = files_for(records)
    names, size = [], 0
    for f in range(n_files):
        lo, hi = records * f // n_files, records * (f + 1) // n_files
        name = f"part-{f:05d}.jsonl"
        size += _write(folder / name, f"o{records}", lo, hi)
        names.append(name)
    meta = {**key, "files": n_files, "bytes": size, "names": names, "bad": records // BAD_EVERY}
    (folder / "_bench.json").write_text(json.dumps(meta))
    return {**meta, "path": str(folder)}


def backlog(cache: Path, files: int, per_file: int) -> dict:
    """A backlog of ``files`` landing files of ``per_file`` lines each (one batch per file when a
    batch holds ``per_file`` records), as ``dataset`` returns it; generated once, then reused."""
    folder = cache / f"backlog-{files}x{per_file}"
    key = {"version": GENERATOR_VERSION, "files": files, "per_file": per_file}
    meta = _cached(folder, key)
    if meta is not None:
        return {**meta, "path": str(folder)}
    _fresh(folder)
    names, size = [], 0
    for f in range(files):
        name = f"part-{f:05d}.jsonl"
        size += _write(folder / name, f"b{per_file}", f * per_file, (f + 1) * per_file)
        names.append(name)
    meta = {**key, "records": files * per_file, "bytes": size, "names": names, "bad": files * per_file // BAD_EVERY}
    (folder / "_bench.json").write_text(json.dumps(meta))
    return {**meta, "path": str(folder)}


def single_file(cache: Path, gib: float) -> dict:
    """One landing file of at least ``gib`` GiB (same lines as ``dataset``)."""
    want = int(gib * (1 << 30))
    folder = cache / f"single-{gib:g}gib"
    key = {"version": GENERATOR_VERSION, "min_bytes": want}
    meta = _cached(folder, key)
    if meta is not None:
        return {**meta, "path": str(folder)}
    _fresh(folder)
    name = "single.jsonl"
    path, tmp = folder / name, folder / f".{name}.tmp"
    records, size = 0, 0
    with open(tmp, "wb") as f:
        while size < want:
            block = next(_chunks("s", records, records + CHUNK))
            f.write(block)
            size += len(block)
            records += CHUNK
    os.replace(tmp, path)
    meta = {**key, "records": records, "files": 1, "bytes": size, "names": [name],
            "bad": records // BAD_EVERY}
    (folder / "_bench.json").write_text(json.dumps(meta))
    return {**meta, "path": str(folder)}
