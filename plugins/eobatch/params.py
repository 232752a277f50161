"""The params a run accepts (the trigger form in the Airflow UI), checked before anything runs.

Airflow validates each declared param against its JSON schema when a run is created; this
module adds what a schema cannot say (unknown keys, combinations, mode) so that a bad trigger
is refused with one clear message before anything is planned or staged. No Airflow imports.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError

PARAMS_DOC = {
    "max_records_per_batch": "Upper bound of records for a new batch (default: the YAML's value). "
                             "Interval mode: an interval holding more fails instead of being split.",
    "dry_run": "Plan, stage and verify, then abort and report what would have been published. "
               "Nothing is published; the planned range stays recorded and the next run re-stages it.",
    "rewind_to_batch": "Continuous mode: restore the tables to before this committed batch and read "
                       "again from its start (the batches from it on become REWOUND).",
}


class ParamsError(UsageError):
    """A run's params that the pipeline refuses (Airflow UI trigger form, ``dags trigger -c``)."""


@dataclass(frozen=True)
class RunParams:
    max_records_per_batch: int | None = None
    dry_run: bool = False
    rewind_to_batch: int | None = None


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


def check_params(conf: dict | None, params: dict | None, mode: str) -> RunParams:
    """``conf``: what the trigger sent (unknown keys are refused); ``params``: the run's params."""
    conf = dict(conf or {})
    unknown = sorted(set(conf) - set(PARAMS_DOC))
    if unknown:
        raise ParamsError(f"unknown param(s) {unknown}; this pipeline accepts {sorted(PARAMS_DOC)}")
    merged = {**(params or {}), **conf}
    dry = merged.get("dry_run", False)
    if dry is None:
        dry = False
    if not isinstance(dry, bool):
        raise ParamsError(f"param 'dry_run' must be true or false, got {dry!r}")
    out = RunParams(
        max_records_per_batch=_pos_int("max_records_per_batch", merged.get("max_records_per_batch")),
        dry_run=dry,
        rewind_to_batch=_pos_int("rewind_to_batch", merged.get("rewind_to_batch")),
    )
    if out.rewind_to_batch is not None and mode != "continuous":
        raise ParamsError("param 'rewind_to_batch' is for continuous mode; in interval mode run the interval "
                          "again (a manual run with its logical date, or a backfill with reprocessing)")
    return out
