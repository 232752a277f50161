"""Kafka interval mode under hypothesis: records whose own timestamps are in any order, plain or
in transactions that stay open, commit or abort (a decided transaction's marker carries the
broker's later time), against runs of any hour in any order, runs that fail before PREPARED
(their batch is abandoned) and commits that die (the next run's recover finishes them).

The topic is a model (``support.kafka_model``) standing in for the broker's answers to the
planner; the protocol, the planner's rule (``sources/kafka/intervals.py``), the ledger and the
delta-rs tables are the real ones, and the stage applies the stage job's rule with pyarrow.

Checked after every step: no record is published twice; none is published that a committed
reader would not read (aborted, still open); each is published in the slice of the hour its
timestamp falls in. At the end of every example every open transaction is decided, every hour
runs once more, and then the sink publishes exactly the committed records, each once, each by
its own hour.

``EOBATCH_MODEL_EXAMPLES=<n>`` (``make model-check``) runs n examples of 40 steps;
``make test`` runs EOBATCH_MODEL_KAFKA_CI_EXAMPLES (default 10) of 30 steps.
"""

from __future__ import annotations

import collections
import shutil
import tempfile
from pathlib import Path

import deltalake
import pyarrow.parquet as pq
import yaml
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from eobatch.core.formats import slice_name
from eobatch.errors import IntervalNotSettled
from eobatch.pipelines.loader import load_pipeline
from eobatch.protocol import Protocol
from support.kafka_model import Log, model_broker, stage_kafka
from support.protocol_runs import T0, H, commit_dying_at, iv, model_settings

HOURS = st.integers(0, 3)
PARTS = st.integers(0, 1)
MINUTES = st.integers(0, 59)
PRODUCERS = st.integers(0, 1)
COMMIT_POINTS = (None, "commit.before_delta_commit", "commit.after_delta_commit")


class KafkaIntervalModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="eobatch-kafkamodel-"))
        doc = {
            "name": "orders", "mode": "interval", "schedule": "@hourly",
            "source": {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9", "topic": "orders",
                       "max_records_per_batch": 100_000, "settle_seconds": 0,
                       "open_transaction_wait_seconds": 10 ** 9},  # an open transaction: the run waits
            "schema": "order_id STRING NOT NULL",
            "sink": {"table": str(self.root / "lake" / "orders")},
            "quarantine": {"table": str(self.root / "lake" / "orders_quarantine")},
        }
        (self.root / "pipelines").mkdir()
        path = self.root / "pipelines" / "orders.yaml"
        path.write_text(yaml.safe_dump(doc))
        self.proto = Protocol(load_pipeline(str(path)))
        self.log = Log(partitions=2, broker_now=(T0 + 100 * H) * 1000)
        self.txn = [0, 1]  # each producer's current transaction id
        self.next_txn = 2
        self.n = 0
        self.runs = 0

    def teardown(self) -> None:
        try:
            for k in range(2):
                if self.log.state.get(self.txn[k]) == "open":
                    self.log.decide(self.txn[k], "committed")
            for h in range(4):
                assert self._run(h) != "waits", "no transaction is open any more"
            self.published_where_they_belong()
            assert self._published() == collections.Counter(self.log.published_once()), \
                "after every transaction was decided and every hour ran once more"
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- the topic ---------------------------------------------------------------------------------
    def _ts(self, h: int, m: int) -> int:
        return (T0 + h * H + m * 60) * 1000

    def _id(self, h: int) -> str:
        self.n += 1
        return f"h{h}-{self.n}"

    @rule(p=PARTS, h=HOURS, m=MINUTES)
    def plain_record(self, p: int, h: int, m: int) -> None:
        self.log.append(p, self._ts(h, m), self._id(h))

    @rule(k=PRODUCERS, p=PARTS, h=HOURS, m=MINUTES)
    def record_in_transaction(self, k: int, p: int, h: int, m: int) -> None:
        if self.log.state.get(self.txn[k], "open") != "open":
            self.txn[k], self.next_txn = self.next_txn, self.next_txn + 1
        self.log.append(p, self._ts(h, m), self._id(h), txn=self.txn[k])

    @rule(k=PRODUCERS, commit=st.booleans())
    def decide_transaction(self, k: int, commit: bool) -> None:
        if self.log.state.get(self.txn[k]) == "open":
            self.log.decide(self.txn[k], "committed" if commit else "aborted")
            event("a transaction " + ("committed" if commit else "aborted"))

    # -- the pipeline ----------------------------------------------------------------------------
    @rule(h=HOURS, point=st.sampled_from(COMMIT_POINTS))
    def run_hour(self, h: int, point: str | None) -> None:
        self._run(h, point)

    @rule(h=HOURS)
    def run_fails_before_prepared(self, h: int) -> None:
        """The stage fails: the abort abandons the batch (its scan counts as never read)."""
        self._run(h, stage_fails=True)

    # -- what holds after every step -----------------------------------------------------------------
    @invariant()
    def nothing_twice_nothing_uncommitted(self) -> None:
        got = self._published()
        assert not [k for k, v in got.items() if v > 1], f"published twice: {got}"
        assert set(got) <= self.log.published_once(), f"not committed: {set(got) - self.log.published_once()}"

    @invariant()
    def published_where_they_belong(self) -> None:
        """Each record is in a file of its own hour's slice."""
        if not deltalake.DeltaTable.is_deltatable(self.proto.cfg.sink_table):
            return
        for uri in deltalake.DeltaTable(self.proto.cfg.sink_table).file_uris():
            path = uri.removeprefix("file://")
            want = {f"h{h}": slice_name((T0 + h * H) * 1000) for h in range(4)}
            for oid in pq.read_table(path).column("order_id").to_pylist():
                assert f"/{want[oid.split('-')[0]]}/" in path, f"{oid} published in {path}"

    # -- helpers ----------------------------------------------------------------------------------------
    def _published(self) -> collections.Counter:
        if not deltalake.DeltaTable.is_deltatable(self.proto.cfg.sink_table):
            return collections.Counter()
        return collections.Counter(r["order_id"] for r in
                                   deltalake.DeltaTable(self.proto.cfg.sink_table).to_pyarrow_table().to_pylist())

    def _plan(self, h: int, rid: str):
        with model_broker(self.log):
            return self.proto.plan(interval=iv(h), run_id=rid)

    def _run(self, h: int, point: str | None = None, stage_fails: bool = False) -> str | None:
        self.runs += 1
        rid = f"r{self.runs}"
        self.proto.recover(run_id=rid)
        try:
            plan, _ = self._plan(h, rid)
        except IntervalNotSettled:
            event("a run waited for an open transaction")
            return "waits"  # the sensor reschedules: a transaction holding records of the hour is open
        if plan is None:
            return None
        if any("late records" in n for n in plan.notes):
            event("a run published late records (an interval again, whole)")
        if plan.range.get("pending"):
            event("a plan kept records for intervals that had not run")
        if stage_fails:
            self.proto.abandon(plan.batch_id, "model: the stage failed")
            return "abandoned"
        self.proto.verify(plan.batch_id, stage_kafka(self.proto, self.log, plan.batch_id))

        return commit_dying_at(self.proto, plan.batch_id, point)


KafkaIntervalModel.TestCase.settings = model_settings("EOBATCH_MODEL_KAFKA_CI_EXAMPLES", 10, 30)
TestKafkaIntervalModel = KafkaIntervalModel.TestCase
