"""Hostile pipeline authors against the platform's access policy (``eobatch.config.access``): a YAML
that names a connection or a location its folder or name pattern is not given is refused when the
folder is loaded (an import error of the DAG file naming the file and the key, every other
pipeline still a DAG) and again by the real task when it runs (a file edited after the DAG was
parsed, a connection named through a variable of the worker's environment)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from eobatch.config import access
from eobatch.errors import ConfigError
from eobatch.pipelines.loader import load_all, load_pipeline

REPO = Path(__file__).resolve().parents[2]


def pipeline(folder: Path, name: str, data: Path, **extra) -> Path:
    """A files pipeline ``name`` in ``folder`` whose landing folder and tables are under ``data``."""
    folder.mkdir(parents=True, exist_ok=True)
    (data / "landing" / name).mkdir(parents=True, exist_ok=True)
    doc = {"name": name, "source": {"kind": "files", "path": str(data / "landing" / name)},
           "schema": "order_id STRING NOT NULL, amount DOUBLE",
           "sink": {"table": str(data / "lake" / name)}, "quarantine": {"table": str(data / "lake" / f"{name}_bad")},
           "retries": {"plan": 0, "stage": 0, "commit": 0, "delay_seconds": 1}}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict) and "kind" not in value:
            doc[key] = {**doc[key], **value}  # type: ignore[dict-item]
        else:
            doc[key] = value
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def team(tmp_path, monkeypatch):
    """Two teams' folders and data; the policy gives team A its folder's pipelines, its lake and landing,
    its own connections, and the Spark and SMTP defaults to every pipeline."""
    a, b = tmp_path / "data" / "team_a", tmp_path / "data" / "team_b"
    for d in (a, b):
        d.mkdir(parents=True)
    policy = tmp_path / "platform" / "access-policy.yaml"
    policy.parent.mkdir()
    policy.write_text(yaml.safe_dump({"rules": [
        {"folder": str(tmp_path / "pipelines" / "team_a"), "pipelines": "team_a_*",
         "connections": ["aws_team_a", "kafka_a*"], "locations": [str(a) + "/", "s3a://team-a-lake/"]},
        {"pipelines": "*", "connections": ["spark_default", "smtp_default"]},
    ]}))
    monkeypatch.setenv(access.ENV, str(policy))
    return {"a": a, "b": b, "folder": tmp_path / "pipelines" / "team_a", "other": tmp_path / "pipelines" / "team_b",
            "policy": policy}


def refused(path: Path, key: str, *words: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_pipeline(str(path))
    text = str(e.value)
    assert text.startswith(f"{path.name}: {key}: ") and all(w in text for w in words), text
    return text


def test_a_pipeline_inside_its_policy_loads(team):
    cfg = load_pipeline(str(pipeline(team["folder"], "team_a_orders", team["a"], aws_conn_id="aws_team_a")))
    assert cfg.name == "team_a_orders"


@pytest.mark.parametrize("key,extra", [
    ("aws_conn_id", {"aws_conn_id": "aws_admin"}),
    ("spark.conn_id", {"spark": {"conn_id": "spark_admin_cluster"}}),
    ("alerts.notify[0].smtp_conn_id", {"alerts": {"notify": [{"email": ["x@example.com"],
                                                              "smtp_conn_id": "smtp_platform"}]}}),
    ("alerts.notify[0].args.slack_conn_id", {"alerts": {"notify": [{
        "notifier": "airflow.providers.slack.notifications.slack.SlackNotifier",
        "args": {"slack_conn_id": "slack_platform", "channel": "#x"}}]}}),
])
def test_a_connection_outside_the_policy_is_refused_naming_the_key(team, key, extra, monkeypatch):
    # a notifier class the platform allows (eobatch.config.notifiers): its connection is the policy's to allow
    monkeypatch.setenv("AIRFLOW__EOBATCH__ALLOWED_NOTIFIERS", "airflow.providers.slack.notifications.slack.SlackNotifier")
    path = pipeline(team["folder"], "team_a_orders", team["a"], **extra)
    refused(path, key, "is not allowed", str(team["policy"]))


def test_the_connection_of_a_delta_source_is_checked(team):
    path = pipeline(team["folder"], "team_a_silver", team["a"], aws_conn_id="aws_team_a", source={
        "kind": "delta", "table": "s3a://team-a-lake/bronze", "conn_id": "aws_team_b"})
    refused(path, "source.conn_id", "'aws_team_b' is not allowed")


def test_a_kafka_connection_by_glob(team):
    ok = pipeline(team["folder"], "team_a_events", team["a"], source={
        "kind": "kafka", "topic": "events", "conn_id": "kafka_a_main"})
    assert load_pipeline(str(ok)).source.conn_id == "kafka_a_main"
    bad = pipeline(team["folder"], "team_a_events", team["a"], source={
        "kind": "kafka", "topic": "events", "conn_id": "kafkaesque"})
    refused(bad, "source.conn_id", "'kafkaesque'")


@pytest.mark.parametrize("key", ["sink.table", "quarantine.table", "source.path"])
def test_another_teams_location_is_refused(team, key):
    section, leaf = key.split(".")
    path = pipeline(team["folder"], "team_a_orders", team["a"], **{section: {leaf: str(team["b"] / "stolen")}})
    refused(path, key, "location", "is not allowed")


def test_dot_dot_a_neighbour_with_the_same_prefix_and_a_link_do_not_escape(team):
    a, b = team["a"], team["b"]
    trick = pipeline(team["folder"], "team_a_orders", a, sink={"table": f"{a}/../team_b/lake/orders"})
    refused(trick, "sink.table", "team_b")  # the loader's one spelling resolves '..' before the check
    neighbour = a.parent / (a.name + "x")  # /data/team_ax is not below /data/team_a
    neighbour.mkdir()
    refused(pipeline(team["folder"], "team_a_orders", a, sink={"table": str(neighbour / "t")}), "sink.table")
    (a / "shortcut").symlink_to(b, target_is_directory=True)  # a link in the team's own folder to another's
    refused(pipeline(team["folder"], "team_a_orders", a, sink={"table": str(a / "shortcut" / "t")}), "sink.table")
    refused(pipeline(team["folder"], "team_a_orders", a, source={"path": str(a / "shortcut")}), "source.path")


def test_s3_locations_match_by_bucket_and_segment(team):
    a = team["a"]
    ok = pipeline(team["folder"], "team_a_orders", a, aws_conn_id="aws_team_a",
                  sink={"table": "s3://team-a-lake/orders"}, quarantine={"table": "s3a://team-a-lake/bad"})
    assert load_pipeline(str(ok)).sink_table == "s3a://team-a-lake/orders"
    for table in ("s3a://team-a-lake-evil/orders", "s3a://team-b-lake/orders", "s3a://team-a-lake/x/../../team-b-lake/t",
                  "s3a://team-a-lake//orders"):
        bad = pipeline(team["folder"], "team_a_orders", a, aws_conn_id="aws_team_a", sink={"table": table},
                       quarantine={"table": "s3a://team-a-lake/bad"})
        refused(bad, "sink.table")


def test_the_same_file_in_another_folder_or_under_another_name_gets_nothing(team):
    refused(pipeline(team["other"], "team_a_orders", team["a"]), "sink.table",
            "1 rule(s) of the access policy match")  # only the rule for every pipeline: spark, smtp
    refused(pipeline(team["folder"], "orders", team["a"]), "sink.table")  # the folder's rule wants team_a_*


def test_the_aws_connection_is_checked_when_used_or_named(team):
    local = pipeline(team["folder"], "team_a_orders", team["a"])  # aws_default, nothing on S3: not used
    assert load_pipeline(str(local)).aws_conn_id == "aws_default"
    s3 = pipeline(team["folder"], "team_a_orders", team["a"], sink={"table": "s3a://team-a-lake/orders"},
                  quarantine={"table": "s3a://team-a-lake/bad"})
    refused(s3, "aws_conn_id", "'aws_default'")  # the platform's default identity is not the team's


def test_a_connection_named_through_a_variable_is_checked_as_expanded(team, monkeypatch):
    path = pipeline(team["folder"], "team_a_orders", team["a"], spark={"conn_id": "${SPARK_CONN:-spark_default}"})
    monkeypatch.delenv("SPARK_CONN", raising=False)
    assert load_pipeline(str(path)).spark.conn_id == "spark_default"
    monkeypatch.setenv("SPARK_CONN", "spark_admin_cluster")
    text = refused(path, "spark.conn_id", "'${SPARK_CONN}' is not allowed")  # refused as expanded, shown by name
    assert "spark_admin_cluster" not in text


@pytest.mark.parametrize("text", ["rules: [{pipelines: '*', colour: red}]", "not: a policy", "rules: [{folder: rel}]",
                                  "rules: [{locations: ['s3a://b/../c']}]", "{{{"])
def test_a_broken_or_missing_policy_refuses_every_pipeline(team, text):
    team["policy"].write_text(text)
    path = pipeline(team["folder"], "team_a_orders", team["a"])
    with pytest.raises(ConfigError, match=r"team_a_orders.yaml: refused: the platform's access policy is broken: .*"
                                          r"access-policy.yaml"):
        load_pipeline(str(path))
    team["policy"].unlink()
    with pytest.raises(ConfigError, match="cannot be read"):
        load_pipeline(str(path))


def test_without_a_policy_everything_is_allowed(team, monkeypatch):
    monkeypatch.delenv(access.ENV)
    path = pipeline(team["folder"], "team_a_orders", team["a"], aws_conn_id="aws_admin",
                    sink={"table": str(team["b"] / "t")})
    assert load_pipeline(str(path)).aws_conn_id == "aws_admin"


def test_one_refused_file_leaves_the_others_loaded(team):
    pipeline(team["folder"], "team_a_orders", team["a"])
    pipeline(team["folder"], "team_a_thief", team["a"], sink={"table": str(team["b"] / "t")})
    good, errors = load_all(str(team["folder"]))
    assert set(good) == {"team_a_orders"}
    assert [os.path.basename(f) for f in errors] == ["team_a_thief.yaml"]
    assert "team_a_thief.yaml: sink.table: location" in next(iter(errors.values()))


def test_dagbag_makes_the_refused_file_an_import_error_and_builds_the_good_pipeline(team, monkeypatch):
    """Airflow's own DagBag over the product's DAG file: the refusal is an import error naming the file
    and the key; the good pipeline of the same folder is a DAG."""
    from airflow.dag_processing.dagbag import DagBag

    pipeline(team["folder"], "team_a_orders", team["a"])
    pipeline(team["folder"], "team_a_thief", team["a"], aws_conn_id="aws_admin")
    monkeypatch.setenv("PIPELINES_DIR", str(team["folder"]))
    bag = DagBag(dag_folder=str(REPO / "dags" / "eobatch_pipelines.py"))
    assert "team_a_orders" in bag.dags and "team_a_thief" not in bag.dags
    errors = "\n".join(bag.import_errors.values())
    assert "team_a_thief.yaml: aws_conn_id: connection 'aws_admin' is not allowed" in errors, errors


RUN_AFTER_EDIT = textwrap.dedent("""\
    import json, os, sys
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    edited = sys.argv[1]
    # what the DAG processor does: parse the DAG folder and serialize its DAGs, while the files are allowed
    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    bundle = manager.get_bundle("dags-folder")
    bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
    assert {"team_a_edited", "team_a_viavar"} <= set(bag.dags), (bag.dags, bag.import_errors)
    sync_bag_to_db(bag, bundle.name, bundle.version)
    # after the DAG processor parsed them: the author edits one file, the worker's environment names a variable
    with open(edited, "a") as f:
        f.write("aws_conn_id: aws_admin\\n")
    os.environ["SPARK_CONN"] = "spark_admin_cluster"
    out = {}
    for dag_id in ("team_a_edited", "team_a_viavar"):
        dr = bag.dags[dag_id].test()
        out[dag_id] = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
    print("STATES " + json.dumps(out))
""")


@pytest.mark.integration
def test_the_real_task_refuses_a_file_edited_after_parsing_and_a_connection_named_through_a_variable(
        team, airflow_template, tmp_path):
    """``dag.test()`` of DAGs parsed while their files were inside the policy: the recover task (the first)
    reads the file again and fails without retries, naming the key; nothing is planned."""
    import shutil

    from support.harness import VENV_BIN, airflow_env

    edited = pipeline(team["folder"], "team_a_edited", team["a"])
    pipeline(team["folder"], "team_a_viavar", team["a"], spark={"conn_id": "${SPARK_CONN:-spark_default}"})
    home = tmp_path / "airflow"
    shutil.copytree(airflow_template, home)
    env = airflow_env(home, team["folder"], {access.ENV: str(team["policy"])})
    env.pop("SPARK_CONN", None)
    r = subprocess.run([str(VENV_BIN / "python"), "-c", RUN_AFTER_EDIT, str(edited)], env=env,
                       capture_output=True, text=True, timeout=600)
    log = r.stdout + r.stderr
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("STATES ")), None)
    assert line, log[-5000:]
    states = json.loads(line[len("STATES "):])
    for dag_id in states:
        assert states[dag_id]["recover"] == "failed", (states, log[-5000:])
        assert states[dag_id].get("plan") != "success" and not (team["a"] / "lake" / dag_id / "_eo_ledger" / "plans").exists()
    assert "refused: team_a_edited.yaml: aws_conn_id: connection 'aws_admin' is not allowed" in log, log[-5000:]
    assert "refused: team_a_viavar.yaml: spark.conn_id: connection '${SPARK_CONN}' is not allowed" in log, \
        log[-5000:]


def test_the_policy_is_read_from_airflow_cfg_as_airflow_reads_it(tmp_path):
    """``[eobatch] access_policy`` in airflow.cfg (no environment variable): the DAG file's and the
    tasks' loader reads it through Airflow's configuration."""
    from support.harness import VENV_BIN, base_env

    home = tmp_path / "home"
    home.mkdir()
    (home / "airflow.cfg").write_text(f"[eobatch]\naccess_policy = {tmp_path / 'policy.yaml'}\n")
    env = {k: v for k, v in base_env({"AIRFLOW_HOME": str(home)}).items() if k != access.ENV}
    r = subprocess.run([str(VENV_BIN / "python"), "-c", "import airflow, eobatch.airflow\n"
                        "from eobatch.config import access\nprint('SOURCE', access.configured_source())"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert f"SOURCE {tmp_path / 'policy.yaml'}" in r.stdout, r.stdout + r.stderr[-3000:]
