"""``eobatch doctor``: is this deployment able to run its pipelines? One line per check, each
saying what was found, or what is missing and how to fix it; exit 1 when anything is missing.

Checks: Java (spark-submit's), Spark (``spark-submit`` of pyspark or ``SPARK_HOME``), the JVM jars
(listed and unchanged, and the stage job's own), the folder of pipeline files (every file loads),
the Airflow connections the pipelines name (when Airflow is installed and configured here), and
write access to each pipeline's tables (a probe file under the table's ledger folder, removed
again), that each pipeline's source can be read (``Planner.check_readable``, the plan's own checks,
metadata only: a landing folder exists, is a folder and can be listed; a Kafka topic exists, with
its partitions' offsets; an upstream Delta table's version), and the trust settings in force (``trust_checks``: the access policy, the allow-lists of
the platform, what each pipeline uses and whether the policy allows it). Reads and writes
nothing else.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable

from . import __version__, paths, preflight
from . import airflow as _reads_airflow_cfg  # noqa: F401 - the settings as the DAG file reads them
from .config import access
from .config.policy import ALLOW_SPARK_CONF_ENV
from .core.formats import Layout
from .core.ledger import Ledger
from .core.stuck import find_stuck
from .errors import EobatchError, TerminalError
from .job import jars
from .job.launch import uses_s3
from .pipelines.loader import PipelineConfig, load_all, pipelines_dir
from .preflight import Check
from .sources import source_for
from .storage.credentials import scrub
from .storage.fs import join, storage_for


def _java() -> Check:
    return preflight.java_check()


def _spark() -> Check:
    return preflight.spark_check()


def _jars(cfgs: dict[str, PipelineConfig] | None = None) -> Check:
    """The check every launch makes, for the sets of jars the pipelines need (every set when no
    pipeline is known)."""
    if not cfgs:
        return preflight.jars_check()
    return preflight.jars_check(jars.sets_for(any(uses_s3(c) for c in cfgs.values())))


def _pipelines(directory: str | None) -> tuple[Check, dict[str, PipelineConfig]]:
    try:
        folder = directory or pipelines_dir()
    except EobatchError as e:
        return Check("pipelines", False, str(e)), {}
    if not os.path.isdir(folder):
        return Check("pipelines", False, f"{folder} is not a folder: create it, or point PIPELINES_DIR / "
                                         f"[eobatch] pipelines_dir at the folder of your pipeline files"), {}
    good, errors = load_all(folder)
    if errors:
        return Check("pipelines", False, f"{folder}: " + "; ".join(errors[f] for f in sorted(errors))), good
    if not good:
        return Check("pipelines", False, f"{folder} holds no pipeline file (*.yaml): add one (docs: getting "
                                         f"started)"), good
    return Check("pipelines", True, f"{folder}: {len(good)} pipeline(s): {', '.join(sorted(good))}"), good


def _connections(cfgs: dict[str, PipelineConfig]) -> Check:
    try:
        from airflow.sdk import BaseHook  # optional: only where Airflow is installed
    except ImportError:
        return Check("connections", True, "Airflow is not installed here: connections not checked")
    wanted: dict[str, list[str]] = {}
    for cfg in cfgs.values():
        named = {cfg.spark.conn_id, getattr(cfg.source, "conn_id", None)}
        if any(t.startswith("s3") for t in (cfg.sink_table, cfg.quarantine_table, cfg.source.path or "")):
            named.add(cfg.aws_conn_id)
        for conn_id in named - {None}:
            wanted.setdefault(str(conn_id), []).append(cfg.name)
    spark = {str(cfg.spark.conn_id) for cfg in cfgs.values()}
    missing, unusable = [], []
    for conn_id, names in sorted(wanted.items()):
        who = f"{conn_id} (pipelines {', '.join(sorted(names))})"
        if conn_id in spark:  # the stage task's own check (preflight), its sentence
            problem = preflight.spark_connection_problem(conn_id)
            if problem is None:
                continue
            if problem[0] == "missing":
                missing.append(f"{who} {problem[1]}")
            else:
                unusable.append(f"{who}: {problem[1]}")
            continue
        try:
            BaseHook.get_connection(conn_id)
        except Exception:  # noqa: BLE001 - any failure: the task would fail the same way
            if conn_id == "aws_default":  # unset: boto3 finds the credentials of the environment
                continue
            missing.append(who)
    if missing or unusable:
        said = ["not defined: " + "; ".join(missing) + f": {preflight.HOW_TO_ADD.replace('add it', 'add them')}"] \
            if missing else []
        return Check("connections", False, "; ".join(said + unusable))
    return Check("connections", True, f"{len(wanted)} named, each defined" if wanted else "none named")


def _tables(cfgs: dict[str, PipelineConfig]) -> list[Check]:
    out = []
    for name, cfg in sorted(cfgs.items()):
        for table in (cfg.sink_table, cfg.quarantine_table):
            ledger = join(table, "_eo_ledger")
            probe = join(ledger, f".doctor-{uuid.uuid4().hex}")
            try:
                fs = storage_for(table)
                fs.put_if_absent(probe, b"eobatch doctor")
                fs.delete(probe)
                fs.remove_empty_dirs(ledger)
                out.append(Check(f"write {name}", True, table))
            except Exception as e:  # noqa: BLE001 - the reason is the answer
                out.append(Check(f"write {name}", False, f"{table}: {type(e).__name__}: {e}: give this "
                                                         f"deployment write access to it"))
    return out


def _sources(cfgs: dict[str, PipelineConfig]) -> list[Check]:
    """Per pipeline: can its source be read (``Planner.check_readable``, the plan's own checks, metadata
    only)? A landing folder that exists and is empty is fine (on S3 a prefix without objects too, S3
    has no folders; a bucket that does not exist or that is denied is not); a Kafka topic that exists
    with its partitions' offsets; an upstream Delta table, or none yet."""
    out = []
    for name, cfg in sorted(cfgs.items()):
        try:
            found = source_for(cfg).check_readable()
        except TerminalError as e:
            out.append(Check(f"source {name}", False, scrub(str(e))))
            continue
        except Exception as e:  # noqa: BLE001 - the reason is the answer
            out.append(Check(f"source {name}", False, scrub(f"{cfg.source.describe()}: {type(e).__name__}: {e}")))
            continue
        out.append(Check(f"source {name}", True, scrub(found)))
    return out


def _progress(cfgs: dict[str, PipelineConfig]) -> list[Check]:
    """Per pipeline: is a batch stuck (``eobatch.core.stuck``, from its ledger alone)?"""
    out = []
    for name, cfg in sorted(cfgs.items()):
        try:
            found = find_stuck(Ledger(Layout(cfg.sink_table, cfg.quarantine_table)), cfg)
        except Exception as e:  # noqa: BLE001 - the reason is the answer
            out.append(Check(f"progress {name}", False, f"its ledger cannot be read: {type(e).__name__}: "
                                                        f"{scrub(str(e))}"))
            continue
        if found is None:
            out.append(Check(f"progress {name}", True, "no batch is stuck"))
        else:
            out.append(Check(f"progress {name}", False, " | ".join(found.lines())))
    return out


# -- the trust settings in force (docs/site/security.md) ---------------------------------------------

SECRET_WORDS = ("password", "secret", "token", "key", "credential")


def _policy(folder: str | None) -> tuple[Check, access.Policy | None]:
    """The access policy ([eobatch] access_policy): none (allowed, loudly), broken, or its rules."""
    source = access.configured_source()
    if source is None:
        return Check("policy", True, "NO ACCESS POLICY: every pipeline file may name every Airflow connection of this "
                                     "deployment and read or write every location its workers can reach. Fine for one "
                                     "team; in a shared Airflow set [eobatch] access_policy (AIRFLOW__EOBATCH__"
                                     "ACCESS_POLICY) to a platform-owned rules file (docs: security)", warn=True), None
    try:
        policy = access.policy_for(source)
    except access.PolicyError as e:
        return Check("policy", False, f"{e}: fix the file ([eobatch] access_policy names it)"), None
    problems = []
    if folder and access.below(os.path.realpath(source), os.path.realpath(folder)):
        problems.append("it lies in the pipelines folder, which pipeline authors write: keep it where only the "
                        "platform can write")
    if os.stat(source).st_mode & 0o022:
        problems.append("group or others may write it: chmod go-w")
    rules = "; ".join(f"pipelines {'|'.join(r.pipelines)}" + (f" in {r.folder}" if r.folder else "")
                      + f": connections [{', '.join(r.connections)}], locations [{', '.join(r.locations)}]"
                      for r in policy.rules)
    text = f"{source}: {len(policy.rules)} rule(s)" + (f": {rules}" if rules else " (every pipeline is refused)")
    return Check("policy", not problems, text + ("" if not problems else ": " + "; ".join(problems))), policy


def _airflow_options() -> dict[str, str]:
    """The options of Airflow's [eobatch] section as this deployment's Airflow reads them ({} without Airflow)."""
    try:
        from airflow.configuration import conf  # optional: only where Airflow is installed
    except ImportError:
        return {}
    return {str(k): str(v) for k, v in (conf.getsection(access.SECTION) or {}).items()}


def _allow_lists() -> list[Check]:
    """The platform's allow-lists and other trust settings doctor can read: ``EOBATCH_*ALLOW*`` of the
    environment, and the options of Airflow's [eobatch] section (values of secret-looking names hidden)."""
    found = {k: v for k, v in os.environ.items() if k.startswith("EOBATCH_") and "ALLOW" in k}
    found.setdefault(ALLOW_SPARK_CONF_ENV, "")
    found |= {f"[{access.SECTION}] {k}": v for k, v in _airflow_options().items()
              if k not in ("pipelines_dir", access.OPTION)}
    out = []
    for k, v in sorted(found.items()):
        shown = "(set, hidden)" if v and any(w in k.lower() for w in SECRET_WORDS) else (v or "(unset)")
        note = ": no security Spark setting is a pipeline's to set" if k == ALLOW_SPARK_CONF_ENV and not v else ""
        out.append(Check(f"trust {k}", True, shown + note))
    return out


def _uses(policy: access.Policy | None, cfg: PipelineConfig) -> Check:
    """What pipeline ``cfg`` uses, each connection and location with the policy's answer."""
    parts, refused = [], 0
    for use in access.uses(cfg):
        why = access.refusal(policy, cfg, use) if policy is not None else None
        refused += bool(why)
        verdict = "no policy" if policy is None else "NOT ALLOWED" if why else "allowed"
        parts.append(f"{use.key} {use.value} ({verdict})")
    return Check(f"access {cfg.name}", not refused, "; ".join(parts) + (
        f": {refused} use(s) the policy refuses: the pipeline does not load (allow them in the policy, or change "
        f"{os.path.basename(cfg.file)})" if refused else ""))


def trust_checks(directory: str | None = None) -> list[Check]:
    """The trust settings in force: the access policy, the allow-lists, and per pipeline of the folder
    (the refused ones too) the connections and locations it uses, each with the policy's answer."""
    try:
        folder: str | None = directory or pipelines_dir()
    except EobatchError:
        folder = None
    policy_check, policy = _policy(folder)
    out = [policy_check, *_allow_lists()]
    if folder and os.path.isdir(folder) and (policy_check.ok or policy is not None):
        with access.unchecked():  # every pipeline, the refused ones too: judged one use at a time below
            cfgs, _errors = load_all(folder)
        out += [_uses(policy, cfg) for _name, cfg in sorted(cfgs.items())]
    return out


def run(directory: str | None = None, log: Callable[[str], None] = print) -> int:
    """Every check, one line each; 0 when all pass (warnings included), else 1."""
    log(f"eobatch {__version__} ({'checkout ' + paths.CHECKOUT if paths.CHECKOUT else 'installed: ' + paths.PACKAGE})")
    pipelines, cfgs = _pipelines(directory)
    checks = [_java(), _spark(), _jars(cfgs), pipelines, _connections(cfgs), *trust_checks(directory), *_tables(cfgs),
              *_sources(cfgs), *_progress(cfgs)]
    for c in checks:
        log(c.line())
    failed = [c for c in checks if not c.ok]
    warned = sum(1 for c in checks if c.ok and c.warn)
    log(f"doctor: {len(checks) - len(failed)} ok, {len(failed)} to fix" + (f", {warned} warning(s)" if warned else ""))
    return 1 if failed else 0
