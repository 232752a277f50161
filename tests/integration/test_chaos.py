"""A short `make chaos` inside the test suite: faults at every phase boundary, each fault kind
drawn at most once (in the seed's order) so one short run covers as many kinds as it can.

Short runs: the continuous pipeline over the first ten kinds (BASE_FAULTS: the seed draws
what it drew before the later kinds existed), and an hourly interval-mode pipeline over
odd_lines, late_file and verify_abort_race (the seed draws them in that order: the odd lines
land in hour 0, a late file lands in the published hour 0 and is republished with hour 1, then a
zombie verify races the abort task on hour 2's attempt).

A short run of hostile landing inputs (a name that is not UTF-8, links to a secret, to /dev/zero
and to a folder, a FIFO) next to normal files: each batch commits the normal files, nothing of
the hostile ones is published or quarantined.

A fourth one upserts into a merge sink through the faults that split its commit: a crash
between the sink's MERGE and the tombstones' (commit_crash), after both and before the ledger
(ledger_crash), and a zombie attempt.

A fifth one reads another Delta table (the delta backend) while the upstream is compacted and
RESTOREd (the refusal's rewind is the operator's repair) and a commit dies.

The long runs (hundreds of batches) and the other kinds (rewind_race, foreign_writers, the
Kafka, S3 and delta backends) stay in `make chaos BATCHES=... SEED=... [MODE=...] [FAULTS=...] [SINK=merge]`.
"""

from __future__ import annotations

import pytest

from chaos.run_chaos import BASE_FAULTS, Chaos

pytestmark = pytest.mark.integration

INTERVAL_KINDS = ["odd_lines", "late_file", "verify_abort_race"]


@pytest.mark.parametrize("seed", [11])
def test_short_chaos_run_is_exactly_once(tmp_path, seed):
    res = Chaos(batches=5, seed=seed, workdir=tmp_path, fault_rate=0.8, quiet=True, distinct=True,
                only=BASE_FAULTS).run()
    assert res["problems"] == []
    assert (res["duplicates"], res["lost"], res["orphans"]) == (0, 0, 0), res
    assert res["batches"] >= 5 and res["faults"] >= 3, res
    assert len(res["faults_by_kind"]) == min(res["faults"], len(BASE_FAULTS)), res  # distinct kinds


def test_short_interval_chaos_run_is_exactly_once(tmp_path):
    res = Chaos(batches=3, seed=3, workdir=tmp_path, fault_rate=1.0, quiet=True, distinct=True,
                only=INTERVAL_KINDS, mode="interval").run()
    assert res["problems"] == [], res
    assert (res["duplicates"], res["lost"], res["orphans"]) == (0, 0, 0), res
    assert res["batches"] >= 3, res
    assert set(INTERVAL_KINDS) <= set(res["faults_by_kind"]), res  # each of them injected
    assert res["bad_records"] >= 6, res  # the odd lines were landed, and quarantined exactly once


def test_short_chaos_run_with_hostile_landing_inputs_never_halts_nor_publishes_them(tmp_path):
    """hostile_inputs (never published nor quarantined) and long_records (lines over
    max_record_bytes, one with no newline, one not in UTF-8: each quarantined once, at its line)."""
    res = Chaos(batches=2, seed=7, workdir=tmp_path, fault_rate=1.0, quiet=True, only=["hostile_inputs", "long_records"],
                distinct=True).run()
    assert res["problems"] == [], res
    assert (res["duplicates"], res["lost"], res["orphans"]) == (0, 0, 0), res
    assert res["batches"] >= 2 and res["faults_by_kind"] == {"hostile_inputs": 1, "long_records": 1}, res
    assert res["bad_records"] >= 3, res  # the long and the non-UTF-8 lines, quarantined exactly once


MERGE_KINDS = ["commit_crash", "ledger_crash", "zombie"]


def test_short_merge_chaos_run_is_exactly_once(tmp_path):
    res = Chaos(batches=3, seed=5, workdir=tmp_path, fault_rate=1.0, quiet=True, distinct=True,
                only=MERGE_KINDS, sink="merge").run()
    assert res["problems"] == [], res
    assert (res["duplicates"], res["lost"], res["orphans"]) == (0, 0, 0), res
    assert res["batches"] >= 3, res
    assert set(MERGE_KINDS) <= set(res["faults_by_kind"]), res
    assert res["outcomes"]["merge: keys published"] > 0, res


DELTA_KINDS = ["upstream_compaction", "upstream_rewind", "commit_crash"]


def test_short_delta_source_chaos_run_is_exactly_once(tmp_path):
    res = Chaos(batches=3, seed=2, workdir=tmp_path, fault_rate=1.0, quiet=True, distinct=True,
                only=DELTA_KINDS, backend="delta").run()
    assert res["problems"] == [], res
    assert (res["duplicates"], res["lost"], res["orphans"]) == (0, 0, 0), res
    assert res["batches"] >= 3, res
    assert set(DELTA_KINDS) <= set(res["faults_by_kind"]), res
