"""What the phases and the repairs read of a pipeline's protocol: ``Queries``, a structural type.

``verbs.Protocol`` is the facade that holds the pipeline's configuration, ledger and tables and
answers the questions every phase decides by (which batch each table holds, a batch's state,
what counts as read). The phase objects (``planning``, ``verify``, ``committing``, ``recovery``),
the interval mode's replaced files (``replacing``) and the repairs (``repairs``) hold the facade
only as ``Queries``: public names only, so none of them reaches into another object's private
methods, and none imports ``verbs`` (which imports them: no import circle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..config.pipeline import PipelineConfig
    from ..core.checkpoint import History, ReadSoFar, RewindKey
    from ..core.formats import BatchPlan, BatchState, Layout, RewindRecord
    from ..core.ledger import Ledger
    from ..sinks import Participant, SinkKind
    from ..storage.fs import Storage


class Queries(Protocol):
    """The pipeline's protocol as its phases and repairs read it (``verbs.Protocol`` is one): its
    configuration, ledger and tables, and the questions it answers over them."""

    cfg: PipelineConfig
    app_id: str
    layout: Layout
    ledger: Ledger
    participants: dict[str, Participant]
    names: tuple[str, ...]
    sink: SinkKind

    def fs_for(self, participant: str) -> Storage: ...

    def inputs(self, participant: str) -> str: ...

    def committed_versions(self) -> dict[str, int]: ...

    def state(self, batch_id: int, versions: dict[str, int] | None = None) -> BatchState | None: ...

    def is_abandoned(self, batch_id: int) -> bool: ...

    def prev_live(self, batch_id: int) -> int: ...

    def undecided_ids(self, latest: int, versions: dict[str, int]) -> list[int]: ...

    def check_config(self, batch_id: int, versions: dict[str, int] | None = None,
                     plan: BatchPlan | None = None) -> None: ...

    def check_consistent(self, latest: int, versions: dict[str, int]) -> None: ...

    def read_so_far(self, pending_rewind: RewindRecord | None = None, hist: History | None = None) -> ReadSoFar: ...

    def rewinds_in_effect(self, hist: History | None = None) -> list[RewindKey]: ...

    def start_marker(self, k: BatchPlan) -> BatchPlan | None: ...

    def sink_record(self) -> str | None: ...
