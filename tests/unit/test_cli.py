"""eobatch.cli: the protocol's verbs and their exit statuses, the ledger's rows and table, `show`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import eobatch
from eobatch import cli
from eobatch.cli import TABLE_COLS, render_table
from eobatch.protocol import Protocol
from eobatch.sources import range_summary
from support.protocol_runs import iv, land
from support.protocol_runs import land_and_run as _run_batch
from support.protocol_runs import lose_prepared_and_committed as _lose_prepared_and_committed
from support.pyarrow_stager import stage

# -- the verbs: through BatchRun, as the Airflow tasks run them; the exit status of each error kind ----


def _cli(cfg, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eobatch.cli", *args],
                          env={"PIPELINES_DIR": str(Path(cfg.file).parent),
                               "PYTHONPATH": str(Path(eobatch.__file__).parents[1]), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def _interval_cfg(make_cfg):
    return make_cfg(mode="interval", schedule="@hourly", source={
        "kind": "files", "path": str(Path(make_cfg().source.path)), "interval_prefix": "dt={ds}/hour={hh}",
        "settle_seconds": 0})


def test_cli_abort_of_an_interval_batch_abandons_it_as_the_abort_task_does(make_cfg):
    cfg = _interval_cfg(make_cfg)
    proto = Protocol(cfg)
    land(cfg, "dt=2026-01-01/hour=00/a.jsonl", ["a1", "a2"])
    plan, _ = proto.plan(interval=iv(0), run_id="h0")
    attempt = stage(proto, plan.batch_id)
    staged = [f for t in (cfg.sink_table, cfg.quarantine_table) for f in Path(t).rglob("*")
              if f.is_file() and "eo_batches" in f.parts]
    assert any(f.suffix == ".parquet" for f in staged)

    r = _cli(cfg, "abort", cfg.name, str(plan.batch_id), attempt)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"removed": len(staged)}
    assert "ABANDONED" in r.stderr
    assert proto.ledger.abandoned(plan.batch_id) is not None  # the next interval can go ahead
    row, = cli.ledger_rows(proto, [plan.batch_id])  # `make ledger` and the UI say why
    assert row["state"] == "ABANDONED" and row["notes"][-1].endswith(": aborted by hand; its interval can run again")
    assert not list(Path(cfg.sink_table).rglob("*.parquet"))
    # and the interval can simply run again: a new batch of the same interval
    plan2, new = proto.plan(interval=iv(0), run_id="h0-again")
    assert new and plan2.batch_id == plan.batch_id + 1 and plan2.rows_in == 2


def test_cli_abort_of_a_prepared_attempt_is_refused_with_the_protocols_exit_status(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    land(cfg, "a.jsonl", ["a1"])
    plan, _ = proto.plan()
    attempt = stage(proto, plan.batch_id)
    proto.verify(plan.batch_id, attempt)
    r = _cli(cfg, "abort", cfg.name, str(plan.batch_id), attempt)
    assert r.returncode == 5 and "PREPARED" in r.stderr, (r.returncode, r.stderr)
    assert proto.ledger.prepared(plan.batch_id).attempt == attempt


def test_cli_exit_status_by_kind(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    land(cfg, "a.jsonl", ["a1"])
    plan, _ = proto.plan()
    r = _cli(cfg, "verify", cfg.name, str(plan.batch_id), "t1-notstagedyet")  # wait: no stage summary
    assert r.returncode == 3 and r.stderr.startswith("not ready:"), (r.returncode, r.stderr)
    r = _cli(cfg, "verify", cfg.name, str(plan.batch_id), "../x")  # usage: a forged attempt id
    assert r.returncode == 2, r.stderr
    r = _cli(cfg, "commit", cfg.name, str(plan.batch_id))  # terminal: not PREPARED
    assert r.returncode == 5 and "not PREPARED" in r.stderr, r.stderr
    r = _cli(cfg, "plan", cfg.name)  # the batch is pending: handed back, not planned past
    assert r.returncode == 0 and json.loads(r.stdout) == {"batch_id": 1, "batches": [1], "new": False,
                                                          "range": range_summary(plan)}, r.stdout


# -- ledger_rows: a batch whose PREPARED record was lost (a crash) shows COMMITTED -----------------


def test_crash_lost_prepared_record_ledger_rows_show_the_batch_committed(make_cfg):
    cfg = make_cfg()
    proto = Protocol(cfg)
    b, _ = _run_batch(proto, range(3), "a.jsonl")
    _lose_prepared_and_committed(proto, b)
    row, = cli.ledger_rows(Protocol(cfg))
    assert row["state"] == "COMMITTED" and row["rows_published"] is None
    assert any("ledger entry missing" in n for n in row["notes"])
    Protocol(cfg).recover()
    row, = cli.ledger_rows(Protocol(cfg))
    assert row["state"] == "COMMITTED" and row["recovered"] is True and row["delta_version"] is not None


def test_as_of_a_batch_is_every_tables_version_at_its_commit_also_when_its_ledger_copy_is_lost(make_cfg):
    """`eobatch as-of`: one consistent cut of the pipeline's tables; a later batch does not move it,
    a batch that is not committed has none."""
    from deltalake import DeltaTable

    from eobatch.errors import ProtocolError

    cfg = make_cfg()
    proto = Protocol(cfg)
    b1, _ = _run_batch(proto, range(3), "a.jsonl")
    b2, _ = _run_batch(proto, range(3, 5), "b.jsonl")
    cut = proto.as_of(b1)
    assert set(cut) == set(proto.participants) and cut["sink"]["table"] == cfg.sink_table
    for t in cut.values():  # each table at that version holds batch 1 and not batch 2
        assert DeltaTable(t["table"], version=t["version"]).transaction_version(cfg.name) == b1
    assert len(DeltaTable(cfg.sink_table, version=cut["sink"]["version"]).to_pyarrow_table()) == 3
    _lose_prepared_and_committed(proto, b2)
    assert Protocol(cfg).as_of(b2)["sink"]["version"] == cut["sink"]["version"] + 1  # from the table's history
    land(cfg, "c.jsonl", ["c1"])
    plan, _ = proto.plan()
    with pytest.raises(ProtocolError, match=rf"batch {plan.batch_id} of orders is PLANNED: only a committed batch"):
        proto.as_of(plan.batch_id)
    r = _cli(cfg, "as-of", cfg.name, str(b1), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tables"] == cut
    row = cli.ledger_rows(Protocol(cfg), [b1])[0]
    assert row["delta_versions"] == {k: v["version"] for k, v in cut.items()}


# -- render_table ----------------------------------------------------------------------------------


def _row(batch_id, **kw):
    row = {k: None for k, _ in TABLE_COLS}
    row.update(batch_id=batch_id, state="COMMITTED", source_range="1 files [a.jsonl]", rows_in=5,
               attempts=1, plan_s=0.123, notes=[])
    row.update(kw)
    return row


def test_render_table_header_rows_and_notes():
    rows = [
        _row(1, rows_published=4, rows_quarantined=1, rows_dropped=0, files=1, bytes=1234, delta_version=1,
             stage_s=12.0,
             verify_s=0.456, commit_s=1.0),
        _row(2, state="PLANNED", source_range="3 files [b.jsonl, c.jsonl, d.jsonl]",
             notes=["changed /l/a.jsonl after it was consumed", "second note"]),
    ]
    out = render_table(rows)
    lines = out.split("\n")
    header, sep, r1, r2 = lines[:4]
    widths = [len(x) for x in sep.split("  ")]
    assert set(sep.replace(" ", "")) == {"-"} and len(widths) == len(TABLE_COLS)

    def cells(line):
        out, pos = [], 0
        for w in widths:
            out.append(line[pos:pos + w])
            assert line[pos + w:pos + w + 2] in ("  ", "")  # aligned under the dashes
            pos += w + 2
        return [c.strip() for c in out]

    assert cells(header) == [h for _, h in TABLE_COLS]
    assert cells(r1) == ["1", "COMMITTED", "1 files [a.jsonl]", "5", "4", "1", "0", "1", "1234", "1", "1",
                         "0.12", "12.00", "0.46", "1.00"]
    assert cells(r2) == ["2", "PLANNED", "3 files [b.jsonl, c.jsonl, d.jsonl]", "5", "-", "-", "-", "-", "-", "-",
                         "1", "0.12", "-", "-", "-"]
    assert widths[2] == len("3 files [b.jsonl, c.jsonl, d.jsonl]")  # widest cell sets the width
    assert lines[4:] == ["", "notes:", "  batch 2: changed /l/a.jsonl after it was consumed",
                         "  batch 2: second note"]


def test_render_table_without_notes_and_without_rows():
    out = render_table([_row(1)])
    assert "notes:" not in out and len(out.split("\n")) == 3
    empty = render_table([])
    assert empty.split("\n")[0].split()[:2] == ["batch", "state"]
    assert len(empty.split("\n")) == 2


# -- show -----------------------------------------------------------------------------------------
# `cli show` reads each table with its participant's storage options (S3 endpoint, region,
# credentials), as every other reader of the tables does; without them an S3 table cannot be opened.


def test_show_opens_tables_with_the_participants_storage_options(make_cfg, monkeypatch, capsys):
    import deltalake
    import pyarrow as pa
    from deltalake import write_deltalake

    from eobatch.cli import show
    from eobatch.protocol import Protocol

    cfg = make_cfg()
    write_deltalake(cfg.sink_table, pa.table({"order_id": ["o1", "o2"], "amount": [1.0, 2.0]}))
    proto = Protocol(cfg)
    for part in proto.participants.values():
        part.storage_options = {"eobatch_marker": part.name}  # delta-rs accepts (ignores) it for a local table

    opened = []
    real = deltalake.DeltaTable

    class Recording(real):
        def __init__(self, table_uri, *args, **kwargs):
            opened.append((str(table_uri), kwargs.get("storage_options", args[1] if len(args) > 1 else None)))
            super().__init__(table_uri, *args, **kwargs)

    monkeypatch.setattr(deltalake, "DeltaTable", Recording)
    show(proto, limit=5)

    out = capsys.readouterr().out
    assert "Delta version 0, 2 rows" in out and '"order_id": "o2"' in out
    parts = {p.uri: p for p in proto.participants.values()}
    assert opened and all(opts == parts[uri].storage_options for uri, opts in opened), opened


def test_rewind_by_upstream_version_is_for_a_delta_source_and_wants_one_target(make_cfg):
    cfg = make_cfg()
    r = _cli(cfg, "rewind", cfg.name, "--upstream-version", "3")
    assert r.returncode == 2 and "--upstream-version is for a source that reads another table's versions" in r.stderr, r.stderr
    r = _cli(cfg, "rewind", cfg.name, "2", "--upstream-version", "3")
    assert r.returncode == 2 and "give BATCH or --upstream-version, not both" in r.stderr, r.stderr
    r = _cli(cfg, "rewind", cfg.name)
    assert r.returncode == 2 and "give BATCH (or, for a delta source, --upstream-version V)" in r.stderr, r.stderr


# -- the platform's settings: read as Airflow reads them, by the CLI as by the DAG file -------------


def _airflow_home_cli(tmp_path: Path, cfg_text: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m eobatch.cli ARGS`` (or ``-c``) with an AIRFLOW_HOME whose airflow.cfg is
    ``cfg_text``, and no eobatch variable in the environment."""
    home = tmp_path / "airflow-home"
    home.mkdir(exist_ok=True)
    (home / "airflow.cfg").write_text(cfg_text)
    env = {"AIRFLOW_HOME": str(home), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(eobatch.__file__).parents[1])}
    return subprocess.run([sys.executable, *(args if args[0] == "-c" else ("-m", "eobatch.cli", *args))],
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_cli_finds_the_pipelines_folder_that_airflow_cfg_names_as_the_dag_file_does(make_cfg, tmp_path):
    """``[eobatch] pipelines_dir`` in airflow.cfg, no PIPELINES_DIR nor AIRFLOW__EOBATCH__PIPELINES_DIR:
    ``ledger`` and ``doctor`` read the folder it names (the one the DAG file and the UI read), not
    the checkout's demo folder."""
    cfg = make_cfg(name="named_in_airflow_cfg")
    folder = str(Path(cfg.file).parent)
    text = f"[eobatch]\npipelines_dir = {folder}\n"
    r = _airflow_home_cli(tmp_path, text, "ledger", cfg.name)
    assert r.returncode == 0 and "(no batches yet)" in r.stdout, r.stdout + r.stderr[-3000:]
    r = _airflow_home_cli(tmp_path, text, "doctor")
    assert f"ok   pipelines: {folder}: 1 pipeline(s): {cfg.name}" in r.stdout, r.stdout + r.stderr[-3000:]
    r = _airflow_home_cli(tmp_path, text, "-c", "from eobatch.airflow import pipelines_dir; print(pipelines_dir())")
    assert r.stdout.strip() == folder, r.stdout + r.stderr[-3000:]


def test_version_and_help_say_what_the_command_is_with_the_users_commands_before_the_protocols_steps():
    env = {"PYTHONPATH": str(Path(eobatch.__file__).parents[1]), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "eobatch.cli", "--version"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == f"eobatch {eobatch.__version__}", r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "eobatch.cli", "--help"], env=env, capture_output=True, text=True,
                       timeout=300)
    out = r.stdout
    assert r.returncode == 0 and out.startswith("usage: eobatch "), out + r.stderr
    description = out.split("\n\n")[1]  # the paragraph after the usage: whole sentences, none cut off
    assert description.rstrip().endswith(".") and "Exactly-once" in description, description
    users, steps = out.index("commands:"), out.index("protocol steps")
    for command in ("doctor", "run", "ledger", "show", "jars", "rewind", "replay", "maintain"):
        assert users < out.index(f"\n    {command} ") < steps, (command, out)
    for step in ("recover", "plan", "verify", "commit", "abort"):
        assert out.index(f"\n    {step} ") > steps, (step, out)
    r = subprocess.run([sys.executable, "-m", "eobatch.cli", "plan", "--help"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "--max-records" in r.stdout, r.stdout + r.stderr  # the steps stay callable


def test_docs_lists_the_pages_installed_with_this_version_and_prints_a_pages_file(capsys):
    """Issue 43: the README's links into docs/site/ break off the repository; the pages come with the
    wheel (eobatch/docs) and `eobatch docs` names them (here, a checkout: docs/site)."""
    assert cli.main(["docs"]) == 0
    out = capsys.readouterr().out
    assert f"eobatch {eobatch.__version__}" in out
    assert "    getting-started    Getting started" in out.splitlines()
    assert cli.main(["docs", "operations"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.name == "operations.md" and path.read_text().startswith("# ")
    assert cli.main(["docs", "no-such-page"]) == 2
    assert "one of" in capsys.readouterr().err


def test_the_wheels_description_has_no_link_that_breaks_off_the_repository():
    """README.md as the wheel's description (include/hatch_build.py): each link into docs/site/
    names the installed page instead, images become their alt text, and any other relative link
    fails the build."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "include"))
    try:
        import hatch_build  # type: ignore[import-not-found]  # include/, put on the path above
    finally:
        sys.path.pop(0)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    text = hatch_build.description(readme)
    assert "](docs/" not in text and "](./" not in text and readme.count("](docs/site/") > 10
    assert "(`eobatch docs getting-started`" in text
    assert hatch_build.description("[a](docs/site/x.md#two-words) ![shot](docs/site/s.png)") == (
        "a (`eobatch docs x`, section two words) *shot*")
    with pytest.raises(ValueError, match="LICENSE"):
        hatch_build.description("see [the licence](LICENSE)")
