"""The check every phase runs first: a configuration edit is an event of the protocol.

A batch is planned, staged, verified and committed under the configuration that planned it
(``config.contract``: what its plan records). ``check_config`` refuses (ConfigChanged) a TABLE key
that differs from the plan's, and a PENDING key while the batch is not decided yet, with the
repair in its text; and (ProtocolError) a sink of another kind than the one the plan was written
for. ``verbs.Protocol.check_config`` hands over to it; it reads the protocol through its public
queries (``queries.Queries``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..config.contract import Edit, edits_text
from ..core.stuck import command
from ..errors import ConfigChanged, ProtocolError
from ..pipelines.loader import TABLE, config_edits
from ..sinks import LEGACY_CONTRACT
from . import state as st
from .recovery import prepare_decided

if TYPE_CHECKING:
    from ..core.formats import BatchPlan
    from .queries import Queries


def check_config(proto: Queries, batch_id: int, versions: dict[str, int] | None = None,
                 plan: BatchPlan | None = None) -> None:
    """Refuse (ConfigChanged) a TABLE key of the pipeline's file that differs from batch
    ``batch_id``'s plan, and a PENDING key when that batch is not decided yet (``versions``: the
    tables' batches; None: it is not), and (ProtocolError) another kind of sink than the plan's.
    ``plan``: batch ``batch_id``'s, when the caller read it already."""
    if not batch_id:
        return
    plan = plan or proto.ledger.require_plan(batch_id)
    pending = True if versions is None else st.undecided(batch_id, versions, proto.is_abandoned(batch_id))
    edits = config_edits(plan.config, proto.cfg, pending)
    if edits:
        raise ConfigChanged(_edits_message(proto, plan, edits, versions))
    _check_sink(proto, plan)


def _edits_message(proto: Queries, plan: BatchPlan, edits: list[Edit], versions: dict[str, int] | None) -> str:
    """The text of ConfigChanged: which keys changed, why they cannot now, and the repair."""
    b = plan.batch_id
    what = edits_text(edits, b)
    keys = ", ".join(k for k, *_ in edits)
    text = f"{proto.cfg.file} changed {keys} of pipeline {proto.app_id!r}: {what}. "
    if any(role == TABLE for _k, role, *_ in edits):
        return text + ("These keys say what the rows of the tables mean and where they are: they cannot change "
                       "under an existing table that holds batches (they would publish wrong rows, or no batch could "
                       "commit again). Nothing was changed. Repair: put the old values back, or give the pipeline a "
                       "new sink.table (and quarantine.table) to start new tables from the source's beginning")
    versions = versions if versions is not None else proto.committed_versions()
    held = [p for p, v in versions.items() if v >= b]
    text += (f"Batch {b} is {proto.state(b, versions) or 'PLANNED'} and a pending batch is committed under the "
             f"configuration that planned it, so the edit waits until it is. Nothing was changed. Repair: "
             f"put the old value(s) back and let a run commit batch {b}, then make the edit again")
    if held:
        return text + f" (the {', '.join(held)} table already holds batch {b}: it cannot be planned again)"
    deciding = prepare_decided(proto.ledger, b)
    if deciding is not None and proto.ledger.prepared(b) is None:  # reset refuses it (Repairs._decide_forgotten)
        return text + (f" (a verify decided attempt {deciding} for PREPARE and has not written PREPARED: the "
                       f"batch is being committed and cannot be planned again; a run's recover finishes it "
                       f"under the old values)")
    return text + (f"; or plan it again under the new configuration (nothing of it is published): trigger a run "
                   f"with the param replan_pending=true "
                   f"(`{command('run', proto.app_id, conf=json.dumps({'replan_pending': True}))}`), or "
                   f"`{command('reset-batch', proto.app_id, b)}` and the next run plans its range again")


def _check_sink(proto: Queries, plan: BatchPlan) -> None:
    """A batch planned for another kind of sink (``PipelineConfig.sink_contract``) than the
    pipeline's now is never planned past, staged or committed: an appended table read as one
    row per key, or rows folded under other keys, would be wrong rows, silently."""
    was = plan.sink or LEGACY_CONTRACT
    if was != proto.cfg.sink_contract:
        raise ProtocolError(
            f"the tables of {proto.app_id!r} hold batches written for a sink of kind {was!r} (batch "
            f"{plan.batch_id}'s plan), and {proto.cfg.file} now says {proto.cfg.sink_contract!r}: the kind of "
            f"sink (sink.mode, merge keys, aggregates) cannot change under an existing table. Put it back, or "
            f"give the pipeline a new sink.table (and quarantine.table) to start a new table from the source's "
            f"beginning")
