"""eobatch.job.launch: what the stage job is started with: its code, its spec, its ``--conf`` and jars.

The code zip of ``--py-files`` holds what the Spark job imports, and only that. The job
(spark_jobs/stage_batch.py, run by spark-submit from the repository) imports its product code
from the zip alone, in the driver and in the Python workers: so a fresh interpreter with only
the zip on its path (and the venv's pyspark, pyarrow, ...) must import every module the job
needs, and none of them may import Airflow.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import marshal
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from eobatch import paths
from eobatch.job import jars as jar_check
from eobatch.job import launch
from eobatch.pipelines.loader import load_pipeline
from eobatch.sources import kind_names
from support.pipeline_yaml import PINNED
from support.pipeline_yaml import write_named as _write
from support.s3env import ENV

REPO = Path(__file__).resolve().parents[3]

# Modules of the Airflow side and of the protocol's verbs: never needed by the Spark job.
NOT_SHIPPED = ("eobatch/airflow/operators.py", "eobatch/airflow/dag_factory.py", "eobatch/cli.py", "eobatch/job/launch.py")
# What the job imports besides the source kinds (named here, independently of launch.SHIPPED).
JOB_NEEDS = ["eobatch.core.formats", "eobatch.storage.fs", "eobatch.core.faults", "eobatch.storage.s3conf", "eobatch.core.ledger",
             "eobatch.config.schemas", "eobatch.core.table_files", "eobatch.config.lines", "spark_jobs.transforms.passthrough",
             "spark_jobs.transforms.color_counts"]


@pytest.fixture(scope="module")
def code_zip(tmp_path_factory) -> Path:
    return Path(launch.pyfiles_zip(cache_dir=str(tmp_path_factory.mktemp("code-zip"))))


def _names(zip_path: Path) -> list[str]:
    with zipfile.ZipFile(zip_path) as z:
        return z.namelist()


def _imports(source: str, module: str, is_package: bool) -> set[str]:
    """Every module an import statement of ``source`` names, wherever it stands (top level or in a
    function), except under ``if TYPE_CHECKING:``; absolute names, ``from x import y`` giving x and x.y."""
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.orelse:
                visit(stmt)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return out


def test_the_zip_leaves_out_the_airflow_side_and_the_protocol(code_zip):
    names = _names(code_zip)
    assert "eobatch/__init__.py" in names and "spark_jobs/transforms/passthrough.py" in names
    for name in NOT_SHIPPED:
        assert name not in names
    assert not [n for n in names if n.startswith("eobatch/protocol/")]
    sources = {n for n in names if n.endswith(".py")}
    assert {n for n in names if n not in sources} == {n + "c" for n in sources}  # and each one compiled


def test_the_zip_holds_the_read_module_of_every_source_kind(code_zip):
    names = _names(code_zip)
    for kind in kind_names():
        assert f"eobatch/sources/{kind}/__init__.py" in names
        assert f"eobatch/sources/{kind}/read.py" in names


def test_no_module_in_the_zip_imports_airflow(code_zip):
    with zipfile.ZipFile(code_zip) as z:
        for name in [n for n in z.namelist() if n.endswith(".py")]:
            module = name[: -len(".py")].replace("/", ".").removesuffix(".__init__")
            found = _imports(z.read(name).decode(), module, name.endswith("/__init__.py"))
            assert not [m for m in found if m == "airflow" or m.startswith("airflow.")], name


def _module_file(module: str) -> Path | None:
    root, _, rest = module.partition(".")
    base = {"eobatch": REPO / "plugins" / "eobatch", "spark_jobs": REPO / "spark_jobs"}.get(root)
    if base is None:
        return None
    base = base.joinpath(*rest.split(".")) if rest else base
    return next((p for p in (base / "__init__.py", base.with_name(base.name + ".py")) if p.is_file()), None)


def _walk_from_the_job() -> set[str]:
    """Every module of eobatch and spark_jobs the job may import: the import statements (at any depth:
    a function's imports run in the driver and the tasks) from spark_jobs/stage_batch.py and from what
    it imports by name (the pipeline's transform, every source kind's package, every sink kind's job
    step), transitively, with the packages that hold them."""
    from eobatch import sinks, sources

    pending = _imports(Path(launch.STAGE_APP).read_text(), "spark_jobs.stage_batch", False)
    pending |= {f"spark_jobs.transforms.{p.stem}" for p in (REPO / "spark_jobs" / "transforms").glob("[!_]*.py")}
    pending |= {type(sources.kind_for(n)).__module__ for n in sources.kind_names()}
    pending |= {sinks.job_module(n) for n in sinks.kind_names()}
    todo, seen = list(pending), set()
    while todo:
        module = todo.pop()
        path = _module_file(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        todo += [module.rpartition(".")[0]] if "." in module else []
        todo += sorted(_imports(path.read_text(), module, path.name == "__init__.py"))
    return seen


def test_the_shipped_set_holds_every_module_the_job_may_import():
    """``launch.SHIPPED`` is declared, not computed: it cannot go stale, because the walk of the job's
    import statements finds nothing outside it, and each entry is still something the job imports."""
    walked, shipped = _walk_from_the_job(), set(launch.job_modules())
    assert walked - shipped == set(), "the job imports these, which launch.SHIPPED does not ship"
    assert [e for e in launch.SHIPPED if e not in walked] == [], "launch.SHIPPED names what the job no longer imports"
    assert not [m for m in shipped if m.startswith(("eobatch.airflow", "eobatch.job.launch", "eobatch.ui", "eobatch.cli"))]


PROBE = """
import builtins, importlib, importlib.util, json, sys, zipfile
ZIP, JOB, KINDS, NEEDS = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
sys.path.insert(0, ZIP)
COMPILED, _compile = [], builtins.compile  # what zipimport compiles (the path in the zip of each)


def _counting_compile(source, filename, *args, **kwargs):
    COMPILED.append(str(filename).removeprefix(ZIP).lstrip("/"))
    return _compile(source, filename, *args, **kwargs)


builtins.compile = _counting_compile


def ours(m):
    return m.split(".")[0] in ("eobatch", "spark_jobs")


def load(m):
    try:
        importlib.import_module(m)
    except ModuleNotFoundError as e:
        parent, _, name = m.rpartition(".")
        if e.name == m and parent and hasattr(importlib.import_module(parent), name):
            return  # ``from parent import name``: a name defined in parent, not a module
        raise


from eobatch.sources import kind_for
for kind in KINDS:
    kind_for(kind)
    importlib.import_module(f"eobatch.sources.{kind}.read")
for m in NEEDS:
    importlib.import_module(m)
from eobatch.core.table_files import writer_statistics  # noqa: F401

wanted = {m for m in _imports(open(JOB).read(), "spark_jobs.stage_batch", False) if ours(m)}
with zipfile.ZipFile(ZIP) as z:
    for name in [n for n in z.namelist() if n.endswith(".py")]:
        module = name[:-3].replace("/", ".").removesuffix(".__init__")
        wanted |= {module} | {m for m in _imports(z.read(name).decode(), module, name.endswith("/__init__.py"))
                              if ours(m)}
for m in sorted(wanted):
    load(m)
compiled = sorted(c for c in COMPILED if c.startswith(("eobatch", "spark_jobs")))
spec = importlib.util.spec_from_file_location("stage_batch", JOB)  # as spark-submit runs it
job = importlib.util.module_from_spec(spec)
spec.loader.exec_module(job)
print(json.dumps({
    "outside_zip": sorted(n for n, m in sys.modules.items()
                          if ours(n) and not (getattr(m, "__file__", None) or "").startswith(ZIP)),
    "airflow": sorted(n for n in sys.modules if n == "airflow" or n.startswith("airflow.")),
    "loaded": sorted(n for n in sys.modules if ours(n)),
    "compiled": compiled,
}))
"""


def test_the_zip_alone_imports_everything_the_stage_job_imports(code_zip, tmp_path):
    """A clean interpreter (-I: no PYTHONPATH, neither plugins/ nor tests/ on the path) with the
    zip first on sys.path imports the job's needs and every module any import statement of the job
    or of the zip's modules names (function-level ones too: they run in the driver and the Spark
    tasks), then the job file itself; all of it from the zip, and never Airflow."""
    probe = tmp_path / "probe.py"
    probe.write_text("import ast\n" + inspect.getsource(_imports) + PROBE)
    r = subprocess.run([sys.executable, "-I", str(probe), str(code_zip), launch.STAGE_APP,
                        json.dumps(kind_names()), json.dumps(JOB_NEEDS)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["outside_zip"] == []
    assert out["airflow"] == [], "the Spark job's code imports Airflow"
    assert {"eobatch.sources.kafka.read", "eobatch.sources.parquet.read", "eobatch.core.table_files"} <= set(out["loaded"])
    assert out["compiled"] == [], "a module of the zip was compiled again instead of loaded from its .pyc"


JOB_SIDE = """
import importlib, json, sys
from eobatch.sinks import BUILTIN as SINKS, job_module, kind_for as sink_kind
from eobatch.sources import BUILTIN as SOURCES, kind_for as source_kind
for name in SOURCES:
    source_kind(name)
    importlib.import_module(f"eobatch.sources.{name}.read")
for name in SINKS:
    sink_kind(name)
    importlib.import_module(job_module(name))
importlib.import_module("spark_jobs.classify")
importlib.import_module("spark_jobs.stage_write")
print(json.dumps(sorted(m for m in ("pydantic", "yaml", "eobatch.pipelines.loader") if m in sys.modules)))
"""


def test_the_job_loads_every_kind_without_pydantic_yaml_or_the_pipeline_loader():
    """A cluster's Python need not have pydantic or PyYAML: the kinds' YAML models (section.py) are
    loaded only where pipeline files are read."""
    r = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path[:0] = {[str(REPO / 'plugins'), str(REPO)]!r}"
                        + "\n" + JOB_SIDE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-4000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


# -- the job's spec and its spark-submit settings ------------------------------------------------


def test_the_job_spec_ships_only_what_the_kind_reads(tmp_path):
    from eobatch.job.launch import job_spec

    files = load_pipeline(_write(tmp_path, "fp_files_min", PINNED["fp_files_min"][0]))
    kafka = load_pipeline(_write(tmp_path, "fp_kafka", PINNED["fp_kafka"][0]))
    # the landing folder: the job opens each planned file below it without following a link
    assert job_spec(files, 1, "a1")["source"] == {"kind": "files", "path": files.source.path}
    assert job_spec(kafka, 1, "a1")["source"] == {"kind": "kafka", "bootstrap_servers": "127.0.0.1:9092,broker2:9093",
                                                  "consumer_timeout_seconds": 60,
                                                  "read_batch_bytes": 16 << 20}


def test_the_run_spec_is_a_ledger_file_and_the_command_line_does_not_grow_with_the_run(tmp_path):
    """Issue 41 (1): one inline ``--spec`` of a run grew with its batches and its schema until Linux
    refused it (E2BIG, one argument of 128 KiB). The spec is a file of the ledger, named with its
    SHA-256; the job reads back each batch's full spec, and refuses a file changed since."""
    import hashlib

    from eobatch.job.launch import job_spec, spec_args
    from spark_jobs import stage_batch as job

    cfg = _local_pipeline(tmp_path, ", ".join(f"column_{i:04d} STRING" for i in range(2000)))
    one, run = spec_args(cfg, {1: "t1-a"}), spec_args(cfg, {b: f"t1-{b:04x}" for b in range(7, 1007)})
    assert len(" ".join(one)) == len(" ".join(run)) - len("0007") + len("a")  # only the first attempt id differs
    assert max(len(a) for a in run) < 400 and run[0] == "--spec-file" and run[2] == "--spec-sha256"
    path = run[1]
    assert path == f"{tmp_path}/lake/p/_eo_ledger/attempts/0000000007/t1-0007/job.json"
    with open(path, "rb") as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == run[3]
    assert len(data) < 2 * len(json.dumps(job_spec(cfg, 7, "t1-0007")))  # the pipeline's part once
    specs = job.batch_specs(job.read_spec(job._parse_args(run)))
    assert [s["batch_id"] for s in specs] == list(range(7, 1007))
    assert specs[500] == job_spec(cfg, 507, f"t1-{507:04x}")
    with open(path, "ab") as f:
        f.write(b" ")
    with pytest.raises(SystemExit, match="not the one the stage task wrote"):
        job.read_spec(job._parse_args(run))
    with pytest.raises(SystemExit):
        job._parse_args(["--spec-file", path])  # never without its digest


def test_spark_conf_of_an_s3_pipeline_holds_no_secret(s3env, tmp_path):
    y = tmp_path / "p.yaml"
    y.write_text(textwrap.dedent("""\
        name: p
        source: {kind: files, path: "s3://bkt/landing"}
        schema: "a STRING"
        sink: {table: s3a://bkt/lake/p}
        quarantine: {table: s3a://bkt/lake/p_bad}
        """))
    cfg = load_pipeline(str(y))
    assert cfg.source.path == "s3a://bkt/landing"  # one spelling everywhere
    assert launch.uses_s3(cfg)
    conf = launch.spark_conf(cfg)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    # each read of a landing object is of one object (If-Match of the ETag its stream opened at)
    assert conf["spark.hadoop.fs.s3a.change.detection.mode"] == "server"
    assert conf["spark.hadoop.fs.s3a.change.detection.source"] == "etag"
    text = repr(conf)
    assert ENV["AWS_SECRET_ACCESS_KEY"] not in text and ENV["AWS_ACCESS_KEY_ID"] not in text
    import re

    assert re.search(conf["spark.redaction.regex"], "spark.executorEnv.AWS_ACCESS_KEY_ID")
    assert re.search(conf["spark.redaction.regex"], "spark.executorEnv.AWS_SECRET_ACCESS_KEY")


def _local_pipeline(tmp_path, schema: str):
    """Pipeline ``p`` of ``schema``: a landing folder and its tables under ``tmp_path``."""
    y = tmp_path / "p.yaml"
    y.write_text(textwrap.dedent(f"""\
        name: p
        source: {{kind: files, path: {tmp_path}/landing}}
        schema: "{schema}"
        sink: {{table: {tmp_path}/lake/p}}
        quarantine: {{table: {tmp_path}/lake/p_bad}}
        """))
    return load_pipeline(str(y))


def test_local_pipelines_get_no_s3a_conf_nor_jars(tmp_path, monkeypatch):
    cfg = _local_pipeline(tmp_path, "a STRING")
    assert not any(k.startswith("spark.hadoop.fs.s3a") for k in launch.spark_conf(cfg))
    jars_dir = tmp_path / "jars"
    jars_dir.mkdir()
    names = ("delta-spark_4.2_2.13-4.4.0.jar", "hadoop-aws-3.5.0.jar", "bundle-2.35.4.jar")
    for name in names:
        (jars_dir / name).write_bytes(name.encode())
    listing = tmp_path / "spark.sha256"
    listing.write_text("".join(f"{hashlib.sha256(n.encode()).hexdigest()}  {n}\n" for n in names))
    monkeypatch.setattr(jar_check, "LIST_FILE", str(listing))
    monkeypatch.setenv("EOBATCH_JARS_DIR", str(jars_dir))
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match="no eobatch-jvm.jar .*make jars"):
        launch.jars(cfg)
    (jars_dir / paths.JVM_EXTENSION).write_bytes(b"")
    assert [j.rsplit("/", 1)[1] for j in launch.jars(cfg)] == ["delta-spark_4.2_2.13-4.4.0.jar", "eobatch-jvm.jar"]
    assert len(launch.jars()) == 4
    monkeypatch.setenv("EOBATCH_JARS_ON_NODES", "1")
    assert all(j.startswith("local:/") for j in launch.jars())


def _rewrite_entry(zip_path: Path, name: str, data: bytes) -> None:
    """The zip again with one entry's bytes replaced (what a writer of the cache folder could do)."""
    with zipfile.ZipFile(zip_path) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    entries[name] = data
    with zipfile.ZipFile(zip_path, "w") as z:
        for n, b in entries.items():
            z.writestr(n, b)


@pytest.mark.parametrize("tamper", ["source", "pyc", "extra", "truncated"])
def test_a_cached_code_zip_that_is_not_the_products_code_is_rebuilt(tmp_path, tamper):
    cache = tmp_path / "cache"
    first = Path(launch.pyfiles_zip(cache_dir=str(cache)))
    good = first.read_bytes()
    arc = "eobatch/core/formats.py"
    if tamper == "source":
        _rewrite_entry(first, arc, b"raise SystemExit('planted')\n")
    elif tamper == "pyc":  # a compilation of other code behind the real source's hash
        with zipfile.ZipFile(first) as z:
            header = z.read(arc + "c")[:16]
        _rewrite_entry(first, arc + "c", header + marshal.dumps(compile("raise SystemExit('planted')", arc, "exec")))
    elif tamper == "extra":
        _rewrite_entry(first, "sitecustomize.py", b"raise SystemExit('planted')\n")
    else:
        first.write_bytes(good[: len(good) // 2])
    again = Path(launch.pyfiles_zip(cache_dir=str(cache)))
    assert again == first
    with zipfile.ZipFile(again) as z:
        assert "sitecustomize.py" not in z.namelist()
        assert z.read(arc) == (REPO / "plugins" / arc).read_bytes()
        assert b"planted" not in z.read(arc + "c")


def test_an_intact_cached_code_zip_is_reused_as_it_is(tmp_path):
    cache = tmp_path / "cache"
    first = Path(launch.pyfiles_zip(cache_dir=str(cache)))
    stamp = first.stat().st_mtime_ns
    assert Path(launch.pyfiles_zip(cache_dir=str(cache))).stat().st_mtime_ns == stamp


def test_the_code_cache_folder_is_never_writable_by_others(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    os.chmod(cache, 0o777)
    launch.pyfiles_zip(cache_dir=str(cache))
    assert cache.stat().st_mode & 0o022 == 0
