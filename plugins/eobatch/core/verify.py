"""Pre-commit verification of one staged attempt: reads manifests and Parquet footers (and what
the sink kind checks of its staged rows: a merge sink reads their key and sequence columns).

Checks, for every participant and every Spark partition of the attempt:
* the stage summary is there (else: not ready yet);
* each partition's manifest is there and says what the driver collected;
* each listed file exists with the listed size, its footer's row count matches, its schema
  is the staged schema, and that schema fits the table (when the table exists);
* rows in (the source's own count) = rows valid + rows quarantined; quarantine rows match;
  a row-preserving transform published exactly the valid rows; the source kind's own check of
  what was read against the planned range (Kafka: offsets per partition; parquet: rows per file);
* the sink kind's own check of the sink's staged rows (``SinkKind.check_staged``; a merge sink:
  one staged row per key, none with a null key or sequence).
The result is the AddAction list per participant (with stats from the footers) and a
fingerprint of the file set: what PREPARED records and commit publishes.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from ..config.contract import contract_edits, edits_text, staged_columns
from ..config.schemas import schema_from_b64, schema_signature
from ..errors import TerminalError, WaitError
from ..sources import kind_for
from ..storage.fs import join
from .formats import JSON, QUARANTINE, SINK, STAGED, BatchPlan, Layout, StageSummary, fingerprint_of

if TYPE_CHECKING:
    from ..sinks import Participant
    from ..storage.fs import Storage
    from .ledger import Ledger

# a bound of a Delta stats column (minValues/maxValues), as ``_stats_json`` writes it
Bound = str | int | float | decimal.Decimal


class NotReady(WaitError):
    """The attempt has not finished staging yet (no stage summary)."""


class VerifyFailed(TerminalError):
    """The staged output is wrong; the attempt must be aborted and the batch re-staged."""

    exit_code: ClassVar[int | None] = 4


def _json_value(v: object, t: pa.DataType, is_max: bool) -> Bound | None:
    """One footer bound as a Delta stats value, or None when it cannot be written so that it
    still bounds every value of the file (the caller then publishes no bounds for the column).

    Every bound is exact or rounded outward (min down, max up); the kind of value must match
    the column's Arrow type (a footer bound of another kind is not trusted). Decimals come back
    as ``decimal.Decimal`` and are written as exact JSON numbers by ``_stats_json``.
    """
    if v is None or pa.types.is_boolean(t) or isinstance(v, bool):
        return None  # Delta collects no min/max for booleans
    if pa.types.is_timestamp(t):
        # work in integer nanoseconds so that no unit loses the digits that decide the rounding
        if isinstance(v, int):
            nanos = v * {"s": 1_000_000_000, "ms": 1_000_000, "us": 1000, "ns": 1}[t.unit]
        elif hasattr(v, "value"):  # pandas.Timestamp: integer nanoseconds
            nanos = int(v.value)
        elif isinstance(v, _dt.datetime):
            if v.tzinfo is None:
                v = v.replace(tzinfo=_dt.timezone.utc)
            delta = v - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
            nanos = (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
        else:
            return None
        ms = -(-nanos // 1_000_000) if is_max else nanos // 1_000_000  # Delta keeps milliseconds
        d = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(milliseconds=ms)
        return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"
    if pa.types.is_date32(t) or pa.types.is_date64(t):  # Parquet stores both as days
        if isinstance(v, int) and pa.types.is_date32(t):
            v = _dt.date(1970, 1, 1) + _dt.timedelta(days=v)
        if isinstance(v, _dt.datetime) or not isinstance(v, _dt.date):
            return None
        return v.isoformat()
    if pa.types.is_decimal(t):
        # exact: written by _stats_json as the decimal's own digits, never through float
        if not isinstance(v, decimal.Decimal) or not v.is_finite():
            return None
        return v.copy_abs() if v.is_zero() else v
    if pa.types.is_floating(t):
        # float16 bounds come back as raw bytes; NaN and +-inf have no JSON number
        if not isinstance(v, float) or math.isnan(v) or math.isinf(v):
            return None
        if v == 0.0:  # -0.0 for a min, +0.0 for a max: outward for readers that order -0.0 < +0.0
            return -0.0 if not is_max else 0.0
        return v
    if pa.types.is_integer(t):
        return v if isinstance(v, int) else None
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        if isinstance(v, (bytes, bytearray)):
            try:
                v = bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                return None
        if not isinstance(v, str):
            return None
        return v if len(v) <= 32 else None  # longer values would need Delta's truncation rules
    return None  # binary (Delta collects no min/max for it), time, nested, ...: no bounds


def _decimal_text(v: decimal.Decimal) -> str:
    """A finite Decimal as a plain JSON number with its own digits and scale (12.30, 1E-18 ->
    0.000000000000000001, 9007199254740993): no float, no exponent."""
    return format(v, "f")


def _stats_json(v: object) -> str:
    """Compact JSON like ``json.dumps(v, separators=(",", ":"))``, except that a Decimal is
    written as an exact number (json.dumps cannot write one as a number)."""
    if isinstance(v, decimal.Decimal):
        return _decimal_text(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_stats_json(x)}" for k, x in v.items()) + "}"
    return json.dumps(v, allow_nan=False)


def holds(t: pa.DataType, kind: Callable[[pa.DataType], bool]) -> bool:
    """Whether type ``t`` is of ``kind`` (a ``pa.types.is_*``) or nests a field that is."""
    if kind(t):
        return True
    return pa.types.is_nested(t) and any(holds(t.field(i).type, kind) for i in range(t.num_fields))


def writer_statistics(schema: pa.Schema) -> bool | list[str]:
    """Which columns the stage writer keeps Parquet footer statistics for (``write_statistics`` of
    pyarrow's ParquetWriter): every column but floating-point ones. Arrow computes a float
    column's footer min/max ignoring NaN, and readers (delta-rs among them) skip row groups by
    those footer statistics themselves, so a row group holding NaN would be skipped for
    ``x > 5``, whatever the Delta stats say. Without footer statistics a float column gets no
    Delta min/max either (``footer_stats``): pruning on float columns is given up, never a row.
    A schema with nested columns and floats (at any depth) writes no statistics at all (leaf
    names are not top-level names)."""
    floats = [f.name for f in schema if holds(f.type, pa.types.is_floating)]
    if not floats:
        return True
    if any(pa.types.is_nested(f.type) for f in schema):
        return False
    return [f.name for f in schema if f.name not in floats]


def footer_stats(meta: pq.FileMetaData, schema: pa.Schema, nan_free: Iterable[str] | None = None) -> str:
    """Delta AddFile stats (numRecords, minValues, maxValues, nullCount) from a Parquet footer.

    Readers skip a file when its stats say no row can match, so every published bound must
    hold for every value of the file (exact, or rounded outward); when that is not certain the
    column gets no min/max (nullCount is kept when the footer has it):

    * decimals are exact JSON numbers (``9007199254740993``, ``12.30``), never rounded through
      float; a bound that is not a finite Decimal is not published;
    * floating-point columns: the stage writer (Arrow C++) computes footer min/max ignoring
      NaN ([1.0, NaN] says max 1.0; an all-NaN chunk has none), while Spark, DuckDB and delta-rs
      order NaN above +inf (``x > 5`` matches it) and delta-rs orders a sign-bit NaN (what
      ``-float("nan")`` gives) below -inf (``x < 0`` matches it). So a float column gets
      min/max only when ``nan_free`` (from the stage writer's manifest: the float columns it
      checked hold no NaN) names it; absent (None) means unknown, and no float column gets
      bounds. A zero min is written as -0.0 and a zero max as 0.0; an infinite bound has no
      JSON number, so that column gets none;
    * timestamps are in milliseconds, min rounded down and max up; strings longer than 32
      characters, booleans, binary and nested columns get no bounds;
    * a column gets bounds only if every row group that holds non-null values has min/max
      (a row group whose statistics the writer dropped, e.g. strings over 4 KiB, may hold
      anything); both bounds or neither.
    """
    mins, maxs, nulls = {}, {}, {}
    top = {f.name: f.type for f in schema}
    nan_free = frozenset(nan_free or ())
    for ci in range(meta.num_columns):
        col0 = meta.row_group(0).column(ci) if meta.num_row_groups else None
        if col0 is None:
            break
        path = col0.path_in_schema
        if "." in path or path not in top:
            continue  # nested columns: no stats
        t = top[path]
        lo = hi = None
        nc, ok, bounded, counted = 0, True, True, True
        for rg in range(meta.num_row_groups):
            st = meta.row_group(rg).column(ci).statistics
            if st is None:
                ok = False
                break
            if st.has_null_count:
                nc += st.null_count or 0
            else:
                counted = False
            if st.has_min_max:
                lo = st.min if lo is None or st.min < lo else lo
                hi = st.max if hi is None or st.max > hi else hi
            elif not st.has_null_count or st.num_values > 0:
                bounded = False  # values without bounds (or unknown): the others' bounds do not hold
        if not ok:
            continue
        if counted:
            nulls[path] = nc
        if not bounded or (pa.types.is_floating(t) and path not in nan_free):
            continue
        a, b = _json_value(lo, t, False), _json_value(hi, t, True)
        if a is not None and b is not None:
            mins[path], maxs[path] = a, b
    return _stats_json({"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def verify_attempt(layout: Layout, ledger: Ledger, fs_for: Callable[[str], Storage], plan: BatchPlan, attempt: str,
                   participants: Mapping[str, Participant], schema_evolution: str = "add_columns",
                   check_staged: Callable[[Storage, str, list[JSON], pa.Schema], list[str]] | None = None,
                   ) -> tuple[StageSummary, dict[str, list[JSON]], dict[str, int]]:
    """Verify one attempt. Returns (summary, adds per participant, totals).

    ``fs_for(participant)`` gives the storage of that participant's table; ``participants``
    maps names to participants (``accepts``: the table's schema check); ``check_staged(fs,
    table_root, adds, schema)``: the sink kind's check of the sink's staged rows.
    """
    batch_id = plan.batch_id
    summary = ledger.stage_summary(batch_id, attempt)
    if summary is None:
        raise NotReady(f"batch {batch_id} attempt {attempt}: no stage summary yet at "
                       f"{layout.stage_summary(batch_id, attempt)}")
    problems: list[str] = []
    if summary.plan_digest and summary.plan_digest != ledger.plan_digest(batch_id):
        raise VerifyFailed(f"batch {batch_id} attempt {attempt} staged another plan of batch {batch_id} than the one "
                           f"recorded now (the batch was reset and planned again while this attempt ran): "
                           f"its output is not this batch's range")
    other = staged_under_plan(plan, summary)
    if other:  # nothing else of it counts: files of another configuration are never committed
        raise VerifyFailed(f"batch {batch_id} attempt {attempt} was not staged under its plan's configuration: "
                           + "; ".join(other) + ". Its files are aborted and the batch is staged again under the "
                           "configuration that planned it")
    adds: dict[str, list[JSON]] = {}
    rows: dict[str, int] = {}
    nbytes = nfiles = 0
    for participant in STAGED:
        fs = fs_for(participant)
        table_root = layout.table(participant)
        n = int(summary.partitions.get(participant, -1))
        if n < 0:
            problems.append(f"{participant}: the stage summary lists no partitions")
            continue
        expected = schema_from_b64(summary.arrow_schema[participant])
        pcols = list(summary.partition_by.get(participant, []))
        data_sig = schema_signature(expected, drop=tuple(pcols))
        collected = {m["partition"]: m for m in summary.manifests.get(participant, [])}
        adds[participant], rows[participant] = [], 0
        seen_paths: set[str] = set()
        for p in range(n):
            m = ledger.manifest(batch_id, attempt, participant, p)
            if m is None:
                problems.append(f"{participant}: manifest of Spark partition {p} of {n} is missing "
                                f"({layout.manifest(batch_id, attempt, participant, p)})")
                continue
            if m.attempt != attempt or m.batch_id != batch_id:
                problems.append(f"{participant}: manifest {p} belongs to batch {m.batch_id} attempt {m.attempt}")
                continue
            c = collected.get(p)
            if c is None or c.get("files") != m.files or c.get("rows") != m.rows:
                problems.append(f"{participant}: manifest {p} on storage differs from what the driver collected")
                continue
            prefix = layout.attempt_staging_rel(batch_id, attempt) + "/"
            mrows = 0
            for f in m.files:
                rel = f["path"]
                if not rel.startswith(prefix) or ".." in rel.split("/") or rel in seen_paths:
                    problems.append(f"{participant}: manifest {p} lists {rel!r} outside its attempt folder or twice")
                    continue
                seen_paths.add(rel)
                full = join(table_root, rel)
                st = fs.stat(full)
                if st is None:
                    problems.append(f"{participant}: {rel} is listed in manifest {p} but missing")
                    continue
                if st.size != f["size"]:
                    problems.append(f"{participant}: {rel} has {st.size} bytes, manifest {p} says {f['size']}")
                    continue
                try:
                    with fs.open_read(full) as fh:
                        pf = pq.ParquetFile(fh)
                        meta, fschema = pf.metadata, pf.schema_arrow
                except Exception as e:  # unreadable footer
                    problems.append(f"{participant}: {rel}: unreadable Parquet footer: {e}")
                    continue
                if meta.num_rows != f["rows"]:
                    problems.append(f"{participant}: {rel} holds {meta.num_rows} rows, manifest {p} says {f['rows']}")
                    continue
                if schema_signature(fschema) != data_sig:
                    problems.append(f"{participant}: {rel} has schema {schema_signature(fschema)}, expected {data_sig}")
                    continue
                if set((f.get("partition_values") or {}).keys()) != set(pcols):
                    problems.append(f"{participant}: {rel} partition values {f.get('partition_values')} do not match {pcols}")
                    continue
                mrows += f["rows"]
                nbytes += st.size
                nfiles += 1
                adds[participant].append({
                    "path": rel, "size": st.size, "partition_values": f.get("partition_values") or {},
                    "modification_time": st.mtime_ms,
                    "stats": footer_stats(meta, expected, nan_free=f.get("nan_free")),
                })
            if mrows != m.rows:
                problems.append(f"{participant}: manifest {p} says {m.rows} rows, its files hold {mrows}")
            rows[participant] += mrows
        if check_staged is not None and participant == SINK:
            problems += check_staged(fs, table_root, adds[SINK], expected)
        # the table, when it exists, must take this schema: as it is, or with the new columns the
        # commit adds (schema_evolution); the schema the commit produces, not the old table's
        problems += participants[participant].accepts(expected, pcols, schema_evolution, f"{participant} ({table_root}): ")
    # reconciliation
    problems += kind_for(plan.source_kind).range(plan.range).check_stage(summary)
    if plan.rows_in is not None and summary.rows_in != plan.rows_in:
        problems.append(f"the job read {summary.rows_in} records, the source range holds {plan.rows_in}")
    if summary.rows_valid + summary.rows_quarantined + summary.rows_dropped != summary.rows_in:
        problems.append(f"rows in {summary.rows_in} != valid {summary.rows_valid} + quarantined "
                        f"{summary.rows_quarantined} + dropped {summary.rows_dropped}")
    if QUARANTINE in rows and rows[QUARANTINE] != summary.rows_quarantined:
        problems.append(f"quarantine files hold {rows[QUARANTINE]} rows, the job quarantined {summary.rows_quarantined}")
    if summary.row_preserving and SINK in rows and rows[SINK] != summary.rows_valid:
        problems.append(f"sink files hold {rows[SINK]} rows, the row-preserving transform had {summary.rows_valid} valid rows")
    if problems:
        raise VerifyFailed(f"batch {batch_id} attempt {attempt} failed verification: " + "; ".join(problems))
    totals = {"rows_published": rows.get(SINK, 0), "bytes": nbytes, "files": nfiles}
    return summary, adds, totals


def staged_under_plan(plan: BatchPlan, summary: StageSummary) -> list[str]:
    """What says that an attempt was staged under another configuration than its plan's
    (``config.CONTRACT``): the values its job recorded differ, or it recorded none, or its sink
    files do not hold the columns the plan's schema gives them (``contract.staged_columns``)."""
    if plan.config is None:  # planned before plans recorded it: nothing to compare
        return []
    if summary.contract is None:
        return ["its job recorded no configuration (a stage job of an older version)"]
    # the job's values are config_values of the code that built its spec (whose stage task compared
    # them with the plan under that code's roles): the keys they hold are compared
    edits = contract_edits(plan.config, summary.contract)
    if edits:
        return [edits_text(edits, plan.batch_id, "the job ran with")]
    want = staged_columns(plan.config)
    b64 = summary.arrow_schema.get(SINK)
    if want is None or not b64:
        return []
    got = {f.name for f in schema_from_b64(b64) if not f.name.startswith("_")}
    if got == want:
        return []
    return [f"its sink files hold the column(s) {', '.join(sorted(got))}, and the schema of batch {plan.batch_id}'s "
            f"plan gives {', '.join(sorted(want))} (extra: {', '.join(sorted(got - want)) or 'none'}; missing: "
            f"{', '.join(sorted(want - got)) or 'none'})"]


def recheck_files(layout: Layout, fs_for: Callable[[str], Storage], adds: Mapping[str, list[JSON]]) -> list[str]:
    """Before commit: every prepared file is still there with its size (VACUUM, manual deletes)."""
    problems = []
    for participant, lst in adds.items():
        fs = fs_for(participant)
        for a in lst:
            st = fs.stat(join(layout.table(participant), a["path"]))
            if st is None:
                problems.append(f"{participant}: {a['path']} is gone")
            elif st.size != a["size"]:
                problems.append(f"{participant}: {a['path']} now has {st.size} bytes, prepared with {a['size']}")
    return problems


__all__ = ["NotReady", "VerifyFailed", "verify_attempt", "recheck_files", "footer_stats", "writer_statistics",
           "fingerprint_of"]
