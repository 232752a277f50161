"""The ``source:`` keys of ``kind: files`` as a typed model (``FilesConfig`` is what it loads to)."""

from __future__ import annotations

from ...config.model import PosInt
from ..section import LandingSection
from .config import FilesConfig


class FilesSection(LandingSection):
    CONFIG = FilesConfig
    # optional: refuse landing files larger than this at plan time. None (the default): any size,
    # the stage job reads a file in pieces (spark.sql.files.maxPartitionBytes) with bounded memory
    max_file_bytes: PosInt | None = None
