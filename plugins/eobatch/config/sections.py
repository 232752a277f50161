"""The bases of the kinds' sections of a loaded pipeline: ``SourceConfig`` (every source kind's
parsed ``source:`` mapping) and ``SinkConfig`` (every sink kind's parsed ``sink:`` keys), what a
``PipelineConfig`` holds of them.

Here, under the kinds, so that ``config.pipeline`` names them without importing a kind: each kind
subclasses them (``eobatch.sources.base`` and ``eobatch.sinks.base`` export them under the same
names). Pure Python: no pydantic, no YAML, nothing of ``storage``; the Spark job imports this module
with the kinds.
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

JSON = dict[str, Any]  # as ``core.formats.JSON`` (config imports nothing of core)

# keys that bound how a range is planned, not what it holds (a pending batch's range is in its plan):
# not in the fingerprint, so a pipeline keeps its fingerprint when they came
NOT_FINGERPRINTED = ("max_files_per_batch", "discovery", "full_listing_hours", "notifications")

# What a plan without a ``sink`` record means (plans written before there was a choice of sink)
LEGACY_CONTRACT = "append"


@dataclass(frozen=True, kw_only=True)
class SourceConfig:
    """Base of every kind's parsed ``source:`` mapping. ``path`` is the source's folder, or None for
    a kind that has none: config checks it against the tables, launch looks for s3a:// in it."""

    kind: str
    max_records_per_batch: int = 100_000
    settle_seconds: int = 60  # interval mode: an interval is planned only this long after its end
    if TYPE_CHECKING:  # read-only to callers: a kind with a folder makes it a field (files, parquet)
        @property
        def path(self) -> str | None: ...

        @property
        def include(self) -> tuple[str, ...]: ...
    else:
        path: ClassVar[str | None] = None
        include: ClassVar[tuple[str, ...]] = ()  # a landing kind makes it a field: the names it reads

    def describe(self) -> str:
        return str(self.path)

    def takes_name(self, path: str) -> bool:
        """Whether this source reads a landing file of this name: ``source.include``, globs of the
        file's name (not its folder), case-sensitive (``*.jsonl`` is what ``.jsonl`` always meant);
        every name for a kind without landing files."""
        name = path.rsplit("/", 1)[-1]
        return not self.include or any(fnmatch.fnmatchcase(name, g) for g in self.include)

    # keys newer than the kind, hashed only when they differ from these defaults: a YAML that does not
    # set them (or sets the default) keeps the fingerprint it always had
    HASHED_UNLESS_DEFAULT: ClassVar[dict[str, Any]] = {}

    def fingerprint_dict(self) -> JSON:
        """What ``PipelineConfig.fingerprint`` hashes of the source."""
        return unless_default(self, {k: v for k, v in asdict(self).items() if k not in NOT_FINGERPRINTED})

    def bucket_connections(self) -> dict[str, str]:
        """S3 buckets this source reads with credentials of their own: bucket -> the Airflow
        connection (the Amazon provider's type) that serves it (``s3conf.Store.buckets``)."""
        return {}


def unless_default(cfg: SourceConfig, d: JSON) -> JSON:
    """``d`` (a fingerprint dict of ``cfg``) without the keys of ``HASHED_UNLESS_DEFAULT`` whose value
    is the default; the others as JSON has them (a tuple as a list)."""
    out = {k: v for k, v in d.items() if k not in cfg.HASHED_UNLESS_DEFAULT}
    for k, default in cfg.HASHED_UNLESS_DEFAULT.items():
        v = getattr(cfg, k)
        if v != default:
            out[k] = list(v) if isinstance(v, tuple) else v
    return out


@dataclass(frozen=True, kw_only=True)
class SinkConfig:
    """Base of every kind's parsed ``sink:`` keys (beyond ``table`` and ``partition_by``, which
    every pipeline has: ``PipelineConfig.sink_table``, ``partition_by``)."""

    kind: str

    def contract(self, mode: str) -> str:
        """What a row of the sink means, recorded in each plan (``BatchPlan.sink``): it cannot
        change under a table. ``mode`` is the pipeline's (continuous, interval)."""
        return LEGACY_CONTRACT

    def fingerprint_dict(self) -> JSON:
        """What ``PipelineConfig.fingerprint`` adds for the sink ({}: nothing)."""
        return {}
