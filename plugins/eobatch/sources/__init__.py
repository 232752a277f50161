"""Source kinds: one package per kind, behind one interface (``SourceKind``) and this registry.

A kind answers for its YAML keys, its planner, its recorded ranges and its Spark reader (see
``base``). Nothing else in the product branches on a kind's name: config, formats, verify,
launch and the Spark job ask ``kind_for(name)``.

The built-in kinds are imported on first use (a process imports the kinds it uses: the Spark job
the one it reads); a kind's YAML model (``KIND.config_model``, pydantic) only where pipeline files
are loaded. Another kind is one package with a ``KIND`` object, published by its distribution as
an entry point of the group ``eobatch.sources`` (``<name> = <module>:KIND``), which
``core.registry`` finds when a pipeline names it, or registered with ``register(KIND)`` before
pipelines are loaded; the Spark job finds it by the same name when the package is installed
where the job runs. A kind that is not built in declares a role for each of its keys, agreeing
with the other kinds (``config.contract.kind_part``), or it is refused.

May import: ``eobatch.core``, ``eobatch.config``, ``eobatch.storage`` (``storage.lineage``: the OpenLineage names of
a range's datasets), pyarrow; pyspark and the kinds' clients (confluent-kafka) inside functions.
Must not import: Apache Airflow, ``eobatch.pipelines`` and ``eobatch.protocol`` (the layers above),
``eobatch.airflow``, ``eobatch.job``, ``eobatch.ui``, ``eobatch.cli`` (tests/unit/test_packages.py checks every
import statement).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..config.contract import check_agrees, kind_part
from ..core.formats import planned_files
from ..core.registry import KindUnavailable, Registry
from ..errors import LedgerMismatch
from ..storage import lineage
from .base import (
    ConfigContext,
    IntervalTooLarge,
    Planner,
    RangeDetail,
    SourceConfig,
    SourceKind,
    SourcePipeline,
    SourceRange,
)

if TYPE_CHECKING:
    from ..core.formats import JSON, BatchPlan
    from ..storage.lineage import LineageDataset

BUILTIN = ("files", "kafka", "parquet", "delta")  # sub-packages of this one


def check_kind(kind: SourceKind) -> None:
    """A kind that is not built in: a role for each of its keys (``contract_keys``, ``harmless_keys``),
    none that another kind known gives another role. ValueError saying what is wrong."""
    part = kind_part("source", kind, kind.config_keys)
    others = [kind_part("source", k) for k in (*(kind_for(n) for n in BUILTIN), *REGISTRY.registered.values())]
    check_agrees(part, others)


REGISTRY: Registry[SourceKind] = Registry(__name__, BUILTIN, SourceKind, "source", check=check_kind)
register = REGISTRY.register
"""``register(kind)``: make a kind known in this process under ``kind.name`` (before pipelines load),
replacing a kind of that name: TypeError when it does not implement the interface, ValueError
when a kind that is not built in fails ``check_kind``. Returns ``kind``."""


def kind_names() -> list[str]:
    """Every kind a pipeline may name, for the config error "must be one of ..."."""
    return sorted(REGISTRY.names())


def kind_for(name: str) -> SourceKind:
    """The kind called ``name``. Raises KeyError for a name no kind has (KindUnavailable, a KeyError,
    for an installed kind that cannot be used: the message names its distribution)."""
    return REGISTRY.get(name)


def kinds() -> list[SourceKind]:
    """Every kind that can be used: the built-in ones, then the others by name."""
    return REGISTRY.kinds()


def source_for(cfg: SourcePipeline) -> Planner:
    """The planner of pipeline ``cfg``: ``next_range``, ``interval_range``, ``late``."""
    return kind_for(cfg.source.kind).planner(cfg)


def range_summary(plan: BatchPlan) -> str:
    """The batch's range in its kind's words, for logs, reports and the ledger page (its interval
    first in interval mode); as recorded (JSON) for a kind this code does not know."""
    try:
        text = kind_for(plan.source_kind).range(plan.range).summary()
    except KeyError:  # a kind this code does not know: show the range as recorded
        text = json.dumps(plan.range, sort_keys=True)
    return f"interval {plan.interval_key}: {text}" if plan.interval else text


def lineage_inputs(source: SourceConfig, plan: BatchPlan) -> list[LineageDataset]:
    """The datasets the batch's range reads, in its kind's words (``SourceKind.lineage_inputs``); of
    a kind this process does not know (a plug-in no longer installed), by its ``source.path``."""
    try:
        kind = kind_for(plan.source_kind)
    except KeyError:
        return [lineage.at(source.path, detail={"kind": plan.source_kind})] if source.path else []
    return kind.lineage_inputs(source, plan.range or {})  # a KeyError of the kind's own is its bug: raised


def range_detail(source_kind: str, rng: JSON) -> RangeDetail:
    """What the ledger page lists of a recorded range (``SourceRange.detail``); of a kind this
    process does not know, or a range its kind cannot read, its files if it names any."""
    try:
        return kind_for(source_kind).range(rng).detail()
    except (KeyError, LedgerMismatch):
        return RangeDetail(files=planned_files(rng) or ())


def compact_offsets(plan: BatchPlan) -> Any:
    """The batch's range as its Delta commits carry it (``eo.offsets``), in its kind's words."""
    return kind_for(plan.source_kind).range(plan.range).commit_offsets()


__all__ = ["SourceKind", "SourceConfig", "SourceRange", "Planner", "SourcePipeline", "ConfigContext", "IntervalTooLarge",
           "KindUnavailable", "register", "kind_for", "kind_names", "kinds", "source_for", "range_summary", "compact_offsets",
           "lineage_inputs"]
