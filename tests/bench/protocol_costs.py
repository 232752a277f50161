"""The protocol's own costs, measured without Spark (part of `make bench`).

* ``commit_large_over_small``: the commit of a batch of F files, and of one with about 100 times
  the bytes in the same number of files (the commit must cost O(files), not O(bytes)).
* ``verify_seconds_per_1000_files``: the pre-commit verification of a batch of 1000 files.
* ``fixed_overhead_seconds``: plan + verify + commit of a one-record batch.
* ``plan_late_over_early``: ``Protocol.plan()`` seconds for batch N of a synthetic ledger of
  N - 1 committed batches (N = ``late``, default 100,000) over the same for batch 10 (medians
  of 3, after one untimed plan of each ledger: see ``time_plan``).

Staged batches are written directly with pyarrow in the exact layout the Spark job writes
(files, manifests, stage summary). The synthetic ledgers are written as plain files at the
paths of ``formats.Layout``, with the records of ``formats`` (plan, PREPARED and COMMITTED of
each batch, one consumed landing file each) and both Delta tables holding the txn of batch N - 1:
what ``plan()`` reads is what a real ledger of that age holds. The records are written without
the put-if-absent of ``Ledger`` (two fsyncs per file would make a 100,000-batch ledger take
many minutes to build); ``plan()`` itself writes its new plan with put-if-absent, as always.
Attempt folders (stage summaries, manifests, decisions) are left out: ``plan()`` of a batch
after a committed one does not read them.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eobatch.config.schemas import schema_to_b64
from eobatch.core.formats import (
    QUARANTINE,
    SINK,
    BatchPlan,
    CommittedBatch,
    ManifestFile,
    PartitionManifest,
    PreparedBatch,
    StagedFile,
    StageSummary,
)
from eobatch.pipelines.loader import config_values
from eobatch.protocol import Protocol
from eobatch.sinks.delta import DeltaParticipant
from support.harness import write_pipeline

SCHEMA = pa.schema([("order_id", pa.string()), ("customer", pa.string()), ("amount", pa.float64()),
                    ("ts", pa.timestamp("us", tz="UTC"))])
QSCHEMA = pa.schema([("batch_id", pa.int64()), ("source", pa.string()), ("position", pa.int64()),
                     ("raw", pa.string()), ("reason", pa.string())])


# -- synthetic staged batches ----------------------------------------------------------
def _tables(n_files: int, rows_per_file: int, text_bytes: int):
    noise = os.urandom(max(text_bytes, 1) * 64).hex()  # incompressible text: bytes on disk grow with it
    for f in range(n_files):
        ids = [f"f{f}-{i}" for i in range(rows_per_file)]
        texts = [noise[(i * 7919) % (len(noise) - text_bytes):][:text_bytes] + str(i) for i in range(rows_per_file)]
        yield pa.table({"order_id": ids, "customer": texts,
                        "amount": [float(i) for i in range(rows_per_file)],
                        "ts": pa.array([1_767_225_600_000_000 + i for i in range(rows_per_file)],
                                       pa.timestamp("us", tz="UTC"))}, schema=SCHEMA)


def synthetic_batch(p, n_files: int, rows_per_file: int, text_bytes: int) -> dict:
    """Plan a real batch, stage it with pyarrow like the Spark job would, then time verify and commit."""
    rows = n_files * rows_per_file
    name = f"land-{time.time_ns()}.jsonl"
    (p.landing / name).write_text("{}\n" * rows)  # the plan counts lines; staging is synthetic
    proto = Protocol(p.cfg)
    t = time.perf_counter()
    plan, _ = proto.plan(max_records=rows)
    plan_s = time.perf_counter() - t
    assert plan is not None, "the landed file was not planned"
    b, attempt = plan.batch_id, f"bench-{time.time_ns()}"
    lay = proto.layout
    manifests, schema = [], SCHEMA
    for i, tbl in enumerate(_tables(n_files, rows_per_file, text_bytes)):
        rel = f"{lay.attempt_staging_rel(b, attempt)}/part-{i:05d}-0-bench.snappy.parquet"
        full = Path(lay.sink_table) / rel
        full.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(tbl, full, compression="snappy")
        schema = tbl.schema
        m = PartitionManifest(batch_id=b, attempt=attempt, participant=SINK, partition=i, task_attempt=0,
                              rows=tbl.num_rows, files=[ManifestFile(path=rel, size=full.stat().st_size,
                                                                     rows=tbl.num_rows).__dict__])
        proto.ledger.fs.write_atomic(lay.manifest(b, attempt, SINK, i), m.to_json())
        manifests.append(json.loads(m.to_json()))
    qm = PartitionManifest(batch_id=b, attempt=attempt, participant=QUARANTINE, partition=0, task_attempt=0,
                           rows=0, files=[])
    proto.ledger.fs.write_atomic(lay.manifest(b, attempt, QUARANTINE, 0), qm.to_json())
    summary = StageSummary(batch_id=b, attempt=attempt, rows_in=rows, rows_valid=rows, rows_quarantined=0,
                           row_preserving=True, partitions={SINK: n_files, QUARANTINE: 1},
                           manifests={SINK: manifests, QUARANTINE: [json.loads(qm.to_json())]},
                           arrow_schema={SINK: schema_to_b64(schema), QUARANTINE: schema_to_b64(QSCHEMA)},
                           partition_by={SINK: [], QUARANTINE: []}, stage_seconds=0.0,
                           config_fingerprint=p.cfg.fingerprint(), contract=config_values(p.cfg))
    proto.ledger.fs.write_atomic(lay.stage_summary(b, attempt), summary.to_json())
    t = time.perf_counter()
    prepared = Protocol(p.cfg).verify(b, attempt)
    verify_s = time.perf_counter() - t
    t = time.perf_counter()
    Protocol(p.cfg).commit(b)
    commit_s = time.perf_counter() - t
    return {"plan": plan_s, "verify": verify_s, "commit": commit_s, "bytes": prepared.bytes,
            "files": prepared.files}


def commit_verify_figures(root: Path, files: int = 16, repeat: int = 3) -> dict:
    p = write_pipeline(root, name="bench_protocol", max_records=10_000_000)
    synthetic_batch(p, 1, 1, 8)  # creates both tables: later commits are plain appends
    small, large, one = [], [], []
    for _ in range(repeat):  # alternate, so drift on the machine hits both alike
        small.append(synthetic_batch(p, files, 100, 8))
        large.append(synthetic_batch(p, files, 100, 5000))
        one.append(synthetic_batch(p, 1, 1, 8))
    thousand = synthetic_batch(p, 1000, 10, 8)

    def med(xs: list[dict], k: str) -> float:
        return statistics.median(x[k] for x in xs)

    return {
        "commit_seconds_small": round(med(small, "commit"), 4),
        "commit_seconds_large": round(med(large, "commit"), 4),
        "commit_large_over_small": round(med(large, "commit") / med(small, "commit"), 3),
        "bytes_small": int(med(small, "bytes")), "bytes_large": int(med(large, "bytes")), "files_per_batch": files,
        "verify_seconds_per_1000_files": round(thousand["verify"], 3),
        "fixed_overhead_seconds": round(statistics.median(x["plan"] + x["verify"] + x["commit"] for x in one), 4),
    }


# -- synthetic ledgers -----------------------------------------------------------------
def _put(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def synthetic_ledger(root: Path, name: str, batches: int):
    """A pipeline whose ledger holds ``batches`` committed batches of one landing file each, and
    one new landing file: its next ``plan()`` plans batch ``batches + 1``."""
    p = write_pipeline(root, name=name, max_records=1000)
    proto = Protocol(p.cfg)
    lay, cfg = proto.layout, p.cfg
    for i in range(1, batches + 2):
        _put(str(p.landing / f"f{i:09d}.jsonl"), b'{"order_id":"x"}\n')
    listed = sorted(proto.ledger.fs.list_files(str(p.landing)), key=lambda f: f.path)
    fp, at = cfg.fingerprint(), "2026-01-01T00:00:00.000+00:00"
    schemas = {SINK: schema_to_b64(SCHEMA), QUARANTINE: schema_to_b64(QSCHEMA)}
    for b, f in zip(range(1, batches + 1), listed):
        attempt = f"t1-{b:012x}"
        _put(lay.plan(b), BatchPlan(
            pipeline=cfg.name, batch_id=b, source_kind="files", rows_in=1, config_fingerprint=fp,
            planned_at=at, range={"files": [{"path": f.path, "size": f.size, "mtime_ms": f.mtime_ms,
                                             "records": 1}]}).to_json())
        add = StagedFile(f"{lay.attempt_staging_rel(b, attempt)}/part-00000-0.snappy.parquet", 1000, {},
                         1_767_225_600_000, "{}")
        _put(lay.prepared(b), PreparedBatch(
            pipeline=cfg.name, batch_id=b, attempt=attempt, adds={SINK: [add], QUARANTINE: []},
            arrow_schema=schemas, partition_by={SINK: [], QUARANTINE: []}, fingerprint=fp, rows_in=1,
            rows_valid=1, rows_quarantined=0, rows_published=1, bytes=1000, files=1, prepared_at=at,
            verify_seconds=0.01, stage_seconds=1.0).to_json())
        _put(lay.committed(b), CommittedBatch(pipeline=cfg.name, batch_id=b, fingerprint=fp,
                                              delta_versions={SINK: 1, QUARANTINE: 1}, committed_at=at,
                                              commit_seconds=0.05).to_json())
    for part, table, schema in ((SINK, lay.sink_table, SCHEMA), (QUARANTINE, lay.quarantine_table, QSCHEMA)):
        if batches:  # the tables hold the txn of the last batch, as after its commit
            DeltaParticipant(part, table).commit(cfg.app_id, batches, [], schema, [], {"eo.bench": "synthetic"},
                                                 expected_prev=0)
    return p


def time_plan(p, repeat: int, warmup: int = 1) -> list[float]:
    """Seconds of ``plan()`` (a new batch each time: the record it writes is removed after).

    The first ``warmup`` plans are not timed: they bring the files into the page cache and
    leave the ledger as planning leaves it at that age (e.g. a checkpoint written by a plan)."""
    out = []
    for _ in range(warmup + repeat):
        proto = Protocol(p.cfg)
        t = time.perf_counter()
        plan, is_new = proto.plan()
        out.append(time.perf_counter() - t)
        assert plan is not None and is_new, "the synthetic ledger planned nothing"
        os.remove(proto.layout.plan(plan.batch_id))
    return out[warmup:]


def plan_figures(root: Path, late: int = 100_000, early: int = 10, repeat: int = 3, repeat_short: int = 15) -> dict:
    """Plan seconds at batch ``late`` over batch ``early``, with the landing zone as a retention
    job leaves it (consumed files removed: the ledger's own cost), and with every consumed file
    still in the landing folder (``..._full_landing``: continuous mode lists the whole folder,
    since a late file may land anywhere in it). A plan after retention takes milliseconds: the
    median of ``repeat_short`` of them (3 moved the ratio between 0.9 and 2.5 from run to run)."""
    t = time.perf_counter()
    p_early = synthetic_ledger(root / "early", "bench_plan_early", early - 1)
    p_late = synthetic_ledger(root / "late", "bench_plan_late", late - 1)
    build_s = time.perf_counter() - t
    e_full = statistics.median(time_plan(p_early, repeat))
    s_full = statistics.median(time_plan(p_late, repeat))
    for p in (p_early, p_late):  # a landing retention job: consumed files go, the newest stays
        newest = max(p.landing.iterdir())
        for f in p.landing.iterdir():
            if f != newest:
                f.unlink()
    e = statistics.median(time_plan(p_early, repeat_short))
    s = statistics.median(time_plan(p_late, repeat_short))
    return {"plan_seconds_early": round(e, 4), "plan_seconds_late": round(s, 4), "plan_early_batch": early,
            "plan_late_batch": late, "plan_late_over_early": round(s / e, 3),
            "plan_seconds_late_full_landing": round(s_full, 4),
            "plan_late_over_early_full_landing": round(s_full / e_full, 3),
            "plan_ledger_build_seconds": round(build_s, 1)}