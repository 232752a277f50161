"""The files a stage job runs that are not rebuilt at each launch (the JVM jars, the driver's
class-data archive) are checked at each launch against a SHA-256 recorded where only the product
writes: the jars against the list the product ships, the archive against the digest written when
it was built. The check is cached by the file's identity, so a launch costs a ``stat`` per file:

* the identity is (device, inode, size, mtime_ns, ctime_ns). Writing a file in place changes its
  ctime, which no user can set back (``utime`` sets only atime and mtime); replacing it gives
  another inode and ctime. Any change of the bytes therefore means another identity, hashed again.
* the digest of an identity is remembered in this process and in ``file-digests.json`` of an
  owner-only cache folder (``private_dir``): every Airflow task is a new process, and hashing the
  AWS SDK bundle (~690 MB) costs seconds.
* the bytes are hashed from the open file, and its identity is taken before and after: a file
  written while it is hashed is refused, never remembered.

No Airflow, no pyspark imports.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat

DIGESTS = "file-digests.json"
MAX_ENTRIES = 256  # the remembered digests of a cache folder: the jars, the archive, and stale ones
_MEMO: dict[str, tuple[tuple[int, ...], str]] = {}


class Changing(OSError):
    """The file changed while it was hashed."""


def private_dir(path: str) -> str:
    """``path``, created owner-only if new. Another user could replace a cached file between its
    check and its use: a folder of another owner is refused, and the product's own folder loses
    any group or world write bit (a umask of 002 gives them)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.geteuid():
        raise PermissionError(f"the cache folder {path} belongs to uid {st.st_uid}, not to this user: "
                              f"set EOBATCH_CACHE_DIR to a folder of your own")
    if st.st_mode & 0o022:
        os.chmod(path, st.st_mode & 0o755)
    return path


def is_private(path: str) -> bool:
    """``path`` is a folder (not a link to one) of this user that no other user can write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _hash(f) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def _load(cache_dir: str) -> dict[str, list]:
    path = os.path.join(cache_dir, DIGESTS)
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return {}
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
        return entries if isinstance(entries, dict) else {}
    except (OSError, ValueError):
        return {}


def _store(cache_dir: str, key: str, identity: tuple[int, ...], digest: str) -> None:
    """Remember ``digest`` for ``key`` in the folder's digest file (best effort: a lost race or a
    full disk only costs a hash at a later launch)."""
    entries = _load(cache_dir)
    entries[key] = [*identity, digest]
    entries = {k: v for k, v in entries.items() if os.path.exists(k)}
    while len(entries) > MAX_ENTRIES:
        entries.pop(next(iter(entries)))
    part = os.path.join(cache_dir, f"{DIGESTS}.{os.getpid()}.tmp")
    try:
        with open(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
            json.dump(entries, f)
        os.replace(part, os.path.join(cache_dir, DIGESTS))
    except OSError:
        try:
            os.remove(part)
        except OSError:
            pass


def sha256(path: str, cache_dir: str | None = None) -> str:
    """The SHA-256 of the regular file at ``path`` (a link is followed), hashed once per identity:
    remembered in this process and, when ``cache_dir`` is an owner-only folder, in its digest file.
    OSError when it is not a regular file; ``Changing`` when it changed while it was hashed."""
    key = os.path.realpath(path)
    with open(key, "rb") as f:
        before = os.fstat(f.fileno())
        if not stat.S_ISREG(before.st_mode):
            raise OSError(f"{path} is not a regular file")
        identity = _identity(before)
        memo = _MEMO.get(key)
        if memo is not None and memo[0] == identity:
            return memo[1]
        usable = cache_dir is not None and is_private(cache_dir)
        if usable:
            assert cache_dir is not None
            kept = _load(cache_dir).get(key)
            if isinstance(kept, list) and tuple(kept[:-1]) == identity and isinstance(kept[-1], str):
                _MEMO[key] = (identity, kept[-1])
                return kept[-1]
        digest = _hash(f)
        if _identity(os.fstat(f.fileno())) != identity or _identity(os.stat(key)) != identity:
            raise Changing(f"{path} changed while it was checked")
    _MEMO[key] = (identity, digest)
    if usable:
        assert cache_dir is not None
        _store(cache_dir, key, identity, digest)
    return digest
