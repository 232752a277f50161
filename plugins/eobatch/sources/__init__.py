"""Source kinds: one package per kind, behind one interface (``SourceKind``) and this registry.

A kind answers for its YAML keys, its planner, its recorded ranges and its Spark reader (see
``base``). Nothing else in the product branches on a kind's name: config, formats, verify,
launch and the Spark job ask ``kind_for(name)``.

The built-in kinds are imported on first use (a process imports the kinds it uses: the Spark job
the one it reads); a kind's YAML model (``KIND.config_model``, pydantic) only where pipeline files
are loaded. Another kind is one package with a ``KIND`` object, registered with
``register(KIND)`` before pipelines are loaded (e.g. in an Airflow plugin module); the Spark
job finds it by the same name when the package is shipped with the job's code.

May import: ``eobatch.core``, ``eobatch.config``, ``eobatch.storage`` (``storage.lineage``: the OpenLineage names of
a range's datasets), ``eobatch.job.jvm`` (the
Spark side's JVM classes), pyarrow; pyspark and the kinds' clients (confluent-kafka) inside functions.
Must not import: Apache Airflow, ``eobatch.protocol`` (the layer above), ``eobatch.airflow``, the rest
of ``eobatch.job``, ``eobatch.ui``, ``eobatch.cli`` (tests/unit/test_packages.py checks every import statement).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..core.registry import Registry
from ..storage import lineage
from .base import ConfigContext, IntervalTooLarge, Planner, SourceConfig, SourceKind, SourceRange

if TYPE_CHECKING:
    from ..core.formats import BatchPlan
    from ..storage.lineage import LineageDataset

BUILTIN = ("files", "kafka", "parquet", "delta")  # sub-packages of this one
REGISTRY: Registry[SourceKind] = Registry(__name__, BUILTIN, SourceKind, "source")
register = REGISTRY.register


def kind_names() -> list[str]:
    """Every kind a pipeline may name, for the config error "must be one of ..."."""
    return sorted(REGISTRY.names())


def kind_for(name: str) -> SourceKind:
    """The kind called ``name``. Raises KeyError for a name no kind has."""
    return REGISTRY.get(name)


def source_for(cfg) -> Planner:
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
    """The datasets the batch's range reads, in its kind's words (``SourceKind.lineage_inputs``); a
    kind without it (another package's), or that this code does not know, by its ``source.path``."""
    try:
        kind = kind_for(plan.source_kind)
    except KeyError:
        kind = None
    method = getattr(kind, "lineage_inputs", None)
    if method is not None:
        return method(source, plan.range or {})
    path = getattr(source, "path", None)
    return [lineage.at(path, detail={"kind": plan.source_kind})] if path else []


def compact_offsets(plan: BatchPlan) -> Any:
    """The batch's range as its Delta commits carry it (``eo.offsets``), in its kind's words."""
    return kind_for(plan.source_kind).range(plan.range).commit_offsets()


__all__ = ["SourceKind", "SourceConfig", "SourceRange", "Planner", "ConfigContext", "IntervalTooLarge",
           "register", "kind_for", "kind_names", "source_for", "range_summary", "compact_offsets",
           "lineage_inputs"]
