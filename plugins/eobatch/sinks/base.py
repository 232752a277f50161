"""What every sink kind implements (``SinkKind``), and what the protocol needs of each table of a
batch's commit (``Participant``), in the protocol's own words.

A sink kind is one package under ``eobatch/sinks/`` whose ``KIND`` object answers for the places
that used to branch on the sink's mode:

* the pipeline YAML (``config``): which ``sink:`` keys it adds, what they mean, how they enter
  the fingerprint and the configuration contract (``config.contract``);
* the protocol (``protocol``): the tables a batch is committed to, in commit order, and the
  participant of each; verify's check of the staged output (``check_staged``);
* the Spark job: what it needs of the sink (``job_spec``) and the step it applies to the
  transform's output before the sink's rows are staged (``job_module``: a module with
  ``step(df, job, within)`` and ``KEEPS_ROWS``);
* maintenance: one pass over one of its tables (``maintain_table``).

A participant is one table of a batch's commit. The protocol asks it which batch of a pipeline
it holds (``committed_batch``), has it commit a batch's staged output with the batch's id
(``commit``: atomic, and refused when the table does not hold the batch before it), and rolls
it back to before a batch (``restore_point``, ``roll_back``). Everything else is the sink's own.

No pyspark and no Airflow at module level, here and in every kind's package.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

# the roles of the configuration contract's keys (``config.contract``), for the kinds' ``contract_keys``
from ..config.contract import PENDING as PENDING
from ..config.contract import TABLE as TABLE

# the base of every kind's ``sink:`` config, under the kinds (``config.pipeline`` holds one), and what a
# plan without a ``sink`` record means (plans written before there was a choice of sink)
from ..config.sections import LEGACY_CONTRACT as LEGACY_CONTRACT
from ..config.sections import SinkConfig as SinkConfig

# a batch's staged files as a participant's commit and the kind's check of them get them
from ..core.formats import StagedFile as StagedFile
from ..errors import RetryableError, TerminalError

if TYPE_CHECKING:
    import pyarrow as pa

    from ..config.ddl import Column
    from ..core.formats import JSON, Layout
    from ..core.ledger import Ledger
    from ..storage.fs import Storage

class CommitConflict(RetryableError):
    """Another writer committed first; re-read the table and decide again."""


class FingerprintMismatch(TerminalError):
    """The table holds this batch with a different file set than the one prepared."""


@dataclass(frozen=True)
class Replace:
    """Interval mode: the exact live files a commit removes in the same transaction (slice
    replace), and the slices they hold (for the log, the commit info and the errors)."""

    paths: frozenset[str] = frozenset()
    slices: tuple[str, ...] = ()

    def describe(self) -> str:
        return ", ".join(self.slices)


@dataclass(frozen=True)
class SinkContext:
    """What a kind's parser needs besides its ``sink:`` mapping: the file (for ConfigError), the
    transform (``passthrough`` publishes the schema's columns) and the schema's columns."""

    file: str
    transform: str
    columns: tuple[Column, ...]


class SinkPipeline(Protocol):
    """The pipeline a sink kind is asked about (``SinkKind.participant_names`` and the others): a
    ``config.pipeline.PipelineConfig`` is one. A structural type: the pipeline's config holds the
    kind's ``SinkConfig`` (a subclass of ``config.sections.SinkConfig``), and the kinds name only what
    they read of it."""

    @property
    def name(self) -> str:
        """The pipeline's name."""
        ...

    @property
    def mode(self) -> str:
        """The pipeline's mode: ``continuous`` or ``interval``."""
        ...

    @property
    def sink(self) -> SinkConfig:
        """Its ``sink:`` keys, as this kind's ``parse_config`` returned them."""
        ...


class Participant(Protocol):
    """One table of a batch's commit (the sink, the quarantine, a sink's own tables)."""

    name: str
    """The participant's name (``sink``, ``quarantine``, a sink's own table), as the ledger records it."""
    uri: str
    """Where the table is (a local path or an ``s3://`` URI)."""
    storage_options: dict[str, str] | None
    """How a reader opens the table (S3: endpoint, region, credentials); None for a local table."""
    reads_from: str | None
    """The participant whose staged files its commit takes; None: its own."""
    keeps_staged_files: bool
    """False: its commit reads the staged files (merge), so they can go once every table holds the batch."""

    def exists(self) -> bool:
        """Whether the table exists yet (its first commit creates it)."""
        ...

    def committed_batch(self, app_id: str) -> int:
        """The last batch of ``app_id`` the table holds (0: none, or no table yet)."""

    def commit(self, app_id: str, batch_id: int, adds: list[StagedFile], schema: pa.Schema, partition_by: list[str],
               metadata: JSON, expected_prev: int | None = None, replace: Replace | None = None) -> int:
        """One atomic commit of batch ``batch_id``'s staged output ``adds`` (of ``schema``; the
        staged files of its participant, or of the one it ``reads_from``) with ``metadata``, only
        on top of batch ``expected_prev`` (default ``batch_id - 1``): CommitConflict otherwise.
        Returns the table's new version."""

    def find_batch_commit(self, app_id: str, batch_id: int) -> tuple[int, JSON] | None:
        """(version, commit metadata) of the commit that carried batch ``batch_id``, or None."""

    def find_commit(self, key: str, value: str, limit: int | None = None) -> int | None:
        """The version of the newest commit (of the last ``limit``) whose commit info has ``key == value``."""
        ...

    def restore_point(self, app_id: str, batch_id: int) -> int | None:
        """Where ``roll_back`` goes to be before batch ``batch_id`` (None: no longer known)."""

    def missing_files_at(self, point: int, fs: Storage) -> list[str]:
        """Files that rolling back to ``point`` needs and storage no longer holds."""

    def roll_back(self, point: int, metadata: JSON, mark: str) -> int:
        """Bring the table back to ``point``, durably marked with ``mark`` (``rolled_back``)."""

    def rolled_back(self, mark: str) -> bool:
        """Whether a ``roll_back`` carrying ``mark`` is in the table."""
        ...

    def accepts(self, staged: pa.Schema, partition_by: list[str], evolution: str, where: str = "") -> list[str]:
        """Problems of committing staged files of ``staged`` partitioned by ``partition_by`` (verify)."""

    def live_files(self) -> set[str]:
        """The paths of the table's current files (relative to its root); empty when there is no table."""
        ...

    def rewritten_text(self, replace: Replace, missing: AbstractSet[str], app_id: str) -> str:
        """Interval mode, for ``SliceRewritten``: what happened to the ``missing`` files of ``replace``
        (how many are gone, and the table's recent commits by writers other than ``app_id``)."""
        ...

    def slice_files(self, proto: SinkDriver, batch_id: int, slice_: str, published: set[str],
                    live: Callable[[], set[str]]) -> set[str]:
        """Interval mode: the files holding ``slice_`` of ``batch_id`` now (``published``, or
        what a compaction of it rewrote them into)."""

    def dataset(self) -> Any:
        """The table's current rows (a pyarrow dataset), or None when there is no table yet."""


class SinkDriver(Protocol):
    """The protocol driving a pipeline's tables, as a sink kind's ``maintain_table`` and a
    participant's ``slice_files`` read it: ``protocol.verbs.Protocol`` is one (a structural type:
    the kinds import nothing of the protocol, the layer above them)."""

    @property
    def cfg(self) -> SinkPipeline:
        """The pipeline (its ``PipelineConfig``)."""
        ...

    @property
    def app_id(self) -> str:
        """The pipeline's id in the tables' commits (Delta's ``txn`` appId)."""
        ...

    @property
    def layout(self) -> Layout:
        """Where the pipeline's tables and ledger are."""
        ...

    @property
    def ledger(self) -> Ledger:
        """The pipeline's ledger."""
        ...

    @property
    def participants(self) -> dict[str, Participant]:
        """The participant of each table of a batch's commit, by name (``SinkKind.participants``)."""
        ...

    def fs_for(self, participant: str) -> Storage:
        """The storage of a participant's table."""
        ...


@runtime_checkable
class SinkKind(Protocol):
    """One sink kind. Register an instance with ``eobatch.sinks.register``."""

    name: str
    """The kind's name: its package's."""
    mode: str
    """What a pipeline YAML gives as ``sink.mode`` to choose it (no two kinds share one)."""
    config_keys: frozenset[str]
    """The keys it adds under ``sink:`` (besides ``table``, ``partition_by``, ``mode``)."""
    job_module: str
    """Spark side: the module (by name) of ``step(df, job, within)`` and ``KEEPS_ROWS``."""
    contract_keys: dict[str, tuple[str, Callable[[Any], Any]]]
    """Its keys that a plan records, in the configuration contract (``config.contract``): ``sink.<...>``
    -> (``TABLE`` or ``PENDING``, the key's value of the kind's ``SinkConfig``); a pipeline of another
    kind records None for them."""
    harmless_keys: dict[str, str]
    """Its other keys: ``sink.<...>`` -> why a pending batch does not depend on it."""

    # -- Airflow side --------------------------------------------------------------------
    def parse_config(self, section: dict[str, Any], ctx: SinkContext) -> SinkConfig:
        """The ``sink:`` mapping (unknown keys already refused); ConfigError naming file and key."""

    def participant_names(self, cfg: SinkPipeline) -> tuple[str, ...]:
        """The tables a batch of pipeline ``cfg`` is committed to, in commit order."""

    def participants(self, cfg: SinkPipeline, layout: Layout, fs_for: Callable[[str], Storage],
                     storage_options: dict[str, str] | None) -> dict[str, Participant]:
        """The participant of each of ``participant_names(cfg)``."""

    def check_staged(self, cfg: SinkPipeline, fs: Storage, table_root: str, adds: list[StagedFile],
                     staged: pa.Schema) -> list[str]:
        """Problems of the sink's staged rows (verify), beyond files, counts and schema."""

    def job_spec(self, cfg: SinkPipeline) -> JSON:
        """What the Spark job needs of the sink (the job spec's ``sink``), ``kind`` included."""

    def changes(self, commit_info: JSON, staged_rows: int | None) -> dict[str, int]:
        """What a batch's commit did to the sink table, per kind of change ({"inserted": n, ...}),
        from the commit's Delta ``commit_info`` and the rows the batch staged (``staged_rows``);
        {} when its published count says it all (an append inserts every staged row)."""

    def maintain_table(self, proto: SinkDriver, participant: str, *, compact: bool, retention_hours: float,
                       checkpoint: bool) -> tuple[JSON | None, list[str]]:
        """One maintenance pass over one table: (its report entry, None when there is no table; notes)."""
