"""``sink.mode: merge``: one row per key in the sink, applied with a Delta MERGE.

Config ``config.MergeConfig`` (``sink.merge``: an upsert by ``sequence_by``, or running
aggregates by ``accumulate``), participants ``participants`` (the sink's MERGE, an upsert's
tombstones, the partials of running aggregates in interval mode), verify's check of the staged
rows ``staged.merge_problems``, the Spark job's step ``job`` (the latest record of each key, or
a key's rows folded into one). ``KIND`` ties them to the registry; its tables are Delta tables,
maintained as the append sink's (``DeltaKind``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.formats import SINK, STAGED, StagedFile
from ..base import Participant
from ..delta import DeltaKind
from .config import CONTRACT, HARMLESS, MergeConfig
from .participants import (
    CDF,
    PARTIALS,
    TOMBSTONES,
    MergeParticipant,
    PartialsParticipant,
    RefoldParticipant,
    TombstoneParticipant,
)
from .staged import merge_problems

if TYPE_CHECKING:
    from .section import MergeSinkSection


class DeltaMergeKind(DeltaKind):
    name = "delta_merge"
    mode = "merge"
    config_keys = frozenset({"merge"})  # under sink: (section.MergeSinkSection)
    job_module = "eobatch.sinks.delta_merge.job"
    contract_keys = CONTRACT
    harmless_keys = HARMLESS

    @property
    def config_model(self) -> type[MergeSinkSection]:
        """The model of the ``sink:`` keys it adds (pydantic: imported where YAML is read, never by the Spark job)."""
        # pydantic: only where YAML is read (the Spark job loads this kind without it)
        from .section import MergeSinkSection

        return MergeSinkSection

    def parse_config(self, section: dict, ctx) -> MergeConfig:
        return self.config_model.parse(section, ctx)

    def participant_names(self, cfg) -> tuple[str, ...]:
        """The sink, the quarantine, and an upsert's tombstones (the keys deleted and the sequence
        that deleted them, read by the sink's next merges: committed after the sink, from the
        sink's staged rows, so the sink's merge of batch N always reads them as of batch N-1).
        Running aggregates in interval mode commit their partials first (each interval's per-key
        partials, from the sink's staged rows): the sink is then recomputed from them as of batch N."""
        m: MergeConfig = cfg.sink
        if m.interval_partials(cfg.mode):
            return (PARTIALS, *STAGED)
        return (*STAGED, TOMBSTONES) if m.upsert else STAGED

    def participants(self, cfg, layout, fs_for, storage_options: dict | None) -> dict[str, Participant]:
        """The sink and its tombstones apply the sink's staged rows with a MERGE; running
        aggregates in interval mode keep the staged partials per slice and recompute the sink
        from them; the quarantine is an append table."""
        m: MergeConfig = cfg.sink
        names = self.participant_names(cfg)
        staged = (fs_for(SINK), layout.sink_table)
        out = super().participants(cfg, layout, fs_for, storage_options)  # in commit order
        sink: RefoldParticipant | MergeParticipant
        if PARTIALS in names:
            out[PARTIALS] = partials = PartialsParticipant(PARTIALS, layout.table(PARTIALS), storage_options, m, *staged)
            sink = RefoldParticipant(SINK, layout.table(SINK), storage_options, m, *staged, partials)
        else:
            tombstones = None
            if TOMBSTONES in names:
                out[TOMBSTONES] = tombstones = TombstoneParticipant(TOMBSTONES, layout.table(TOMBSTONES),
                                                                    storage_options, m, *staged)
            sink = MergeParticipant(SINK, layout.table(SINK), storage_options, m, *staged, tombstones)
        if m.change_data_feed:  # the sink's commits write change data files, for a downstream change feed reader
            sink.table_properties = {CDF: "true"}
        out[SINK] = sink
        return out

    def check_staged(self, cfg, fs, table_root: str, adds: list[StagedFile], staged) -> list[str]:
        return merge_problems(fs, table_root, adds, staged, cfg.sink)

    def job_spec(self, cfg) -> dict:
        return {"kind": self.name, **cfg.sink.job()}

    def changes(self, commit_info: dict, staged_rows: int | None) -> dict[str, int]:
        """The batch's MERGE by its Delta operationMetrics: keys inserted, updated (or folded),
        deleted, and the staged rows that changed nothing ("ignored": older than the key's row or
        than its delete, a delete of a key the table does not hold). A batch whose MERGE changed
        nothing has an empty commit of its own (not a MERGE): every staged row was ignored."""
        m = commit_info.get("operationMetrics") or {} if commit_info.get("operation") == "MERGE" else {}
        out = {k: int(m.get(f"num_target_rows_{k}") or 0) for k in ("inserted", "updated", "deleted")}
        if staged_rows is not None:
            out["ignored"] = max(0, staged_rows - sum(out.values()))
        return out


KIND = DeltaMergeKind()

__all__ = ["KIND", "DeltaMergeKind", "MergeConfig", "MergeParticipant", "TombstoneParticipant", "PartialsParticipant",
           "RefoldParticipant", "TOMBSTONES", "PARTIALS"]
