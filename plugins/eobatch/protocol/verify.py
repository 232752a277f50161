"""The pre-commit phase (preCommit, in Flink's two-phase commit): a staged attempt verified, then
PREPARED put-if-absent. From then on the batch must commit; it is never aborted.

``Verifying.verify`` checks the batch may still be PREPARED (not ABANDONED, its plan not void, the
pipeline's file what its plan recorded), runs ``verify_attempt``, checks the files an interval's
commit replaces are still there (``replacing``), then wins the attempt's "prepare" decision
against an abort and writes PREPARED. ``verbs.Protocol`` builds one (``proto.verifying``) and its
``verify`` hands over to it; it reads the protocol through its public queries
(``queries.Queries``).

``verify_attempt``, the checks of one staged attempt, reads manifests and Parquet footers (and
what the sink kind checks of its staged rows: a merge sink reads their key and sequence columns).

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
The result is the staged files per participant (``StagedFile``: each one's Delta AddFile, with
stats from its footer) and a fingerprint of the file set: what PREPARED records and commit publishes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from ..config.contract import contract_edits, edits_text, staged_columns
from ..config.schemas import schema_from_b64, schema_signature
from ..core import faults
from ..core.formats import (
    JSON,
    QUARANTINE,
    SINK,
    STAGED,
    BatchPlan,
    Layout,
    PreparedBatch,
    StagedFile,
    StageSummary,
    fingerprint_of,
    utcnow,
)
from ..core.table_files import add_action
from ..errors import ProtocolError, TerminalError, WaitError
from ..sources import kind_for
from ..storage.fs import join

if TYPE_CHECKING:
    from ..core.ledger import Ledger
    from ..sinks import Participant
    from ..storage.fs import Storage
    from .queries import Queries
    from .repairs import Repairs
    from .replacing import Replacing

log = logging.getLogger("eobatch")


class NotReady(WaitError):
    """The attempt has not finished staging yet (no stage summary)."""


class VerifyFailed(TerminalError):
    """The staged output is wrong; the attempt must be aborted and the batch re-staged."""

    exit_code: ClassVar[int | None] = 4


def verify_attempt(layout: Layout, ledger: Ledger, fs_for: Callable[[str], Storage], plan: BatchPlan, attempt: str,
                   participants: Mapping[str, Participant], schema_evolution: str = "add_columns",
                   check_staged: Callable[[Storage, str, list[StagedFile], pa.Schema], list[str]] | None = None,
                   ) -> tuple[StageSummary, dict[str, list[StagedFile]], dict[str, int]]:
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
    _check_same_plan(ledger, plan, summary, attempt)
    adds: dict[str, list[StagedFile]] = {}
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
                add, problem = _checked_file(fs, table_root, rel, f, f"{participant}: {rel}", f"manifest {p}",
                                             expected, data_sig, pcols)
                if add is None:
                    problems.append(problem)
                    continue
                mrows += f["rows"]
                nbytes += add.size
                nfiles += 1
                adds[participant].append(add)
            if mrows != m.rows:
                problems.append(f"{participant}: manifest {p} says {m.rows} rows, its files hold {mrows}")
            rows[participant] += mrows
        if check_staged is not None and participant == SINK:
            problems += check_staged(fs, table_root, adds[SINK], expected)
        # the table, when it exists, must take this schema: as it is, or with the new columns the
        # commit adds (schema_evolution); the schema the commit produces, not the old table's
        problems += participants[participant].accepts(expected, pcols, schema_evolution, f"{participant} ({table_root}): ")
    problems += _reconciled(plan, summary, rows)
    if problems:
        raise VerifyFailed(f"batch {batch_id} attempt {attempt} failed verification: " + "; ".join(problems))
    totals = {"rows_published": rows.get(SINK, 0), "bytes": nbytes, "files": nfiles}
    return summary, adds, totals


def _check_same_plan(ledger: Ledger, plan: BatchPlan, summary: StageSummary, attempt: str) -> None:
    """VerifyFailed when the attempt staged another plan of the batch than the one recorded now, or
    under another configuration than its plan's: nothing else of it counts."""
    batch_id = plan.batch_id
    if summary.plan_digest and summary.plan_digest != ledger.plan_digest(batch_id):
        raise VerifyFailed(f"batch {batch_id} attempt {attempt} staged another plan of batch {batch_id} than the one "
                           f"recorded now (the batch was reset and planned again while this attempt ran): "
                           f"its output is not this batch's range")
    other = staged_under_plan(plan, summary)
    if other:  # files of another configuration are never committed
        raise VerifyFailed(f"batch {batch_id} attempt {attempt} was not staged under its plan's configuration: "
                           + "; ".join(other) + ". Its files are aborted and the batch is staged again under the "
                           "configuration that planned it")


def _reconciled(plan: BatchPlan, summary: StageSummary, rows: dict[str, int]) -> list[str]:
    """The problems of the counts: the source kind's check of what was read against the planned
    range, rows in = valid + quarantined + dropped, the staged files' rows (``rows``) against the
    job's counts."""
    problems: list[str] = []
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
    return problems


def _checked_file(fs: Storage, table_root: str, rel: str, f: JSON, what: str, manifest: str, expected: pa.Schema,
                  data_sig: list[tuple[str, str]], pcols: list[str]) -> tuple[StagedFile | None, str]:
    """(its AddFile, "") for staged file ``rel`` that a manifest lists as ``f``, or (None, the
    problem): it exists with the listed size, its footer's rows and schema are the listed ones,
    its partition values are the table's partition columns."""
    full = join(table_root, rel)
    st = fs.stat(full)
    if st is None:
        return None, f"{what} is listed in {manifest} but missing"
    if st.size != f["size"]:
        return None, f"{what} has {st.size} bytes, {manifest} says {f['size']}"
    try:
        with fs.open_read(full) as fh:
            pf = pq.ParquetFile(fh)
            meta, fschema = pf.metadata, pf.schema_arrow
    except Exception as e:  # unreadable footer
        return None, f"{what}: unreadable Parquet footer: {e}"
    if meta.num_rows != f["rows"]:
        return None, f"{what} holds {meta.num_rows} rows, {manifest} says {f['rows']}"
    if schema_signature(fschema) != data_sig:
        return None, f"{what} has schema {schema_signature(fschema)}, expected {data_sig}"
    if set((f.get("partition_values") or {}).keys()) != set(pcols):
        return None, f"{what} partition values {f.get('partition_values')} do not match {pcols}"
    return add_action(meta, expected, f.get("nan_free"), path=rel, size=st.size,
                      partition_values=f.get("partition_values") or {}, modification_time=st.mtime_ms), ""


def staged_under_plan(plan: BatchPlan, summary: StageSummary) -> list[str]:
    """What says that an attempt was staged under another configuration than its plan's
    (``config.contract``): the values its job recorded differ, or it recorded none, or its sink
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


def recheck_files(layout: Layout, fs_for: Callable[[str], Storage], adds: Mapping[str, list[StagedFile]]) -> list[str]:
    """Before commit: every prepared file is still there with its size (VACUUM, manual deletes)."""
    problems = []
    for participant, files in adds.items():
        fs = fs_for(participant)
        for f in files:
            st = fs.stat(join(layout.table(participant), f.path))
            if st is None:
                problems.append(f"{participant}: {f.path} is gone")
            elif st.size != f.size:
                problems.append(f"{participant}: {f.path} now has {st.size} bytes, prepared with {f.size}")
    return problems


def void_text(batch_id: int) -> str:
    """Why batch ``batch_id`` is never PREPARED nor committed: its plan is void."""
    return (f"batch {batch_id}'s plan is void: it was planned after a plan of batch {batch_id - 1} that a reset "
            f"forgot (nothing of it is published; the next run's recover forgets it and plans its range again)")


class Verifying:
    """The pre-commit phase of one pipeline (``verify``): a staged attempt checked
    (``verify_attempt``), then PREPARED, put-if-absent, after winning the attempt's decision."""

    def __init__(self, proto: Queries, repairs: Repairs, replacing: Replacing) -> None:
        self.proto = proto  # its queries; the rest is what it holds:
        self.cfg, self.layout, self.ledger = proto.cfg, proto.layout, proto.ledger
        self.repairs, self.replacing = repairs, replacing

    def verify(self, batch_id: int, attempt: str, dry_run: bool = False) -> PreparedBatch:
        """PREPARED or an exception, as ``Protocol.verify`` says: the batch's PREPARED record when
        there is one already (another attempt's, which won); else the attempt's checks, the
        attempt's "prepare" decision won, and its PREPARED record written."""
        t0 = time.time()
        existing = self.ledger.prepared(batch_id)
        if existing is not None:
            if existing.attempt != attempt:
                log.warning("batch %s was already PREPARED by attempt %s; attempt %s lost and its files "
                            "will be swept", batch_id, existing.attempt, attempt)
            return existing
        plan = self._verifiable_plan(batch_id, attempt, dry_run)
        try:
            summary, adds, totals = verify_attempt(
                self.layout, self.ledger, self.proto.fs_for, plan, attempt, self.proto.participants,
                self.cfg.schema_evolution,
                lambda fs, root, adds, schema: self.proto.sink.check_staged(self.cfg, fs, root, adds, schema))
        except VerifyFailed as e:  # this attempt can never be PREPARED: decided so, its files are the abort's
            if not dry_run:
                self.ledger.decide(batch_id, attempt, "abort", {"reason": f"verify: {e}"[:2000], "aborted_at": utcnow()})
            raise
        prepared = PreparedBatch(
            pipeline=self.cfg.name, batch_id=batch_id, attempt=attempt, adds=adds,
            arrow_schema=summary.arrow_schema, partition_by=summary.partition_by,
            fingerprint=fingerprint_of(adds), rows_in=summary.rows_in, rows_valid=summary.rows_valid,
            rows_quarantined=summary.rows_quarantined, rows_published=totals["rows_published"],
            bytes=totals["bytes"], files=totals["files"], prepared_at=utcnow(),
            verify_seconds=round(time.time() - t0, 3), stage_seconds=summary.stage_seconds,
            rows_dropped=summary.rows_dropped, expectations=dict(summary.expectations),
        )
        self.replacing.check_replaceable(plan, self.replacing.replaces(plan), "verify")
        if dry_run:
            return prepared
        return self._prepare(prepared)

    def _verifiable_plan(self, batch_id: int, attempt: str, dry_run: bool) -> BatchPlan:
        """The plan of batch ``batch_id``, when ``attempt`` may still be PREPARED: the batch is not
        ABANDONED, its plan not void (then the attempt is decided "abort"), the pipeline's file says
        what the plan recorded, the attempt was not aborted. ProtocolError, VerifyFailed or
        ConfigChanged otherwise."""
        plan = self.ledger.plan(batch_id)
        if plan is None:
            raise ProtocolError(f"batch {batch_id} has no plan at {self.layout.plan(batch_id)}")
        if plan.rewind:
            # the first batch after a rewind is PREPARED only once every table was restored for it
            # (so its commit is always possible), or never when the rewind was cancelled
            self.repairs.complete_rewinds()
        if self.ledger.abandoned(batch_id) is not None:
            raise VerifyFailed(f"batch {batch_id} was ABANDONED; attempt {attempt} cannot be prepared")
        if self.ledger.is_void(plan):
            if not dry_run:
                self.ledger.decide(batch_id, attempt, "abort", {"reason": "its plan is void", "aborted_at": utcnow()})
            raise VerifyFailed(void_text(batch_id) + f"; attempt {attempt} cannot be prepared")
        self.proto.check_config(batch_id, plan=plan)
        if self.ledger.aborted_info(batch_id, attempt) is not None:
            raise VerifyFailed(f"batch {batch_id} attempt {attempt} was ABORTED (its files removed); it cannot "
                               f"be prepared: the next run stages the batch again")
        return plan

    def _prepare(self, prepared: PreparedBatch) -> PreparedBatch:
        """Write PREPARED for a verified attempt, after winning its decision: the batch's PREPARED
        record (another attempt's when that one was PREPARED first)."""
        batch_id, attempt = prepared.batch_id, prepared.attempt
        # Win the attempt's decision before PREPARED: an abort racing this verify (a zombie
        # verify, a task marked failed) either won first, and then this attempt is never
        # prepared, or loses, and then it never removes the files that PREPARED names.
        decided = self.ledger.decide(batch_id, attempt, "prepare", {"decided_at": utcnow()})
        if decided["decision"] != "prepare":
            raise VerifyFailed(f"batch {batch_id} attempt {attempt} was ABORTED while it was verified (its "
                               f"files are being removed); it cannot be prepared: the next run stages the "
                               f"batch again")
        if not self.ledger.put_prepared(prepared):
            winner = self.ledger.prepared(batch_id)
            if winner is None:
                raise VerifyFailed(f"batch {batch_id} was ABANDONED while attempt {attempt} was verified")
            log.warning("batch %s: attempt %s verified, but attempt %s was PREPARED first; this "
                        "attempt's files will be swept", batch_id, attempt, winner.attempt)
            return winner
        faults.crash_point("verify.after_prepared")
        return prepared


__all__ = ["NotReady", "VerifyFailed", "Verifying", "verify_attempt", "recheck_files", "void_text", "fingerprint_of"]
