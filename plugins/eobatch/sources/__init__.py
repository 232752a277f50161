"""Source kinds: one package per kind, behind one interface (``SourceKind``) and this registry.

A kind answers for its YAML keys, its planner, its recorded ranges and its Spark reader (see
``base``). Nothing else in the product branches on a kind's name: config, formats, verify,
launch and the Spark job ask ``kind_for(name)``.

The built-in kinds are imported on first use (a process imports the kinds it uses: the Spark job
the one it reads); a kind's YAML model (``KIND.config_model``, pydantic) only where pipeline files
are loaded. Another kind is one package with a ``KIND`` object, registered with
``register(KIND)`` before pipelines are loaded (e.g. in an Airflow plugin module); the Spark
job finds it by the same name when the package is shipped with the job's code.
"""

from __future__ import annotations

from ..core.registry import Registry
from .base import ConfigContext, IntervalTooLarge, Planner, SourceConfig, SourceKind, SourceRange

BUILTIN = ("files", "kafka", "parquet")  # sub-packages of this one
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


__all__ = ["SourceKind", "SourceConfig", "SourceRange", "Planner", "ConfigContext", "IntervalTooLarge",
           "register", "kind_for", "kind_names", "source_for"]
