"""Command line of the product, ``eobatch`` once installed (``python -m eobatch.cli`` in a checkout);
no Airflow needed but for ``run`` (and ``doctor``'s check of connections).

    eobatch jars [--with s3] [--maven-settings FILE] # the JVM jars, into ~/.cache/eobatch/jars (EOBATCH_JARS_DIR)
    eobatch doctor [--pipelines DIR]                # what this deployment lacks, and how to fix it
    eobatch run orders [--runs N] [--conf JSON]     # `make run`: N runs with `airflow dags test`
    python -m eobatch.cli ledger orders [--format table|json]   # `make ledger`
    python -m eobatch.cli show orders                           # what the tables publish
    python -m eobatch.cli sweep orders [--all]                  # `make sweep`
    python -m eobatch.cli reset-batch orders 7                  # repair: re-plan batches 7.. no table holds

The protocol's verbs, one process each, exactly what the Airflow tasks call (used by
`make chaos`, and by an operator finishing a batch by hand):

    python -m eobatch.cli recover orders
    python -m eobatch.cli plan orders [--max-records N]         # prints the batch id (exit 6: nothing new)
    python -m eobatch.cli verify orders BATCH ATTEMPT
    python -m eobatch.cli commit orders BATCH
    python -m eobatch.cli abort orders BATCH ATTEMPT            # interval mode: also abandons the batch

Exit status (``eobatch.errors``): 0 done, 2 bad input (config, ids), 3 wait (not staged yet,
another run's batch first), 4 verification failed, 5 a repair is needed (the message says
which), 6 nothing new to plan, 7 transient (retry later), 1 anything else (a traceback).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

from . import __version__
from . import airflow as _reads_airflow_cfg  # noqa: F401 - the settings as the DAG file reads them
from .airflow.runs import airflow_bin, run_dags_test, run_date
from .core.formats import BatchPlan, changes_text
from .core.stuck import find_stuck
from .doctor import run as doctor
from .errors import NOTHING_TO_DO, EobatchError, exit_code
from .job.jars import SETTINGS_ENV, resolve
from .job.launch import build_class_archive, uses_s3
from .paths import DOCS
from .pipelines.loader import find_pipeline, load_all, pipelines_dir
from .protocol import Protocol, utcnow
from .protocol.batch_run import BatchRun
from .protocol.maintenance import last_report, maintain, summary_line
from .protocol.replay import replay
from .sources import kind_for, range_summary
from .storage import s3conf


def ledger_rows(proto: Protocol, batch_ids: Iterable[int] | None = None) -> list[dict]:
    """One row per batch of the ledger: `make ledger` (every batch, oldest first, read from every
    record, checkpoints or not) and the UI's ledger page and JSON (``batch_ids``: only those
    batches, in that order; ids the ledger does not hold are left out)."""
    versions = proto.committed_versions()
    if batch_ids is None:
        plans = proto.ledger.plans()
    else:
        plans = [p for p in (proto.ledger.plan(b) for b in batch_ids) if p is not None]
    return [ledger_row(proto, plan, versions) for plan in plans]


def ledger_row(proto: Protocol, plan: BatchPlan, versions: dict[str, int]) -> dict:
    """The row of one batch (``ledger_rows``); ``versions``: ``proto.committed_versions()``."""
    b = plan.batch_id
    prepared = proto.ledger.prepared(b)
    committed = proto.ledger.committed(b)
    state = proto.state(b, versions)
    attempts = proto.ledger.attempts(b)
    row: dict[str, Any] = {
        "batch_id": b,
        "state": state,
        "source_range": range_summary(plan),
        "rows_in": plan.rows_in if plan.rows_in is not None else (prepared.rows_in if prepared else None),
        "rows_published": prepared.rows_published if prepared else None,
        "rows_quarantined": prepared.rows_quarantined if prepared else None,
        "rows_dropped": prepared.rows_dropped if prepared else None,
        "expectations": dict(prepared.expectations) if prepared else None,  # name -> records that failed it
        "files": prepared.files if prepared else None,
        "bytes": prepared.bytes if prepared else None,
        "delta_version": (committed.delta_versions.get("sink") if committed else None),
        "quarantine_delta_version": (committed.delta_versions.get("quarantine") if committed else None),
        "delta_versions": dict(committed.delta_versions) if committed else None,  # every table's: a consistent cut
        "fingerprint": prepared.fingerprint if prepared else None,
        "attempts": len(attempts),
        "aborted_attempts": sum(1 for a in attempts if proto.ledger.aborted_info(b, a)),
        "plan_s": plan.plan_seconds,
        "stage_s": prepared.stage_seconds if prepared else None,
        "verify_s": prepared.verify_seconds if prepared else None,
        "commit_s": committed.commit_seconds if committed else None,
        "recovered": committed.recovered if committed else None,
        # what the commit did to the sink table per kind of change (a merge sink), else None
        "changes": dict(committed.changes) if committed and committed.changes else None,
        "planned_at": plan.planned_at,
        "committed_at": committed.committed_at if committed else None,
        "interval": plan.interval,
        "run_id": plan.run_id,
        "run_first": plan.first_of_run,  # the first batch its run planned with it (itself: a run of one)
        "notes": list(plan.notes),
        "source_kind": plan.source_kind,  # whose words ``offsets`` are in
        "offsets": plan.range,
    }
    if state == "COMMITTED" and committed is None:
        row["notes"].append("ledger entry missing: the next run's recover completes it")
    if state == "ABANDONED":
        info = proto.ledger.abandoned(b) or {}
        row["notes"].append(f"abandoned at {info.get('abandoned_at', '?')}: {info.get('reason', 'no reason recorded')}; "
                            f"its interval can run again")
    return row


def rows_json(rows: list[dict]) -> str:
    """Ledger rows as `make ledger FORMAT=json` prints them (and the UI's JSON API serves them)."""
    return json.dumps(rows, indent=1, default=str)


TABLE_COLS = [("batch_id", "batch"), ("state", "state"), ("source_range", "source range"), ("rows_in", "in"),
              ("rows_published", "published"), ("rows_quarantined", "quarantined"), ("rows_dropped", "dropped"),
              ("files", "files"),
              ("bytes", "bytes"), ("delta_version", "delta v"), ("attempts", "attempts"), ("plan_s", "plan s"),
              ("stage_s", "stage s"), ("verify_s", "verify s"), ("commit_s", "commit s")]


def render_table(rows: list[dict]) -> str:
    def cell(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.2f}"
        return str(v)

    cols = TABLE_COLS + ([("changes", "changes to the sink")] if any(r.get("changes") for r in rows) else [])
    header = [h for _, h in cols]
    body = [[changes_text(r[k]) or "-" if k == "changes" else cell(r[k]) for k, _ in cols] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body)] if body else [len(h) for h in header]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in body]
    notes = [f"batch {r['batch_id']}: {n}" for r in rows for n in r["notes"]]
    if notes:
        lines += ["", "notes:"] + [f"  {n}" for n in notes]
    return "\n".join(lines)


def show(proto: Protocol, limit: int) -> None:
    # deltalake: only this command
    from deltalake import DeltaTable

    for participant, part in proto.participants.items():
        if not part.exists():
            print(f"{participant} table {part.uri}: not created yet")
            continue
        dt = DeltaTable(part.uri, storage_options=part.storage_options)  # S3: endpoint, region, credentials
        t = dt.to_pyarrow_table()
        print(f"{participant} table {part.uri}: Delta version {dt.version()}, {t.num_rows} rows, "
              f"txn({proto.app_id}) = {dt.transaction_version(proto.app_id)}")
        for row in t.slice(max(0, t.num_rows - limit)).to_pylist():
            print("   ", json.dumps(row, default=str))


def run_verb(proto: Protocol, args) -> int:
    """One protocol verb through ``BatchRun``, exactly as the Airflow task runs it; its report
    as one JSON line on stdout, its log lines on stderr."""
    run = BatchRun(proto, run_id=getattr(args, "run_id", None))
    if args.cmd == "recover":
        r = run.recover()
    elif args.cmd == "plan":
        r = run.plan({"start": args.interval[0], "end": args.interval[1]} if args.interval else None)
        if r.value is None:
            print("nothing new")
            return NOTHING_TO_DO
        r.value = r.detail
    elif args.cmd == "verify":
        r = run.verify(args.batch, args.attempt)
        if not isinstance(r.value, dict):
            raise TypeError(f"verify reported {r.value!r}, not the attempt's counts")
        r.value = {"batch_id": args.batch, **r.value}
    elif args.cmd == "commit":
        r = run.commit(args.batch)
    else:  # abort: what the abort task does (interval mode: the batch is abandoned too)
        r = run.fail(args.batch, args.attempt, "aborted by hand")
        if r.detail.get("aborted") is False:  # the attempt is PREPARED: refused, as an error of its own
            raise r.detail["error"]
        r.value = {"removed": r.value}
    for line in r.warnings + r.lines:
        print(f"{args.cmd}: {line}", file=sys.stderr)
    print(json.dumps(r.value, default=str))
    return 0


DESCRIPTION = ("Exactly-once micro-batch pipelines into Delta Lake, orchestrated by Apache Airflow, computed by "
               "PySpark: each batch is planned, staged, verified and committed (a two-phase commit per batch).")
# the groups of `eobatch --help`, in this order: (title, the commands of the group, in this order)
GROUPS = (
    ("commands", ("doctor", "jars", "run", "ledger", "show", "as-of", "maintain", "sweep", "pools", "docs")),
    ("repairs (the docs' operations page says when)", ("rewind", "replay", "reset-batch")),
    ("protocol steps (internal: one step of a batch in one process, exactly what the pipeline's Airflow task runs; "
     "for finishing a batch by hand and for `make chaos`)", ("recover", "plan", "verify", "commit", "abort")),
    ("helpers of the Makefile", ("run-date", "class-archive")),
)
EPILOG = ("`eobatch <command> --help` gives a command's arguments. Exit status: 0 done, 2 bad input (config, ids), "
          "3 wait (not staged yet, another run's batch first), 4 verification failed, 5 a repair is needed (the "
          "message says which), 6 nothing new to plan, 7 transient (retry later), 1 anything else (a traceback).")


def _overview(helps: dict[str, str], width: int = 100) -> str:
    """The description of `eobatch --help`: DESCRIPTION, then each group of GROUPS with its commands."""
    assert sorted(helps) == sorted(c for _t, cmds in GROUPS for c in cmds), "every command in one group of GROUPS"
    out = [textwrap.fill(DESCRIPTION, width)]
    for title, cmds in GROUPS:
        lines = textwrap.wrap(title + ":", width)
        for c in cmds:
            lines += textwrap.wrap(helps[c], width, initial_indent=f"    {c:<15}", subsequent_indent=" " * 19)
        out.append("\n".join(lines))
    return "\n\n".join(out)


def parser() -> argparse.ArgumentParser:
    """The command line: each command's parser under the subparsers of ``cmd``; `eobatch --help` lists
    them by GROUPS (the user's commands first, the protocol's internal steps last), each still callable."""
    helps: dict[str, str] = {}
    ap = argparse.ArgumentParser(prog="eobatch", usage="%(prog)s [-h] [--version] <command> [<arguments>]",
                                 epilog=textwrap.fill(EPILOG, 100), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"eobatch {__version__}",
                    help="print the version of eobatch and exit")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="<command>", help=argparse.SUPPRESS, prog="eobatch")

    def add_parser(name: str, help: str) -> argparse.ArgumentParser:
        helps[name] = help
        return sub.add_parser(name, description=help, help=help)

    for group in (_pipeline_commands, _repair_commands, _setup_commands):
        group(add_parser)
    ap.description = _overview(helps)
    return ap


def _pipeline_commands(add_parser: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """`parser`'s commands that read a pipeline, and the protocol's steps."""
    lp = add_parser("ledger", "the batches of a pipeline: state, range, counts, versions, timings")
    lp.add_argument("pipeline")
    lp.add_argument("--format", choices=["table", "json"], default="table")
    shp = add_parser("show", "what the pipeline's tables publish (read with delta-rs)")
    shp.add_argument("pipeline")
    shp.add_argument("--limit", type=int, default=5)
    op = add_parser("as-of", "the pipeline as of a committed batch: each table's version at the commit "
                                      "that carried it (one consistent cut of all its tables)")
    op.add_argument("pipeline")
    op.add_argument("batch", type=int)
    op.add_argument("--format", choices=["table", "json"], default="table")
    sp = add_parser("sweep", "delete staged files no commit will use (only of decided batches)")
    sp.add_argument("pipeline")
    sp.add_argument("--all", action="store_true", help="every batch, not only the newest ones")
    for verb, extra, what in (
            ("recover", (), "settle what an earlier run left undecided (the first task of every run)"),
            ("plan", (), "plan the next batch and print it (exit 6: nothing new)"),
            ("verify", ("batch", "attempt"), "check a staged attempt and record its PREPARE decision"),
            ("commit", ("batch",), "commit a verified batch to every table of the pipeline"),
            ("abort", ("batch", "attempt"), "abort an attempt (interval mode: the batch is abandoned too)")):
        vp = add_parser(verb, what)
        vp.add_argument("pipeline")
        for a in extra:
            vp.add_argument(a, type=int if a == "batch" else str)
        if verb == "plan":
            vp.add_argument("--max-records", type=int, default=None)
            vp.add_argument("--interval", nargs=2, metavar=("START", "END"),
                            help="interval mode: the data interval (ISO times, UTC)")
            vp.add_argument("--run-id", default=None, help="interval mode: the owner of the batch")

def _repair_commands(add_parser: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """`parser`'s commands that move a pipeline or repair it."""
    dp = add_parser("run-date", "the logical date `airflow dags test` needs so that the run covers "
                                         "DATE's interval (interval mode) or DATE (continuous mode)")
    dp.add_argument("pipeline")
    dp.add_argument("date")
    wp = add_parser("rewind", "restore the tables to before BATCH and read again from its start")
    wp.add_argument("pipeline")
    wp.add_argument("batch", type=int, nargs="?")
    wp.add_argument("--upstream-version", type=int, default=None, metavar="V",
                    help="a delta source: rewind to the first batch that read upstream version V or a later one "
                         "(instead of BATCH)")
    wp.add_argument("--dry-run", action="store_true", help="say what would happen, change nothing")
    wp.add_argument("--accept-loss", action="store_true", help="go ahead although landing files of the rewound "
                                                               "batches are gone (the ledger records the loss)")
    mp = add_parser("maintain", "one maintenance pass: compaction, VACUUM, Delta checkpoint (as the "
                                          "<name>_maintenance DAG)")
    mp.add_argument("pipeline")
    qp = add_parser("replay", "write a batch's quarantined records not replayed yet back as a new landing "
                                        "file (each record at most once, whatever the selections)")
    qp.add_argument("pipeline")
    qp.add_argument("batch", type=int)
    qp.add_argument("--reason", default=None, help="only records whose reason contains this text")
    rp = add_parser("reset-batch", "forget batches BATCH.. that no table holds (repair), re-plan them")
    rp.add_argument("pipeline")
    rp.add_argument("batch", type=int)
    rp.add_argument("--accept-loss", action="store_true", help="go ahead although landing files of the forgotten "
                                                               "batches are gone (the ledger records the loss)")

def _setup_commands(add_parser: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """`parser`'s commands that set up and check a deployment."""
    ap_ = add_parser("class-archive", "build the stage job's JVM class-data archive (make setup runs it): "
                                              "one small stage job, a faster start for every later one")
    ap_.add_argument("--master", default="local[*]")
    ap_.add_argument("--force", action="store_true", help="build it again even if it is there")
    pp = add_parser("pools", "the Airflow pools the pipelines name (maintenance.pool): one line each, "
                             "<pool> <pipelines, comma-separated>; --create creates them")
    pp.add_argument("--create", action="store_true", help="create (or reset) each pool in this Airflow with one "
                                                          "slot, with `airflow pools set`")
    jp = add_parser("jars", "resolve the stage job's JVM jars (Delta, hadoop-aws) with Maven into the jars "
                                     "folder (EOBATCH_JARS_DIR, default ~/.cache/eobatch/jars), checked against "
                                     "their SHA-256 list")
    jp.add_argument("--dir", default=None, help="another folder (then set EOBATCH_JARS_DIR to it for the tasks)")
    jp.add_argument("--with", dest="sets", action="append", choices=["s3"], default=None,
                    help="also the s3 set (hadoop-aws and the AWS SDK bundle, about 660 MB) for s3a:// locations; "
                         "unset: only when a pipeline of the pipelines folder has one (the core set, Delta, always)")
    jp.add_argument("--pipelines", default=None, help="the folder of pipeline files whose needs choose the sets "
                                                       "(default: PIPELINES_DIR or [eobatch] pipelines_dir)")
    jp.add_argument("--maven-settings", default=None,
                    help=f"the Maven settings file (your repository manager; default: {SETTINGS_ENV}, else "
                         "~/.m2/settings.xml, else Maven Central only)")
    jp.add_argument("--write-list", default=None, help=argparse.SUPPRESS)  # `make jar-lock`: after a pom change
    dop = add_parser("doctor", "check this deployment: Java, Spark, jars, the pipelines folder, the "
                                        "connections the pipelines name, write access to their tables")
    dop.add_argument("--pipelines", default=None, help="the folder of pipeline files (default: PIPELINES_DIR or "
                                                       "the Airflow option [eobatch] pipelines_dir)")
    rnp = add_parser("run", "RUNS runs of a pipeline's DAG, one after another, each with `airflow dags "
                                     "test` (the Airflow of this environment, whose DAG folder builds the pipeline)")
    rnp.add_argument("pipeline")
    rnp.add_argument("--runs", type=int, default=1)
    rnp.add_argument("--conf", default=None, help="the run's params, as JSON")
    rnp.add_argument("--date", default=None, help="interval mode: the start of the interval to run")
    dcp = add_parser("docs", "the documentation of this version, installed with it: its pages (title and file), "
                             "or where PAGE is")
    dcp.add_argument("page", nargs="?", default=None, help="a page's name, e.g. getting-started or operations")


def _log_to_stderr() -> None:
    """The product's log lines go to stderr: stdout is the command's answer (JSON for `plan`, the
    ledger's table), whatever logging importing Airflow set up (it may write to stdout)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in ("eobatch", "py4j"):
        lg = logging.getLogger(name)
        lg.handlers[:] = [handler]
        lg.propagate = False
        lg.setLevel(logging.WARNING)  # as before Airflow was imported: warnings and errors


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    _log_to_stderr()
    try:
        if args.cmd == "pools":
            return _pools(create=args.create)
        if args.cmd == "jars":
            say = lambda m: print(m, file=sys.stderr)  # noqa: E731
            resolve(args.dir, log=say, write_list=args.write_list, sets=_jar_sets(args.sets, args.pipelines, say),
                    settings=args.maven_settings)
            return 0
        if args.cmd == "doctor":
            return doctor(args.pipelines)
        if args.cmd == "docs":
            return _docs(args.page)
        if args.cmd == "run":
            return run_dags_test(args.pipeline, args.runs, args.conf, args.date)
        if args.cmd == "class-archive":
            build_class_archive(args.master, log=lambda m: print(m, file=sys.stderr), force=args.force)
            return 0
        return _command(args)
    except KeyError as e:  # no such pipeline
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    except EobatchError as e:  # the one table: eobatch.errors.exit_code
        print(f"{'not ready' if e.kind == 'wait' else 'error'}: {e}", file=sys.stderr)
        return exit_code(e)


def _jar_sets(asked: list[str] | None, folder: str | None, log) -> tuple[str, ...]:
    """The sets of jars `eobatch jars` fetches: ``core`` and those of ``--with``; without it, ``s3``
    too when a pipeline of the pipelines folder has an s3a:// location (``launch.uses_s3``)."""
    if asked:
        return ("core", *asked)
    try:
        folder = folder or pipelines_dir()
    except EobatchError:
        folder = None
    if not folder or not os.path.isdir(folder):
        log("jars: no pipelines folder to look at: the core set only (`eobatch jars --with s3` for s3a:// pipelines)")
        return ("core",)
    cfgs, errors = load_all(folder)
    on_s3 = sorted(name for name, cfg in cfgs.items() if uses_s3(cfg))
    if errors:
        log(f"jars: {len(errors)} pipeline file(s) of {folder} do not load and are not counted "
            f"(`eobatch doctor` says why)")
    if on_s3:
        log(f"jars: the core and s3 sets: pipeline(s) {', '.join(on_s3)} of {folder} use s3a:// locations")
        return ("core", "s3")
    log(f"jars: the core set only: no pipeline of {folder} uses s3a:// (`eobatch jars --with s3` adds the s3 set)")
    return ("core",)


def _docs(page: str | None) -> int:
    """The pages of the documentation installed with this version (``paths.DOCS``): each page's
    title and file, or the file of ``page`` (a page's name, with or without ``.md``)."""
    pages = sorted(f for f in os.listdir(DOCS) if f.endswith(".md")) if os.path.isdir(DOCS) else []
    if not pages:
        print(f"error: no documentation pages in {DOCS}", file=sys.stderr)
        return 1
    if page is not None:
        name = page.removesuffix(".md") + ".md"
        if name not in pages:
            print(f"error: no page {page!r}: one of {', '.join(p.removesuffix('.md') for p in pages)}", file=sys.stderr)
            return 2
        print(os.path.join(DOCS, name))
        return 0
    print(f"the documentation of eobatch {__version__}, in {DOCS} (Markdown; `eobatch docs PAGE` prints a page's file):")
    for name in pages:
        with open(os.path.join(DOCS, name), encoding="utf-8") as f:
            title = next((line.lstrip("#").strip() for line in f if line.startswith("# ")), name)
        print(f"    {name.removesuffix('.md'):<18} {title}")
    return 0


POOL_SLOTS = 1  # a pool's commit and maintenance tasks take turns (maintenance.pool)


def _pools(create: bool = False) -> int:
    """The pools the pipelines name, one line each; ``create``: each created (or reset) in this
    Airflow with POOL_SLOTS slot, by `airflow pools set` (the Airflow of this environment, its
    AIRFLOW_HOME or its database settings)."""
    cfgs, errors = load_all()
    for name, err in sorted(errors.items()):
        print(f"warning: {name}: {err}", file=sys.stderr)
    pools: dict[str, list[str]] = {}
    for cfg in cfgs.values():
        if cfg.maintenance.pool:
            pools.setdefault(cfg.maintenance.pool, []).append(cfg.name)
    if create and not pools:
        print("no pipeline names a pool (maintenance.pool): nothing to create", file=sys.stderr)
    for pool, names in sorted(pools.items()):
        if not create:
            print(f"{pool} {','.join(sorted(names))}")
            continue
        what = f"eobatch: the commit and maintenance tasks of {','.join(sorted(names))}"
        r = subprocess.run([airflow_bin(), "pools", "set", pool, str(POOL_SLOTS), what],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"error: `airflow pools set {pool} {POOL_SLOTS} ...` failed (exit {r.returncode}): "
                  f"{(r.stderr or r.stdout).strip()[-1500:]}", file=sys.stderr)
            return 1
        print(f"pool {pool}: {POOL_SLOTS} slot ({','.join(sorted(names))})")
    return 0


def _batch_of_upstream_version(proto: Protocol, args) -> int | None:
    """``rewind --upstream-version V``: the first live batch that read upstream version V or a later
    one (said on stdout), or None after saying why there is none (on stderr)."""
    src = proto.cfg.source
    kind = kind_for(src.kind)
    finder = kind.first_batch_reading if kind.reads_table_versions else None
    if args.batch is not None or finder is None or args.upstream_version < 0:
        why = ("give BATCH or --upstream-version, not both" if args.batch is not None else
               f"--upstream-version is for a source that reads another table's versions (kind: delta); "
               f"{proto.cfg.name} reads {src.describe()}" if finder is None else
               "--upstream-version must be 0 or more")
        print(f"error: {why}", file=sys.stderr)
        return None
    found = finder(proto.ledger.live_plans(), args.upstream_version)
    if found is None:
        print(f"error: no batch of {proto.cfg.name} has read upstream version {args.upstream_version} of "
              f"{src.describe()} or a later one: nothing to rewind", file=sys.stderr)
        return None
    batch, (start, end) = found
    print(f"upstream version {args.upstream_version}: batch {batch} read upstream versions {start}..{end - 1}; "
          f"rewinding to it (the next batch reads the upstream again from version {start})")
    return batch


def _print_ledger(proto: Protocol, fmt: str) -> int:
    """`eobatch ledger`: the batches, as a table or JSON."""
    cfg = proto.cfg
    rows = ledger_rows(proto)
    if fmt == "json":
        print(rows_json(rows))
    else:
        versions = proto.committed_versions()
        print(f"pipeline {cfg.name} ({cfg.mode}): {cfg.source.describe()} -> {cfg.sink_table}; committed txn "
              f"versions {versions}")
        for r in proto.ledger.rewinds():
            print(f"rewind after batch {r.after_batch} to before batch {r.to_batch} at {r.requested_at} "
                  f"(run {r.run_id}): batches {r.to_batch}..{r.after_batch} REWOUND")
        for k in sorted(proto.ledger.cancelled_rewinds()):
            c = proto.ledger.rewind_cancelled(k.after_batch, k.to_batch) or {}
            print(f"rewind after batch {k.after_batch} to before batch {k.to_batch} CANCELLED at "
                  f"{c.get('cancelled_at')}: {c.get('why')}")
        last = last_report(proto)
        if last:
            print(summary_line(last, proto.names))
        stuck = find_stuck(proto.ledger, cfg)
        for line in stuck.lines() if stuck else []:
            print(f"stuck: {line}")
        found = proto.ledger.checkpoint_files()
        if found:
            print(f"ledger checkpoint: batches 1..{found[0][0]} (a plan reads it and the plans after it; "
                  f"{len(found)} kept); every batch is listed below")
        print(render_table(rows) if rows else "(no batches yet)")
    return 0


def _print_as_of(proto: Protocol, batch: int, fmt: str) -> int:
    """`eobatch as-of`: each table's version at the commit that carried ``batch``."""
    cfg = proto.cfg
    cut = proto.as_of(batch)
    if fmt == "json":
        print(json.dumps({"pipeline": cfg.name, "batch_id": batch, "tables": cut}, indent=1, sort_keys=True))
        return 0
    print(f"{cfg.name} as of batch {batch}: every table at the version of the commit that carried it")
    for name, t in cut.items():
        print(f"  {name:12} version {t['version']:>6}  {t['table']}")
    sink = cut["sink"]
    print("\nread them at that cut, e.g.:\n"
          f"  Spark:    spark.read.format(\"delta\").option(\"versionAsOf\", {sink['version']}).load(\"{sink['table']}\")\n"
          f"  delta-rs: DeltaTable(\"{s3conf.table_uri(sink['table'])}\", version={sink['version']}).to_pyarrow_table()\n"
          f"  Polars:   pl.read_delta(\"{s3conf.table_uri(sink['table'])}\", version={sink['version']})\n"
          f"  DuckDB:   SELECT * FROM delta_scan('{s3conf.table_uri(sink['table'])}')  -- after checking that "
          f"the table's version is {sink['version']}")
    return 0


def _print_replay(proto: Protocol, batch: int, reason: str | None) -> int:
    """`eobatch replay`: a batch's quarantined records written back as a landing file."""
    done = replay(proto, batch, reason)
    for f in done["finished"]:
        print(f"finished replay {f['replay']} of batch {f['batch_id']} ({f['records']} record(s)) as {f['file']}: "
              f"recorded by a replay that had not written it (it stopped before, or runs at the same time)")
    skipped = "".join(f"; {n} skipped: {why}" for n, why in (
        (done["already"], f"already replayed ({', '.join(done['already_in'])})"),
        (done["skipped"], "their raw text was not kept exactly")) if n)
    if done["replay"] is None:
        print(f"nothing new to replay of batch {batch}{skipped}")
    else:
        print(f"replayed {done['records']} quarantined record(s) of batch {batch} as {done['file']} "
              f"(replay {done['replay']}, lineage: {done['record']}); the next run publishes them once (one "
              f"still failing is quarantined again){skipped}")
    return 0


def _command(args) -> int:
    cfg = find_pipeline(args.pipeline)
    proto = Protocol(cfg)
    if args.cmd == "ledger":
        return _print_ledger(proto, args.format)
    if args.cmd == "show":
        show(proto, args.limit)
        return 0
    if args.cmd == "as-of":
        return _print_as_of(proto, args.batch, args.format)
    if args.cmd in ("recover", "plan", "verify", "commit", "abort"):
        return run_verb(proto, args)
    if args.cmd == "run-date":
        try:
            print(run_date(cfg, args.date))
        except ValueError as e:
            print(f"error: DATE {args.date!r}: {e}", file=sys.stderr)
            return 2
        return 0
    if args.cmd == "rewind":
        batch = args.batch if args.upstream_version is None else _batch_of_upstream_version(proto, args)
        if batch is None:
            if args.upstream_version is None:
                print("error: give BATCH (or, for a delta source, --upstream-version V)", file=sys.stderr)
            return 2
        for line in proto.rewind(batch, run_id=f"cli:{utcnow()}", dry_run=args.dry_run,
                                 accept_loss=args.accept_loss):
            print(line)
        return 0
    if args.cmd == "reset-batch":
        moved = proto.reset(args.batch, accept_loss=args.accept_loss)
        print(f"forgot batches {moved}: archived under {proto.layout.ledger}/archive/; the next run plans "
              f"them again from the end of batch {args.batch - 1}")
        return 0
    if args.cmd == "replay":
        return _print_replay(proto, args.batch, args.reason)
    if args.cmd == "maintain":
        report = maintain(proto)
        print(summary_line(report, proto.names).replace("last maintenance", "maintenance", 1))
        print(json.dumps(report, indent=1, sort_keys=True))
        return 0
    if args.cmd == "sweep":
        removed = proto.sweep(recent=None if args.all else 5)
        print(f"swept {len(removed)} orphan file(s)")
        for path in removed:
            print(f"  {path}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
