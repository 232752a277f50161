"""Independent checks of what a pipeline published: read with delta-rs and the raw _delta_log,
never with the product's own code.
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from typing import Any


def parse_commit(version: int, data: bytes) -> dict:
    """One commit file of a raw _delta_log: {version, commitInfo, adds, removes, txns,
    restated_txns}. ``txns`` are the txn actions of a batch's commit; a maintenance commit (its
    commitInfo says ``eo.maintenance``: an interval-mode slice compaction restates the
    pipeline's txn, unchanged, to exclude a racing batch commit; a compaction carries its own
    ``<pipeline>.compaction`` txn) and a rewind's RESTORE (``eo.rewind``: it carries the rewind's
    own ``<pipeline>.rewind.<L>-<K>`` txn, its durable mark) keep them in ``restated_txns``.

    Actions are separated by "\n" only (the Delta protocol: one JSON object per line). A JSON
    string may hold U+2028, U+2029 or U+0085 unescaped (delta-rs's OPTIMIZE writes statistics of
    such values that way), so ``str.splitlines()``, which also splits there, must not be used."""
    entry: dict[str, Any] = {"version": version, "commitInfo": {}, "adds": [], "removes": [], "txns": []}
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        a = json.loads(line)
        for kind in ("add", "remove", "txn"):
            if kind in a:
                entry[kind + "s"].append(a[kind])
        if "commitInfo" in a:
            entry["commitInfo"] = a["commitInfo"]
    entry["restated_txns"] = []
    if entry["commitInfo"].get("eo.maintenance") or entry["commitInfo"].get("eo.rewind"):
        entry["restated_txns"], entry["txns"] = entry["txns"], []
    return entry


def delta_log_commits(table: Path) -> list[dict]:
    """Every commit of the raw _delta_log, in version order (see ``parse_commit``)."""
    log = Path(table) / "_delta_log"
    return [parse_commit(int(f.stem), f.read_bytes()) for f in sorted(log.glob("*.json")) if f.stem.isdigit()]


def read_rows(table: Path) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(str(table)).to_pyarrow_table().to_pylist()


def txn_version(table: Path, app_id: str) -> int | None:
    from deltalake import DeltaTable

    return DeltaTable(str(table)).transaction_version(app_id)


def live_files(table: Path) -> set[str]:
    """Files referenced by the table's current snapshot, from the raw log (adds minus removes)."""
    live = set()
    for c in delta_log_commits(table):
        for r in c["removes"]:
            live.discard(r["path"])
        for a in c["adds"]:
            live.add(a["path"])
    return live


def orphans(table: Path) -> list[str]:
    """Staged files under eo_batches/ that no commit of the Delta log ever added (a file a later
    commit removed, a compaction's input say, waits for VACUUM: not an orphan)."""
    root = table / "eo_batches"
    if not root.exists():
        return []
    live = ({a["path"] for c in delta_log_commits(table) for a in c["adds"]}
            if (table / "_delta_log").exists() else set())
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), table)
            if rel not in live:
                out.append(rel)
    return sorted(out)


def assert_exactly_once(p, batches: int, key: str = "order_id") -> None:
    """Published = every good record landed, once; quarantined = every bad line, once; txn = batches;
    one commit per batch in each table carrying that batch's offsets; no orphan files."""
    rows = read_rows(p.sink)
    got = collections.Counter(r[key] for r in rows)
    want = collections.Counter(r[key] for r in p.landed)
    dup = {k: v for k, v in got.items() if v > 1}
    assert not dup, f"duplicates published: {list(dup.items())[:5]}"
    assert set(got) == set(want), (f"lost {sorted(set(want) - set(got))[:5]} "
                                   f"unexpected {sorted(set(got) - set(want))[:5]}")
    bad = collections.Counter(r["raw"] for r in read_rows(p.quarantine))
    assert bad == collections.Counter(p.landed_bad), f"quarantine {bad} != landed bad {collections.Counter(p.landed_bad)}"
    for table in (p.sink, p.quarantine):
        assert txn_version(table, p.name) == batches, f"{table}: txn {txn_version(table, p.name)} != {batches}"
        commits = [c for c in delta_log_commits(table) if c["txns"]]
        assert [c["txns"][0]["version"] for c in commits] == list(range(1, batches + 1)), \
            f"{table}: txn versions in the log {[c['txns'] for c in commits]}"
        for c in commits:
            info = c["commitInfo"]
            assert info.get("eo.batchId") == str(c["txns"][0]["version"])
            assert json.loads(info["eo.offsets"]), "commit carries no offsets"
        assert orphans(table) == [], f"orphan files in {table}: {orphans(table)}"
