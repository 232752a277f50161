"""The configuration contract, and comparing a batch's plan with the configuration a step runs
under: a batch is planned, staged, verified and committed only under one configuration (the TABLE
and PENDING keys, which a plan records as ``config``).

Every key of a pipeline file has one of three roles. Each plan records the values of the TABLE and
PENDING keys (``BatchPlan.config``); plan, recover, verify and commit compare them with the file's
now (``pipelines.loader.config_edits``) and refuse (``ConfigChanged``), naming the key, the old and the new value:

* TABLE: what the tables' rows mean and where they are: fixed while the tables hold batches;
* PENDING: what a batch is staged, verified or committed with: a batch that is PLANNED, STAGED or
  PREPARED finishes under the values that planned it (the edit waits until it has);
* harmless: read only when a batch is planned or scheduled, or by no batch at all (the reason says).

The keys every pipeline has are here (``PIPELINE_KEYS``, ``PIPELINE_HARMLESS``, ``SECTION_HARMLESS``);
each source and sink kind declares the roles of its own keys (``contract_keys``, ``harmless_keys``:
``kind_part``), and ``assemble`` puts them together (``pipelines.loader.contract``, with every kind the
registries know, built-in or plug-in).

No pydantic, no YAML, no kind: the stage job imports this to compare its spec's ``contract`` (the
values its task read from the pipeline file) with the plan, and the Airflow side (``pipelines.loader.config_edits``,
``verify``) compares with the roles of the running code's contract."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .ddl import parse_schema

# The roles of the keys of the configuration contract (the harmless keys have a reason instead)
TABLE, PENDING = "table", "pending"
ROLES = (TABLE, PENDING)
Getter = Callable[[Any], Any]  # a key's value: of a PipelineConfig here, of the kind's config in a kind's part

PASSTHROUGH = "passthrough"  # the transform that publishes the parsed records unchanged
# the packages of a transform in the stage job: shipped with eobatch, or a pipeline folder's own
# (config.transforms), which the code zip holds
SHIPPED_TRANSFORMS, OWN_TRANSFORMS = "spark_jobs.transforms", "pipeline_transforms"
NOT_GIVEN = "<not given>"  # a key a plan records and a job's contract values do not hold

Edit = tuple[str, str, Any, Any]  # (key, role, the plan's value, the other value)


def contract_edits(recorded: dict | None, now: dict, roles: Mapping[str, str] | None = None,
                   pending: bool = True) -> list[Edit]:
    """The edits between two records of ``config_values``: a plan's, and the values a stage job ran
    with (its spec's ``contract``, kept in its stage summary) or the file's now. ``roles``: each
    key's role in the running code's contract (``config.contract``); a key it does not know is not
    compared, and a key it knows that ``now`` lacks counts as changed (to NOT_GIVEN). Without
    ``roles`` (the stage job, which has no contract of its own), the keys ``now`` holds are
    compared: its spec's values are ``config_values`` of the code that built it. ``pending=False``
    compares the TABLE keys only."""
    keys = dict(roles) if roles is not None else dict.fromkeys(now, PENDING)
    wanted = (TABLE, PENDING) if pending else (TABLE,)
    was = recorded or {}
    return [(k, keys[k], was[k], now.get(k, NOT_GIVEN)) for k in sorted(was)
            if k in keys and keys[k] in wanted and was[k] != now.get(k, NOT_GIVEN)]


def edits_text(edits: list[Edit], batch_id: int, now: str = "is now") -> str:
    """The one wording of configuration edits, for every refusal (ConfigChanged, the stage job's,
    verify's): each key, the value batch ``batch_id``'s plan recorded and the other one."""
    return "; ".join(f"{k} was {old!r} when batch {batch_id} was planned and {now} {new!r}"
                     for k, _r, old, new in edits)


def contract_refusal(plan, contract: dict | None, attempt: str) -> str | None:
    """Why a stage job must not stage ``attempt`` of ``plan``'s batch with the contract values
    ``contract`` of its spec (``config_values`` of the file its task read), or None. A batch is
    staged only under the configuration that planned it; the task checks the file before it
    builds the job (``Protocol.check_stage``) and its retry builds the job again."""
    if plan.config is None:  # planned before plans recorded it: nothing to compare
        return None
    b = plan.batch_id
    if contract is None:
        return (f"batch {b} attempt {attempt} is not staged: the job spec does not say which configuration it "
                f"was built from (a stage task of an older version). Nothing was staged; the task's retry "
                f"builds the job again")
    edits = contract_edits(plan.config, contract)
    if not edits:
        return None
    return (f"batch {b} attempt {attempt} of pipeline {plan.pipeline!r} is not staged: its job was built from a "
            f"pipeline file that changed {', '.join(k for k, *_ in edits)}: {edits_text(edits, b, 'the job has')}. "
            f"A batch is staged, verified and committed only under the configuration that planned it. Nothing "
            f"was staged. The stage task builds the job from the pipeline file when it starts and refuses while "
            f"the file differs from the plan (naming the repair: put the old values back, or reset the batch); "
            f"once the file says what the plan recorded, its retry stages the batch")


def staged_columns(values: dict | None) -> set[str] | None:
    """The published columns of a batch's sink files under the configuration ``values`` (a plan's
    ``config``): the schema's, when the transform publishes the records unchanged (whatever the
    sink kind: a merge sink adds only ``_``-prefixed columns, never published); None when another
    transform decides them, or the plan records no configuration."""
    if not values or values.get("transform") != PASSTHROUGH or not isinstance(values.get("schema"), str):
        return None
    return {c.name for c in parse_schema(values["schema"]) if not c.name.startswith("_")}


# -- the contract's keys: every pipeline's, and each kind's part ------------------------------------
# the keys every pipeline has, whatever its kinds: key -> (role, its value of a PipelineConfig)
PIPELINE_KEYS: dict[str, tuple[str, Getter]] = {
    "name": (TABLE, lambda c: c.name),  # the tables' txn appId
    "sink.partition_by": (TABLE, lambda c: list(c.partition_by)),  # a Delta table's partitioning is fixed
    "sink.mode": (TABLE, lambda c: c.sink_mode),  # and each sink kind's keys (SinkKind.contract_keys)
    "mode": (PENDING, lambda c: c.mode),
    "schema": (PENDING, lambda c: c.schema),
    "transform": (PENDING, lambda c: c.transform),
    "transform.options": (PENDING, lambda c: c.transform_options),
    "transform.code": (PENDING, lambda c: c.transform_code),  # the own file's SHA-256 (config.transforms)
    "max_record_bytes": (PENDING, lambda c: c.max_record_bytes),
    "expectations": (PENDING, lambda c: [[e.name, e.expr, e.action] for e in c.expectations]),
    "schema_evolution": (PENDING, lambda c: c.schema_evolution),
    "source.kind": (PENDING, lambda c: c.source.kind),  # and each source kind's keys (SourceKind.contract_keys)
}
# the harmless keys every pipeline has: key -> why
PIPELINE_HARMLESS: dict[str, str] = {
    "description": "text for people",
    "schedule": "when runs start; a pending batch's interval is in its plan",
    "aws_conn_id": "credentials, not what is read or written",
    "max_batches_per_run": "how many batches a run plans; each batch's range is in its plan",
    # the tables' txn says what they hold: a table moved with the ledger under it goes on, a new empty one
    # under an existing ledger is a gap that recover and plan refuse (LedgerMismatch)
    "sink.table": "where the tables are, not what they mean",
    "quarantine.table": "where the tables are, not what they mean",
}
# the sections whose every key is harmless: section -> why (its keys are the loader's: ``assemble``)
SECTION_HARMLESS: dict[str, str] = {
    "spark": "where and with what resources the stage job runs",
    "retries": "how often and how long a run tries",
    "alerts": "who is told what",
    "maintenance": "maintenance keeps exactly-once under any settings",
}
SECTIONS = ("source", "sink")  # the sections whose keys are each kind's own


@dataclass(frozen=True)
class KindPart:
    """What one kind declares of the contract: ``keys`` (key -> (role, value of the kind's config:
    its ``SourceConfig`` or ``SinkConfig``)) and ``harmless`` (key -> why), every key under its
    ``section`` (``source.`` or ``sink.``)."""

    section: str
    kind: str
    keys: Mapping[str, tuple[str, Getter]]
    harmless: Mapping[str, str]


def kind_part(section: str, kind: Any, yaml_keys: Iterable[str] | None = None) -> KindPart:
    """The part of ``kind`` (a source or sink kind) in the contract: its ``contract_keys`` and
    ``harmless_keys``, checked: every key under ``section.``, a role of ``ROLES`` or a reason, no key
    both, none of the keys every pipeline has; with ``yaml_keys`` (the keys the kind takes under
    ``section:``), each of them has a role (``kind`` is the pipeline's, not the kind's). ValueError
    naming the kind and the key otherwise."""
    name = getattr(kind, "name", repr(kind))
    keys, harmless = dict(getattr(kind, "contract_keys", {})), dict(getattr(kind, "harmless_keys", {}))
    where = f"{section} kind {name!r}"
    for key, value in keys.items():
        if not (isinstance(value, tuple) and len(value) == 2 and value[0] in ROLES and callable(value[1])):
            raise ValueError(f"{where}: contract_keys[{key!r}] must be (role, function of the kind's config) with "
                             f"role {' or '.join(map(repr, ROLES))}, got {value!r}")
    for key, reason in harmless.items():
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{where}: harmless_keys[{key!r}] must say why the key is harmless, got {reason!r}")
    for key in [*keys, *harmless]:
        if not isinstance(key, str) or not key.startswith(f"{section}.") or key in PIPELINE_KEYS \
                or key in PIPELINE_HARMLESS:
            raise ValueError(f"{where}: {key!r} is not a key of its own: a kind declares keys {section}.<key>, "
                             f"other than every pipeline's ({', '.join(k for k in PIPELINE_KEYS if k.startswith(section))})")
    both = sorted(set(keys) & set(harmless))
    if both:
        raise ValueError(f"{where}: {both[0]} is both in contract_keys and in harmless_keys")
    if yaml_keys is not None:
        missing = sorted({f"{section}.{k}" for k in yaml_keys if k != "kind"} - keys.keys() - harmless.keys())
        if missing:
            raise ValueError(f"{where}: no role for {', '.join(missing)}: each of its keys is in contract_keys "
                             f"(a pending batch depends on it) or in harmless_keys (with the reason it is not)")
    return KindPart(section, name, keys, harmless)


def part_clashes(part: KindPart, others: Iterable[KindPart]) -> list[str]:
    """Where ``part`` disagrees with ``others`` (other kinds' parts): a key one of them declares with
    another role, or in the contract where the other has it harmless (or the other way round). Two
    kinds may share a key (``source.path``): each pipeline records the value of its own kind."""
    out = []
    for other in others:
        if other.section != part.section or other.kind == part.kind:
            continue
        for key, (role, _get) in part.keys.items():
            if key in other.keys and other.keys[key][0] != role:
                out.append(f"{key} is {role} here and {other.keys[key][0]} for {part.section} kind {other.kind!r}")
            elif key in other.harmless:
                out.append(f"{key} is {role} here and harmless for {part.section} kind {other.kind!r}")
        out += [f"{key} is harmless here and {other.keys[key][0]} for {part.section} kind {other.kind!r}"
                for key in part.harmless if key in other.keys]
    return out


def check_agrees(part: KindPart, others: Iterable[KindPart]) -> None:
    """ValueError when ``part`` gives a key another role than one of ``others`` (``part_clashes``):
    a kind that is not built in is refused then."""
    clashes = part_clashes(part, others)
    if clashes:
        raise ValueError(f"its keys' roles in the configuration contract are not those of the other kinds: "
                         f"{'; '.join(clashes)}")


@dataclass(frozen=True)
class Contract:
    """The roles of every key: ``keys`` (key -> (role, its value of a PipelineConfig)) and
    ``harmless`` (key -> why)."""

    keys: Mapping[str, tuple[str, Getter]]
    harmless: Mapping[str, str]

    def roles(self) -> dict[str, str]:
        """Each contract key's role (TABLE or PENDING), for ``contract_edits``."""
        return {k: role for k, (role, _get) in self.keys.items()}

    def values(self, cfg: Any) -> dict[str, Any]:
        """The value of each key for pipeline ``cfg`` (None for a key of another kind than its own)."""
        return {k: get(cfg) for k, (_role, get) in self.keys.items()}


def _kind_value(section: str, getters: Mapping[str, Getter]) -> Getter:
    """A kind key's value of a PipelineConfig: its kind's (``getters``: kind -> value of the kind's
    config), None for a pipeline whose kind does not declare it."""
    def value(cfg: Any) -> Any:
        own = getattr(cfg, section)
        get = getters.get(own.kind)
        return None if get is None else get(own)
    return value


def assemble(parts: Iterable[KindPart], sections: Mapping[str, Iterable[str]]) -> Contract:
    """The contract of the pipeline keys, ``SECTION_HARMLESS``'s sections (``sections``: section ->
    its keys) and the kinds' ``parts``. A key several kinds declare takes the role they agree on
    (ValueError when they do not: ``part_clashes``) and the reason of the first; every pipeline
    records every kind's keys, None for those of kinds other than its own."""
    parts = list(parts)
    keys: dict[str, tuple[str, Getter]] = dict(PIPELINE_KEYS)
    harmless = dict(PIPELINE_HARMLESS)
    for section, why in SECTION_HARMLESS.items():
        harmless.update({f"{section}.{k}": why for k in sections.get(section, ())})
    getters: dict[str, dict[str, Getter]] = {}
    roles: dict[str, str] = {}
    for i, part in enumerate(parts):
        clashes = part_clashes(part, parts[:i])
        if clashes:
            raise ValueError(f"{part.section} kind {part.kind!r} disagrees with another kind: {'; '.join(clashes)}")
        for key, (role, get) in part.keys.items():
            getters.setdefault(key, {})[part.kind] = get
            roles[key] = role
        for key, why in part.harmless.items():
            harmless.setdefault(key, why)
    for key, by_kind in getters.items():
        keys[key] = (roles[key], _kind_value(key.split(".", 1)[0], by_kind))
    return Contract(keys, harmless)
