"""eobatch.doctor: every check passes on a working checkout, and each missing part is named with
its fix (a bad pipeline file, a table this deployment cannot write, an undefined Spark connection)."""

from __future__ import annotations

import json
import os
import sys

import yaml

from eobatch import doctor


def _pipeline(folder, name: str, table: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({
        "name": name, "source": {"kind": "files", "path": str(folder.parent / "landing")},
        "schema": "order_id STRING NOT NULL", "sink": {"table": table}, "quarantine": {"table": table + "_bad"}}))


def test_a_working_deployment_passes_and_each_missing_part_is_named_with_its_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[*]"}))
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])  # the venv's spark-submit
    folder = tmp_path / "pipelines"
    _pipeline(folder, "orders", str(tmp_path / "lake" / "orders"))
    (tmp_path / "landing").mkdir()
    lines: list[str] = []
    assert doctor.run(str(folder), log=lines.append) == 0, lines
    assert [ln.split(":")[0] for ln in lines[1:-1] if " trust " not in ln] == [
        "ok   java", "ok   spark", "ok   jars", "ok   pipelines", "ok   connections", "WARN policy", "ok   access orders",
        "ok   write orders", "ok   write orders", "ok   source orders", "ok   progress orders"]
    assert not (tmp_path / "lake" / "orders" / "_eo_ledger").exists()  # the probe is removed, and its folder
    (tmp_path / "a-file").write_text("x")
    _pipeline(folder, "blocked", str(tmp_path / "a-file" / "blocked"))  # under a file: cannot be written
    (folder / "broken.yaml").write_text("name: broken\n")
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT")
    lines.clear()
    assert doctor.run(str(folder), log=lines.append) == 1
    text = "\n".join(lines)
    assert "FAIL pipelines: " in text and "broken.yaml" in text, text
    assert "FAIL write blocked: " in text and "give this deployment write access to it" in text, text
    assert "FAIL connections: not defined: spark_default (pipelines blocked, orders)" in text, text
    assert lines[-1].startswith("doctor: ") and lines[-1].endswith(" ok, 4 to fix, 1 warning(s)"), lines


def test_a_landing_folder_that_cannot_be_read_fails_its_pipelines_source_check_with_the_fix(tmp_path):
    """A landing path that does not exist used to pass the doctor ("ok"): the plan lists nothing
    there and says "nothing new" for ever. Doctor runs the plan's own check of the folder."""
    folder = tmp_path / "pipelines"
    _pipeline(folder, "orders", str(tmp_path / "lake" / "orders"))  # its landing folder: tmp_path/landing
    lines: list[str] = []
    assert doctor.run(str(folder), log=lines.append) == 1
    (line,) = [ln for ln in lines if " source orders" in ln]
    landing = tmp_path / "landing"
    assert line.startswith(f"FAIL source orders: the landing folder {landing} (source.path of "
                           f"{folder / 'orders.yaml'}) does not exist"), line
    assert "create the folder" in line
    landing.write_text("")  # a file, not a folder
    lines.clear()
    doctor.run(str(folder), log=lines.append)
    assert "is not a folder" in next(ln for ln in lines if " source orders" in ln)
    landing.unlink()
    landing.mkdir()  # exists, empty: fine (nothing new is not an error)
    lines.clear()
    doctor.run(str(folder), log=lines.append)
    assert next(ln for ln in lines if " source orders" in ln) == (
        f"ok   source orders: {landing}: a folder it can list (it reads the files named [*.jsonl])")


def test_a_stuck_pipeline_is_named_with_its_batch_its_last_error_and_the_repair_command(tmp_path):
    from eobatch.pipelines.loader import load_pipeline
    from eobatch.protocol import Protocol
    from support.protocol_runs import failing_run, land_ids

    folder = tmp_path / "pipelines"
    _pipeline(folder, "orders", str(tmp_path / "lake" / "orders"))
    (tmp_path / "landing").mkdir()
    cfg = load_pipeline(str(folder / "orders.yaml"))
    land_ids(cfg, "a.jsonl", range(3))
    for i in (1, 2, 3):
        failing_run(Protocol(cfg), f"scheduled__{i}")
    lines: list[str] = []
    doctor.run(str(folder), log=lines.append)
    (line,) = [ln for ln in lines if "progress orders" in ln]
    assert line.startswith("FAIL progress orders: pipeline orders is STUCK: batch 1 is PLANNED since "), line
    assert "last error" in line and "run scheduled__3 failed" in line
    assert "command: make reset-batch PIPELINE=orders BATCH=1" in line


def test_a_delta_source_says_its_upstream_version_or_that_there_is_none_yet(tmp_path):
    """Issue 43: doctor checked landing folders only; every source kind now answers the plan's own
    check (``check_readable``): an upstream Delta table's version, or none yet (fine: the plan waits)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from eobatch.pipelines.loader import load_pipeline
    from support.harness import write_delta_pipeline

    upstream = tmp_path / "lake" / "orders"
    p = write_delta_pipeline(tmp_path, "silver", upstream)
    cfgs = {"silver": load_pipeline(str(p.yaml_path))}
    [check] = doctor._sources(cfgs)
    assert (check.ok, check.text) == (True, f"no Delta table at {upstream} yet: the plans wait for its first version")
    write_deltalake(str(upstream), pa.table({"order_id": ["a"]}))
    write_deltalake(str(upstream), pa.table({"order_id": ["b"]}), mode="append")
    [check] = doctor._sources(cfgs)
    assert (check.ok, check.text) == (True, f"Delta table {upstream}: version 1")
