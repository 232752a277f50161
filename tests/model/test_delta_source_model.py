"""A pipeline reading another Delta table (``kind: delta``) under hypothesis: the upstream appends,
compacts (``dataChange=false``), deletes rows (a change commit, passed over: ``on_change_commit:
skip``) and is RESTOREd to any earlier version, in any order, against downstream runs whose commits
die at any crash point (the next run's recover finishes them). A downstream plan refused because a
RESTORE undid versions it had published is repaired as the message says: the downstream is rewound
to the batch it names.

The upstream is a real delta-rs table; the protocol, the planner, the ledger and the downstream
tables are the real ones; the stage applies the stage job's rule with pyarrow (every row of every
planned file, once).

The oracle is written forwards and on its own: the appends in effect at each upstream version
(an append adds its version, a compaction or a delete keeps the previous version's, a RESTORE to
``t`` takes ``t``'s). After every step no record is published twice and none that was never
appended; at the end of every example the downstream, run until it has nothing to read, publishes
exactly the records of the appends in effect at the upstream's latest version, each once.

``EOBATCH_MODEL_EXAMPLES=<n>`` (``make model-check``) runs n examples of 40 steps;
``make test`` runs EOBATCH_MODEL_DELTA_CI_EXAMPLES (default 10) of 25 steps.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import tempfile
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from eobatch.pipelines.loader import load_pipeline
from eobatch.protocol import Protocol
from eobatch.sources.delta import UpstreamRefused
from support.protocol_runs import commit_dying_at, model_settings
from support.pyarrow_stager import stage

COMMIT_POINTS = (None, "commit.before_delta_commit", "commit.after_delta_commit")


class DeltaSourceModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="eobatch-deltamodel-"))
        self.upstream = str(self.root / "lake" / "bronze")
        doc = {
            "name": "silver",
            "source": {"kind": "delta", "table": self.upstream, "max_records_per_batch": 4,
                       "max_versions_per_batch": 3, "on_change_commit": "skip"},
            "schema": "order_id STRING NOT NULL, part STRING",
            "sink": {"table": str(self.root / "lake" / "silver")},
            "quarantine": {"table": str(self.root / "lake" / "silver_quarantine")},
        }
        (self.root / "pipelines").mkdir()
        path = self.root / "pipelines" / "silver.yaml"
        path.write_text(yaml.safe_dump(doc))
        self.proto = Protocol(load_pipeline(str(path)))
        self.effect: list[tuple[int, ...]] = []  # per upstream version: the append versions in effect
        self.appended: dict[int, list[str]] = {}  # append version -> its records
        self.n = 0
        self.runs = 0

    def teardown(self) -> None:
        try:
            for _ in range(200):
                if self._run() is None:
                    break
            else:
                raise AssertionError("the downstream never caught up")
            want = collections.Counter(r for v in (self.effect[-1] if self.effect else ()) for r in self.appended[v])
            assert self._published() == want, "after the downstream read everything"
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- the upstream -------------------------------------------------------------------------------
    def _version(self) -> int:
        return deltalake.DeltaTable(self.upstream).version()

    def _after(self, keep: tuple[int, ...] | None = None) -> None:
        """Record what the upstream's newest version holds: ``keep`` (None: the previous version's)."""
        v = self._version()
        assert v == len(self.effect), f"upstream version {v}, the model knows {len(self.effect)} versions"
        self.effect.append(keep if keep is not None else (self.effect[-1] if self.effect else ()))

    @rule(n=st.integers(1, 3), part=st.sampled_from(["a", "b"]))
    def upstream_appends(self, n: int, part: str) -> None:
        ids = [f"r{self.n + i}" for i in range(n)]
        self.n += n
        deltalake.write_deltalake(self.upstream, pa.table({"order_id": ids, "part": [part] * n}), mode="append",
                                  partition_by=["part"])
        v = self._version()
        self.appended[v] = ids
        self._after((self.effect[-1] if self.effect else ()) + (v,))

    @precondition(lambda self: self.effect)
    @rule()
    def upstream_compacts(self) -> None:
        before = self._version()
        deltalake.DeltaTable(self.upstream).optimize.compact()
        if self._version() != before:
            event("an upstream compaction")
            self._after()

    @precondition(lambda self: self.effect)
    @rule(data=st.data())
    def upstream_deletes(self, data) -> None:
        live = deltalake.DeltaTable(self.upstream).to_pyarrow_table().column("order_id").to_pylist()
        if not live:
            return
        victim = data.draw(st.sampled_from(sorted(live)))
        deltalake.DeltaTable(self.upstream).delete(f"order_id = '{victim}'")
        event("an upstream delete (passed over downstream)")
        self._after()

    @precondition(lambda self: len(self.effect) > 1)
    @rule(data=st.data())
    def upstream_restores(self, data) -> None:
        t = data.draw(st.integers(0, len(self.effect) - 2))
        deltalake.DeltaTable(self.upstream).restore(t)
        event("an upstream RESTORE")
        self._after(self.effect[t])

    # -- the downstream ---------------------------------------------------------------------------------
    @rule(point=st.sampled_from(COMMIT_POINTS))
    def downstream_runs(self, point: str | None) -> None:
        self._run(point)

    # -- what holds after every step -----------------------------------------------------------------
    @invariant()
    def nothing_twice_nothing_never_appended(self) -> None:
        got = self._published()
        assert not [k for k, v in got.items() if v > 1], f"published twice: {got}"
        ever = {r for rs in self.appended.values() for r in rs}
        assert set(got) <= ever, f"never appended: {set(got) - ever}"

    # -- helpers ------------------------------------------------------------------------------------------
    def _published(self) -> collections.Counter:
        table = self.proto.cfg.sink_table
        if not deltalake.DeltaTable.is_deltatable(table):
            return collections.Counter()
        return collections.Counter(deltalake.DeltaTable(table).to_pyarrow_table().column("order_id").to_pylist())

    def _lines(self, plan):
        """Every row of every planned file, as the stage job reads it (partition value from the log)."""
        lines, positions = [], {}
        for f in plan.range["files"]:
            if f.get("skipped"):
                continue
            rows = pq.read_table(f["path"]).to_pylist()
            for i, row in enumerate(rows):
                rec = {**row, **(f.get("partition_values") or {})}
                lines.append(("", f["path"], i, json.dumps(rec).encode()))
            positions[f["path"]] = [len(rows), 0, len(rows) - 1] if rows else [0, None, None]
        return lines, positions

    def _run(self, point: str | None = None) -> str | None:
        self.runs += 1
        rid = f"r{self.runs}"
        self.proto.recover(run_id=rid)
        try:
            plan, _ = self.proto.plan(run_id=rid)
        except UpstreamRefused as e:
            m = re.search(r"BATCH=(\d+)", str(e))
            assert m, f"a refusal without a repair: {e}"
            event("a RESTORE undid published versions: the downstream was rewound")
            self.proto.rewind(int(m.group(1)), run_id=f"{rid}-rewind")
            return "rewound"
        if plan is None:
            return None
        lines, positions = self._lines(plan)
        self.proto.verify(plan.batch_id, stage(self.proto, plan.batch_id, lines=lines, source_positions=positions))

        return commit_dying_at(self.proto, plan.batch_id, point)


DeltaSourceModel.TestCase.settings = model_settings("EOBATCH_MODEL_DELTA_CI_EXAMPLES", 10, 25)
TestDeltaSourceModel = DeltaSourceModel.TestCase
