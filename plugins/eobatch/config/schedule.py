"""Schedules in a pipeline YAML: cron expressions and Airflow's presets, and interval mode's
landing sub-folders (``source.interval_prefix``), which must name exactly one interval of the
schedule. Pure Python (croniter, which ships with Airflow, where a check needs it); the checks
raise ``errors.Invalid``.
"""

from __future__ import annotations

import datetime as dt
import re
import string
from itertools import pairwise
from typing import Any

from ..errors import Invalid

ONLY_INTERVAL = "only used in interval mode (set mode: interval, or remove it)"
INTERVAL_FIELDS = {"ds", "hh", "ds_nodash"}


def check_interval_prefix(prefix: Any, mode: str, schedule: str | None) -> str:
    """``source.interval_prefix``: the sub-folder of one interval, which the schedule's intervals fit."""
    if mode != "interval":
        raise Invalid(ONLY_INTERVAL)
    if not isinstance(prefix, str) or not prefix.strip("/ "):
        raise Invalid("must be a sub-folder pattern such as 'dt={ds}' or 'dt={ds}/hour={hh}'")
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(prefix) if f is not None}
    except ValueError as e:
        raise Invalid(f"{prefix!r} is not a valid pattern: {e}") from None
    unknown = names - INTERVAL_FIELDS
    if unknown or not names:
        raise Invalid(f"{prefix!r} must use only the placeholders {{ds}} (YYYY-MM-DD), "
                                     f"{{ds_nodash}} (YYYYMMDD) and {{hh}} (hour, 00-23), and at least one of them")
    if prefix.startswith("/") or ".." in prefix.split("/"):
        raise Invalid(f"{prefix!r} must be a relative sub-folder of source.path")
    if schedule is None:  # parse_config refuses this before it parses the source
        raise Invalid("interval mode needs a schedule (a cron expression or a preset such as '@hourly'): its "
                      "runs' data intervals are the batches' ranges", key="schedule")
    _check_prefix_grain(prefix, names, schedule)
    return prefix


HOUR, DAY = dt.timedelta(hours=1), dt.timedelta(days=1)
PREFIX_HINT = "use dt={ds}/hour={hh} with @hourly ('0 * * * *'), or dt={ds} with @daily ('0 0 * * *')"


def _check_prefix_grain(prefix: str, names: set, schedule: str) -> None:
    """The prefix must name exactly one interval: its folder changes at every interval boundary, never inside.

    With {hh} every interval must be one clock hour (and the folder needs the date too); with the
    date alone, one UTC day from 00:00 to 00:00.
    """
    hourly = "hh" in names
    if hourly and not names & {"ds", "ds_nodash"}:
        raise Invalid(f"{prefix!r} has {{hh}} and also needs {{ds}} or {{ds_nodash}}: without "
                                     f"the date, hour 10 of every day is the same folder; {PREFIX_HINT}")
    odd = _odd_interval(PRESET_CRON.get(schedule.strip(), schedule.strip()), HOUR if hourly else DAY)
    if odd:
        unit, shape = ("clock hour", "HH:00 to HH+1:00") if hourly else ("UTC day", "00:00 to 00:00")
        raise Invalid(f"{prefix!r} names one folder per {unit}, so every interval must be one "
                                     f"{unit} ({shape} UTC), but schedule {schedule!r} has intervals such as "
                                     f"{_at(odd[0])} to {_at(odd[1])} UTC ({_span(odd[1] - odd[0])}); {PREFIX_HINT}")


GRAIN_CHECK_FROM = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)  # a Monday 00:00 of a leap year


def _odd_interval(cron: str, step: dt.timedelta) -> tuple[dt.datetime, dt.datetime] | None:
    """The first interval of ``cron`` that is not exactly one ``step`` (an hour or a day) starting on a
    multiple of it, or None. Intervals are UTC (no DST), from one tick to the next, as Airflow's.

    Cron's ticks are (the days it runs) x (its times of day): the times are checked over one day of
    ticks, the days over a year of midnights (every month, day of the month and weekday).
    """
    # croniter: not needed by the Spark job, which loads this module
    from croniter import croniter

    for a, b in pairwise(_ticks(cron, DAY // step + 1)):
        if b - a != step or (a - GRAIN_CHECK_FROM) % step:
            return a, b
    for a, b in pairwise(_ticks(" ".join(["0", "0", *cron.split()[2:5]]), 367)):
        if b - a != DAY:  # a day it does not run: the interval that ends at b spans it
            return croniter(cron, b).get_prev(dt.datetime), b
    return None


def _ticks(cron: str, n: int) -> list[dt.datetime]:
    # croniter: not needed by the Spark job, which loads this module
    from croniter import croniter

    it = croniter(cron, GRAIN_CHECK_FROM - dt.timedelta(microseconds=1))
    return [it.get_next(dt.datetime) for _ in range(n)]


def _at(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S" if t.second else "%Y-%m-%d %H:%M")


def _span(d: dt.timedelta) -> str:
    for unit, size in (("day", DAY), ("hour", HOUR), ("minute", dt.timedelta(minutes=1))):
        if not d % size:
            return f"{d // size} {unit}{'' if d == size else 's'}"
    return f"{int(d.total_seconds())} seconds"


# Cron spelling of Airflow's presets, for interval mode's CronDataIntervalTimetable.
PRESET_CRON = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
               "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@quarterly": "0 0 1 */3 *",
               "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *"}
PRESETS = {"@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly", "@annually", "@midnight"}


def check_schedule(s: str) -> None:
    """A cron expression (5 or 6 fields) or one of Airflow's PRESETS (Invalid otherwise)."""
    s = s.strip()
    if s.startswith("@"):
        if s not in PRESETS:
            raise Invalid(f"unknown preset {s!r} (known: {', '.join(sorted(PRESETS))})")
        return
    fields = s.split()
    if len(fields) not in (5, 6) or not all(re.fullmatch(r"[0-9A-Za-z*/,\-?LW#]+", f) for f in fields):
        raise Invalid(f"{s!r} is not a cron expression (5 fields) or a preset")
    try:
        from croniter import croniter  # ships with Airflow; optional here
    except ImportError:
        return
    if not croniter.is_valid(s):
        raise Invalid(f"{s!r} is not a valid cron expression")


