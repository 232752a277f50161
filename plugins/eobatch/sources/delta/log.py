"""The upstream table's Delta log, read as the delta kind needs it: one version's actions at a time.

A version is one JSON file ``_delta_log/<version, 20 digits>.json`` of actions (the Delta protocol).
What the kind makes of a version (``Commit.change``):

* ``append``: files added with ``dataChange=true`` and none removed with it (a WRITE, an eobatch
  batch of an append sink): its files are read;
* ``none``: no data changed (``dataChange=false`` only: OPTIMIZE, our compaction; metadata,
  a CREATE TABLE without files): nothing to read;
* ``restore``: a RESTORE to an earlier version (an eobatch rewind upstream, ``RESTORE TABLE``):
  the table is then what it was at that version (``effective_versions``);
* ``change``: rows changed or deleted (files removed with ``dataChange=true``: MERGE, DELETE,
  UPDATE, an overwrite, a slice replaced): an append-only reader cannot read it exactly; a reader
  of the Change Data Feed reads its change data files (``cdc`` actions) when it wrote them, and
  otherwise, as the Delta protocol defines such a version's changes ("Change Data Files"), the
  rows of its added files as inserts and those of its removed files as deletes (whole partitions
  deleted, a DELETE without a condition, an overwrite write no change data).

The log is read with the product's storage (local, ``s3a://``), not with a Delta library: what a
version did is in its own file, which no snapshot API hands out. Paths in the log are URIs
relative to the table (percent-encoded) or absolute; ``data_path`` resolves them (decoded, ``..``
and ``.`` resolved, ``s3:``/``s3n:`` as ``s3a:``) and ``within`` says whether one lies under a root:
whoever can append to an upstream's ``_delta_log`` writes these paths (``planner``: a file outside
the table's root is refused unless the platform allows its location, ``ALLOW_LOCATIONS_ENV``).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

from ...errors import TerminalError
from ...storage.fs import Storage, join

LOG_DIR = "_delta_log"
# the platform's locations (comma-separated local folders or s3a://bucket/prefix) whose files a Delta
# source may read although they are outside its table's root (a shallow clone's source table): the
# workers' environment, as EOBATCH_ALLOW_SPARK_CONF; a pipeline's YAML cannot widen it
ALLOW_LOCATIONS_ENV = "EOBATCH_ALLOW_DELTA_LOCATIONS"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):(.*)\Z", re.S)
S3_SCHEMES = ("s3a", "s3", "s3n")


class UndoneRead(TerminalError):
    """An upstream RESTORE undid versions this pipeline has already read and published."""

    def __init__(self, message: str, restore: int, target: int):
        super().__init__(message)
        self.restore, self.target = restore, target


@dataclass(frozen=True)
class DataFile:
    """A file a version adds (or removes, or a change data file) with ``dataChange=true``: its
    absolute path, size (0 when a remove action does not say), partition values."""

    path: str
    size: int
    partition_values: Mapping[str, str | None]
    deletion_vector: bool = False  # some of its rows are deleted by a deletion vector
    log_path: str = ""  # the path as the log spells it (before ``data_path``)


@dataclass(frozen=True)
class Commit:
    version: int
    operation: str
    adds: tuple[DataFile, ...] = ()
    changes: tuple[DataFile, ...] = ()  # its change data files (``cdc``: the Change Data Feed), when it wrote any
    removed_with_data: int = 0  # files removed with dataChange=true (``removes``)
    no_data_change: int = 0  # files added or removed with dataChange=false
    restore_to: int | None = None  # a RESTORE: the version the table is restored to
    metadata: Mapping | None = None  # the version's metaData action, when it has one
    info: Mapping = field(default_factory=dict)  # its commitInfo
    removes: tuple[DataFile, ...] = ()  # the files it removed with dataChange=true

    @property
    def timestamp_ms(self) -> int | None:
        """When it was committed (ms since the epoch): its in-commit timestamp, else its commitInfo's
        timestamp (what change data readers return as ``_commit_timestamp``); None when neither."""
        for key in ("inCommitTimestamp", "timestamp"):
            try:
                return int(self.info[key])
            except (KeyError, TypeError, ValueError):
                continue
        return None

    @property
    def change(self) -> str:
        """``append``, ``none``, ``restore`` or ``change`` (the module docstring)."""
        if self.operation == "RESTORE" and self.restore_to is not None:
            return "restore"
        if self.removed_with_data or self.operation == "RESTORE":
            return "change"
        return "append" if self.adds else "none"

    @property
    def pipeline_batch(self) -> tuple[str, int] | None:
        """(pipeline, batch) of the eobatch batch this version carried (its commit info's
        ``eo.pipeline`` and ``eo.batchId``), or None for another writer's commit."""
        pipeline, batch = self.info.get("eo.pipeline"), self.info.get("eo.batchId")
        if pipeline is None or batch is None:
            return None
        try:
            return str(pipeline), int(batch)
        except (TypeError, ValueError):
            return None

    def describe(self) -> str:
        own = self.pipeline_batch
        return f"version {self.version} ({self.operation}" + (f", {own[0]} batch {own[1]})" if own else ")")


def data_path(table: str, path: str) -> str:
    """The absolute path of a file the log names: a URI relative to the table, percent-encoded,
    or an absolute URI (``file:``, ``s3a:``/``s3:``/``s3n:``) or absolute path; decoded, with
    ``.`` and ``..`` resolved (where a reader would find it), S3 as ``s3a://``. Whether it is under
    the table is ``within``'s question."""
    if _SCHEME.match(path) is None and not path.startswith("/"):  # relative to the table
        store, root = _store_path(table)
        return _spelled(store, root.rstrip("/") + "/" + unquote(path))
    if path.startswith("/"):  # an absolute path of the table's own store
        return _spelled(_store_path(table)[0], unquote(path))
    return _spelled(*_store_path(unquote(path)))


def _store_path(uri: str) -> tuple[str, str]:
    """(store, absolute path with ``.``/``..`` resolved) of a decoded location: store ``file`` for a
    local path (``file:``, ``file://localhost/``), ``s3a://<bucket>`` for S3 (s3a, s3, s3n),
    ``<scheme>://<host>`` for anything else."""
    m = _SCHEME.match(uri)
    if m is None:
        return "file", _norm(uri)
    scheme, rest = m.group(1).lower(), m.group(2)
    host, path = "", rest
    if rest.startswith("//"):
        host, _sep, path = rest[2:].partition("/")
    if scheme == "file":
        return ("file" if host in ("", "localhost") else f"file://{host}"), _norm(path)
    return (f"s3a://{host}" if scheme in S3_SCHEMES else f"{scheme}://{host}"), _norm(path)


def _norm(path: str) -> str:
    return posixpath.normpath("/" + path.lstrip("/"))


def _spelled(store: str, path: str) -> str:
    return _norm(path) if store == "file" else store + _norm(path)


def within(path: str, root: str) -> bool:
    """Whether ``path`` (as ``data_path`` gives it) lies strictly below ``root`` (a table or an
    allowed location): the same store (scheme, bucket) and, ``..`` resolved, below its folder."""
    store, p = _store_path(path)
    root_store, r = _store_path(root)
    return store == root_store and p.startswith(r.rstrip("/") + "/")


def allowed_locations(env: Mapping[str, str] | None = None) -> list[str]:
    """The locations the platform lets Delta sources read outside their tables (``ALLOW_LOCATIONS_ENV``)."""
    raw = (os.environ if env is None else env).get(ALLOW_LOCATIONS_ENV, "")
    return [p.strip() for p in raw.split(",") if p.strip()]


class DeltaLog:
    """The log of the table at ``table`` (a local path or s3a:// URI), through ``fs``."""

    def __init__(self, fs: Storage, table: str):
        self.fs, self.table = fs, table
        self.root = join(table, LOG_DIR)

    def commit(self, version: int) -> Commit | None:
        """What ``version`` did; None when its commit file is no longer in the log."""
        path = join(self.root, f"{version:020d}.json")
        try:
            text = self.fs.read_bytes(path)
        except FileNotFoundError:
            return None
        return parse_commit(self.table, version, text)


def parse_commit(table: str, version: int, text: bytes) -> Commit:
    """A version's commit file as a ``Commit`` (the Delta protocol's actions, one JSON per line)."""
    adds: list[DataFile] = []
    changes: list[DataFile] = []
    removes: list[DataFile] = []
    quiet = 0
    info: dict = {}
    metadata = None
    for line in text.decode("utf-8").splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action:
            info = action["commitInfo"] or {}
        elif "add" in action:
            a = action["add"]
            if a.get("dataChange", True):
                adds.append(DataFile(data_path(table, a["path"]), int(a["size"]), dict(a.get("partitionValues") or {}),
                                     a.get("deletionVector") is not None, a["path"]))
            else:
                quiet += 1
        elif "remove" in action:
            a = action["remove"]
            if a.get("dataChange", True):
                removes.append(DataFile(data_path(table, a["path"]), int(a.get("size") or 0),
                                        dict(a.get("partitionValues") or {}), a.get("deletionVector") is not None,
                                        a["path"]))
            else:
                quiet += 1
        elif "cdc" in action:
            a = action["cdc"]
            changes.append(DataFile(data_path(table, a["path"]), int(a["size"]), dict(a.get("partitionValues") or {}),
                                    log_path=a["path"]))
        elif "metaData" in action:
            metadata = action["metaData"]
    operation = str(info.get("operation") or "?")
    restore_to = None
    if operation == "RESTORE":
        try:
            restore_to = int(str((info.get("operationParameters") or {}).get("version")))
        except ValueError:
            restore_to = None  # a RESTORE to a timestamp: which version is not recorded
    return Commit(version, operation, tuple(adds), tuple(changes), len(removes), quiet, restore_to, metadata, info,
                  tuple(removes))


def effective_versions(commits: Mapping[int, Commit | None], start: int, latest: int,
                       read_by: Mapping[int, int] | None = None) -> list[int]:
    """The versions from ``start`` to ``latest`` whose changes make up the table at ``latest``
    from the table at ``start - 1``, oldest first: walking back from ``latest``, a RESTORE to
    version ``t`` makes the versions after ``t`` up to it (itself included) count for nothing (the
    table after the RESTORE is the table at ``t``). A RESTORE to a version before ``start - 1``
    undid versions already read: UndoneRead (``read_by``: the batch that read each version, for
    the message). A version whose commit is gone (None) is kept: the caller decides."""
    out: list[int] = []
    v = latest
    while v >= start:
        c = commits[v]
        if c is not None and c.change == "restore":
            t = int(c.restore_to)  # type: ignore[arg-type]
            if t < start - 1:
                batches = sorted({b for u, b in (read_by or {}).items() if t < u < start})
                raise UndoneRead(f"upstream {c.describe()} restored the table to version {t}: it undid versions "
                                 f"{t + 1}..{start - 1}, which this pipeline has already read and published"
                                 + (f" (batch{'es' if len(batches) > 1 else ''} {', '.join(map(str, batches))})"
                                    if batches else ""), v, t)
            v = t
            continue
        out.append(v)
        v -= 1
    return out[::-1]
