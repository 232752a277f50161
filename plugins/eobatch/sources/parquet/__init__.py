"""``kind: parquet``: a folder (local or s3a://) of Parquet files, every ``*.parquet`` below it.

Planned like ``kind: files`` (whole new files, at least one per batch, up to
``max_records_per_batch``; interval mode by ``interval_prefix`` or modification time, late files
included) with record counts from the footers; each row is read as one JSON record (``read``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import fields_as_keys
from ..files import LANDING_HARMLESS, FilesKind
from .config import ParquetConfig
from .planner import ParquetSource, UnreadableParquet, footer_rows
from .range import ParquetRange
from .read import file_positions, read_lines

if TYPE_CHECKING:
    from ..section import SourceSection


class ParquetKind(FilesKind):
    """A files kind whose files are Parquet: its own config, planner (footer counts), range and
    reader; the rest (no positions, late files, the job's source, the pre-read check) is files'."""

    name = "parquet"
    config_keys = fields_as_keys(ParquetConfig)
    harmless_keys = LANDING_HARMLESS  # and files' contract_keys: its folder
    replayable = False  # a replay writes JSON lines, which a Parquet source does not read
    located_columns = ()
    quarantine_columns = ()
    # its positions are counted from the kept records (``positions``): the stage job keeps them
    reads_alike = False

    @property
    def config_model(self) -> type[SourceSection]:
        """The ``source:`` section's model (pydantic: imported where YAML is read, never by the Spark job)."""
        # pydantic: only where YAML is read (the Spark job loads this kind without it)
        from .section import ParquetSection

        return ParquetSection

    def planner(self, cfg) -> ParquetSource:
        return ParquetSource(cfg)

    def range(self, data: dict) -> ParquetRange:
        return ParquetRange.from_json(data)

    def read(self, spark, rng: dict, job: dict):
        self._seen = (rng, job.get("path"))
        return read_lines(spark, rng, job.get("path"))

    def locate(self, spark, records, rng: dict, job: dict):
        return records  # the row index is exact already

    def positions(self, lines) -> dict:
        """Rows read per file (``read.file_positions``) and, under ``"files"``, each planned file's
        identity after the reads (``FilesKind.positions``; no path is ``"files"``)."""
        return {**file_positions(lines), **super().positions(lines)}


KIND = ParquetKind()

__all__ = ["KIND", "ParquetKind", "ParquetConfig", "ParquetSource", "ParquetRange", "UnreadableParquet",
           "footer_rows"]
