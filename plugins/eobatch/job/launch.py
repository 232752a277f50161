"""What a stage attempt's spark-submit needs: the job spec, the code zip, the jars, the conf.

Shared by the Airflow stage operator and by tests/benchmarks that launch the job directly,
so both run exactly the same command. No Airflow imports here.
"""

from __future__ import annotations

import base64
import fnmatch
import glob
import hashlib
import importlib.util
import io
import json
import marshal
import os
import py_compile
import secrets
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from collections.abc import Mapping

from ..config import transforms
from ..core.formats import Layout
from ..errors import RetryableError
from ..paths import PACKAGE, SPARK_JOBS, STAGE_APP
from ..pipelines.loader import PipelineConfig, config_values, load_pipeline
from ..protocol import Protocol
from ..sinks import sink_for
from ..sources import kind_for
from ..storage import s3conf
from ..storage.fs import storage_for
from . import driver_jvm
from . import jars as jar_check
from .driver_jvm import default_cache_dir
from .integrity import private_dir

# Settings every stage job runs with: deterministic time zone, no speculative duplicate tasks
# (one manifest per partition), no UI port on shared CI machines, loopback for local mode.
SPARK_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.speculation": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
    # The stage job caches its classified records (DISK_ONLY) for the sink's write, the
    # quarantine and the positions; compressing that cache spent about a seventh of the job's
    # CPU gathering encoding statistics (JFR profile) for a local-disk cache read once or twice:
    # off, the read-classify-write pass takes 15 % less wall time at 5M records.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Spark's default plus access_key / AWS_ACCESS_KEY_ID (spark.executorEnv.* the job sets)
    "spark.redaction.regex": "(?i)secret|password|token|access[._]?key",
}
# The command that fills the jars folder: the Makefile's in a checkout, the console command's installed.
JARS_COMMAND = jar_check.JARS_COMMAND


def new_attempt_id(try_number: int | None = None) -> str:
    """Attempt-unique name: a retried or zombie spark-submit never writes another's files."""
    prefix = f"t{try_number}-" if try_number is not None else ""
    return f"{prefix}{secrets.token_hex(6)}"


def job_spec(cfg: PipelineConfig, batch_id: int, attempt: str) -> dict:
    return {
        "pipeline": cfg.name, "batch_id": batch_id, "attempt": attempt, "schema": cfg.schema,
        "not_null": [c.name for c in cfg.columns if c.not_null], "transform": cfg.transform,
        "transform_module": transforms.TransformCode(cfg.transform, cfg.transform_file).module,
        "transform_options": cfg.transform_options, "sink_table": cfg.sink_table,
        "quarantine_table": cfg.quarantine_table, "partition_by": list(cfg.partition_by),
        "max_record_bytes": cfg.max_record_bytes, "config_fingerprint": cfg.fingerprint(),
        "source": kind_for(cfg.source.kind).job_source(cfg.source),
        "expectations": [{"name": e.name, "expr": e.expr, "action": e.action} for e in cfg.expectations],
        "sink": sink_for(cfg).job_spec(cfg),
        # the values of the keys the batch depends on, of the same file as the rest of the spec: the
        # job stages only when they are its plan's, and records them for verify (config.contract)
        "contract": config_values(cfg),
    }


def job_env(cfg: PipelineConfig) -> dict[str, str]:
    """The source's settings for the job that travel as spark-submit's environment (secrets)."""
    return kind_for(cfg.source.kind).job_env(cfg.source)


def encode_spec(spec: dict) -> str:
    return base64.b64encode(json.dumps(spec, sort_keys=True).encode()).decode()


def spec_args(cfg: PipelineConfig, attempts: dict[int, str]) -> list[str]:
    """The stage job's arguments for the batches of ``attempts`` ({batch: attempt}): the run's spec
    (``run_spec``) is written to the ledger, in the attempt folder of the run's first batch (local
    disk or S3, wherever the ledger is: the driver reads it there), and the command line names that
    file and the SHA-256 of its bytes, so the job runs exactly the spec the task wrote. The command
    line stays the same size whatever the run carries: Linux refuses one argument of 128 KiB or more
    (E2BIG), which one inline spec of a wide schema or of many batches reached."""
    first = min(attempts)
    path = Layout(cfg.sink_table, cfg.quarantine_table).job_spec(first, attempts[first])
    data = json.dumps(run_spec(cfg, attempts), sort_keys=True).encode()
    storage_for(path).write_atomic(path, data)
    return ["--spec-file", path, "--spec-sha256", hashlib.sha256(data).hexdigest()]


def uses_s3(cfg: PipelineConfig) -> bool:
    return any(s3conf.is_s3(p or "") for p in (cfg.source.path, cfg.sink_table, cfg.quarantine_table))


def jar_sets(cfg: PipelineConfig | None) -> tuple[str, ...]:
    """The sets of jars (``jars.SETS``) the stage job of ``cfg`` needs; every set when no ``cfg``."""
    return jar_check.SETS if cfg is None else jar_check.sets_for(uses_s3(cfg))


def jars(cfg: PipelineConfig | None = None) -> list[str]:
    """The jars for ``--jars``: the ``core`` set, and the ``s3`` set (hadoop-aws, the AWS SDK bundle)
    only when ``cfg`` (if given) has an s3a:// location (``jar_sets``). Checked at each launch
    (``jar_check.checked``): exactly the listed jars of those sets, each with its listed SHA-256 (a
    stat per jar once a file is known), no jar the list does not name, else JarsRefused naming what
    is wrong and the command that fetches them (`eobatch jars --with s3` for the s3 set); then the
    stage job's own JVM jar, the one built into the installed package, never a file of the jars
    folder (``jar_check.own_jvm_jar``)."""
    found = [*jar_check.checked(sets=jar_sets(cfg)), jar_check.own_jvm_jar()]
    if os.environ.get("EOBATCH_JARS_ON_NODES", "").lower() in ("1", "true", "yes"):
        # the same jars are installed at the same path on every node: `local:` URIs are not
        # shipped to each executor (the AWS SDK bundle alone is ~690 MB)
        found = [f"local:{j}" for j in found]
    return found


# The import roots of the job's code: where each top-level package lives in the repository.
CODE_ROOTS = {"eobatch": PACKAGE, "spark_jobs": SPARK_JOBS}

# What the Spark job imports, and all that the code zip of --py-files holds: these modules, every module
# of these packages, and the packages above them (their __init__.py). spark_jobs/stage_batch.py itself is
# spark-submit's main file. tests/unit/job/test_launch.py walks the import statements from the job (at any
# depth) and fails when one names a module outside this set, and imports the job from the zip alone.
SHIPPED = (
    # the pipeline file as the job sees it: no pydantic, no YAML
    "eobatch.config.contract", "eobatch.config.ddl", "eobatch.config.lines", "eobatch.config.schemas",
    # the bases of the kinds' configs (the kinds import them)
    "eobatch.config.sections",
    # the refusal of YAML SQL that reaches the JVM (on Spark's own parse, in the job)
    "eobatch.config.sql_guard",
    # named only inside the kinds' section() (their YAML models), which the job never calls
    "eobatch.config.model", "eobatch.config.schedule",
    # the ledger's records and the staged files' statistics (table_files, ledger -> checkpoint)
    "eobatch.errors", "eobatch.core.faults", "eobatch.core.formats", "eobatch.core.ledger",
    "eobatch.core.checkpoint", "eobatch.core.registry", "eobatch.core.table_files",
    # the stage job's own JVM classes (eobatch-jvm.jar), as the driver reaches them
    "eobatch.core.jvm",
    # whole packages: local and S3 files; every source and sink kind (the spec names one at run time)
    "eobatch.storage", "eobatch.sources", "eobatch.sinks",
    "spark_jobs.classify", "spark_jobs.stage_write", "spark_jobs.transforms", "spark_jobs.worker_daemon",
)


def _module_file(module: str) -> str | None:
    """The source file of ``module`` (a package's ``__init__.py``) under CODE_ROOTS, or None."""
    root, _, rest = module.partition(".")
    if root not in CODE_ROOTS:
        return None
    base = os.path.join(CODE_ROOTS[root], *rest.split(".")) if rest else CODE_ROOTS[root]
    for path in (os.path.join(base, "__init__.py"), base + ".py"):
        if os.path.isfile(path):
            return path
    return None


def job_modules() -> list[str]:
    """The modules of ``SHIPPED``: each one named, each module below a package named, and the
    packages above them."""
    found: set[str] = set()
    for name in SHIPPED:
        path = _module_file(name)
        if path is None:
            raise FileNotFoundError(f"launch.SHIPPED names {name}, which is no module of {sorted(CODE_ROOTS)}")
        found.add(name)
        if path.endswith("__init__.py"):
            folder = os.path.dirname(path)
            for dirpath, dirnames, files in os.walk(folder):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for f in files:
                    if f.endswith(".py"):
                        rel = os.path.relpath(os.path.join(dirpath, f), folder)[:-3].replace(os.sep, ".")
                        found.add(f"{name}.{rel}".removesuffix(".__init__"))
        parts = name.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(m for m in found if _module_file(m) is not None)


def _code_files() -> list[tuple[str, str]]:
    """(file, name in the zip) of every module of ``job_modules``."""
    out = []
    for module in job_modules():
        path = _module_file(module)
        assert path is not None  # job_modules keeps only modules with a file
        root = module.partition(".")[0]
        out.append((path, os.path.join(root, os.path.relpath(path, CODE_ROOTS[root]))))
    return sorted(out, key=lambda f: f[1])


def _compiled(source: bytes, arc: str, tmp: str) -> bytes:
    """The module compiled for this Python, as an unchecked hash-based .pyc (PEP 552): zipimport
    loads it without compiling the source again, in the driver and in every Python worker (about
    0.3 s each, measured); a worker of another Python version finds the magic number differs and
    compiles the .py next to it. Tracebacks name the file by its path in the zip."""
    src, cfile = os.path.join(tmp, "m.py"), os.path.join(tmp, "m.pyc")
    with open(src, "wb") as f:
        f.write(source)
    py_compile.compile(src, cfile=cfile, dfile=arc, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    with open(cfile, "rb") as f:
        return f.read()


def _own_transform(cfg: PipelineConfig | None) -> dict[str, bytes]:
    """The pipeline folder's own transform as entries of the code zip (name in the zip -> source),
    exactly the bytes whose SHA-256 the loaded pipeline holds (``cfg.transform_code``, what the
    batch's plan recorded): a file edited since is refused, never shipped."""
    if cfg is None or not cfg.transform_file:
        return {}
    with open(cfg.transform_file, "rb") as f:
        source = f.read()
    if hashlib.sha256(source).hexdigest() != cfg.transform_code:
        raise RetryableError(f"{cfg.transform_file} changed after the pipeline {cfg.name} was loaded: the "
                            f"next try loads it again (and stages only if the batch's plan has this code)")
    package = transforms.OWN_TRANSFORMS
    return {f"{package}/__init__.py": b"", f"{package}/{cfg.transform}.py": source}


def pyfiles_zip(cfg: PipelineConfig | None = None, cache_dir: str | None = None) -> str:
    """A zip of the modules the Spark job imports (``job_modules``), each as its source and its
    compiled .pyc, for --py-files, with the pipeline ``cfg``'s own transform if it has one
    (``config.transforms``); cached by the hash of the sources and the Python version (a .pyc's
    bytes may differ between two compilations of the same source).

    A cached zip is code every executor will run: it is reused only from a folder that no other
    user can write, and only when it holds exactly these sources and their compilations
    (``_zip_holds``); anything else is rebuilt in its place."""
    expected: dict[str, bytes] = {}
    for path, arc in _code_files():
        with open(path, "rb") as f:
            expected[arc] = f.read()
    expected.update(_own_transform(cfg))
    h = hashlib.sha256(sys.implementation.cache_tag.encode())
    for arc, source in sorted(expected.items()):
        h.update(arc.encode() + b"\0" + hashlib.sha256(source).digest())
    cache_dir = private_dir(cache_dir or default_cache_dir())  # a cached zip is code: owner-only
    target = os.path.join(cache_dir, f"eobatch-{h.hexdigest()[:16]}.zip")
    if os.path.exists(target):
        if _zip_holds(target, expected):
            return target
        print(f"eobatch: the cached code zip {target} does not hold the product's code: rebuilt", file=sys.stderr)
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, source in sorted(expected.items()):
            z.writestr(zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0)), source)
            z.writestr(zipfile.ZipInfo(arc + "c", date_time=(2020, 1, 1, 0, 0, 0)), _compiled(source, arc, tmp))
    part = f"{target}.{os.getpid()}.tmp"
    with open(part, "wb") as f:
        f.write(buf.getvalue())
    os.replace(part, target)
    return target


# PEP 552: a hash-based .pyc whose source is not checked on import (bit 0 set, bit 1 clear)
_UNCHECKED_HASH_PYC = 0b01


def _zip_holds(path: str, expected: dict[str, bytes]) -> bool:
    """The zip at ``path`` holds exactly the modules of ``expected`` (name in the zip -> source):
    intact entries (CRC), each source byte for byte, and next to it a .pyc of this Python that is
    the compilation of that source (its header's source hash, and its code object equal to a
    fresh compilation's). About a quarter of the cost of building the zip."""
    try:
        with zipfile.ZipFile(path) as z:
            if z.testzip() is not None or sorted(z.namelist()) != sorted([*expected, *(a + "c" for a in expected)]):
                return False
            for arc, source in expected.items():
                pyc = z.read(arc + "c")
                if (z.read(arc) != source or pyc[:4] != importlib.util.MAGIC_NUMBER
                        or int.from_bytes(pyc[4:8], "little") != _UNCHECKED_HASH_PYC
                        or pyc[8:16] != importlib.util.source_hash(source)
                        or marshal.loads(pyc[16:]) != compile(source, arc, "exec", dont_inherit=True)):
                    return False
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, TypeError, SyntaxError):
        return False
    return True


def spark_conf(cfg: PipelineConfig) -> dict:
    """``--conf`` of the stage job. Never a credential: those travel as environment variables."""
    conf = dict(SPARK_DEFAULTS)
    if uses_s3(cfg):
        conf.update(s3conf.spark_hadoop_conf())
    conf.update(cfg.spark.conf)
    return conf


def log_level(cfg: PipelineConfig) -> str:
    """Spark's log level in the stage job of ``cfg``: its ``spark.log_level``, else the deployment's
    EOBATCH_SPARK_LOG_LEVEL, else WARN (``driver_jvm.log_level``)."""
    return driver_jvm.log_level(cfg.spark.log_level)


def spark_submit_argv(cfg: PipelineConfig, batch_id: int, attempt: str, master: str = "local[*]",
                      conf: dict | None = None, also: dict[int, str] | None = None) -> list[str]:
    """The spark-submit command line (for tests and benchmarks; Airflow uses its hook), the
    stage operator's ``--conf`` set (``conf`` over it); ``also``: more batches of the run
    ({batch: attempt}) that the same application stages after this one."""
    attempts = {batch_id: attempt, **(also or {})}
    argv = ["spark-submit", "--master", master, "--name", app_name(cfg, attempts),
            "--jars", ",".join(jars(cfg)), "--py-files", pyfiles_zip(cfg)]
    for k, v in {**driver_jvm.java_options(spark_conf(cfg), log_level=log_level(cfg)), **(conf or {})}.items():
        argv += ["--conf", f"{k}={v}"]
    if cfg.spark.driver_memory:
        argv += ["--driver-memory", cfg.spark.driver_memory]
    argv += [STAGE_APP, *spec_args(cfg, attempts)]
    return argv


def run_spec(cfg: PipelineConfig, attempts: dict[int, str]) -> dict:
    """The job's spec for the batches of ``attempts`` ({batch: attempt}), which one application
    stages in order: ``{"common": spec, "batches": [[batch, attempt], ...]}``, the pipeline's part
    (``job_spec`` but the batch and the attempt) once, so the spec grows by a few bytes a batch
    (``batch_specs`` gives each batch's spec back)."""
    ids = sorted(attempts)
    common = job_spec(cfg, ids[0], attempts[ids[0]])
    del common["batch_id"], common["attempt"]
    return {"common": common, "batches": [[b, attempts[b]] for b in ids]}


def app_name(cfg: PipelineConfig, attempts: dict[int, str]) -> str:
    """The Spark application's name: the pipeline, its batches and the (first) attempt."""
    ids = sorted(attempts)
    batches = f"b{ids[0]}" if len(ids) == 1 else f"b{ids[0]}-{ids[-1]}"
    return f"eobatch-{cfg.name}-{batches}-{attempts[ids[0]]}"


# The stage job's environment (spark-submit, its driver, and in local mode every Python worker, which
# inherits the JVM's): built from an allow-list, never a copy of the task's environment, which holds the
# platform's secrets (AIRFLOW_CONN_*, AIRFLOW__DATABASE__SQL_ALCHEMY_CONN, other pipelines' keys) that a
# pipeline's transform would read. Kept: what runs Java, Spark, Hadoop and Python and where they are
# (no secret); the settings the job itself reads (``JOB_SETTINGS``); the names or globs the platform
# lists in ``STAGE_ENV_ALLOW_ENV``. The pipeline's own settings (its S3 credentials, its source's
# connection) are added by the caller, never inherited.
STAGE_ENV_ALLOW_ENV = "EOBATCH_STAGE_ENV_ALLOW"
STAGE_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
    "JAVA_HOME", "SPARK_HOME", "SPARK_CONF_DIR", "SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME", "SPARK_LOCAL_DIRS",
    "SPARK_DIST_CLASSPATH", "HADOOP_HOME", "HADOOP_CONF_DIR", "YARN_CONF_DIR",
    "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "AWS_CA_BUNDLE",
)
STAGE_ENV_GLOBS = ("LC_*",)
# read by the job itself: its fault injection (eobatch.core.faults)
JOB_SETTINGS = ("EOBATCH_FAIL", "EOBATCH_CRASH", "EOBATCH_PAUSE", "EOBATCH_CRASH_ONCE_DIR")


def stage_env_allowed(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """May the variable ``name`` of the task's environment reach the stage job? (``STAGE_ENV``,
    ``JOB_SETTINGS``, and the platform's ``EOBATCH_STAGE_ENV_ALLOW``: comma-separated names or
    globs, matched case-sensitively.)"""
    extra = (os.environ if environ is None else environ).get(STAGE_ENV_ALLOW_ENV, "")
    globs = (*STAGE_ENV_GLOBS, *(p.strip() for p in extra.split(",") if p.strip()))
    return name in STAGE_ENV or name in JOB_SETTINGS or any(fnmatch.fnmatchcase(name, g) for g in globs)


def spark_env(job: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of the stage job's spark-submit: the variables of ``environ`` (default:
    this process's) that ``stage_env_allowed`` keeps, loopback for local mode and this Python for
    the workers unless set, then ``job`` (the pipeline's own settings: ``job_env``, its S3
    credentials). Nothing else of the task's environment reaches the job."""
    src = os.environ if environ is None else environ
    env = {k: v for k, v in src.items() if stage_env_allowed(k, src)}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    bindir = os.path.dirname(sys.executable)
    if bindir not in env.get("PATH", "").split(os.pathsep):
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.update({str(k): str(v) for k, v in (job or {}).items()})
    return env


# -- the stage driver's class-data archive (driver_jvm), made by one stage job -------------------------

WARMUP_SAMPLE = [b'{"id": "a%d", "n": %d, "x": %d.5, "ts": "2026-01-01T00:00:%02dZ"}' % (i, i, i, i % 60) for i in range(200)]


def build_class_archive(master: str = "local[*]", cache_dir: str | None = None, log=print, force: bool = False) -> str:
    """The stage driver's class-data archive (``driver_jvm``): run one stage job of a small pipeline
    (valid, bad and blank lines: the sink and the quarantine are both written) with
    ``-XX:ArchiveClassesAtExit``; return the archive's path.
    An archive already there for this pyspark and this Java is kept unless ``force``."""
    target = driver_jvm.archive_path(cache_dir)
    if target is None:
        raise FileNotFoundError("no java: set JAVA_HOME or put java on PATH")
    if os.path.exists(target) and not force:
        problem = driver_jvm.archive_problem(target)
        if problem is None:
            log(f"class archive: {target} is up to date")
            return target
        log(f"class archive: {target} is built again: {problem}")
    with tempfile.TemporaryDirectory(prefix="eobatch-class-archive-") as tmp:
        landing, dump = os.path.join(tmp, "landing"), os.path.join(tmp, "classes.jsa")
        os.makedirs(landing)
        with open(os.path.join(landing, "sample.jsonl"), "wb") as f:
            f.write(b"\n".join(WARMUP_SAMPLE + [b"{not json", b"", b'{"id": "b", "n": "NaN?"}']) + b"\n")
        yaml = os.path.join(tmp, "warmup.yaml")
        with open(yaml, "w") as f:
            f.write(textwrap.dedent(f"""\
                name: class_archive_warmup
                source: {{kind: files, path: {landing}}}
                schema: "id STRING NOT NULL, n BIGINT, x DOUBLE, ts TIMESTAMP"
                sink: {{table: {tmp}/lake/sink}}
                quarantine: {{table: {tmp}/lake/bad}}
                """))
        cfg = load_pipeline(yaml)
        proto = Protocol(cfg)
        proto.recover()
        plan, _ = proto.plan()
        if plan is None:
            raise RuntimeError("the warm-up pipeline planned nothing")
        dumping = {driver_jvm.JAVA_OPTIONS: f"{driver_jvm.with_collector(driver_jvm.platform_java_options())} -XX:ArchiveClassesAtExit={dump}"}
        argv = spark_submit_argv(cfg, plan.batch_id, new_attempt_id(1), master=master, conf=dumping)
        log(f"class archive: one stage job of {len(WARMUP_SAMPLE) + 2} records, -XX:ArchiveClassesAtExit")
        r = subprocess.run(argv, env=spark_env(), capture_output=True, text=True, timeout=900)
        if r.returncode != 0 or not os.path.exists(dump):
            raise RuntimeError(f"the warm-up stage job failed (exit {r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
        check = subprocess.run([driver_jvm.java() or "java", f"-XX:SharedArchiveFile={dump}", "-version"],
                               capture_output=True, text=True, timeout=120)
        if check.returncode != 0:
            raise RuntimeError(f"a JVM cannot start from the new archive {dump}:\n{check.stderr[-2000:]}")
        driver_jvm.install_archive(dump, target)  # owner-only, with its SHA-256 beside it
    for old in glob.glob(os.path.join(os.path.dirname(target), "stage-classes-*.jsa")):
        if old != target:  # made with another pyspark, Java or collector (a JVM mapping one keeps its mapping)
            os.remove(old)
            if os.path.lexists(old + driver_jvm.DIGEST_SUFFIX):
                os.remove(old + driver_jvm.DIGEST_SUFFIX)
            log(f"class archive: removed {old}, made for another pyspark, Java or collector")
    log(f"class archive: {target} ({os.path.getsize(target) >> 20} MiB)")
    return target
