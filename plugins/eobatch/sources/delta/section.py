"""The ``source:`` keys of ``kind: delta`` as a typed model (``DeltaConfig`` is what it loads to)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ValidationInfo, model_validator

from ...config.model import Bool, ConnId, Invalid, NonNegativeInt, PosInt, TablePath, one_of
from ...storage import s3conf
from ..base import DEFAULT_MAX_FILES_PER_BATCH
from ..section import MaxFiles, SourceSection
from .config import CHOICES, DEFAULT_MAX_VERSIONS, DeltaConfig


class DeltaSection(SourceSection):
    CONFIG = DeltaConfig
    table: TablePath
    starting_version: NonNegativeInt = 0
    max_versions_per_batch: PosInt = DEFAULT_MAX_VERSIONS
    max_files_per_batch: MaxFiles = DEFAULT_MAX_FILES_PER_BATCH
    on_change_commit: Annotated[str, one_of(*CHOICES["on_change_commit"])] = CHOICES["on_change_commit"][0]
    on_data_loss: Annotated[str, one_of(*CHOICES["on_data_loss"])] = CHOICES["on_data_loss"][0]
    change_feed: Bool = False
    conn_id: ConnId | None = None  # an Airflow AWS connection for an s3a:// table in another store

    @model_validator(mode="before")
    @classmethod
    def _continuous_only(cls, data: Any, info: ValidationInfo) -> Any:
        if (info.context or {}).get("mode") == "interval":
            raise Invalid("'delta' reads its upstream table's versions in order, as they were committed; it has no "
                          "intervals: use mode: continuous (a schedule still runs it; or schedule it on the upstream's "
                          "asset)", at="kind")
        return data

    @model_validator(mode="after")
    def _conn_for_s3(self) -> "DeltaSection":
        if self.conn_id is not None and not s3conf.is_s3(self.table):
            raise Invalid(f"{self.conn_id!r} names the connection of an S3 store; table {self.table!r} is "
                          f"on the local disk: drop conn_id", at="conn_id")
        return self
