"""Schema evolution of a Delta table: what a batch's commit adds to the table first, and what
refuses it (verify checks it, the commit applies it: ``DeltaParticipant``)."""

from __future__ import annotations

import pyarrow as pa

from ...config.schemas import normalize_type


def schema_change(table: pa.Schema | None, staged: pa.Schema, policy: str = "add_columns",
                  where: str = "") -> tuple[list[pa.Field], list[str]]:
    """What committing files of schema ``staged`` to a table of schema ``table`` needs: (the
    columns the batch's commit adds to the table first; the problems that refuse it). Columns
    match by name. ``add_columns``: a column of ``staged`` the table lacks is added, nullable
    (rows already published read null); ``fail``: it is a problem naming it. Always problems: a
    column whose type changes (named with both types), a table column the batch no longer writes.
    """
    if table is None:
        return [], []
    have = {f.name: f for f in table}
    new = [f for f in staged if f.name not in have]
    problems = []
    for f in staged:
        old = have.get(f.name)
        if old is not None and normalize_type(old.type) != normalize_type(f.type):
            problems.append(f"{where}column {f.name!r} is {normalize_type(old.type)} in the table and "
                            f"{normalize_type(f.type)} in this batch: " + (
                                "a widening Delta's typeWidening table feature allows, which delta-rs (the "
                                "commit engine) cannot apply: cast the column back to "
                                f"{normalize_type(old.type)} in the transform, or publish it under a new name"
                                if is_widening(old.type, f.type) else
                                "a column's type is never changed (Delta keeps it; add a column of the new type "
                                "under a new name instead)"))
    gone = [n for n in have if n not in {f.name for f in staged}]
    if gone:
        problems.append(f"{where}the table's column(s) {', '.join(gone)} are not in this batch's schema: removing a "
                        f"column is not supported (keep it in the pipeline's schema)")
    if new and policy != "add_columns":
        problems.append(f"{where}new column(s) {', '.join(f.name for f in new)} are not in the table and "
                        f"schema_evolution is {policy!r}: set schema_evolution: add_columns in the pipeline YAML "
                        f"to add them with the next batch (rows already published read null)")
    return ([pa.field(f.name, f.type, nullable=True) for f in new] if not problems else []), problems


def is_widening(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether ``old`` -> ``new`` is a type change of the Delta protocol's typeWidening feature
    (integers to wider integers or to double, float to double, date to timestamp_ntz, decimals
    to decimals with room for every value)."""
    ints = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
    if old in ints and new in ints:
        return ints.index(new) > ints.index(old)
    if new == pa.float64() and (old in ints[:3] or old == pa.float32()):
        return True
    if old == pa.date32() and pa.types.is_timestamp(new) and new.tz is None:
        return True
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale and new != old
    return False


__all__ = ["schema_change", "is_widening"]
