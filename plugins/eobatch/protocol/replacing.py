"""Interval mode: the files a batch's commit replaces, which plan, verify and commit all check.

A batch of an interval that was published before replaces, in the same Delta transaction, the
files its slices' newest committed batches published (``state.replaced_files``), named one by
one, or as they are now after a compaction of the pipeline's own rewrote them. Each phase checks
that they are all still in the tables: a file another writer rewrote also holds other rows, so
publishing the interval again would publish those twice (``SliceRewritten``).

``verbs.Protocol`` builds one ``Replacing`` (``proto.replacing``) and hands it to the phases; it
reads the protocol through its public queries (``queries.Queries``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.formats import STAGED, BatchPlan
from ..errors import SliceRewritten
from ..sinks import Replace
from . import state as st

if TYPE_CHECKING:
    from ..core.checkpoint import History
    from .queries import Queries


class Replacing:
    """The files a batch of an interval replaces in each table, and the check that they are there."""

    def __init__(self, proto: Queries) -> None:
        self.proto = proto
        self.app_id, self.ledger, self.participants, self.names = proto.app_id, proto.ledger, proto.participants, proto.names

    def replaces(self, plan: BatchPlan, hist: History | None = None,
                 held: int | None = None) -> dict[str, Replace] | None:
        """Interval mode, per participant: the files this batch's commit removes, named one by
        one: those its slices' newest committed batches published (``state.replaced_files``).
        None in continuous mode. ``hist`` and ``held`` (the newest batch every table holds): when
        the caller read them already."""
        if plan.interval is None:
            return None
        held = min(self.proto.committed_versions().values()) if held is None else held
        hist = (hist or self.ledger.history()).bound(held)
        by_slice = st.replaced_files(plan, hist.replace_sources(plan, held), self._current_slice_files())
        # a table of staged files replaces its slices' files, named; a merge table is told the
        # batch's slices only (an upsert re-applies its rows, running aggregates replace their
        # partials by slice: the participant says which, keeps_staged_files)
        return {part: Replace(paths=frozenset().union(*(v.get(part, set()) for v in by_slice.values())),
                              slices=tuple(sorted(n for n, v in by_slice.items() if v.get(part))))
                if self.participants[part].keeps_staged_files else Replace(slices=tuple(sorted(plan.slices())))
                for part in self.names}

    def _current_slice_files(self) -> Callable[[int, str, str, set[str]], set[str]]:
        """For ``state.replaced_files``: the files holding a slice now, after compactions of it
        (the participant's ``slice_files``); each table's live files are read once, when needed."""
        live: dict[str, set[str]] = {}

        def current(batch_id: int, participant: str, slice_: str, published: set[str]) -> set[str]:
            if participant not in STAGED:
                return published

            def live_files() -> set[str]:
                if participant not in live:
                    live[participant] = self.participants[participant].live_files()
                return live[participant]
            return self.participants[participant].slice_files(self.proto, batch_id, slice_, published, live_files)
        return current

    def check_replaceable(self, plan: BatchPlan, replaces: dict[str, Replace] | None, step: str) -> None:
        """Interval mode: refuse (SliceRewritten) a batch whose replace is no longer exact: a file
        it names is no longer in its table. ``step``: "plan", "verify" or "commit", for the text."""
        problems = []
        for part, rep in (replaces or {}).items():
            missing = rep.paths - self.participants[part].live_files() if rep.paths else set()
            if missing:
                problems.append(self.participants[part].rewritten_text(rep, missing, self.app_id))
        if problems:
            raise SliceRewritten(self.rewritten_message(plan, "; ".join(problems), step))

    def rewritten_message(self, plan: BatchPlan, problem: str, step: str, held: list[str] | None = None) -> str:
        """The text of ``SliceRewritten``: what was not done at ``step`` and why (``problem``), why the
        interval cannot simply publish again, and the repair; ``held``: the tables that hold the
        batch already (at the commit)."""
        what = {"plan": "was not planned", "verify": f"(batch {plan.batch_id}) was not PREPARED",
                "commit": f"(batch {plan.batch_id}, PREPARED) was not committed"}[step]
        text = (f"interval {plan.interval_key} {what}: {problem}. Its commit would replace those files, and the "
                f"rewritten ones also hold that interval's records (mixed with other intervals' rows), so "
                f"publishing it again would publish them twice. Nothing was published. Interval tables must "
                f"not be compacted by other writers (documentation: Concepts, \"What exactly once means\"). To publish late files of it, "
                f"move them into the folder of a later interval (without interval_prefix: touch them, so "
                f"their time falls in a later interval): that interval's run publishes them; or set "
                f"`late_files: ignore`. The interval itself cannot be re-run")
        late = [f for x in plan.late for f in x.get("files", [])]
        if late:
            text += f". The late files this batch would have published: {', '.join(late[:20])}"
        if step == "commit" and held:
            text += (f". The {', '.join(held)} table already holds batch {plan.batch_id}, so it cannot be planned "
                     f"again. Repair: undo the other writer's rewrite named above (a Delta RESTORE of that table to the "
                     f"version before it), then run again")
        elif step == "commit":
            text += (f". Repair: `make reset-batch PIPELINE={self.app_id} BATCH={plan.batch_id}` (the batch is "
                     f"published nowhere), then as above")
        return text
