"""Storage primitives the protocol relies on, for local paths (and later object stores).

The protocol needs exactly these operations:

* ``put_if_absent``: atomic create-if-not-exists; a second writer loses and is told so
  (Spark's HDFSMetadataLog: write a temp file, then rename without overwrite).
* ``write_atomic``: readers see the old content or the new one, never a torn file.
* listing with sizes and modification times, ``stat``, ``delete``.

Pure Python: importable by the Spark job and by Airflow tasks.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class FileInfo:
    path: str  # absolute path or URI
    size: int
    mtime_ms: int


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
        try:
            st = os.stat(self._p(path))
        except FileNotFoundError:
            return None
        return FileInfo(path, st.st_size, int(st.st_mtime * 1000))

    def read_bytes(self, path: str) -> bytes:
        with open(self._p(path), "rb") as f:
            return f.read()

    def open_read(self, path: str):
        return open(self._p(path), "rb")

    def _write_tmp(self, p: str, data: bytes) -> str:
        """Write ``data`` durably to a temp file beside ``p`` (skipped by listings); return its path."""
        d, name = os.path.split(p)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".{name}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def write_atomic(self, path: str, data: bytes) -> None:
        p = self._p(path)
        os.replace(self._write_tmp(p, data), p)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` unless it exists. True if this call created it."""
        p = self._p(path)
        tmp = self._write_tmp(p, data)
        try:
            os.link(tmp, p)  # atomic, fails if p exists: rename without overwrite
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def delete(self, path: str) -> None:
        try:
            os.unlink(self._p(path))
        except FileNotFoundError:
            pass

    def list_files(self, prefix: str, recursive: bool = True) -> Iterator[FileInfo]:
        """Files under ``prefix`` (a folder). Temp files of ``write_atomic`` are skipped."""
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
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    if recursive:
                        stack.append(e.path)
                elif e.is_file():
                    if e.name.endswith(".tmp") and e.name.startswith("."):
                        continue
                    try:
                        st = e.stat()
                    except FileNotFoundError:
                        continue
                    yield FileInfo(e.path, st.st_size, int(st.st_mtime * 1000))

    def list_dirs(self, prefix: str) -> list[str]:
        root = self._p(prefix)
        if not os.path.isdir(root):
            return []
        return sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False))

    def remove_empty_dirs(self, prefix: str) -> None:
        root = self._p(prefix)
        for d, _dirs, _files in os.walk(root, topdown=False):
            try:
                os.rmdir(d)
            except OSError:
                pass

    def arrow_fs(self):
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem()

    def arrow_path(self, path: str) -> str:
        return self._p(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(self._p(path), exist_ok=True)


def storage_for(uri: str):
    """The storage that serves ``uri``."""
    if uri.startswith(("s3a://", "s3://")):
        raise NotImplementedError("S3 storage arrives with the scale-out issue")
    return LocalStorage()
