"""make chaos: the kinds that need a pipeline of their own (issue 41, "never stuck").

Each kind drives a side pipeline next to the chaos pipeline (same pipelines folder, its own
landing, tables and ledger), created when the kind is first drawn; the chaos pipeline's run goes
on after it as usual. A side run does what one DAG run of several batches does, each step in its
own process exactly as its Airflow task calls the product (``BatchRun``): recover, plan (up to the
YAML's ``max_batches_per_run``), the stage task's choice of attempts (a batch STAGED by an earlier
run's job is verified as it is), one spark-submit staging every batch still to stage
(``launch.spark_submit_argv(..., also=...)``), verify of each, commit of each in order; the abort
task (``BatchRun.fail_run``) when the Spark job fails. The kinds (see run_chaos's docstring):
wide_schema, many_files_low_limit, transform_action, upstream_partition_delete. At the end every
side pipeline is drained, swept and checked like the chaos pipeline, by the same independent
reader (delta-rs, the raw _delta_log), and none may be stuck (``eobatch.core.stuck.find_stuck``).
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import re
import resource
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eobatch.job import launch
from support.harness import Pipeline, write_delta_pipeline, write_pipeline

if TYPE_CHECKING:
    from chaos.run_chaos import Chaos

SIDE_KINDS = ["wide_schema", "many_files_low_limit", "transform_action", "upstream_partition_delete"]
WIDE_COLUMNS = 300  # nullable columns the wide pipeline adds to the chaos schema
WIDE_TYPES = ("STRING", "BIGINT", "DOUBLE", "BOOLEAN")
MAX_RUN_BATCHES = 30  # the wide pipeline's max_batches_per_run: runs near the limits
MANY_PER_BATCH = 200  # many_files_low_limit: one-record files per batch
NOFILE_LIMIT = 1024  # many_files_low_limit: RLIMIT_NOFILE of its spark-submit (a run opens more files than this)
PY = sys.executable
WIDE = re.compile(r"w\d{3}")
CUSTOMERS = 5  # upstream_partition_delete: partitions (customer c0..c4) of the upstream
# transform_action: the pipeline's own transform, one of these at a time (each publishes its input unchanged)
ACTIONS = {
    "via_rdd": "return df.sparkSession.createDataFrame(df.rdd.map(lambda row: row), df.schema)",
    "is_empty": "return df.limit(0) if df.isEmpty() else df",
    "first_row": "ctx.options['first'] = df.first()\n    return df",
    "counted": "return df if df.count() >= 0 else df.limit(0)",
}
CDF_OPS = ("partition_delete", "truncate", "overwrite", "update")

# One step of a DAG run of several batches, in a process of its own, as its Airflow task calls it
# (eobatch.airflow.operators): argv = pipeline, run id, step, [JSON argument]; prints JSON.
SIDE_TASK = r"""
import json, sys
from eobatch.pipelines.loader import find_pipeline
from eobatch.protocol.batch_run import BatchRun, RunParams
from eobatch.protocol import Protocol
from eobatch.job import launch
name, run_id, step = sys.argv[1:4]
arg = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
run = BatchRun(Protocol(find_pipeline(name)), run_id=run_id, params=RunParams(replan_pending=step == "replan"))
if step in ("recover", "replan"):
    r = run.recover()
    out = {"lines": r.lines, "value": r.value}
elif step == "plan":
    out = run.plan().value
elif step == "stage_attempts":
    r = run.stage_attempts(arg, lambda: launch.new_attempt_id(1))
    out = {"attempts": r.value, "stage": r.detail["stage"]}
elif step == "verify":
    out = run.verify_run({int(b): a for b, a in arg.items()}).value
elif step == "commit":
    out = [run.commit(b).value for b in arg]
else:  # fail: the abort task of a run of several batches
    r = run.fail_run(arg["batches"], {int(b): a for b, a in arg["attempts"].items()}, "chaos: run failed")
    out = {"removed": r.value, "lines": r.lines + r.warnings}
print(json.dumps(out, default=str))
"""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE_LIMIT, NOFILE_LIMIT))


class Side:
    """A side pipeline: the pipeline, its runs, what the harness did to it."""

    def __init__(self, kind: str, p: Pipeline, upstream: Path | None = None):
        self.kind, self.p, self.upstream = kind, p, upstream
        self.runs = 0
        self.files = 0
        self.action: str | None = None  # transform_action: the transform's body in effect
        self.ops: collections.Counter[str] = collections.Counter()  # what was done to it (for the report)


class SideRuns:
    def __init__(self, chaos: Chaos):
        self.c = chaos
        self.sides: dict[str, Side] = {}

    # -- the side pipelines ------------------------------------------------------------------
    def side(self, kind: str) -> Side:
        if kind not in self.sides:
            self.sides[kind] = getattr(self, f"_new_{kind}")()
        return self.sides[kind]

    def _extra(self, batches: int) -> str:
        return f"max_batches_per_run: {batches}\nmaintenance: {{vacuum_retention_hours: 0}}\n"

    def _new_wide_schema(self) -> Side:
        cols = ", ".join(f"w{i:03d} {WIDE_TYPES[i % len(WIDE_TYPES)]}" for i in range(WIDE_COLUMNS))
        schema = f"order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP, {cols}"
        return Side("wide_schema", write_pipeline(self.c.root, name="chaos_wide", schema=schema, max_records=20,
                                                  extra=self._extra(MAX_RUN_BATCHES)))

    def _new_many_files_low_limit(self) -> Side:
        return Side("many_files_low_limit", write_pipeline(self.c.root, name="chaos_many", max_records=MANY_PER_BATCH,
                                                           extra=self._extra(10)))

    def _new_transform_action(self) -> Side:
        own = self.c.root / "pipelines" / "transforms"
        own.mkdir(parents=True, exist_ok=True)
        side = Side("transform_action", write_pipeline(self.c.root, name="chaos_act", transform="chaos_action",
                                                       max_records=30, extra=self._extra(5)))
        self._set_action(side, self.c.rnd.choice(sorted(ACTIONS)))
        return side

    def _new_upstream_partition_delete(self) -> Side:
        up = self.c.root / "lake" / "cdf_upstream"
        side = Side("upstream_partition_delete", Pipeline(self.c.root, "chaos_cdf", Path(), Path(), Path(), Path()), up)
        self._cdf_write(side, self._cdf_rows(side, self.c.rnd.randint(5, 20)), "append")  # the table exists first
        merge = "merge: {keys: [order_id], sequence_by: change_seq, delete_when: \"change_type = 'delete'\"}"
        side.p = write_delta_pipeline(self.c.root, "chaos_cdf", up,
                                      "change_feed: true\nmax_records_per_batch: 40\nmax_versions_per_batch: 2\n",
                                      rest="transform: change_rows\n" + self._extra(10),
                                      sink_extra=f"mode: merge\n{merge}\n")
        return side

    # -- what each kind does -------------------------------------------------------------------
    def inject(self, kind: str) -> str:
        side = self.side(kind)
        rnd = self.c.rnd
        crash = False
        if kind == "wide_schema":
            n = rnd.randint(2, MAX_RUN_BATCHES)
            for _ in range(n):
                self._land(side, rnd.randint(11, 20))  # over half a batch: one file per batch
            crash = rnd.random() < 0.3
            what = f"{n} files of {WIDE_COLUMNS + 4} columns landed (a run of {n} batches)"
        elif kind == "many_files_low_limit":
            n = rnd.randint(NOFILE_LIMIT + 100, NOFILE_LIMIT + 500)
            folder = f"m{side.ops[kind]:03d}"  # one folder per landing
            for i in range(n):
                self._land(side, 1, name=f"{folder}/f{i:05d}.jsonl")
            crash = rnd.random() < 0.3
            what = (f"{n} one-record files landed (at least {-(-n // MANY_PER_BATCH)} batches), spark-submit under "
                    f"RLIMIT_NOFILE={NOFILE_LIMIT}")
        elif kind == "transform_action":
            for _ in range(rnd.randint(1, 3)):
                self._land(side, rnd.randint(5, 25))
            left = self._plan_only(side) if rnd.random() < 0.4 else ""
            what = left + self._switch_action(side)
        else:
            what = self._cdf_change(side)
        side.ops[kind] += 1
        return f"side {side.p.name}: {what}; " + self.run(side, crash=crash)

    def _land(self, side: Side, n: int, name: str | None = None) -> None:
        side.files += 1
        k, seed = side.files, self.c.seed
        good: list[dict[str, Any]] = [{"order_id": f"{side.p.name}-s{seed}-f{k}-{i}", "customer": f"c{i % 5}",
                                       "amount": float(i) + 0.25, "ts": "2026-01-01T00:00:00Z"} for i in range(n)]
        if side.kind == "wide_schema":  # a few of the wide columns set, the others null
            for r in good:
                for i in self.c.rnd.sample(range(WIDE_COLUMNS), 8):
                    t = WIDE_TYPES[i % len(WIDE_TYPES)]
                    r[f"w{i:03d}"] = (f"v{i}" if t == "STRING" else i * 1000 if t == "BIGINT"
                                      else i + 0.5 if t == "DOUBLE" else bool(i % 3))
        bad = [f'{{"order_id": "bad-{side.p.name}-{seed}-{k}", "amount": "x"}}'] if self.c.rnd.random() < 0.3 else []
        side.p.land(name or f"d{k % 3}/f{k:05d}.jsonl", good, bad=bad)

    def _set_action(self, side: Side, name: str) -> None:
        path = self.c.root / "pipelines" / "transforms" / "chaos_action.py"
        path.write_text(f"# {name}\ndef transform(df, ctx):\n    {ACTIONS[name]}\n")
        side.action = name

    def _switch_action(self, side: Side) -> str:
        """Another transform, between batches: a pending batch pins the code it was planned with, so
        when one is pending the run replans it under the new code (the run param replan_pending)."""
        name = self.c.rnd.choice(sorted(ACTIONS))
        if name == side.action:
            return f"transform {name} (through df.rdd or with an action on its input) kept"
        pending = self._pending(side)
        self._set_action(side, name)
        if pending:
            side.ops["replan_pending"] += 1
            out = self.step(side, "replan", f"replan-{side.runs}")
            return f"transform switched to {name} with batch {pending} pending: {'; '.join(out['lines'][1:2])}"
        return f"transform switched to {name} (through df.rdd or with an action on its input)"

    def _plan_only(self, side: Side) -> str:
        """A run that planned its batches and went no further (its stage task never ran: the run
        was marked failed): they stay PLANNED, pinned to the transform's code of their plan."""
        side.runs += 1
        run_id = f"chaos__{side.p.name}__{side.runs}"
        self.step(side, "recover", run_id)
        batches = self.step(side, "plan", run_id)
        side.ops["left_planned"] += 1
        return f"a run planned batch(es) {batches} and stopped; " if batches else ""

    def _pending(self, side: Side) -> int | None:
        from eobatch.core.stuck import first_open

        return first_open(side.p.protocol().ledger)

    # -- upstream_partition_delete: the upstream table, with the Change Data Feed on -----------------
    def _cdf_rows(self, side: Side, n: int, keys: list[str] | None = None) -> list[dict]:
        rnd = self.c.rnd
        rows = []
        for i in range(n):
            side.files += 1
            key = keys[i] if keys else f"cdf-s{self.c.seed}-{side.files}"
            rows.append({"order_id": key, "customer": f"c{rnd.randrange(CUSTOMERS)}", "amount": float(side.files),
                         "ts": dt.datetime(2026, 1, 1, rnd.randrange(24), tzinfo=dt.timezone.utc)})
        return rows

    def _cdf_write(self, side: Side, rows: list[dict], mode: str) -> None:
        import pyarrow as pa
        from deltalake import write_deltalake

        schema = pa.schema([("order_id", pa.string()), ("customer", pa.string()), ("amount", pa.float64()),
                            ("ts", pa.timestamp("us", tz="UTC"))])
        data, conf = pa.Table.from_pylist(rows, schema), {"delta.enableChangeDataFeed": "true"}
        if mode == "overwrite":
            write_deltalake(str(side.upstream), data, mode="overwrite", partition_by=["customer"], configuration=conf)
        else:
            write_deltalake(str(side.upstream), data, mode="append", partition_by=["customer"], configuration=conf)

    def _cdf_change(self, side: Side) -> str:
        """New rows, then one change that writes no change data (a whole-partition DELETE, a DELETE
        without a condition, an overwrite) or, for contrast, an UPDATE (which writes some)."""
        from deltalake import DeltaTable

        rnd = self.c.rnd
        self._cdf_write(side, self._cdf_rows(side, rnd.randint(3, 15)), "append")
        op = rnd.choice(CDF_OPS)
        table = DeltaTable(str(side.upstream))
        if op == "partition_delete":
            parts = rnd.sample([f"c{i}" for i in range(CUSTOMERS)], rnd.randint(1, 2))
            table.delete(" or ".join(f"customer = '{c}'" for c in parts))
            what = f"DELETE of partitions {parts}"
        elif op == "truncate":
            table.delete()
            what = "DELETE without a condition (truncate)"
        elif op == "overwrite":
            old = [r["order_id"] for r in table.to_pyarrow_table(columns=["order_id"]).to_pylist()]
            keep = rnd.sample(old, min(len(old), rnd.randint(0, 5)))  # keys written again, with new values
            self._cdf_write(side, self._cdf_rows(side, len(keep), keep) + self._cdf_rows(side, rnd.randint(0, 6)),
                            "overwrite")
            what = f"overwrite ({len(keep)} of {len(old)} keys written again)"
        else:
            table.update({"amount": "amount + 1000.0"}, predicate=f"customer = 'c{rnd.randrange(CUSTOMERS)}'")
            what = "UPDATE of a partition's rows (change data)"
        side.ops[op] += 1
        return f"upstream (change feed on) appended, then {what}: version {DeltaTable(str(side.upstream)).version()}"

    # -- one DAG run of several batches ----------------------------------------------------------
    def step(self, side: Side, step: str, run_id: str, arg: Any = None) -> Any:
        argv = [PY, "-c", SIDE_TASK, side.p.name, run_id, step] + ([json.dumps(arg)] if arg is not None else [])
        r = subprocess.run(argv, env=self.c.env, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"{side.p.name}: {step} failed (exit {r.returncode}): {r.stderr[-2000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])

    def run(self, side: Side, crash: bool = False) -> str:
        """One run: recover, plan, stage (one Spark application for every batch still to stage;
        ``crash``: it dies after the first of them, EOBATCH_CRASH=stage.between_batches), verify,
        commit; the abort task when the Spark job failed."""
        side.runs += 1
        run_id = f"chaos__{side.p.name}__{side.runs}"
        self.step(side, "recover", run_id)
        batches = self.step(side, "plan", run_id)
        if not batches:
            return "nothing new"
        chosen = self.step(side, "stage_attempts", run_id, batches)
        attempts = {int(b): a for b, a in chosen["attempts"].items()}
        todo = {int(b): a for b, a in chosen["stage"].items()}
        span = f"batches {batches[0]}..{batches[-1]}" if len(batches) > 1 else f"batch {batches[0]}"
        kept = f" ({len(attempts) - len(todo)} STAGED by an earlier run, verified as they are)" \
            if len(todo) < len(attempts) else ""
        if todo:
            first = min(todo)
            argv = launch.spark_submit_argv(side.p.cfg, first, todo[first], master=self.c.master,
                                            also={b: a for b, a in todo.items() if b != first})
            crash = crash and len(todo) > 1
            env = {**self.c.env, **({"EOBATCH_CRASH": "stage.between_batches"} if crash else {})}
            limited = side.kind == "many_files_low_limit"
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600,
                               preexec_fn=_limited if limited else None)
            if r.returncode != 0:
                out = self.step(side, "fail", run_id, {"batches": batches, "attempts": attempts})
                if not crash:
                    self.c.anomalies.append(f"{side.p.name} run {side.runs}: the stage job of {span} failed (exit "
                                            f"{r.returncode}) with no fault injected: {(r.stdout + r.stderr)[-1500:]}")
                    self.c.say(f"ANOMALY: {self.c.anomalies[-1]}")
                side.ops["stage_crash_between_batches" if crash else "stage_failed"] += 1
                return (f"{span}: the stage job {'died after its first batch (injected)' if crash else 'FAILED'}; "
                        f"abort: {'; '.join(out['lines'])[:300]}")
        self.step(side, "verify", run_id, attempts)
        self.step(side, "commit", run_id, batches)
        side.ops["batches committed"] += len(batches)
        return f"{span} staged by one Spark application{kept}, verified, committed"

    def drain(self) -> None:
        """Each side pipeline: runs until nothing is new and nothing pending, then the sweep."""
        for side in self.sides.values():
            for _ in range(8):
                out = self.run(side)
                self.c.say(f"drain {side.p.name}: {out}")
                if out == "nothing new" and self._pending(side) is None:
                    break
            r = subprocess.run([PY, "-m", "eobatch.cli", "sweep", side.p.name, "--all"], env=self.c.env,
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise RuntimeError(f"sweep {side.p.name} failed: {r.stderr[-2000:]}")

    # -- the independent check -------------------------------------------------------------------
    def check(self) -> dict:
        """Every side pipeline as the chaos pipeline is checked: (totals, per pipeline)."""
        total: dict[str, Any] = {"batches": 0, "duplicates": 0, "lost": 0, "orphans": 0, "stuck": 0, "problems": []}
        per: dict[str, dict] = {}
        for side in self.sides.values():
            res = self._check_cdf(side) if side.upstream else self._check_files(side)
            res.update(self._check_tables(side, res["problems"]))
            res["ops"] = dict(side.ops)
            res["runs"] = side.runs
            per[side.p.name] = res
            for k in ("batches", "duplicates", "lost", "orphans", "stuck"):
                total[k] += res[k]
            total["problems"] += [f"{side.p.name}: {x}" for x in res["problems"]]
        total["pipelines"] = per
        return total

    def _check_files(self, side: Side) -> dict:
        """Published rows = the good records landed (a wide record: each of its columns as landed),
        quarantined = the bad lines, every landed file in exactly one committed batch."""
        p, problems = side.p, []
        rows = self.c.rows_of(p.sink)
        got = collections.Counter(r["order_id"] for r in rows)
        want = {r["order_id"]: r for r in p.landed}
        duplicates = sum(v - 1 for v in got.values() if v > 1) + sum(v for k, v in got.items() if k not in want)
        lost = sum(1 for k in want if k not in got)
        wide = [c for c in (rows[0] if rows else {}) if WIDE.fullmatch(c)]
        wrong = [r["order_id"] for r in rows if r["order_id"] in want
                 and any(r[c] != want[r["order_id"]].get(c) for c in wide)]
        if wrong:
            problems.append(f"rows whose wide columns differ from what landed: {wrong[:3]}")
            lost += len(wrong)
        qgot = collections.Counter(r["raw"] for r in self.c.rows_of(p.quarantine))
        qwant = collections.Counter(p.landed_bad)
        duplicates += sum(max(0, qgot[k] - qwant.get(k, 0)) for k in qgot)
        lost += sum(max(0, qwant[k] - qgot.get(k, 0)) for k in qwant)
        seen = collections.Counter(path for c in self.c.log_commits(p.sink) if c["txns"]
                                   for path, _s, _m in json.loads(c["commitInfo"]["eo.offsets"]))
        landed = {str(f) for f in p.landing.rglob("*.jsonl")}
        if set(seen) != landed or any(v != 1 for v in seen.values()):
            problems.append(f"offsets: files in committed batches {sum(seen.values())}, distinct {len(seen)}, "
                            f"landed {len(landed)}; never: {sorted(landed - set(seen))[:3]}")
        return {"duplicates": duplicates, "lost": lost, "problems": problems, "records": len(want),
                "bad_records": sum(qwant.values())}

    def _check_cdf(self, side: Side) -> dict:
        """The merge sink over the change feed holds exactly the upstream's rows (delta-rs, both
        sorted), and the batches read every upstream version once, in order."""
        from deltalake import DeltaTable

        cols = ("order_id", "customer", "amount", "ts")
        up = {r["order_id"]: tuple(str(r[c]) for c in cols)
              for r in DeltaTable(str(side.upstream)).to_pyarrow_table().to_pylist()}
        down = [tuple(str(r[c]) for c in cols) for r in self.c.rows_of(side.p.sink)]
        got = collections.Counter(r[0] for r in down)
        duplicates = sum(v - 1 for v in got.values()) + sum(1 for k in got if k not in up)
        wrong = sorted(r for r in down if r[0] in up and up[r[0]] != r)
        lost = sum(1 for k in up if k not in got) + len(wrong)
        problems = [f"rows that differ from the upstream's: {wrong[:3]}"] if wrong else []
        end = 0
        for c in (c for c in self.c.log_commits(side.p.sink) if c["txns"]):
            f, t = json.loads(c["commitInfo"]["eo.offsets"])["versions"]
            if f != end or t < f:
                problems.append(f"batch {c['txns'][0]['version']} reads upstream versions [{f}, {t}) after {end}")
            end = t
        latest = DeltaTable(str(side.upstream)).version()
        if end <= latest:
            problems.append(f"committed up to upstream version {end}, the upstream's newest is {latest}")
        return {"duplicates": duplicates, "lost": lost, "problems": problems, "records": len(up), "bad_records": 0}

    def _check_tables(self, side: Side, problems: list[str]) -> dict:
        """Ledger = tables (every batch COMMITTED, the quarantine at the sink's batch), no orphan
        staged file, and the stuck detector names no batch."""
        from eobatch.core.stuck import find_stuck

        p = side.p
        sink_log, q_log = self.c.log_commits(p.sink), self.c.log_commits(p.quarantine)
        versions = [c["txns"][0]["version"] for c in sink_log if c["txns"]]
        if [c["txns"][0]["version"] for c in q_log if c["txns"]] != versions:
            problems.append(f"quarantine txn versions differ from the sink's {versions}")
        r = subprocess.run([PY, "-m", "eobatch.cli", "ledger", p.name, "--format", "json"], env=self.c.env,
                           capture_output=True, text=True, timeout=600)
        states = {b["batch_id"]: b["state"] for b in json.loads(r.stdout)} if r.returncode == 0 else {}
        if states != {v: "COMMITTED" for v in versions}:
            problems.append(f"ledger {sorted(states.items())[-5:]} != table (committed {versions[-5:]})")
        orphan = []
        for t, log in ((p.sink, sink_log), (p.quarantine, q_log)):
            ever, _live = self.c.files_in_log(log)
            orphan += [f"{t}/{f}" for f in self.c.files_under_staging(t) if f not in ever]
        if orphan:
            problems.append(f"orphan staged files: {orphan[:3]}")
        proto = p.protocol()
        stuck = find_stuck(proto.ledger, proto.cfg)
        if stuck is not None:
            problems.append("stuck: " + " | ".join(stuck.lines()))
        return {"batches": len(versions), "orphans": len(orphan), "stuck": int(stuck is not None)}
