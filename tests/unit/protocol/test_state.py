"""eobatch.protocol.state: every decision of the protocol, as tables of plain values.

Each row is a situation of the ledger and the tables (plain data, no I/O), the decision
expected, and why (the row's test id). The verbs (``protocol/verbs.py``) and the repairs read
the ledger and the tables and call these functions; their scenarios on real storage and real
delta-rs tables are in ``test_verbs.py`` and ``test_repairs.py``. What a dangling or zombie
attempt leaves is swept by the repairs (``Repairs.sweep``), not decided here: here it is the
``staged`` fact of ``BatchFacts`` (an aborted attempt's summary never counts).
"""

from __future__ import annotations

import datetime as dt

import pytest

from eobatch.core import checkpoint as ckpt
from eobatch.core.formats import BatchPlan, PreparedBatch, RewindRecord, StagedFile, slice_name
from eobatch.errors import LedgerMismatch
from eobatch.protocol import state as st

H = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
UTC = dt.timezone.utc


def _ids(rows: list[tuple]) -> list[str]:
    return [r[-1] for r in rows]  # each row ends with its reason


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _plan(b: int, start: int | None = None, files: dict[str, list[str]] | None = None) -> BatchPlan:
    """Batch ``b``; interval mode when ``start`` (an hour from it), with ``files``: slice start
    (hours after T0, as text) -> planned paths; continuous mode without."""
    rng: dict = {"files": [{"path": p, "size": 1, "mtime_ms": 0, "records": 1, "slice": slice_name(T0 + int(h) * H)}
                           for h, ps in (files or {}).items() for p in ps]}
    interval = None if start is None else {"start": _iso(start), "end": _iso(start + H)}
    return BatchPlan(pipeline="orders", batch_id=b, source_kind="files", range=rng, rows_in=len(rng["files"]),
                     config_fingerprint="fp", planned_at="t", interval=interval, notes=[f"note of {b}"], run_id="r")


# -- batch_state: the state a batch is in -------------------------------------------------------
def _facts(**kw) -> st.BatchFacts:
    return st.BatchFacts(**{"planned": True, "abandoned": False, "prepared": False, "staged": False,
                            "rewound": False, **kw})


STATES = [
    # facts, held (the lowest batch every table holds), batch id, state, why
    (_facts(planned=False), 0, 1, None, "no plan: no batch, whatever else is recorded"),
    (_facts(planned=False, prepared=True), 5, 1, None, "no plan: no batch, even with other records"),
    (_facts(), 0, 1, "PLANNED", "first batch, planned only"),
    (_facts(), 6, 7, "PLANNED", "planned, no attempt staged, or only aborted ones (a zombie's late summary)"),
    (_facts(staged=True), 6, 7, "STAGED", "an attempt staged and not aborted"),
    (_facts(prepared=True), 6, 7, "PREPARED", "PREPARED, not in every table yet: it must commit, never abort"),
    (_facts(prepared=True, staged=True), 6, 7, "PREPARED", "PREPARED wins over STAGED"),
    (_facts(prepared=True), 7, 7, "COMMITTED", "every table holds it"),
    (_facts(prepared=True, staged=True), 9, 7, "COMMITTED", "later batches committed too"),
    (_facts(), 7, 7, "COMMITTED", "the tables hold it though the ledger lost its PREPARED: the tables are the truth"),
    (_facts(prepared=True, rewound=True), 9, 7, "REWOUND", "rewound: held stays (a RESTORE keeps txn ids)"),
    (_facts(abandoned=True), 6, 7, "ABANDONED", "abandoned before PREPARED"),
    (_facts(abandoned=True, staged=True), 6, 7, "ABANDONED", "abandoned with a staged attempt"),
    (_facts(abandoned=True), 9, 7, "ABANDONED", "abandoned, later batches committed past it: never COMMITTED"),
]


@pytest.mark.parametrize("facts, held, batch_id, want, why", STATES, ids=_ids(STATES))
def test_batch_state(facts, held, batch_id, want, why):
    assert st.batch_state(facts, held, batch_id) == want, why


# -- prev_live: the batch the tables must hold before a batch commits ---------------------------
PREV = [
    # batch id, abandoned batches, the batch it needs, why
    (1, set(), 0, "the first batch needs none"),
    (5, set(), 4, "the batch before"),
    (5, {5}, 4, "its own abandonment is not the question"),
    (5, {4}, 3, "an abandoned batch is skipped"),
    (5, {2, 3, 4}, 1, "abandoned batches in a row are skipped"),
    (5, {3}, 4, "only abandoned batches right before it are skipped"),
    (5, {1, 2, 3, 4}, 0, "every earlier batch abandoned: none"),
]


@pytest.mark.parametrize("batch_id, abandoned, want, why", PREV, ids=_ids(PREV))
def test_prev_live(batch_id, abandoned, want, why):
    assert st.prev_live(batch_id, abandoned.__contains__) == want, why


# -- undecided: is the newest batch still to be decided -----------------------------------------
UNDECIDED = [
    # latest planned, versions per table, latest abandoned, undecided, why
    (0, {"sink": 0, "quarantine": 0}, False, False, "an empty ledger"),
    (3, {"sink": 3, "quarantine": 3}, False, False, "committed everywhere: nothing to do again"),
    (3, {"sink": 4, "quarantine": 4}, False, False, "tables ahead: not pending (check_consistent refuses it)"),
    (3, {"sink": 2, "quarantine": 2}, False, True, "planned, staged or PREPARED, in no table"),
    (3, {"sink": 3, "quarantine": 2}, False, True, "committed in the sink only: a crash between the commits"),
    (3, {"sink": 3, "quarantine": 3, "tombstones": 2}, False, True, "a sink's own table behind"),
    (3, {"sink": 2, "quarantine": 2}, True, False, "abandoned: decided"),
]


@pytest.mark.parametrize("latest, versions, abandoned, want, why", UNDECIDED, ids=_ids(UNDECIDED))
def test_undecided(latest, versions, abandoned, want, why):
    assert st.undecided(latest, versions, abandoned) is want, why


# -- check_consistent: ledger and tables agree ---------------------------------------------------
TABLES = {"sink": "/lake/orders", "quarantine": "/lake/orders_q"}
CONSISTENT = [
    # latest planned, need (prev_live of latest), versions, error (regex) or None, why
    (0, 0, {"sink": 0, "quarantine": 0}, None, "a new pipeline"),
    (3, 2, {"sink": 2, "quarantine": 2}, None, "the newest batch pending"),
    (3, 2, {"sink": 3, "quarantine": 3}, None, "the newest batch committed"),
    (3, 2, {"sink": 3, "quarantine": 2}, None, "the newest batch committed in one table: recover completes it"),
    (5, 3, {"sink": 3, "quarantine": 3}, None, "batch 4 abandoned: batch 5 needs batch 3"),
    (3, 2, {"sink": 4, "quarantine": 4}, r"sink table /lake/orders holds batch 4 of 'orders' but the ledger "
     r"\(/lake/orders/_eo_ledger\) only knows batches up to 3\. The ledger was lost", "a table ahead of the ledger"),
    (0, 0, {"sink": 1, "quarantine": 0}, r"holds batch 1 .* only knows batches up to 0",
     "a table holds batches of an empty ledger (another pipeline's, or a lost ledger)"),
    (3, 2, {"sink": 1, "quarantine": 1}, r"gap: the ledger planned batch 3 but the sink table /lake/orders holds only "
     r"up to batch 1; batches 2 are missing .* `make reset-batch PIPELINE=orders BATCH=2`",
     "a table restored behind the ledger"),
    (3, 2, {"sink": 2, "quarantine": 0}, r"quarantine table /lake/orders_q holds only up to batch 0",
     "the quarantine table replaced by an empty one"),
    (5, 4, {"sink": 3, "quarantine": 3}, r"batches 4 are missing", "batch 4 not abandoned: a gap"),
]


@pytest.mark.parametrize("latest, need, versions, error, why", CONSISTENT, ids=_ids(CONSISTENT))
def test_check_consistent(latest, need, versions, error, why):
    if error is None:
        st.check_consistent("orders", TABLES, "/lake/orders/_eo_ledger", latest, need, versions)
        return
    with pytest.raises(LedgerMismatch, match=error) as e:
        st.check_consistent("orders", TABLES, "/lake/orders/_eo_ledger", latest, need, versions)
    assert "Nothing was published" in str(e.value), why


# -- read_so_far: which ranges count as read ----------------------------------------------------
def _marker(k: BatchPlan) -> BatchPlan | None:
    """A position-based kind's start marker (as Kafka's): an empty range at k's start."""
    return st.start_marker(k, {"start_of": k.batch_id})


def _rewind(after: int, to: int) -> RewindRecord:
    return RewindRecord(pipeline="orders", after_batch=after, to_batch=to, restore_versions={}, requested_at="t")


READ = [
    # planned batches, rewinds (after, to), abandoned, kind has positions, read (mK: marker of K's start), why
    ([], [], set(), True, [], "nothing planned"),
    ([1, 2, 3], [], set(), True, [1, 2, 3], "every batch counts, the pending one too (it is re-staged, never re-planned)"),
    ([1, 2], [], set(), True, [1, 2], "batch 3 was reset (its records removed): it never counted"),
    ([1, 2, 3], [], {2}, True, [1, 3], "an abandoned batch does not count"),
    ([1, 2, 3], [(3, 2)], set(), True, [1, "m2"], "rewound to 2, the next batch not planned: restart at 2's start"),
    ([1, 2, 3], [(3, 2)], set(), False, [1], "the same for a kind without positions: no marker"),
    ([1, 2, 3], [(3, 1)], set(), True, ["m1"], "rewound to the first batch"),
    ([1, 2, 3, 4], [(3, 2)], set(), True, [1, 4], "the batch after the rewind is planned: its range carries on"),
    ([1, 3], [(3, 2)], set(), True, [1], "the rewound batch's plan is gone: no marker to give"),
    ([1, 2, 3, 4, 5], [(3, 2), (5, 4)], set(), True, [1, "m4"], "a second rewind, to the first batch of the first"),
    ([1, 2, 3, 4, 5], [(5, 4), (3, 2)], set(), True, [1, "m4"], "the same, rewinds listed in another order"),
    ([1, 2, 3], [(3, 3), (3, 2)], set(), True, [1, "m2"], "two rewinds after one batch: the deeper one restarts"),
    ([1, 2, 3, 4, 5, 6], [(3, 2), (5, 4)], set(), True, [1, 6], "after two rewinds, the next batch carries on"),
]


@pytest.mark.parametrize("planned, rewinds, abandoned, positions, want, why", READ, ids=_ids(READ))
def test_read_so_far(planned, rewinds, abandoned, positions, want, why):
    plans = [_plan(b) for b in planned]
    got = st.read_so_far(plans, [_rewind(a, t) for a, t in rewinds], abandoned.__contains__,
                         _marker if positions else (lambda k: None))
    assert [f"m{p.batch_id}" if "start_of" in p.range else p.batch_id for p in got] == want, why


START_MARKERS = [
    # the kind's empty range at k's start, the marker expected (None, or what it keeps of k), why
    (None, None, "a kind without positions (files, parquet) has no marker"),
    ({"partitions": {"0": [5, 5]}}, {"batch_id": 4, "range": {"partitions": {"0": [5, 5]}}, "rows_in": 0,
                                     "notes": [], "interval": None, "run_id": None, "config_fingerprint": "fp"},
     "k's id and fingerprint, the empty range, none of k's records, notes or run"),
]


@pytest.mark.parametrize("rng, want, why", START_MARKERS, ids=_ids(START_MARKERS))
def test_start_marker(rng, want, why):
    got = st.start_marker(_plan(4, files={"0": ["/landing/a"]}), rng)
    assert (None if got is None else {k: getattr(got, k) for k in want}) == want, why


# -- interval mode: look-back, published slices, where an interval begins, what it replaces -----
LOOKBACK = [
    # cron, n, first planned interval start (hours after T0), run's start (hours), intervals (hours), why
    ("@hourly", 0, 0, 5, [], "no look-back asked"),
    ("@hourly", 3, None, 5, [], "nothing planned yet: not answerable for earlier files"),
    ("@hourly", 3, 0, 5, [(4, 5), (3, 4), (2, 3)], "the 3 intervals before, newest first"),
    ("@hourly", 3, 4, 5, [(4, 5)], "none before the first interval planned"),
    ("@hourly", 3, 5, 5, [], "the first interval itself looks back at nothing"),
    ("@hourly", 2, 0, 5.5, [(5, 5.5), (4, 5)], "a start between ticks: the first interval ends at it"),
    ("0 0 * * *", 2, -48, 0, [(-24, 0), (-48, -24)], "a daily cron"),
]


@pytest.mark.parametrize("cron, n, first, start, want, why", LOOKBACK, ids=_ids(LOOKBACK))
def test_lookback(cron, n, first, start, want, why):
    at = dt.datetime.fromtimestamp((T0 + start * H) / 1000, UTC)
    got = st.lookback(cron, n, None if first is None else T0 + first * H, at)
    assert got == [(T0 + int(lo * H), T0 + int(hi * H)) for lo, hi in want], why
    assert st.lookback(cron, n, None if first is None else T0 + first * H, at.isoformat()) == got  # ISO text alike


PUBLISHED = [
    # live plans (batch id, its files per slice), held, slice -> files expected, why
    ([], 0, {}, "nothing planned"),
    ([(1, {"0": ["a"]})], 1, {"0": {"a"}}, "a committed interval"),
    ([(1, {"0": ["a"]})], 0, {}, "a batch not committed yet is not published"),
    ([(1, {"0": ["a"]}), (2, {"0": ["a", "late"]})], 2, {"0": {"a", "late"}}, "a republished interval: the newest"),
    ([(1, {"0": ["a"]}), (2, {"0": ["a", "late"]})], 1, {"0": {"a"}}, "its republish not committed yet: the old one"),
    ([(1, {"0": ["a"]}), (2, {"1": ["b"], "0": ["late"]}), (3, {"1": ["b", "c"]})], 3,
     {"0": {"late"}, "1": {"b", "c"}}, "each slice from the newest committed batch that published it"),
    ([(1, {})], 1, {"0": []}, "a batch of no files publishes its own interval, empty"),
]


@pytest.mark.parametrize("plans, held, want, why", PUBLISHED, ids=_ids(PUBLISHED))
def test_published_slices(plans, held, want, why):
    live = [_plan(b, T0, files) for b, files in plans]
    got = st.published_slices(live, held)
    assert got == {slice_name(T0 + int(h) * H): {(p, 1, 0) for p in ps} for h, ps in want.items()}, why


BEFORE = [
    # live plans (batch id, interval start in hours; None: continuous), run's start (hours), batch expected, why
    ([], 2, None, "nothing planned"),
    ([(1, 0), (2, 1)], 2, 2, "the interval right before"),
    ([(1, 0), (2, 1)], 1, 1, "an interval ending at the start counts, a later one not"),
    ([(1, 0), (2, 1)], 0.5, None, "no interval ends by then"),
    ([(1, 0), (2, 1), (3, 1)], 2, 3, "an interval published twice: its newest batch"),
    ([(1, 0), (2, 1), (3, 0)], 2, 2, "a backfill of an older interval later: the latest interval wins, not the newest id"),
    ([(1, None), (2, 0)], 2, 2, "a plan without interval is not one"),
]


@pytest.mark.parametrize("plans, start, want, why", BEFORE, ids=_ids(BEFORE))
def test_last_interval_before(plans, start, want, why):
    live = [_plan(b, None if h is None else T0 + h * H) for b, h in plans]
    got = st.last_interval_before(live, _iso(int(T0 + start * H)))
    assert (got.batch_id if got is not None else None) == want, why


def _staged(b: int, slices: list[str], participant: str = "sink") -> list[StagedFile]:
    """Batch ``b``'s staged files of ``participant``, one per slice ("": a file without a slice folder)."""
    folder = f"eo_batches/b{b:010d}/t{b}"
    return [StagedFile(f"{folder}/{slice_name(T0 + int(h) * H) + '/' if h else ''}{participant}-{h or 'all'}.parquet", 1)
            for h in slices]


def _prepared(b: int, sink: list[str], quarantine: list[str]) -> PreparedBatch:
    return PreparedBatch(pipeline="orders", batch_id=b, attempt=f"t{b}",
                         adds={"sink": _staged(b, sink), "quarantine": _staged(b, quarantine, "quarantine")},
                         arrow_schema={}, partition_by={}, fingerprint="x", rows_in=0, rows_valid=0, rows_quarantined=0,
                         rows_published=0, bytes=0, files=0, prepared_at="t", verify_seconds=0, stage_seconds=0)


def _names(b: int, sink: list[str], quarantine: list[str]) -> dict[str, set[str]]:
    return {"sink": {f.path for f in _staged(b, sink)},
            "quarantine": {f.path for f in _staged(b, quarantine, "quarantine")}}


REPLACED = [
    # the new batch's slices, committed (batch id, its slices, sink files' slices, quarantine files' slices),
    # slice -> the batch whose files it removes (and which of them), why
    (None, [], {}, "continuous mode replaces nothing"),
    (["0"], [], {}, "an interval's first batch replaces nothing"),
    (["0"], [(1, ["0"], ["0"], ["0"])], {"0": (1, ["0"], ["0"])}, "a republished interval: its earlier batch's files"),
    (["0"], [(1, ["0"], [""], [""])], {"0": (1, [""], [""])},
     "a batch of one slice staged before slice folders: all its files"),
    (["0"], [(1, ["0"], ["0"], [])], {"0": (1, ["0"], [])}, "nothing quarantined then: no quarantine file to remove"),
    (["0"], [(1, ["0", "1"], ["0", "1"], ["1"])], {"0": (1, ["0"], [])},
     "a batch of two slices: only the files under this slice's folder"),
    (["0"], [(1, ["0"], ["0"], ["0"]), (2, ["0"], ["0"], [])], {"0": (2, ["0"], [])}, "republished twice: the newest"),
    (["0", "1"], [(1, ["0"], ["0"], ["0"])], {"0": (1, ["0"], ["0"])}, "a late slice's first publish replaces nothing"),
    (["1"], [(1, ["0"], ["0"], ["0"]), (2, ["1", "0"], ["1", "0"], ["0"]), (3, ["0"], ["0"], [])],
     {"1": (2, ["1"], [])}, "the newest batch that published this slice, not the newest batch"),
    (["0"], [(1, ["0"], ["0"], []), (5, ["0"], ["0"], ["0"])], {"0": (1, ["0"], [])},
     "a batch not before this one is not replaced"),
]


@pytest.mark.parametrize("slices, committed, want, why", REPLACED, ids=_ids(REPLACED))
def test_replaced_files(slices, committed, want, why):
    new = _plan(4, None if slices is None else T0, {h: [f"/landing/{h}"] for h in slices or []})
    held = [(_plan(b, T0, {h: [f"/landing/{h}"] for h in sl}), _prepared(b, sink, q)) for b, sl, sink, q in committed]
    got = st.replaced_files(new, held)
    assert got == {slice_name(T0 + int(h) * H): _names(*w) for h, w in want.items()}, why


def test_replaced_files_are_the_current_ones_after_a_compaction_of_the_slice():
    """``current``: the files holding the slice now, when maintenance compacted it."""
    seen = []

    def current(batch_id, participant, slice_, published):
        seen.append((batch_id, participant, slice_, published))
        return {f"eo_compacted/{participant}"} if participant == "sink" else published

    new = _plan(4, T0, {"0": ["/landing/0"]})
    got = st.replaced_files(new, [(_plan(1, T0, {"0": ["/landing/0"]}), _prepared(1, ["0"], ["0"]))], current)
    names = _names(1, ["0"], ["0"])
    assert got == {slice_name(T0): {"sink": {"eo_compacted/sink"}, "quarantine": names["quarantine"]}}
    assert seen == [(1, "sink", slice_name(T0), names["sink"]), (1, "quarantine", slice_name(T0), names["quarantine"])]


# -- the texts decisions are reported in ---------------------------------------------------------
RANGES = [
    ([], "", "none"),
    ([4], "4", "one"),
    ([7, 8], "7..8", "two in a row"),
    ([1, 2, 3, 5], "1..3, 5", "a run and a single"),
    ([5, 3, 1, 2], "1..3, 5", "in any order"),
    ([1, 3, 5], "1, 3, 5", "no run"),
]


@pytest.mark.parametrize("ids, want, why", RANGES, ids=_ids(RANGES))
def test_ranges(ids, want, why):
    assert st.ranges(ids) == want, why


INTERVALS = [
    (dt.datetime(2026, 1, 1, 3), dt.datetime(2026, 1, 1, 4), "2026-01-01T03:00:00+00:00", "naive datetimes are UTC"),
    (dt.datetime(2026, 1, 1, 4, tzinfo=dt.timezone(dt.timedelta(hours=1))), dt.datetime(2026, 1, 1, 4, tzinfo=UTC),
     "2026-01-01T03:00:00+00:00", "zoned datetimes in UTC"),
    ("2026-01-01T04:00:00+01:00", "2026-01-01T04:00:00Z", "2026-01-01T03:00:00+00:00", "ISO texts alike"),
    ("2026-01-01T03:00:00", "2026-01-01T04:00:00", "2026-01-01T03:00:00+00:00", "naive ISO text is UTC"),
]


@pytest.mark.parametrize("start, end, want, why", INTERVALS, ids=_ids(INTERVALS))
def test_interval_of(start, end, want, why):
    got = st.interval_of(start, end)
    assert got == {"start": want, "end": "2026-01-01T04:00:00+00:00"}, why
    assert ckpt.ms(got["end"]) - ckpt.ms(got["start"]) == H
