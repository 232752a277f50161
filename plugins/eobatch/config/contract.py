"""Comparing a batch's plan with the configuration a step runs under: a batch is planned, staged,
verified and committed only under one configuration (the TABLE and PENDING keys of
``config.contract``, which a plan records as ``config``).

No pydantic, no YAML: the stage job imports this to compare its spec's ``contract`` (the values
its task read from the pipeline file) with the plan, and the Airflow side (``config.config_edits``,
``verify``) compares with the roles of the running code's contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..sinks.base import PENDING, TABLE
from .ddl import parse_schema

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
