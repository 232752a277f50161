"""The config of ``kind: delta``: what its ``source:`` keys load to (``section.DeltaSection``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ...storage import s3conf
from ..base import DEFAULT_MAX_FILES_PER_BATCH, NOT_FINGERPRINTED, SourceConfig

CHOICES = {"on_change_commit": ("fail", "skip"), "on_data_loss": ("fail", "accept")}  # the first is the default
DEFAULT_MAX_VERSIONS = 100


@dataclass(frozen=True, kw_only=True)
class DeltaConfig(SourceConfig):
    table: str  # the upstream Delta table: an absolute local path or s3a://bucket/prefix
    starting_version: int = 0  # where a new pipeline starts: the first upstream version it reads
    max_versions_per_batch: int = DEFAULT_MAX_VERSIONS  # upstream versions with data a batch reads at most
    # files a batch reads at most, at version boundaries (a version is never split: one version
    # holding more files is a batch of its own)
    max_files_per_batch: int = DEFAULT_MAX_FILES_PER_BATCH
    # an upstream version that changes or deletes rows (MERGE, DELETE, UPDATE, a slice replaced):
    # fail (the plan says which version and what to do) | skip (recorded in the range and the notes)
    on_change_commit: str = "fail"
    # upstream versions or files removed (log cleanup, VACUUM) before this pipeline read them:
    # fail | accept (the plan goes on after them and records what it could not read)
    on_data_loss: str = "fail"
    # read the upstream's Change Data Feed: every change row is a record, with the metadata columns
    # _change_type (insert, update_preimage, update_postimage, delete), _commit_version and
    # _commit_timestamp; a version without change data: its added files' rows are inserts, its
    # removed files' rows deletes (the Delta protocol's definition)
    change_feed: bool = False
    # an Airflow connection (the Amazon provider's type) for an s3a:// table in another store: its
    # endpoint, region and credentials serve the table's bucket (a pipeline's own tables use
    # aws_conn_id). Credentials, not what is read: not in the fingerprint.
    conn_id: str | None = None

    @property
    def path(self) -> str:  # the config's overlap check keeps the pipeline's own tables out of it
        return self.table

    def describe(self) -> str:
        return f"delta table {self.table}"

    def fingerprint_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "conn_id" and k not in NOT_FINGERPRINTED}

    def bucket_connections(self) -> dict[str, str]:
        """``SourceConfig.bucket_connections``: the table's bucket, served by ``conn_id``."""
        return {s3conf.split(self.table)[0]: self.conn_id} if self.conn_id and s3conf.is_s3(self.table) else {}
