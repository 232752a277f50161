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
