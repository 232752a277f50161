"""The config of ``kind: delta``: what its ``source:`` keys load to (``section.DeltaSection``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..base import SourceConfig

CHOICES = {"on_change_commit": ("fail", "skip"), "on_data_loss": ("fail", "accept")}  # the first is the default
DEFAULT_MAX_VERSIONS = 100


@dataclass(frozen=True, kw_only=True)
class DeltaConfig(SourceConfig):
    table: str  # the upstream Delta table: an absolute local path or s3a://bucket/prefix
    starting_version: int = 0  # where a new pipeline starts: the first upstream version it reads
    max_versions_per_batch: int = DEFAULT_MAX_VERSIONS  # upstream versions with data a batch reads at most
    # an upstream version that changes or deletes rows (MERGE, DELETE, UPDATE, a slice replaced):
    # fail (the plan says which version and what to do) | skip (recorded in the range and the notes)
    on_change_commit: str = "fail"
    # upstream versions or files removed (log cleanup, VACUUM) before this pipeline read them:
    # fail | accept (the plan goes on after them and records what it could not read)
    on_data_loss: str = "fail"
    # read the upstream's Change Data Feed: every change row is a record, with the metadata columns
    # _change_type (insert, update_preimage, update_postimage, delete) and _commit_version
    change_feed: bool = False

    @property
    def path(self) -> str:  # the config's overlap check keeps the pipeline's own tables out of it
        return self.table

    def describe(self) -> str:
        return f"delta table {self.table}"

    def fingerprint_dict(self) -> dict:
        return asdict(self)
