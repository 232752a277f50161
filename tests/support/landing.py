"""Landing zones for the unit tests of the storage and of the files and parquet source kinds:
a landing file of given records and modification time, a zone holding symbolic links of every
kind (to a secret file, to a folder, dangling), the paths of a planned range."""

from __future__ import annotations

import json
import os
from pathlib import Path

T0 = 1_700_000_000  # seconds: the modification time of landing files unless given
SECRET = '{"aws_secret": "s3cr3t"}\n'


def land_at(path: Path, ids: range, mtime: int = T0) -> str:
    """File ``path`` with the records o<i> of ``ids``, modified at ``mtime``; its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"order_id": f"o{i}", "amount": float(i)}) + "\n" for i in ids))
    os.utime(path, (mtime, mtime))
    return str(path)


def zone_with_links(tmp_path: Path, landing: Path) -> dict:
    """A regular file plus three kinds of link; returns their paths."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "credentials"
    secret.write_text(SECRET)
    folder = outside / "folder"
    land_at(folder / "elsewhere.jsonl", range(3))
    paths = {"regular": land_at(landing / "a.jsonl", range(2)),
             "file_link": str(landing / "creds.jsonl"),
             "dir_link": str(landing / "sub"),
             "dangling": str(landing / "gone.jsonl")}
    os.symlink(secret, paths["file_link"])
    os.symlink(folder, paths["dir_link"], target_is_directory=True)
    os.symlink(outside / "no-such-file.jsonl", paths["dangling"])
    return paths


def links_of(paths: dict) -> list[str]:
    """The three links of a ``zone_with_links``, sorted."""
    return sorted(paths[k] for k in ("file_link", "dir_link", "dangling"))


def planned_paths(rng):
    """The paths of the landing files of a planned range."""
    return [f["path"] for f in rng["files"]]


class without_read_override:
    """Within the block, this thread reads with the file permission bits even as root: the
    capabilities that bypass them (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) leave its effective set
    and come back after (they stay permitted). A no-op for any other user, whom the bits stop anyway.
    Linux only (capget / capset)."""

    _HEADER_V3 = 0x20080522
    _DAC = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH

    def __enter__(self):
        import ctypes

        self._saved = None
        if os.geteuid() != 0:
            return self
        libc = ctypes.CDLL(None, use_errno=True)
        header = (ctypes.c_uint32 * 2)(self._HEADER_V3, 0)
        data = (ctypes.c_uint32 * 6)()  # 2 x {effective, permitted, inheritable}
        if libc.capget(header, data) != 0:
            raise OSError(ctypes.get_errno(), "capget")
        self._libc, self._saved = libc, list(data)
        data[0] &= ~self._DAC
        if libc.capset(header, data) != 0:
            raise OSError(ctypes.get_errno(), "capset")
        return self

    def __exit__(self, *exc):
        import ctypes

        if self._saved is not None:
            header = (ctypes.c_uint32 * 2)(self._HEADER_V3, 0)
            if self._libc.capset(header, (ctypes.c_uint32 * 6)(*self._saved)) != 0:
                raise OSError(ctypes.get_errno(), "capset")
        return False
