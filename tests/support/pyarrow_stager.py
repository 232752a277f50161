"""A stager without Spark, for protocol tests: writes one attempt of a files batch exactly in the
layout the Spark job writes (attempt-unique Parquet files under each table's eo_batches/, one
manifest per partition, the stage summary last), with pyarrow.

It reads the batch's planned files itself, splits them into lines with the product's shared
definition (``eobatch.config.lines``), parses each line as a JSON object of the pipeline's schema and
quarantines what does not fit, like the job does for the simple types used in tests.
It is a stand-in for the Spark job only where the job's behaviour is not what is under test.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import uuid
from typing import Any, Iterable, Iterator

import pyarrow as pa

from eobatch.config.contract import contract_refusal
from eobatch.config.lines import split_records
from eobatch.config.schemas import schema_to_b64
from eobatch.core.formats import QUARANTINE, SINK, ManifestFile, PartitionManifest, StageSummary
from eobatch.core.table_files import TableFileWriter
from eobatch.pipelines.loader import config_values
from eobatch.sinks.delta_merge import MergeConfig
from eobatch.sinks.delta_merge.job import DELETE_COL
from eobatch.storage.fs import join, storage_for
from spark_jobs.stage_write import staged_file

ARROW = {"STRING": pa.string(), "BIGINT": pa.int64(), "LONG": pa.int64(), "INT": pa.int32(),
         "INTEGER": pa.int32(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(),
         "TIMESTAMP": pa.timestamp("us", tz="UTC")}
QUARANTINE_ARROW = pa.schema([("batch_id", pa.int64()), ("source", pa.string()), ("position", pa.int64()),
                              ("raw", pa.string()), ("reason", pa.string())])


def arrow_type(spark_type: str) -> pa.DataType:
    m = re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", spark_type)
    return pa.decimal128(int(m.group(1)), int(m.group(2))) if m else ARROW[spark_type]


def sink_schema(cfg) -> pa.Schema:
    return pa.schema([(c.name, arrow_type(c.type)) for c in cfg.columns])


def _fits(value, t: pa.DataType) -> bool:
    if value is None:
        return True
    if pa.types.is_string(t):
        return isinstance(value, str)
    if pa.types.is_integer(t):
        return isinstance(value, int) and not isinstance(value, bool)
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool)
    if pa.types.is_boolean(t):
        return isinstance(value, bool)
    if pa.types.is_timestamp(t):
        try:
            dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            return True
        except ValueError:
            return False
    return False


def _value(value, t: pa.DataType):
    if value is not None and pa.types.is_timestamp(t):
        d = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return d if d.tzinfo else d.replace(tzinfo=dt.timezone.utc)
    if value is not None and pa.types.is_floating(t):
        return float(value)
    if value is not None and pa.types.is_decimal(t):
        return decimal.Decimal(value)
    return value


def classify(cfg, source: str, position: int, raw: bytes) -> tuple[dict | None, str | None, str]:
    """(record, reason, text) of one line: reason None when the record is valid."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "invalid UTF-8", raw.decode("utf-8", "replace")
    try:
        obj = json.loads(text, parse_float=decimal.Decimal)  # exact, as Spark reads a DECIMAL
    except ValueError:
        return None, "malformed JSON: not a JSON object", text
    if not isinstance(obj, dict):
        return None, "malformed JSON: not a JSON object", text
    schema = sink_schema(cfg)
    for f in schema:
        if not _fits(obj.get(f.name), f.type):
            return None, f"field '{f.name}': expected {f.type}", text
    for c in cfg.columns:
        if c.not_null and obj.get(c.name) is None:
            return None, f"missing required field '{c.name}'", text
    return {f.name: _value(obj.get(f.name), f.type) for f in schema}, None, text


def deletes(delete_when: str | None, row: dict) -> bool:
    """``delete_when`` of the tests' merge pipelines: ``<column> = '<text>'`` (Spark evaluates any
    expression; this stager needs only that one)."""
    if delete_when is None:
        return False
    m = re.fullmatch(r"\s*(\w+)\s*=\s*'([^']*)'\s*", delete_when)
    assert m, f"the pyarrow stager evaluates only <column> = '<text>', not {delete_when!r}"
    return row.get(m.group(1)) == m.group(2)


def latest_per_key(merge, good: list) -> list:
    """A merge sink's staged rows: per key, the row with the highest sequence (ties: the highest
    row as JSON), with its delete flag (as ``eobatch/sinks/delta_merge/job.py`` stages them)."""
    best: dict[tuple, tuple[str, dict]] = {}
    for sl, row in good:
        row = {**row, DELETE_COL: deletes(merge.delete_when, row)}
        k = tuple(row[c] for c in merge.keys)
        rank = (row[merge.sequence_by], json.dumps(row, sort_keys=True, default=str))
        if k not in best or rank > (best[k][1][merge.sequence_by], json.dumps(best[k][1], sort_keys=True, default=str)):
            best[k] = (sl, row)
    return list(best.values())


def fold_per_key(merge, good: list) -> list:
    """An accumulating merge sink's staged rows: the rows of each key (of each interval slice)
    folded (sum, min, max; nulls ignored), as ``eobatch/sinks/delta_merge/job.py`` stages them."""
    fns: dict[str, Any] = {"sum": lambda a, b: a + b, "min": min, "max": max}
    out: dict[tuple, tuple[str, dict]] = {}
    for sl, row in good:
        k = (sl, *(row[c] for c in merge.keys))
        if k not in out:
            out[k] = (sl, dict(row))
            continue
        acc = out[k][1]
        for c, fn in merge.accumulate:
            if row[c] is not None:
                acc[c] = row[c] if acc[c] is None else fns[fn](acc[c], row[c])
    return list(out.values())


def planned_lines(plan) -> Iterator[tuple[str, str, int, bytes]]:
    """(slice folder or "", source, position, raw) of each line of a files batch's planned files."""
    for f in plan.range.get("files", []):
        data = storage_for(f["path"]).read_bytes(f["path"])
        for position, raw in split_records(data):
            yield f.get("slice", ""), f["path"], position, raw


class JobRefused(Exception):
    """The stage job refused to stage (its SystemExit): nothing of the attempt was written."""


def stage(proto, batch_id: int, attempt: str | None = None, partitions: int = 2,
          write_summary: bool = True, lines: Iterable[tuple[str, str, int, bytes]] | None = None,
          source_positions: dict | None = None, checks: bool = True) -> str:
    """Stage ``attempt`` (new when None) of ``batch_id`` as the Spark job would, under ``proto.cfg``
    (the file its task read); returns the attempt. ``lines``: the batch's records when they are not
    its planned files (a model of another source), with the ``source_positions`` the source kind
    reports. Like the job, it refuses (JobRefused) a configuration that is not the plan's, unless
    ``checks`` is false (a job that does not check: what verify must catch)."""
    attempt = attempt or f"t1-{uuid.uuid4().hex[:12]}"
    digest = proto.ledger.plan_digest(batch_id)
    plan = proto.ledger.plan(batch_id)
    if plan is None or digest is None:  # as the job: a batch a reset forgot since the task chose it
        raise JobRefused(f"batch {batch_id} has no plan at {proto.layout.plan(batch_id)}")
    cfg = proto.cfg
    contract = config_values(cfg)
    refused = contract_refusal(plan, contract, attempt) if checks else None
    if refused:
        raise JobRefused(refused)
    good: list[tuple[str, dict | None]] = []  # (slice folder or "", row)
    bad: list[tuple[str, dict | None]] = []
    for slice_, source, position, raw in (planned_lines(plan) if lines is None else lines):
        rec, reason, text = classify(cfg, source, position, raw)
        if reason is None:
            good.append((slice_, rec))
        else:
            bad.append((slice_, {"batch_id": batch_id, "source": source, "position": position, "raw": text,
                                 "reason": reason}))
    schemas = {SINK: sink_schema(cfg), QUARANTINE: QUARANTINE_ARROW}
    valid = len(good)
    merge = cfg.sink if isinstance(cfg.sink, MergeConfig) else None
    if merge is not None and not merge.upsert:
        good = fold_per_key(merge, good)
    elif merge is not None:
        good = latest_per_key(merge, good)
        schemas[SINK] = schemas[SINK].append(pa.field(DELETE_COL, pa.bool_()))
    rows = {SINK: good, QUARANTINE: bad}
    manifests: dict[str, list[dict]] = {}
    for participant in (SINK, QUARANTINE):
        table = proto.layout.table(participant)
        fs = storage_for(table)
        manifests[participant] = []
        for pid in range(partitions):
            mine = rows[participant][pid::partitions]
            files = []
            for slice_ in sorted({sl for sl, _ in mine}):  # interval mode: one folder per interval slice
                part = [row for sl, row in mine if sl == slice_]
                rel = staged_file(proto.layout.attempt_staging_rel(batch_id, attempt), slice_, [], (), pid, 0)["path"]
                full = join(table, rel)
                fs.makedirs(full.rsplit("/", 1)[0])
                w = TableFileWriter(fs.arrow_path(full), schemas[participant], filesystem=fs.arrow_fs())
                w.write(pa.Table.from_pylist(part, schema=schemas[participant]))
                w.close()
                info = fs.stat(full)
                assert info is not None, f"{full}: written but not found"
                files.append(ManifestFile(path=rel, size=info.size, rows=len(part), nan_free=w.nan_free).__dict__)
            m = PartitionManifest(batch_id=batch_id, attempt=attempt, participant=participant, partition=pid,
                                  task_attempt=0, rows=len(mine), files=files)
            proto.ledger.fs.write_atomic(proto.layout.manifest(batch_id, attempt, participant, pid), m.to_json())
            manifests[participant].append(json.loads(m.to_json()))
    if write_summary:
        summary = StageSummary(
            batch_id=batch_id, attempt=attempt, rows_in=valid + len(bad), rows_valid=valid,
            rows_quarantined=len(bad), row_preserving=merge is None, partitions={SINK: partitions, QUARANTINE: partitions},
            manifests=manifests, arrow_schema={p: schema_to_b64(s) for p, s in schemas.items()},
            partition_by={SINK: [], QUARANTINE: []}, stage_seconds=0.0, spark_app_id="pyarrow-stager",
            config_fingerprint=cfg.fingerprint(), plan_digest=digest, source_positions=source_positions or {},
            contract=contract)
        proto.ledger.fs.write_atomic(proto.layout.stage_summary(batch_id, attempt), summary.to_json())
    return attempt
