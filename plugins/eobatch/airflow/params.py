"""The params a run accepts (the trigger form in the Airflow UI), checked before anything runs.

Airflow validates each declared param against its JSON schema when a run is created; this
module adds what a schema cannot say (unknown keys, combinations, mode) so that a bad trigger
is refused with one clear message before anything is planned or staged. No Airflow imports.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..config.pipeline import MAX_BATCHES_PER_RUN
from ..errors import UsageError
from ..protocol.batch_run import RunParams

PARAMS_DOC = {
    "max_records_per_batch": "Upper bound of records for a new batch (default: the YAML's value). "
                             "Interval mode: an interval holding more fails instead of being split.",
    "max_batches_per_run": "Continuous mode: how many new batches this run plans, stages in one Spark "
                           "application and commits one after another (default: the YAML's max_batches_per_run).",
    "dry_run": "Plan, stage and verify, then abort and report what would have been published. "
               "Nothing is published; the planned range stays recorded and the next run re-stages it. "
               "With rewind_to_batch: report what the rewind would restore, and change nothing.",
    "rewind_to_batch": "Continuous mode: restore the tables to before this committed batch and read "
                       "again from its start (the batches from it on become REWOUND). Run it with "
                       "dry_run first; the real rewind needs confirm_rewind.",
    "confirm_rewind": "Confirms a rewind_to_batch that changes the published tables (a dry run "
                      "needs no confirmation).",
    "accept_loss": "A rewind whose batches' landing files are gone (expired) is refused, naming them: "
                   "their rows would be taken back for good. This goes ahead anyway; the ledger records the loss.",
    "replan_pending": "Continuous mode: the pending batches (planned, maybe staged, never PREPARED, in no table) "
                      "are forgotten and their range is planned again under the pipeline file as it is now: the "
                      "way on after a transform or another key a pending batch pinned was changed (a fix), "
                      "which is otherwise refused until the batch commits.",
}
# The trigger form: each param's title and section (Airflow groups the fields by section).
PARAMS_FORM = {
    "max_records_per_batch": ("Max records in a new batch", "Batch"),
    "max_batches_per_run": ("Max batches this run carries", "Batch"),
    "dry_run": ("Dry run (publish nothing)", "Batch"),
    "rewind_to_batch": ("Rewind to batch", "Rewind (continuous mode)"),
    "confirm_rewind": ("Yes, rewind the published tables", "Rewind (continuous mode)"),
    "accept_loss": ("Rewind even though landing files are gone", "Rewind (continuous mode)"),
    "replan_pending": ("Plan the pending batches again under the edited file", "Repair (continuous mode)"),
}
REWIND_PARAMS = ("rewind_to_batch", "confirm_rewind", "accept_loss")
CONTINUOUS_PARAMS = (*REWIND_PARAMS, "max_batches_per_run", "replan_pending")


def params_for_mode(mode: str) -> tuple[str, ...]:
    """The params a pipeline in ``mode`` offers: in interval mode no rewind (an interval runs again)
    and one batch per run (its interval)."""
    return tuple(k for k in PARAMS_DOC if mode == "continuous" or k not in CONTINUOUS_PARAMS)


class ParamsError(UsageError):
    """A run's params that the pipeline refuses (Airflow UI trigger form, ``dags trigger -c``)."""


def _pos_int(key: str, v) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, str) and v.strip().isdigit():  # a form field typed as text
            v = int(v.strip())
        else:
            raise ParamsError(f"param {key!r} must be a positive integer or null, got {v!r}")
    if v < 1:
        raise ParamsError(f"param {key!r} must be a positive integer or null, got {v}")
    return v


def _bool(key: str, v) -> bool:
    if v is None:
        return False
    if not isinstance(v, bool):
        raise ParamsError(f"param {key!r} must be true or false, got {v!r}")
    return v


def check_params(conf: dict | None, params: dict | None, mode: str, declared: Iterable[str] = ()) -> RunParams:
    """``conf``: what the trigger sent (unknown keys are refused); ``params``: the run's params;
    ``declared``: the params the DAG declares. A DAG of the user's that holds the pipeline's tasks
    (``pipeline_tasks``) may declare params of its own: a key it declares is its own, not refused;
    any other key the pipeline does not know is (a misspelt ``dry_run`` never runs for real)."""
    conf = dict(conf or {})
    theirs = set(declared) - set(PARAMS_DOC)
    if mode != "continuous" and conf.get("max_batches_per_run") not in (None, 1):
        raise ParamsError("param 'max_batches_per_run' is for continuous mode; in interval mode a run's batch is "
                          "its data interval (a backfill runs several intervals)")
    if mode != "continuous" and conf.get("replan_pending") not in (None, False):
        raise ParamsError("param 'replan_pending' is for continuous mode; in interval mode a failed run abandons "
                          "its interval's batch, which then runs again under the file as it is")
    if mode != "continuous" and any(conf.get(k) not in (None, False) for k in REWIND_PARAMS):
        raise ParamsError("param 'rewind_to_batch' is for continuous mode; in interval mode run the interval "
                          "again (a manual run with its logical date, or a backfill with reprocessing)")
    unknown = sorted(set(conf) - set(PARAMS_DOC) - theirs)  # a null rewind key in interval mode is harmless
    if unknown:
        raise ParamsError(f"unknown param(s) {unknown}; this pipeline accepts {sorted(params_for_mode(mode))}"
                          + (f" and its DAG declares {sorted(theirs)}" if theirs else ""))
    merged = {**(params or {}), **conf}
    out = RunParams(
        max_records_per_batch=_pos_int("max_records_per_batch", merged.get("max_records_per_batch")),
        dry_run=_bool("dry_run", merged.get("dry_run", False)),
        rewind_to_batch=_pos_int("rewind_to_batch", merged.get("rewind_to_batch")),
        confirm_rewind=_bool("confirm_rewind", merged.get("confirm_rewind", False)),
        accept_loss=_bool("accept_loss", merged.get("accept_loss", False)),
        max_batches_per_run=_pos_int("max_batches_per_run", merged.get("max_batches_per_run")),
        replan_pending=_bool("replan_pending", merged.get("replan_pending", False)),
    )
    if out.replan_pending and (out.dry_run or out.rewind_to_batch is not None):
        raise ParamsError("param 'replan_pending' changes the ledger: not with dry_run nor with rewind_to_batch")
    if out.max_batches_per_run is not None and out.max_batches_per_run > MAX_BATCHES_PER_RUN:
        raise ParamsError(f"param 'max_batches_per_run' must be at most {MAX_BATCHES_PER_RUN}, "
                          f"got {out.max_batches_per_run}")
    if out.accept_loss and out.rewind_to_batch is None:
        raise ParamsError("param 'accept_loss' is for a rewind: set 'rewind_to_batch' too")
    if out.confirm_rewind and out.rewind_to_batch is None:
        raise ParamsError("param 'confirm_rewind' confirms a rewind: set 'rewind_to_batch' too")
    if out.rewind_to_batch is not None and not out.dry_run and not out.confirm_rewind:
        k = out.rewind_to_batch
        raise ParamsError(f"rewind_to_batch={k} restores the published tables to before batch {k}: trigger it "
                          f"first with dry_run=true to see what it would restore, then again with "
                          f"confirm_rewind=true; nothing was changed")
    return out
