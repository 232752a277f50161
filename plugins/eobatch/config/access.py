"""Which Airflow connections and which storage locations a pipeline may use: the platform's access
policy (pure Python; the setting is read by ``eobatch.settings``, as every setting of eobatch).

The policy is one platform-owned file, named by the Airflow option ``[eobatch] access_policy``
(airflow.cfg, or ``AIRFLOW__EOBATCH__ACCESS_POLICY``; read the same way by the DAG file, the tasks,
the ``eobatch`` command and doctor: ``eobatch.settings``). A YAML (or JSON) mapping::

    rules:
      - pipelines: "team_a_*"                 # a glob on the pipeline name (or a list); default "*"
        folder: /opt/airflow/pipelines/team_a # the pipeline file is in this folder or below it
        connections: [aws_team_a, "kafka_a*", spark_default]    # Airflow connection ids (globs)
        locations: ["s3a://team-a-lake/", "/data/team_a/"]     # prefixes of tables and landing paths

A pipeline may use what the union of the rules it matches allows (a rule matches when its
``pipelines`` and ``folder`` both do); one that matches no rule may use nothing. ``policy_for``
reads the file; ``check_access`` (called by the loader, so at DAG parse time and again by every
task when it re-reads the file) raises a ``ConfigError`` naming the file and the key of the first
connection or location the policy does not allow. Without the option set, everything is allowed
(a single-team install keeps working) and ``eobatch doctor`` says so loudly. A set option whose file
cannot be read or is not a valid policy refuses every pipeline (fail closed), naming the file.

What a pipeline uses (``uses``): ``spark.conn_id`` always; ``aws_conn_id`` when a location is on S3
or the file names one; ``source.conn_id``; each e-mail notifier's ``smtp_conn_id``
(``smtp_default`` when not given) and every notifier argument whose name ends in ``conn_id``;
the locations ``sink.table``, ``quarantine.table`` and the source's ``path`` (landing folder) or
``table`` (a Delta source). A location matches a prefix at a path-component boundary
(``/data/team_a`` is not below ``/data/team`` and ``s3a://lake-2`` is not below ``s3a://lake``);
local paths are compared with symbolic links and ``..`` resolved (``os.path.realpath``), S3 keys
with ``.`` or ``..`` segments or empty segments are refused (Hadoop's paths would collapse them).
"""

from __future__ import annotations

import contextvars
import fnmatch
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from .. import settings
from ..errors import ConfigError, UsageError

if TYPE_CHECKING:
    from .pipeline import PipelineConfig

SECTION, OPTION = settings.SECTION, settings.ACCESS_POLICY.option
ENV = settings.ACCESS_POLICY.env
RULE_KEYS = frozenset({"pipelines", "folder", "connections", "locations"})
S3_PREFIXES = ("s3a://", "s3://", "s3n://")


class PolicyError(UsageError):
    """The policy file itself is wrong: every pipeline is refused until it is fixed."""

    def __init__(self, source: str, message: str):
        super().__init__(f"{source}: {message}")
        self.source = source


@dataclass(frozen=True)
class Rule:
    pipelines: tuple[str, ...]
    folder: str | None
    connections: tuple[str, ...]
    locations: tuple[str, ...]

    def matches(self, name: str, file: str) -> bool:
        if not any(fnmatch.fnmatchcase(name, p) for p in self.pipelines):
            return False
        return self.folder is None or below(_real(os.path.dirname(os.path.abspath(file))), self.folder)


@dataclass(frozen=True)
class Policy:
    source: str  # the file it was read from
    rules: tuple[Rule, ...]

    def rules_for(self, name: str, file: str) -> list[Rule]:
        return [r for r in self.rules if r.matches(name, file)]

    def allows_connection(self, rules: Iterable[Rule], conn_id: str) -> bool:
        return any(fnmatch.fnmatchcase(conn_id, p) for r in rules for p in r.connections)

    def allows_location(self, rules: Iterable[Rule], location: str) -> bool:
        loc = normalize_location(location)
        return any(below(loc, p) for r in rules for p in r.locations)


@dataclass(frozen=True)
class Use:
    """One connection or location a pipeline uses, by the YAML key that names it."""
    key: str
    kind: str  # "connection" | "location"
    value: str


# -- where the policy is set, and reading it --------------------------------------------------------


def configured_source() -> str | None:
    """The policy file the platform set: ``AIRFLOW__EOBATCH__ACCESS_POLICY``, else Airflow's option
    ``[eobatch] access_policy`` (airflow.cfg, its ``_cmd`` / ``_secret`` forms too) in a process that
    imported ``eobatch.airflow`` (the DAG processor, a task, the api-server, the eobatch command,
    doctor): ``eobatch.settings``. None: not set."""
    return settings.value(settings.ACCESS_POLICY)


_cache: dict[tuple, Policy] = {}
_cache_lock = threading.Lock()


def policy_for(source: str) -> Policy:
    """The policy of file ``source`` (re-read when the file changes); ``PolicyError`` when it
    cannot be read or is not a valid policy."""
    try:
        st = os.stat(source)
    except OSError as e:
        raise PolicyError(source, f"the access policy ([{SECTION}] {OPTION}) cannot be read: {e.strerror}; "
                                  f"every pipeline is refused until it can") from None
    key = (source, st.st_ino, st.st_size, st.st_mtime_ns)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    try:
        with open(source, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise PolicyError(source, f"the access policy cannot be read: {e}; every pipeline is refused") from None
    policy = Policy(source, tuple(_rule(source, i, r) for i, r in enumerate(_rules(source, raw))))
    with _cache_lock:
        _cache.clear()
        _cache[key] = policy
    return policy


def current_policy() -> Policy | None:
    """The policy in force (None: none is set, everything is allowed)."""
    source = configured_source()
    return None if source is None else policy_for(source)


def _rules(source: str, raw: Any) -> list:
    if not isinstance(raw, dict) or set(raw) != {"rules"} or not isinstance(raw["rules"], list):
        raise PolicyError(source, "the access policy must be a mapping with one key, rules: a list of "
                                  "{pipelines, folder, connections, locations}; every pipeline is refused")
    return raw["rules"]


def _strings(source: str, where: str, v: Any) -> tuple[str, ...]:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(x, str) and x.strip() for x in items):
        raise PolicyError(source, f"{where}: must be a string or a list of strings; every pipeline is refused")
    return tuple(x.strip() for x in items)


def _rule(source: str, i: int, raw: Any) -> Rule:
    where = f"rules[{i}]"
    if not isinstance(raw, dict) or set(raw) - RULE_KEYS:
        raise PolicyError(source, f"{where}: must be a mapping of {', '.join(sorted(RULE_KEYS))}; every pipeline "
                                  f"is refused")
    folder = raw.get("folder")
    if folder is not None and (not isinstance(folder, str) or not os.path.isabs(folder)):
        raise PolicyError(source, f"{where}.folder: must be an absolute path; every pipeline is refused")
    locations = []
    for loc in _strings(source, f"{where}.locations", raw.get("locations", [])):
        try:
            locations.append(normalize_location(loc))
        except ValueError as e:
            raise PolicyError(source, f"{where}.locations: {e}; every pipeline is refused") from None
    return Rule(pipelines=_strings(source, f"{where}.pipelines", raw.get("pipelines", "*")),
                folder=_real(folder) if folder else None,
                connections=_strings(source, f"{where}.connections", raw.get("connections", [])),
                locations=tuple(locations))


# -- locations --------------------------------------------------------------------------------------


def _real(path: str) -> str:
    return os.path.realpath(path)


def normalize_location(location: str) -> str:
    """One spelling of a location: ``s3a://bucket/key`` (no trailing slash; ``.``, ``..`` or empty
    key segments are refused) or a local absolute path with links and ``..`` resolved."""
    loc = location.strip()
    for scheme in S3_PREFIXES:
        if loc.startswith(scheme):
            bucket, _, key = loc[len(scheme):].partition("/")
            parts = key.rstrip("/").split("/") if key.rstrip("/") else []
            if not bucket or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"{location!r}: an S3 location needs a bucket and no '.', '..' or empty segments")
            return "s3a://" + "/".join([bucket.lower(), *parts])
    if "://" in loc or not os.path.isabs(loc):
        raise ValueError(f"{location!r}: must be an absolute local path or an s3a:// URI")
    return _real(loc)


def below(location: str, prefix: str) -> bool:
    """``location`` is ``prefix`` or below it (both normalized), at a path-component boundary."""
    root = prefix.rstrip("/") or "/"
    return location == root or location.startswith(root if root.endswith("/") else root + "/")


# -- what a pipeline uses, and the check ------------------------------------------------------------


def _is_s3(path: str | None) -> bool:
    return bool(path) and str(path).startswith(S3_PREFIXES)


def locations(cfg: PipelineConfig) -> list[Use]:
    out = [Use("sink.table", "location", cfg.sink_table), Use("quarantine.table", "location", cfg.quarantine_table)]
    table = getattr(cfg.source, "table", None)
    if isinstance(table, str) and table:
        out.append(Use("source.table", "location", table))
    elif cfg.source.path:
        out.append(Use("source.path", "location", cfg.source.path))
    return out


def connections(cfg: PipelineConfig) -> list[Use]:
    out = [Use("spark.conn_id", "connection", str(cfg.spark.conn_id))]
    if cfg.aws_conn_id != "aws_default" or any(_is_s3(u.value) for u in locations(cfg)):
        out.append(Use("aws_conn_id", "connection", cfg.aws_conn_id))
    source_conn = getattr(cfg.source, "conn_id", None)
    if source_conn:
        out.append(Use("source.conn_id", "connection", str(source_conn)))
    notified = getattr(cfg.source, "notifications", None)
    if notified is not None and notified.conn_id:
        out.append(Use("source.notifications.conn_id", "connection", str(notified.conn_id)))
    for i, n in enumerate(cfg.alerts.notify):
        if n.email:
            out.append(Use(f"alerts.notify[{i}].smtp_conn_id", "connection", n.smtp_conn_id or "smtp_default"))
        for k, v in sorted((n.args or {}).items()):
            if str(k).endswith("conn_id") and isinstance(v, str):
                out.append(Use(f"alerts.notify[{i}].args.{k}", "connection", v))
    return out


def uses(cfg: PipelineConfig) -> list[Use]:
    """Every connection and location ``cfg`` uses, by the key that names it."""
    return connections(cfg) + locations(cfg)


def refusal(policy: Policy, cfg: PipelineConfig, use: Use) -> str | None:
    """Why ``policy`` does not allow ``use`` of ``cfg`` (None: it does)."""
    rules = policy.rules_for(cfg.name, cfg.file)
    if use.kind == "connection":
        if policy.allows_connection(rules, use.value):
            return None
        what = f"connection {use.value!r}"
    else:
        try:
            if policy.allows_location(rules, use.value):
                return None
        except ValueError as e:
            return str(e)
        what = f"location {use.value!r}"
    scope = (f"{len(rules)} rule(s) of the access policy match pipeline {cfg.name!r}" if rules else
             f"no rule of the access policy matches pipeline {cfg.name!r} (its name and folder)")
    return f"{what} is not allowed: {scope}, none allows it ({policy.source}; the platform's [{SECTION}] {OPTION})"


_unchecked: contextvars.ContextVar[bool] = contextvars.ContextVar("eobatch_access_unchecked", default=False)


@contextmanager
def unchecked() -> Iterator[None]:
    """Pipelines loaded inside this block are not checked (``eobatch doctor``'s report of what every
    pipeline uses, the refused ones too, judged by ``refusal`` one by one). Never around a load
    whose pipeline then runs or is shown."""
    token = _unchecked.set(True)
    try:
        yield
    finally:
        _unchecked.reset(token)


def check_access(cfg: PipelineConfig, policy: Policy | None = None, *, extra: Iterable[Use] = ()) -> None:
    """Refuses (``ConfigError`` naming the file and the key) the first connection or location of
    ``cfg`` (and ``extra``, e.g. a task's own connection) that the policy in force does not allow."""
    if _unchecked.get():
        return
    if policy is None:
        try:
            policy = current_policy()
        except PolicyError as e:
            raise ConfigError(cfg.file, "", f"refused: the platform's access policy is broken: {e}") from None
    if policy is None:
        return
    for use in [*uses(cfg), *extra]:
        why = refusal(policy, cfg, use)
        if why:
            raise ConfigError(cfg.file, use.key, why)
