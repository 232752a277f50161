"""A sink kind of a distribution of its own (``eobatch-labelled``), published under the entry-point
group ``eobatch.sinks`` as ``labelled = eobatch_labelled:KIND``: an append sink whose every commit
carries a label (``sink.mode: labelled``, ``sink.labelled.label``) in its Delta commit info.

It uses eobatch's public API only (``eobatch.sinks``, ``eobatch.sinks.delta``, ``eobatch.errors``)
and changes no file of the product (tests/unit/core/test_registry.py installs and runs it).

    sink:
      table: /data/lake/orders
      mode: labelled
      labelled:
        label: gold     # in every commit: what the table's rows are labelled (TABLE: fixed under a table)
        note: text      # for people (harmless)
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from eobatch.errors import ConfigError
from eobatch.sinks import TABLE, Participant, Replace, SinkConfig, SinkContext, StagedFile
from eobatch.sinks.delta import DeltaKind, DeltaParticipant

LABEL = "toy.label"  # the commit info key of the label


@dataclass(frozen=True, kw_only=True)
class LabelledConfig(SinkConfig):
    kind: str = "labelled"
    label: str
    note: str | None = None

    def fingerprint_dict(self) -> dict:
        return {"label": self.label}


class LabelledParticipant(DeltaParticipant):
    """An append table whose commits carry the label."""

    def __init__(self, name: str, table_uri: str, storage_options: dict | None, label: str):
        super().__init__(name, table_uri, storage_options)
        self.label = label

    def commit(self, app_id: str, batch_id: int, adds: list[StagedFile], schema: pa.Schema, partition_by: list[str],
               metadata: dict, expected_prev: int | None = None, replace: Replace | None = None) -> int:
        """The append sink's commit of the batch's staged files (``StagedFile`` values), labelled."""
        return super().commit(app_id, batch_id, adds, schema, partition_by, {**metadata, LABEL: self.label},
                              expected_prev, replace)


class LabelledKind(DeltaKind):
    """The append sink's tables, maintenance and Spark step, with a label of its own."""

    name = "labelled"
    mode = "labelled"
    config_keys = frozenset({"labelled"})
    job_module = "eobatch.sinks.delta.job"  # the append sink's step: the transform's rows as they are
    # its part of the configuration contract
    contract_keys = {"sink.labelled.label": (TABLE, lambda s: s.label)}
    harmless_keys = {"sink.labelled.note": "text for people"}

    def parse_config(self, section: dict, ctx: SinkContext) -> LabelledConfig:
        given = section.get("labelled")
        if not isinstance(given, dict) or not isinstance(given.get("label"), str) or not given["label"]:
            raise ConfigError(ctx.file, "sink.labelled.label", "is required: the label of the table's commits")
        extra = sorted(set(given) - {"label", "note"})
        if extra:
            raise ConfigError(ctx.file, f"sink.labelled.{extra[0]}", "unknown key (allowed: label, note)")
        return LabelledConfig(label=given["label"], note=given.get("note"))

    def participants(self, cfg, layout, fs_for, storage_options: dict | None) -> dict[str, Participant]:
        return {p: LabelledParticipant(p, layout.table(p), storage_options, cfg.sink.label)
                for p in self.participant_names(cfg)}

    def job_spec(self, cfg) -> dict:
        return {"kind": self.name, "label": cfg.sink.label}


KIND = LabelledKind()
