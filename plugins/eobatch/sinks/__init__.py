"""Sink kinds: one package per kind, behind one interface (``SinkKind``) and this registry.

A kind answers for its ``sink:`` keys, the tables (participants) of a batch's commit, verify's
check of its staged rows, the Spark job's step and spec, and the maintenance of its tables (see
``base``). Nothing else in the product branches on a sink's mode: config, the protocol, verify,
launch, maintenance and the Spark job ask ``kind_for`` / ``kind_for_mode``.

Built in: ``delta`` (``sink.mode: append``: the stage job's files added to a Delta table) and
``delta_merge`` (``sink.mode: merge``: an upsert or running aggregates, applied with a Delta
MERGE). They are imported on first use (a process imports the kinds it uses); a kind's YAML
model (``KIND.config_model``, pydantic) only where pipeline files are loaded. Another kind is one
package with a ``KIND`` object, published by its distribution as an entry point of the group
``eobatch.sinks`` (``<name> = <module>:KIND``: ``core.registry``), or registered with
``register(KIND)`` before pipelines are loaded; its ``job_module`` is installed where the job
runs. A kind that is not built in declares the roles of its keys agreeing with the other kinds
(``config.contract.kind_part``), or it is refused.

May import: ``eobatch.core``, ``eobatch.config``, ``eobatch.storage``, pyarrow; deltalake and
pyspark inside functions.
Must not import: Apache Airflow, ``eobatch.pipelines`` and ``eobatch.protocol`` (the layers above),
``eobatch.airflow``, ``eobatch.job``, ``eobatch.ui``, ``eobatch.cli`` (tests/unit/test_packages.py checks every
import statement).
"""

from __future__ import annotations

from ..config.contract import check_agrees, kind_part
from ..core.registry import KindUnavailable, Registry
from .base import (
    LEGACY_CONTRACT,
    PENDING,
    TABLE,
    CommitConflict,
    FingerprintMismatch,
    Participant,
    Replace,
    SinkConfig,
    SinkContext,
    SinkDriver,
    SinkKind,
    SinkPipeline,
    StagedFile,
)

BUILTIN = ("delta", "delta_merge")  # sub-packages of this one, in the order their modes are listed
DEFAULT = "delta"  # the kind of a pipeline whose sink: has no mode


def check_kind(kind: SinkKind) -> None:
    """A kind that is not built in: a mode of its own, its keys' roles (``contract_keys``,
    ``harmless_keys``) none that another kind known gives another role. ValueError saying what is wrong."""
    others = [k for k in (*(kind_for(n) for n in BUILTIN), *REGISTRY.registered.values()) if k.name != kind.name]
    same = [k.name for k in others if k.mode == kind.mode]
    if same:
        raise ValueError(f"sink.mode {kind.mode!r} is sink kind {same[0]!r}'s")
    check_agrees(kind_part("sink", kind), [kind_part("sink", k) for k in others])


REGISTRY: Registry[SinkKind] = Registry(__name__, BUILTIN, SinkKind, "sink", check=check_kind)
register = REGISTRY.register
"""``register(kind)``: make a kind known in this process under ``kind.name`` (before pipelines load),
replacing a kind of that name: TypeError when it does not implement the interface, ValueError
when a kind that is not built in fails ``check_kind`` (a mode of its own). Returns ``kind``."""
kind_names = REGISTRY.names
"""``kind_names()``: the built-in kinds, in their order, then the others by name."""


def kind_for(name: str) -> SinkKind:
    """The kind called ``name``. Raises KeyError for a name no kind has."""
    return REGISTRY.get(name)


def kinds() -> list[SinkKind]:
    """Every kind that can be used: the built-in ones, then the others by name."""
    return REGISTRY.kinds()


def modes() -> list[str]:
    """Every ``sink.mode`` a pipeline may name, for the config error "must be one of ..."."""
    return [k.mode for k in kinds()]


def kind_for_mode(mode: str) -> SinkKind:
    """The kind of ``sink.mode: <mode>``. Raises KeyError for a mode no kind has."""
    for k in kinds():
        if k.mode == mode:
            return k
    raise KeyError(f"unknown sink mode {mode!r} (known: {', '.join(modes())})")


def sink_for(cfg: SinkPipeline) -> SinkKind:
    """The sink kind of pipeline ``cfg``."""
    return kind_for(cfg.sink.kind)


def job_module(name: str) -> str:
    """Spark side: the module of kind ``name``'s job step, without importing the kind (the job's
    code holds its ``job_module`` only: ``eobatch.job.launch.SHIPPED``)."""
    if name in BUILTIN and name not in REGISTRY.registered:
        return f"{__name__}.{name}.job"
    return kind_for(name).job_module


__all__ = ["TABLE", "PENDING", "SinkKind", "SinkConfig", "SinkContext", "SinkPipeline", "SinkDriver", "Participant", "Replace", "StagedFile", "CommitConflict",
           "FingerprintMismatch", "LEGACY_CONTRACT", "DEFAULT", "KindUnavailable", "register", "kind_for", "kind_for_mode", "kind_names", "kinds",
           "modes", "sink_for", "job_module"]
