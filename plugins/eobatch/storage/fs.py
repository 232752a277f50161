"""Storage primitives the protocol relies on, for local paths and S3 (``s3a://bucket/key``).

The protocol needs exactly these operations:

* ``put_if_absent``: atomic create-if-not-exists; a second writer loses and is told so
  (Spark's HDFSMetadataLog: write a temp file, then rename without overwrite).
* ``write_atomic``: readers see the old content or the new one, never a torn file.
* ``put_if_absent(..., within=root)``: the same, into a folder others write too (a landing zone),
  where no symbolic link below ``root`` is ever followed (``LinkRefused``).
* listing with sizes and modification times, ``stat``, ``delete``.

Pure Python: importable by the Spark job and by Airflow tasks.
"""

from __future__ import annotations

import errno
import io
import os
import stat as st_mode
import time
import uuid
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Protocol

from ..errors import RetryableError, TerminalError
from . import s3conf


@dataclass(frozen=True)
class FileInfo:
    path: str  # absolute path or URI
    size: int
    mtime_ms: int
    # what tells this file from another one put under the same name with the same size and mtime:
    # local files [device, inode, mtime in ns]; S3 objects [ETag, VersionId (None in a bucket
    # without versioning), LastModified in ms] (``S3Storage.stat``); None when not known (a listing)
    identity: list | None = None


class ObjectChanged(OSError):
    """An S3 object read by ``S3Storage.open_landing`` was overwritten (or deleted) while it was read:
    its ETag (or version) is no longer the one it was opened at. Nothing more of it is read."""


class NotARegularFile(OSError):
    """A landing path that is a symbolic link (anywhere below the landing root), a folder, a FIFO,
    a socket or a device: never opened for reading (a link can point at a credentials file, a
    FIFO or ``/dev/zero`` never ends)."""


def printable(path: str) -> str:
    """``path`` as text any UTF-8 writer takes: the bytes of a name that is not UTF-8 (held by
    Python as surrogate escapes) are written as ``\\xNN``."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _identity(st) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_mtime_ns]


def _info(path: str, st) -> FileInfo:
    return FileInfo(path, st.st_size, int(st.st_mtime * 1000), _identity(st))


class Storage(Protocol):
    """What the protocol needs of a file system; ``LocalStorage`` and ``S3Storage`` implement it.

    Paths are whole (a local path, or ``s3a://bucket/key``); folders are prefixes."""

    scheme: str  # "file" or "s3"

    def exists(self, path: str) -> bool: ...
    def stat(self, path: str) -> FileInfo | None: ...
    def is_link(self, path: str) -> bool: ...
    def read_bytes(self, path: str) -> bytes: ...
    def open_read(self, path: str) -> BinaryIO: ...
    def open_landing(self, path: str, root: str | None = None) -> tuple[BinaryIO, FileInfo]: ...
    def write_atomic(self, path: str, data: bytes) -> None: ...
    def put_if_absent(self, path: str, data: bytes, *, within: str | None = None) -> bool: ...
    def delete(self, path: str) -> None: ...
    def list_files(self, prefix: str, recursive: bool = True, *, links: list[str] | None = None,
                   unreadable: list[tuple[str, str]] | None = None, after: str | None = None) -> Iterator[FileInfo]: ...
    def list_dirs(self, prefix: str, start_after: str | None = None) -> list[str]: ...
    def folder_problem(self, path: str) -> str | None: ...
    def remove_empty_dirs(self, prefix: str) -> None: ...
    def makedirs(self, path: str) -> None: ...
    def arrow_fs(self): ...
    def arrow_path(self, path: str) -> str: ...


class LinkRefused(TerminalError, OSError):
    """A symbolic link where a write was to go: links are never followed when writing."""


def link_refused(path: str) -> LinkRefused:
    return LinkRefused(f"{path} is a symbolic link: links are never followed when writing (it could point at "
                       f"another pipeline's landing zone, or anywhere); nothing was written through it. Replace it "
                       f"with a regular folder or file (or remove it), then try again")


def _below(path: str, root: str) -> list[str]:
    """The names from ``root`` down to ``path``; ValueError for a path not strictly below it."""
    parts = relpath(path, root).split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{path} is not a plain path below {root}")
    return parts


def sorts_after(path: str, after: str, folder: bool = False) -> bool:
    """Whether ``path`` sorts after ``after`` in the order S3 lists keys (UTF-8 bytes, which is
    the order of Python's str for any name in UTF-8); ``folder``: whether any path below the folder
    ``path`` can."""
    if not folder:
        return path > after
    below = path.rstrip("/") + "/"
    return after.startswith(below) or below > after


def join(base: str, *parts: str) -> str:
    out = base.rstrip("/")
    for p in parts:
        p = str(p).strip("/")
        if p:
            out = f"{out}/{p}"
    return out


def relpath(path: str, root: str) -> str:
    root = root.rstrip("/") + "/"
    if not path.startswith(root):
        raise ValueError(f"{path} is not under {root}")
    return path[len(root):]


# above every key that starts with a common prefix (U+10FFFF: the highest code point, 4 bytes in UTF-8)
_PAST_PREFIX = "\U0010ffff"


def _next_page_after(page: dict) -> str:
    """``StartAfter`` of the ListObjectsV2 page after ``page`` (a truncated one): its last key, or
    when a common prefix (a folder, ``Delimiter``) ends the page, a key above all of that folder's.
    Not the continuation token: S3Proxy (and S3-compatible stores like it) hand the token back
    URL-encoded under boto3's ``EncodingType=url`` and read it back as a key, so a key holding
    ``=`` (``dt=2026-01-01/``) sent every next page back to the prefix's start, for ever. Keys and
    common prefixes come in UTF-8 byte order, which is Python's str order."""
    last = [o["Key"] for o in page.get("Contents", [])[-1:]]
    last += [c["Prefix"] + _PAST_PREFIX for c in page.get("CommonPrefixes", [])[-1:]]
    if not last:
        raise S3StorageError(f"a truncated ListObjectsV2 page with no key and no prefix: {sorted(page)}")
    return max(last)


class LocalStorage:
    """A local (or mounted) file system. Paths are absolute; ``file://`` is accepted."""

    scheme = "file"

    @staticmethod
    def _p(path: str) -> str:
        if path.startswith("file://"):
            path = path[len("file://"):]
        return path

    def exists(self, path: str) -> bool:
        return os.path.exists(self._p(path))

    def stat(self, path: str) -> FileInfo | None:
        """The file at ``path``; None when nothing is there or it is a symbolic link.

        A link is never followed (lstat) and never passes as a file: it can point anywhere (a
        credentials file), and its own size and modification time can be made to match a file's."""
        try:
            st = os.lstat(self._p(path))
        except FileNotFoundError:
            return None
        if st_mode.S_ISLNK(st.st_mode):
            return None
        return _info(path, st)

    def is_link(self, path: str) -> bool:
        """Whether a symbolic link is at ``path`` (dangling or not); never followed."""
        return os.path.islink(self._p(path))

    def read_bytes(self, path: str) -> bytes:
        with open(self._p(path), "rb") as f:
            return f.read()

    def open_read(self, path: str):
        return open(self._p(path), "rb")

    def open_landing(self, path: str, root: str | None = None) -> tuple[BinaryIO, FileInfo]:
        """Open a landing file for reading, following no link: not at ``path`` itself, and, when
        ``path`` is under ``root``, not on the way from ``root`` down to it (each folder opened
        relative to its parent, ``O_NOFOLLOW``). ``root`` itself (the configured landing folder)
        is trusted. Only a regular file is opened (``O_NONBLOCK``: a FIFO does not block the
        open); the caller reads what ``fstat`` saw of it, returned with the reader.
        NotARegularFile otherwise; other OSErrors (unreadable, gone) as they are."""
        fd = self.open_fd(path, root)
        st = os.fstat(fd)
        if not st_mode.S_ISREG(st.st_mode):
            os.close(fd)
            raise NotARegularFile(errno.EINVAL, "not a regular file (a FIFO, socket or device); never read", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), _info(path, st)

    def open_fd(self, path: str, root: str | None = None) -> int:
        """The raw descriptor of ``open_landing`` (before its regular-file check)."""
        p = self._p(path)
        top = self._p(root).rstrip("/") if root else None
        if top and p.startswith(top + "/"):
            start, parts = top, p[len(top) + 1:].split("/")
        else:
            start, name = os.path.split(p)
            parts = [name]
        if any(part in ("", ".", "..") for part in parts):
            raise NotARegularFile(errno.EINVAL, "not a plain path below the landing folder", path)
        cloexec = getattr(os, "O_CLOEXEC", 0)
        d = os.open(start or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | cloexec)
        try:
            for part in parts[:-1]:
                try:
                    nd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | cloexec, dir_fd=d)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise NotARegularFile(e.errno, f"folder {part!r} on the way is a symbolic link (or not a "
                                              f"folder); links are never followed", path) from None
                    raise
                os.close(d)
                d = nd
            try:
                return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | cloexec,
                               dir_fd=d)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise NotARegularFile(e.errno, "a symbolic link; links are never followed", path) from None
                raise
        finally:
            os.close(d)

    @staticmethod
    def _fsync_dir(d: str) -> None:
        """Make the names in folder ``d`` durable (a new name lives in its folder, not in the file).

        Like PostgreSQL's fsync_fname: a file system that cannot fsync a folder (EINVAL, EBADF)
        is taken as keeping its names without it; any other error is raised."""
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            LocalStorage._fsync_fd(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _fsync_fd(fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EBADF):
                raise

    def _write_tmp(self, p: str, data: bytes) -> str:
        """Write ``data`` durably to a temp file beside ``p`` (skipped by listings); return its path.

        Folders missing on the way to ``p`` are created, and the parent of each is fsynced so
        the new folder survives a power loss (whoever created it: a concurrent writer too)."""
        d, name = os.path.split(p)
        missing = []
        up = d
        while up and not os.path.isdir(up):
            missing.append(up)
            parent = os.path.dirname(up)
            if parent == up:
                break
            up = parent
        if missing:
            os.makedirs(d, exist_ok=True)
            for new in reversed(missing):  # outermost first
                self._fsync_dir(os.path.dirname(new) or ".")
        tmp = os.path.join(d, f".{name}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data``; once this returns, the new content survives a power loss."""
        p = self._p(path)
        os.replace(self._write_tmp(p, data), p)
        self._fsync_dir(os.path.dirname(p) or ".")

    def put_if_absent(self, path: str, data: bytes, *, within: str | None = None) -> bool:
        """Create ``path`` with ``data`` unless it exists. True if this call created it.

        Either way, once this returns the name survives a power loss: a loser goes on to act on
        the winner's record, whose folder the winner may not have fsynced yet.

        With ``within`` (a folder above ``path``), nothing below it is followed if it is a
        symbolic link: not a folder on the way (missing ones are created), not the name itself
        (``LinkRefused``, nothing written). ``within`` itself is taken as configured."""
        if within is not None:
            return self._put_if_absent_within(self._p(within), _below(self._p(path), self._p(within)), data)
        p = self._p(path)
        tmp = self._write_tmp(p, data)
        try:
            os.link(tmp, p)  # atomic, fails if p exists: rename without overwrite
            created = True
        except FileExistsError:
            created = False
        finally:
            os.unlink(tmp)
        self._fsync_dir(os.path.dirname(p) or ".")  # the new name (and the temp name's removal)
        return created

    def _put_if_absent_within(self, root: str, parts: list[str], data: bytes) -> bool:
        """``put_if_absent`` by names relative to folders held open (``*at`` calls with
        O_NOFOLLOW): a link planted on the way, even after a check, is never walked through."""
        nofollow_dir = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW

        def refuse_if_link(name: str, fd: int, where: str) -> None:
            try:
                st = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                return
            if st_mode.S_ISLNK(st.st_mode):
                raise link_refused(where)

        os.makedirs(root, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            where = root
            for name in parts[:-1]:
                where = os.path.join(where, name)
                try:
                    os.mkdir(name, dir_fd=fd)
                    self._fsync_fd(fd)  # the new folder's name
                except FileExistsError:
                    pass
                try:
                    sub = os.open(name, nofollow_dir, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        refuse_if_link(name, fd, where)
                    raise
                os.close(fd)
                fd = sub
            name = parts[-1]
            target = os.path.join(where, name)
            refuse_if_link(name, fd, target)
            tmp = f".{name}.{uuid.uuid4().hex}.tmp"
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
            try:
                with os.fdopen(out, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                    created = True
                except FileExistsError:
                    refuse_if_link(name, fd, target)
                    created = False
            finally:
                os.unlink(tmp, dir_fd=fd)
            self._fsync_fd(fd)  # the new name (and the temp name's removal)
            return created
        finally:
            os.close(fd)

    def delete(self, path: str) -> None:
        try:
            os.unlink(self._p(path))
        except FileNotFoundError:
            pass

    def list_files(self, prefix: str, recursive: bool = True,
                   links: list | None = None, unreadable: list | None = None,
                   after: str | None = None) -> Iterator[FileInfo]:
        """Regular files under ``prefix`` (a folder). Temp files of ``write_atomic`` are skipped.
        ``after``: only the files whose path sorts after it (``sorts_after``, the order of S3's
        keys), without reading the folders that sort wholly before it.

        Symbolic links are never followed, to files or to folders: a link can point anywhere (a
        credentials file, a folder outside ``prefix``). Each one found (dangling ones too) is
        appended to ``links`` when given, so the caller can report it. Other entries that are
        neither files nor folders (FIFOs, sockets, devices) are skipped. A folder below
        ``prefix`` that cannot be read is appended to ``unreadable`` as (path, why) when given,
        and the listing goes on without it; without ``unreadable`` the error is raised."""
        root = self._p(prefix)
        if not os.path.isdir(root):
            return
        stack = [root]
        while stack:
            d = stack.pop()
            try:
                entries = list(os.scandir(d))
            except FileNotFoundError:
                continue
            except OSError as err:
                if unreadable is None or d == root:
                    raise
                unreadable.append((d, f"{type(err).__name__}: {err.strerror or err}"))
                continue
            for e in entries:
                if after is not None and not sorts_after(e.path, after, folder=e.is_dir(follow_symlinks=False)):
                    continue  # this file, or every path below this folder, sorts before ``after``
                if e.is_symlink():
                    if links is not None:
                        links.append(e.path)
                    continue
                if e.is_dir(follow_symlinks=False):
                    if recursive:
                        stack.append(e.path)
                    continue
                if e.name.endswith(".tmp") and e.name.startswith("."):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if st_mode.S_ISLNK(st.st_mode):  # replaced by a link since the folder was read
                    if links is not None:
                        links.append(e.path)
                    continue
                if st_mode.S_ISREG(st.st_mode):
                    yield _info(e.path, st)

    def folder_problem(self, path: str) -> str | None:
        """Why ``path`` is not a folder that can be listed (it does not exist, is a link to nothing,
        is a file, cannot be looked at or read), or None when it is one. ``list_files`` lists nothing
        of such a path; a caller for which that is not "empty" asks this first. ``path`` itself may
        be a link to a folder (a configured folder is trusted)."""
        p = self._p(path)
        try:
            st = os.stat(p)
        except FileNotFoundError:
            return "is a symbolic link to nothing (its target does not exist)" if os.path.islink(p) else "does not exist"
        except OSError as e:
            return f"cannot be looked at ({type(e).__name__}: {e.strerror or e})"
        if not st_mode.S_ISDIR(st.st_mode):
            return "is not a folder (a file is there)" if st_mode.S_ISREG(st.st_mode) else "is not a folder"
        try:
            with os.scandir(p) as entries:
                next(entries, None)
        except OSError as e:
            return f"cannot be read ({type(e).__name__}: {e.strerror or e})"
        return None

    def list_dirs(self, prefix: str, start_after: str | None = None) -> list[str]:
        """Sub-folders of ``prefix``, sorted; with ``start_after``, only those whose name sorts
        after it (S3: a StartAfter listing; here the folder is still read whole, names are
        compared before anything else is looked at)."""
        root = self._p(prefix)
        if not os.path.isdir(root):
            return []
        return sorted(e.name for e in os.scandir(root)
                      if (start_after is None or e.name > start_after) and e.is_dir(follow_symlinks=False))

    def remove_empty_dirs(self, prefix: str) -> None:
        root = self._p(prefix)
        for d, _dirs, _files in os.walk(root, topdown=False):
            try:
                os.rmdir(d)
            except OSError:
                pass

    def arrow_fs(self):
        # pyarrow: only for an Arrow filesystem (the rest of storage is pure Python)
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem()

    def arrow_path(self, path: str) -> str:
        return self._p(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(self._p(path), exist_ok=True)


# the codes of an S3 request its credentials may not make (or that names credentials S3 does not know)
ACCESS_DENIED = ("AccessDenied", "403", "Forbidden", "AllAccessDisabled", "InvalidAccessKeyId",
                 "SignatureDoesNotMatch")


class S3StorageError(RetryableError, OSError):
    """An S3 request failed; the message names the operation and the object, never a credential."""


def _is_temp_name(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


class S3Storage:
    """An S3 bucket (AWS or an S3-compatible server), addressed by ``s3a://bucket/key`` URIs.

    * ``put_if_absent`` is one conditional PUT (``If-None-Match: *``): S3 lets exactly one writer
      create a key; the others get 412 PreconditionFailed (False here). A 409
      ConditionalRequestConflict (a concurrent conditional write in flight) is retried, and
      then answers like any other loser when the key exists.
    * ``write_atomic`` is one PUT: S3 objects are never torn.
    * S3 has no folders: ``makedirs`` and ``remove_empty_dirs`` do nothing; ``list_dirs`` is a
      delimiter listing of common prefixes.
    Clients are created lazily (no I/O in the constructor) and cached per process.
    """

    scheme = "s3"

    def __init__(self, settings=None):
        self._settings = settings

    # -- plumbing ------------------------------------------------------------------------
    def settings_for(self, path: str):
        """The settings serving ``path``: this storage's own, else its bucket's (``s3conf.settings_for``)."""
        return self._settings or s3conf.settings_for(path)

    def client(self, path: str):
        return s3conf.boto3_client(self.settings_for(path))

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        return s3conf.split(path)

    def _error(self, op: str, path: str, e: Exception) -> S3StorageError:
        code = _code(e)
        return S3StorageError(s3conf.redact(f"S3 {op} {path} failed: {code or type(e).__name__}: {e}",
                                            self._settings))

    def _call(self, op: str, path: str, fn, **kw):
        try:
            return fn(**kw)
        except Exception as e:  # noqa: BLE001 - re-raised without credentials
            if _code(e) in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(path) from None
            raise self._error(op, path, e) from None

    # -- reading -------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return self.stat(path) is not None

    def stat(self, path: str) -> FileInfo | None:
        b, k = self._split(path)
        try:
            h = self._call("HEAD", path, self.client(path).head_object, Bucket=b, Key=k)
        except FileNotFoundError:
            return None
        mtime = _mtime_ms(h["LastModified"])
        return FileInfo(path, int(h["ContentLength"]), mtime, [h.get("ETag"), h.get("VersionId"), mtime])

    def is_link(self, path: str) -> bool:
        return False  # S3 has no symbolic links

    def read_bytes(self, path: str) -> bytes:
        b, k = self._split(path)
        r = self._call("GET", path, self.client(path).get_object, Bucket=b, Key=k)
        return r["Body"].read()

    def open_landing(self, path: str, root: str | None = None):
        """A reader of the object as HEAD saw it, and what HEAD said (``stat``: size, LastModified,
        ETag, VersionId). Every read is a ranged GET with ``If-Match`` of that ETag (and that
        VersionId, when the bucket keeps versions): the reader never returns bytes of another
        object put under the key since; it raises ObjectChanged instead. Seekable, buffered
        (8 MiB). S3 has no links, FIFOs or devices."""
        info = self.stat(path)
        if info is None:
            raise FileNotFoundError(path)
        return io.BufferedReader(_PinnedObject(self, info), buffer_size=8 << 20), info

    def open_read(self, path: str):
        """A seekable reader (ranged GETs): Parquet footers are read without the data."""
        try:
            return self.arrow_fs(path).open_input_file(self.arrow_path(path))
        except FileNotFoundError:
            raise FileNotFoundError(path) from None
        except OSError as e:
            raise self._error("GET", path, e) from None

    # -- writing -------------------------------------------------------------------------
    def write_atomic(self, path: str, data: bytes) -> None:
        b, k = self._split(path)
        self._call("PUT", path, self.client(path).put_object, Bucket=b, Key=k, Body=data)

    def put_if_absent(self, path: str, data: bytes, *, within: str | None = None) -> bool:
        """Create ``path`` with ``data`` unless it exists. True if this call created it.
        ``within``: a prefix ``path`` must be below (S3 has no links to refuse)."""
        if within is not None:
            _below(path, within)
        b, k = self._split(path)
        for i in range(8):
            try:
                self.client(path).put_object(Bucket=b, Key=k, Body=data, IfNoneMatch="*")
                return True
            except Exception as e:  # noqa: BLE001
                code = _code(e)
                if code in ("PreconditionFailed", "412"):
                    return False
                if code in ("ConditionalRequestConflict", "409"):
                    time.sleep(0.05 * (2 ** i))  # another conditional write in flight: decide again
                    continue
                raise self._error("conditional PUT", path, e) from None
        if self.exists(path):
            return False
        raise S3StorageError(f"S3 conditional PUT {path}: still conflicting after retries")

    def delete(self, path: str) -> None:
        b, k = self._split(path)
        try:
            self._call("DELETE", path, self.client(path).delete_object, Bucket=b, Key=k)
        except FileNotFoundError:
            pass

    # -- listing -------------------------------------------------------------------------
    def _prefix(self, prefix: str) -> tuple[str, str]:
        b, k = self._split(prefix)
        k = k.rstrip("/")
        return b, (k + "/") if k else ""

    def list_files(self, prefix: str, recursive: bool = True, page_size: int = 1000,
                   links: list | None = None, unreadable: list | None = None,
                   after: str | None = None) -> Iterator[FileInfo]:
        """Objects under ``prefix`` (a folder): ListObjectsV2, paginated. Temp names are skipped.
        ``after``: only the objects whose path sorts after it, from S3 itself (``StartAfter``: the
        calls are those of the objects listed, not of the prefix). Each next page is asked for after
        the page before (``_next_page_after``), never with the continuation token.

        S3 has no symbolic links: ``links`` (see LocalStorage.list_files) is accepted and left as is."""
        b, p = self._prefix(prefix)
        scheme = prefix.split("://", 1)[0] + "://"  # listed paths keep the caller's spelling
        kw = {"Bucket": b, "Prefix": p, "MaxKeys": page_size}
        if after is not None:
            ab, ak = self._split(after)
            if ab == b and ak > p:
                kw["StartAfter"] = ak
        if not recursive:
            kw["Delimiter"] = "/"
        while True:
            r = self._list(prefix, kw)
            for o in r.get("Contents", []):
                key = o["Key"]
                if key.endswith("/") or _is_temp_name(key.rsplit("/", 1)[-1]):
                    continue
                yield FileInfo(scheme + s3conf.to_s3a(b, key)[len("s3a://"):], int(o["Size"]),
                               _mtime_ms(o["LastModified"]))
            if not r.get("IsTruncated"):
                return
            kw["StartAfter"] = _next_page_after(r)

    def _list(self, prefix: str, kw: dict) -> dict:
        try:
            return self._call("LIST", prefix, self.client(prefix).list_objects_v2, **kw)
        except FileNotFoundError:
            return {}
        except S3StorageError as e:
            if "NoSuchBucket" in str(e):
                return {}
            raise

    def folder_problem(self, path: str) -> str | None:
        """Why the prefix ``path`` cannot be listed (its bucket does not exist, access is denied), or
        None when it can. A prefix with no object under it is not a problem: S3 has no folders, so
        it cannot be told from an empty folder. Other failures (the store is down) raise
        S3StorageError, as a listing would."""
        b, p = self._prefix(path)
        try:
            self.client(path).list_objects_v2(Bucket=b, Prefix=p, MaxKeys=1)
        except Exception as e:  # noqa: BLE001 - the code is the answer; re-raised without credentials
            code = _code(e)
            if code == "NoSuchBucket":
                return f"is in bucket {b!r}, which does not exist (NoSuchBucket)"
            if code in ACCESS_DENIED:
                return f"cannot be listed: access denied ({code}) with the credentials this pipeline uses"
            raise self._error("LIST", path, e) from None
        return None

    def list_dirs(self, prefix: str, start_after: str | None = None) -> list[str]:
        """Common prefixes under ``prefix``; with ``start_after``, a ListObjectsV2 StartAfter
        listing that begins at that name (the listing costs what the folders after it cost)."""
        b, p = self._prefix(prefix)
        kw: dict = {"Bucket": b, "Prefix": p, "Delimiter": "/", "MaxKeys": 1000}
        if start_after is not None:
            kw["StartAfter"] = p + start_after
        out = []
        while True:
            r = self._list(prefix, kw)
            out += [c["Prefix"][len(p):].rstrip("/") for c in r.get("CommonPrefixes", [])]
            if not r.get("IsTruncated"):
                break
            kw["StartAfter"] = _next_page_after(r)
        # StartAfter=<p><name> still lists <p><name>/... (a longer key): the folder itself is not "after"
        return sorted(d for d in out if start_after is None or d > start_after)

    def remove_empty_dirs(self, prefix: str) -> None:
        pass  # S3 has no folders

    def makedirs(self, path: str) -> None:
        pass  # S3 has no folders

    # -- Arrow -----------------------------------------------------------------------------
    def arrow_fs(self, path: str = ""):
        """pyarrow's filesystem for ``path``'s bucket (without one: the environment's settings)."""
        return s3conf.arrow_filesystem(self.settings_for(path))

    def arrow_path(self, path: str) -> str:
        b, k = self._split(path)
        return f"{b}/{k}"


class _PinnedObject(io.RawIOBase):
    """The bytes of one S3 object as it was when ``info`` was taken (``S3Storage.open_landing``)."""

    def __init__(self, fs: S3Storage, info: FileInfo):
        self.fs, self.info, self.pos = fs, info, 0
        self.bucket, self.key = fs._split(info.path)
        etag, version = (info.identity or [None, None])[:2]
        self.pin = {"IfMatch": etag} if etag else {}
        if version:
            self.pin["VersionId"] = version

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = max(0, offset if whence == 0 else self.pos + offset if whence == 1 else self.info.size + offset)
        return self.pos

    def readinto(self, b) -> int:
        n = min(len(b), self.info.size - self.pos)
        if n <= 0:
            return 0
        try:
            r = self.fs.client(self.info.path).get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={self.pos}-{self.pos + n - 1}",
                                          **self.pin)
        except Exception as e:  # noqa: BLE001 - re-raised without credentials
            if _code(e) in ("PreconditionFailed", "412", "NoSuchKey", "404", "NoSuchVersion"):
                raise ObjectChanged(errno.ESTALE, f"overwritten or deleted while read (ETag/version "
                                    f"{self.info.identity[:2] if self.info.identity else None} no longer there)",
                                    self.info.path) from None
            raise self.fs._error("GET", self.info.path, e) from None
        data = r["Body"].read()
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)


def _mtime_ms(dt) -> int:
    """Whole seconds: HEAD answers an HTTP date (seconds), a listing may carry milliseconds;
    both must give the same value for the same object."""
    return int(dt.timestamp()) * 1000


def _code(e: Exception) -> str | None:
    resp = getattr(e, "response", None)
    if isinstance(resp, dict):
        err = resp.get("Error") or {}
        code = err.get("Code")
        if code:
            return str(code)
        status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return str(status) if status else None
    return None


_S3 = None


def storage_for(uri: str) -> Storage:
    """The storage that serves ``uri``: S3 for ``s3a://`` and ``s3://``, else the local disk."""
    global _S3
    if uri.startswith(("s3a://", "s3://")):
        if _S3 is None:
            _S3 = S3Storage()
        return _S3
    return LocalStorage()
