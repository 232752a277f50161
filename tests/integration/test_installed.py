"""eobatch installed the way a user installs it into the Airflow they run: the wheel (built by the
same backend as `make wheel`) into a fresh venv, together with Airflow and the rest from the
runtime lock (pip, every distribution checked against the lock's SHA-256, and the wheel's own
dependency ranges resolved against the lock's pins), in a folder outside the repository, with no
checkout on ``sys.path`` and nothing of the checkout named in the environment but the resolved
Delta jars (what `eobatch jars` puts in place; the stage job's own JVM jar comes from the wheel).

It walks the getting-started page's "Install into your Airflow" (docs/site/getting-started.md):
the install, the jars, the DAG file, the pipeline YAML and the last step's commands are the page's
own code blocks (``support.docs_walk``: a page that changes changes what this test runs), with
the page's example paths replaced by the test's folders. The YAML gets its own transform
(transforms/<name>.py beside it, shipped to Spark in the job's code zip); `eobatch doctor`
says what is missing until the Spark connection exists; `airflow dags test` and `eobatch run`
publish each record exactly once, judged by an independent reader (delta-rs); `airflow
providers list` and `airflow plugins` show the package; the real api-server serves the ledger API
of the plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from deltalake import DeltaTable

from support.airflow_stack import AirflowStack
from support.docs_walk import block, commands

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
GUIDE, SECTION = "getting-started.md", "Install into your Airflow"
PYTHON_TAG = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _run(argv: list, env: dict, cwd: Path, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {r.returncode}:\n{r.stdout[-4000:]}\n{r.stderr[-6000:]}")
    return r


class Installed:
    def __init__(self, root: Path):
        self.root = root
        self.venv = root / "venv"
        self.bin = self.venv / "bin"
        self.work = root / "work"  # the current folder of every command: not the repository
        self.pipelines, self.dags, self.landing, self.lake = (root / n for n in ("pipelines", "dags", "landing", "lake"))
        for d in (self.work, self.pipelines, self.dags, self.landing, self.lake, root / "plugins", root / "jars"):
            d.mkdir(parents=True, exist_ok=True)
        path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if not p.startswith(str(REPO))]
        self.env = {
            "PATH": os.pathsep.join([str(self.bin)] + path), "HOME": str(root / "home"), "LANG": "C.UTF-8",
            "JAVA_HOME": os.environ.get("JAVA_HOME", ""), "SPARK_LOCAL_IP": "127.0.0.1",
            "AIRFLOW_HOME": str(root / "airflow"), "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__EOBATCH__PIPELINES_DIR": str(self.pipelines),
            "EOBATCH_JARS_DIR": str(root / "jars"),
            # pip's cache of this machine (what `make setup` downloaded and built): nothing of the checkout
            "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR") or os.path.expanduser("~/.cache/pip"),
        }
        if not self.env["JAVA_HOME"]:
            del self.env["JAVA_HOME"]

    def run(self, *argv, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        return _run(list(argv), self.env, self.work, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    inst = Installed(tmp_path_factory.mktemp("installed"))
    dist = inst.root / "dist"
    # the wheel, as `make wheel` builds it (the stage job's JVM jar from `make setup`)
    _run([REPO / ".venv" / "bin" / "hatchling", "build", "-t", "wheel", "-d", dist], dict(os.environ), REPO)
    wheel, = dist.glob("eobatch-*-py3-none-any.whl")
    # the runtime lock with its hashes, and the wheel with its own (what `make wheel` writes beside it):
    # pip resolves the wheel's dependency ranges against the lock's pins (a range that excludes a pin fails)
    reqs = Path(_run([sys.executable, REPO / "include" / "wheel_requirements.py", wheel, REPO / "requirements.txt"],
                     dict(os.environ), REPO).stdout.strip())
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", inst.venv], inst.env, inst.work)
    # the page's install of the hash-locked lock, from the folder that holds dist/; --no-compile: the
    # same files, bytecode written when a module is first imported (the few of Airflow's thousands
    # that the test imports) instead of for every file at install time
    [install] = [c for c in commands(block(GUIDE, SECTION, "pip install -r eobatch-")) if "pip install" in c]
    version = wheel.name.split("-")[1]
    assert reqs.name == f"eobatch-{version}-requirements.txt", reqs
    _run(["bash", "-c", install.replace("<version>", version) + " --quiet --no-compile"], inst.env, inst.root,
         timeout=1800)
    # the Delta and hadoop jars `eobatch jars` resolves, already resolved by `make setup` (no Maven
    # here): linked one by one, without the checkout's own JVM jar, which the wheel brings
    for jar in (REPO / ".jars").glob("*.jar"):
        if jar.name != "eobatch-jvm.jar":
            (inst.root / "jars" / jar.name).symlink_to(jar)
    return inst


def _records(prefix: str, n: int) -> list[dict]:
    return [{"order_id": f"{prefix}{i}", "customer": "c", "amount": float(i)} for i in range(n)]


def _land(inst: Installed, name: str, records: list[dict]) -> None:
    part = inst.landing / f".{name}.part"
    part.write_text("".join(json.dumps(r) + "\n" for r in records))
    part.rename(inst.landing / name)


def test_the_installed_wheel_publishes_a_pipeline_exactly_once_with_no_checkout(installed):
    inst = installed
    r = inst.run(inst.bin / "python", "-c", "import eobatch, json, sys; print(json.dumps([eobatch.__file__, sys.path]))")
    where, path = json.loads(r.stdout)
    assert where.startswith(str(inst.venv / "lib" / PYTHON_TAG / "site-packages" / "eobatch")), where
    assert not [p for p in path if p.startswith(str(REPO))], path
    # the page's DAG file and pipeline YAML, its example paths replaced by this test's folders
    dag_file = block(GUIDE, SECTION, "pipeline_dags(globals()")
    assert "/path/to/pipelines" in dag_file, dag_file
    (inst.dags / "pipelines.py").write_text(dag_file.replace("/path/to/pipelines", str(inst.pipelines)))
    yaml_text = block(GUIDE, SECTION, "name: orders")
    assert "/data/landing/orders" in yaml_text and "/data/lake/" in yaml_text, yaml_text
    (inst.pipelines / "orders.yaml").write_text(
        yaml_text.replace("/data/landing/orders", str(inst.landing)).replace("/data/lake", str(inst.lake))
        + "transform: {name: in_cents, options: {factor: 100}}\nretries: {stage: 0, commit: 2, delay_seconds: 1}\n")
    (inst.pipelines / "transforms").mkdir()
    (inst.pipelines / "transforms" / "in_cents.py").write_text(textwrap.dedent("""\
        from pyspark.sql import functions as F

        ROW_PRESERVING = True


        def transform(df, ctx):
            return df.withColumn("cents", (F.col("amount") * ctx.options["factor"]).cast("long"))
        """))
    jars_cmd = commands(block(GUIDE, SECTION, "eobatch jars --with s3"))[0]
    assert jars_cmd == "eobatch jars", jars_cmd
    jars = inst.run("bash", "-c", jars_cmd)
    assert "already holds the" in jars.stderr, jars.stderr
    inst.run("airflow", "db", "migrate", timeout=900)  # the Airflow the platform already runs
    doctor_cmd, dags_test, runs = commands(block(GUIDE, SECTION, "eobatch doctor"))
    assert (doctor_cmd, dags_test, runs) == ("eobatch doctor", "airflow dags test orders",
                                             "eobatch run orders --runs 2"), (doctor_cmd, dags_test, runs)
    doctor = inst.run("bash", "-c", doctor_cmd, check=False)  # no Spark connection yet: said, with the fix
    assert doctor.returncode == 1 and "FAIL connections: not defined: spark_default (pipelines orders)" in doctor.stdout \
        and "master 'yarn'" in doctor.stdout and "AIRFLOW_CONN_SPARK_DEFAULT=" in doctor.stdout, doctor.stdout
    inst.env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[*]"})
    doctor = inst.run("eobatch", "doctor", check=False)
    assert doctor.returncode == 0 and ", 0 to fix" in doctor.stdout.strip().splitlines()[-1] and "FAIL" not in doctor.stdout, \
        doctor.stdout + doctor.stderr
    assert "installed: " + str(inst.venv) in doctor.stdout and "eobatch-jvm.jar" in doctor.stdout, doctor.stdout

    _land(inst, "a.jsonl", _records("a", 5) + [{"order_id": None}])  # one bad record: quarantined
    inst.run("bash", "-c", dags_test, timeout=900)
    _land(inst, "b.jsonl", _records("b", 3))
    inst.run("bash", "-c", runs, timeout=900)  # the second run finds nothing new
    published = DeltaTable(str(inst.lake / "orders")).to_pyarrow_table().select(["order_id", "cents"]).to_pylist()
    assert sorted(published, key=lambda r: r["order_id"]) == sorted(
        ({"order_id": r["order_id"], "cents": int(r["amount"] * 100)} for r in _records("a", 5) + _records("b", 3)),
        key=lambda r: r["order_id"])  # each record once, through the pipeline folder's own transform
    assert DeltaTable(str(inst.lake / "orders_bad")).to_pyarrow_table().num_rows == 1
    ledger = json.loads(inst.run("eobatch", "ledger", "orders", "--format", "json").stdout)
    assert [(b["batch_id"], b["state"]) for b in ledger] == [(1, "COMMITTED"), (2, "COMMITTED")], ledger

    providers = inst.run("airflow", "providers", "list", "-o", "json")
    assert "eobatch" in {p["package_name"] for p in json.loads(providers.stdout)}, providers.stdout[-2000:]
    plugins = inst.run("airflow", "plugins", "-o", "json")
    assert "eobatch_ledger" in {p["name"] for p in json.loads(plugins.stdout)}, plugins.stdout[-2000:]
    # the documentation of this version came with it, and the description names its pages (no link
    # into a checkout's docs/site/)
    page = Path(inst.run("eobatch", "docs", "getting-started").stdout.strip())
    assert str(page).startswith(str(inst.venv)) and page.read_text() == (REPO / "docs" / "site" / page.name).read_text()
    described = inst.run(inst.bin / "python", "-c",
                         "import importlib.metadata as m; print(m.metadata('eobatch').get_payload())").stdout
    assert "(`eobatch docs getting-started`" in described and "](docs/" not in described, described[:2000]


def test_the_real_api_server_serves_the_ledger_api_of_the_installed_plugin(installed):
    """After the runs above: the api-server of the fresh venv (its plugins from the wheel's entry
    point, the plugins folder empty) answers the ledger API with the committed batches."""
    inst = installed
    if not (inst.lake / "orders" / "_delta_log").exists():
        pytest.skip("needs the runs of the test above")
    stack = AirflowStack(inst.root / "stack", inst.env, home=inst.root / "airflow", database="sqlite",
                         users={"admin": "installed-password"})
    try:
        stack.start(["orders"])
        status, body = stack.rest("GET", "/eobatch/api/pipelines/orders/batches")
        assert status == 200, body
        assert sorted((b["batch_id"], b["state"]) for b in body) == [(1, "COMMITTED"), (2, "COMMITTED")], body
    finally:
        stack.stop()
