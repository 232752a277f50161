"""The ``source:`` keys of ``kind: files`` as a typed model (``FilesConfig`` is what it loads to)."""

from __future__ import annotations

from ...config.model import PosInt
from ..section import LandingSection, include_field
from .config import FilesConfig


class FilesSection(LandingSection):
    CONFIG = FilesConfig
    include: include_field("*.jsonl") = ("*.jsonl",)  # type: ignore[valid-type]
    # optional: refuse landing files larger than this at plan time. None (the default): any size,
    # the stage job reads a file in pieces (spark.sql.files.maxPartitionBytes) with bounded memory
    max_file_bytes: PosInt | None = None
