"""``sink.mode: append`` (the default): the stage job's files added to a Delta table as they are.

The participant ``participant.DeltaParticipant`` commits a batch's files with
``txn(appId, batch)`` in one metadata-only transaction, adding new columns first
(``schema.schema_change``); in interval mode its commit replaces its slices' files.
``compaction`` and ``maintenance`` keep its tables small and clean without breaking either.
``KIND`` ties them to the registry; ``delta_merge`` builds on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.formats import STAGED, StagedFile
from ..base import Participant, SinkConfig, SinkContext
from .maintenance import maintain_table
from .participant import NO_TABLE_YET, DeltaParticipant
from .schema import is_widening, schema_change


@dataclass(frozen=True, kw_only=True)
class DeltaConfig(SinkConfig):
    """``sink.mode: append``: no keys of its own."""

    kind: str = "delta"


class DeltaKind:
    name = "delta"
    mode = "append"
    config_keys: frozenset[str] = frozenset()
    job_module = "eobatch.sinks.delta.job"
    contract_keys: dict = {}  # no keys of its own (config.contract)
    harmless_keys: dict[str, str] = {}

    def changes(self, commit_info: dict, staged_rows: int | None) -> dict[str, int]:
        return {}  # an append inserts every staged row: the batch's rows_published

    def parse_config(self, section: dict, ctx: SinkContext) -> SinkConfig:
        return DeltaConfig()

    def participant_names(self, cfg) -> tuple[str, ...]:
        return STAGED

    def participants(self, cfg, layout, fs_for, storage_options: dict | None) -> dict[str, Participant]:
        """Append tables take the staged files as they are."""
        out: dict[str, Participant] = {p: DeltaParticipant(p, layout.table(p), storage_options)
                                       for p in self.participant_names(cfg)}
        return out

    def check_staged(self, cfg, fs, table_root: str, adds: list[StagedFile], staged) -> list[str]:
        return []

    def job_spec(self, cfg) -> dict:
        return {"kind": self.name}

    def maintain_table(self, proto, participant: str, *, compact: bool, retention_hours: float,
                       checkpoint: bool) -> tuple[dict | None, list[str]]:
        return maintain_table(proto, participant, compact=compact, retention_hours=retention_hours,
                              checkpoint=checkpoint)


KIND = DeltaKind()

__all__ = ["KIND", "DeltaKind", "DeltaConfig", "DeltaParticipant", "NO_TABLE_YET", "schema_change", "is_widening"]
