"""Parquet planner: the files kind's planning (new whole files, oldest first, at least one per
batch, up to the record limit; interval mode by prefix or modification time; late files), with
``*.parquet`` landing files whose records are counted exactly from their footers (no data read)."""

from __future__ import annotations

from ...errors import TerminalError
from ...storage import FileInfo
from ..files.planner import FilesSource


class UnreadableParquet(TerminalError):
    """A landing ``*.parquet`` file whose footer cannot be read (not Parquet, or still being written)."""


def footer_rows(fs, path: str) -> int:
    """The number of rows of a Parquet file, from its footer."""
    import pyarrow.parquet as pq

    try:
        with fs.open_read(path) as fh:
            return pq.ParquetFile(fh).metadata.num_rows
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise UnreadableParquet(f"{path}: not a readable Parquet file ({e}); nothing was planned. Write landing "
                                f"files under a name starting with '.' or '_' and rename them into place when "
                                f"complete; remove or replace this one") from e


class ParquetSource(FilesSource):
    kind = "parquet"
    suffix = ".parquet"

    def _entry(self, f: FileInfo) -> dict:
        return {"path": f.path, "size": f.size, "mtime_ms": f.mtime_ms, "records": footer_rows(self.fs, f.path)}
