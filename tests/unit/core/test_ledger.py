"""eobatch.core.ledger: the batch ledger over LocalStorage: one put-if-absent record per batch and phase,
the batch ids, an attempt's decision (decided once), the newest batch with a checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from eobatch.core.formats import CommittedBatch, Layout
from eobatch.core.ledger import Ledger
from eobatch.storage.fs import LocalStorage
from support.ledger_book import Book
from support.ledger_book import commit_batches as _committed
from support.records import plan_record as _plan
from support.records import prepared_record as _prepared


@pytest.fixture
def ledger(tmp_path):
    return Ledger(Layout(str(tmp_path / "lake" / "orders"), str(tmp_path / "lake" / "q")), LocalStorage())


def test_empty_ledger(ledger):
    assert ledger.batch_ids() == []
    assert ledger.latest_batch_id() == 0
    assert ledger.plans() == []
    assert ledger.plan(1) is None and ledger.prepared(1) is None and ledger.committed(1) is None
    assert ledger.stage_summary(1, "a") is None and ledger.manifest(1, "a", "sink", 0) is None
    assert ledger.attempts(1) == [] and ledger.aborted_info(1, "a") is None


def test_put_plan_is_put_if_absent(ledger):
    first = _plan(1)
    assert ledger.put_plan(first) is True
    assert ledger.put_plan(_plan(1, files=[])) is False
    assert ledger.plan(1) == first


def test_batch_ids_sorted_and_latest(ledger, tmp_path):
    for b in (3, 1, 12, 2):
        assert ledger.put_plan(_plan(b))
    plans_dir = Path(ledger.layout.plans_dir())
    (plans_dir / "README.txt").write_text("not a batch")
    (plans_dir / "12.json").write_text("{}")  # not a 10-digit batch file
    (plans_dir / ".0000000099.json.abc.tmp").write_text("{}")  # a put in progress
    assert ledger.batch_ids() == [1, 2, 3, 12]
    assert ledger.latest_batch_id() == 12
    assert [p.batch_id for p in ledger.plans()] == [1, 2, 3, 12]


def test_prepared_committed_aborted(ledger):
    p = _prepared(1)
    assert ledger.put_prepared(p) is True
    other = _prepared(1)
    other.attempt = "a2"
    assert ledger.put_prepared(other) is False
    assert ledger.prepared(1) == p
    c = CommittedBatch(pipeline="orders", batch_id=1, fingerprint=p.fingerprint,
                       delta_versions={"sink": 1, "quarantine": 1}, committed_at="t", commit_seconds=0.2)
    assert ledger.put_committed(c) is True
    assert ledger.put_committed(c) is False
    assert ledger.committed(1) == c
    first = ledger.decide(1, "a0", "abort", {"reason": "verify failed"})
    assert ledger.decide(1, "a0", "abort", {"reason": "a second abort does not replace it"}) == first
    assert ledger.decide(1, "a0", "prepare", {}) == first  # decided once: a late verify loses
    assert ledger.aborted_info(1, "a0")["reason"] == "verify failed"
    assert ledger.decide(1, "a1", "prepare", {})["decision"] == "prepare"
    assert ledger.decide(1, "a1", "abort", {})["decision"] == "prepare"  # an abort after verify loses
    assert ledger.aborted_info(1, "a1") is None
    assert ledger.attempts(1) == ["a0", "a1"]
    assert ledger.latest_batch_id() == 0  # only plans define batches


def test_ledger_defaults_to_storage_of_the_sink(tmp_path):
    led = Ledger(Layout(str(tmp_path / "t"), str(tmp_path / "q")))
    assert isinstance(led.fs, LocalStorage)
    assert led.put_plan(_plan(1)) is True
    assert (tmp_path / "t" / "_eo_ledger" / "plans" / "0000000001.json").is_file()
    assert led.describe(1).startswith("batch 1 (")


def test_latest_batch_id_from_the_checkpoint_equals_the_listing(small, tmp_path):
    book = Book(tmp_path)
    _committed(book, 5)
    book.checkpoint()
    _committed(book, 2)
    book.plan()
    assert book.ledger.latest_batch_id() == max(book.ledger.batch_ids()) == 8
    book.reset()
    assert book.ledger.latest_batch_id() == 7
