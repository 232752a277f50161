"""The ``source:`` keys of ``kind: parquet`` as a typed model: those of ``kind: files`` but
``max_file_bytes`` (Spark splits a Parquet file by row groups, so no file has to fit one task)."""

from __future__ import annotations

from ..section import LandingSection, include_field
from .config import ParquetConfig


class ParquetSection(LandingSection):
    CONFIG = ParquetConfig
    include: include_field("*.parquet") = ("*.parquet",)  # type: ignore[valid-type]
