"""What a pipeline YAML may not do, whoever wrote it: the platform's rules, not a pipeline's
settings (pure Python, no Airflow, no pyspark).

* Spark settings: ``spark.conf`` may not set the platform's security settings (``SPARK_CONF_SECURITY``,
  unless the platform allows them with ``EOBATCH_ALLOW_SPARK_CONF``) nor the product's own
  (``SPARK_CONF_PRODUCT``): ``check_spark_conf``.
* Variables: ``${VAR}`` and ``${VAR:-default}`` are expanded only in ``EXPANDED_KEYS`` (locations
  and connections); anywhere else they are an error: ``expand_vars``.

Both raise ``ConfigError`` naming the file and the key.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError
from ..paths import demo_data_dir

BUILTIN_VARS = {"EOBATCH_DATA_DIR": demo_data_dir()}

# Spark settings a pipeline YAML may not set (fnmatch globs, matched case-insensitively). They decide
# who may see or change what (redaction, ACLs, authentication, TLS, encryption, event and driver
# logs), which code runs (jars, packages, files, Python, JVM options, listeners, plugins, extensions,
# catalogs, scripts), with which identity and credentials, and what reaches the processes'
# environment: the platform's business (spark-defaults, the Spark connection), not a pipeline's. The
# platform can let pipelines set some of them with EOBATCH_ALLOW_SPARK_CONF (environment only).
SPARK_CONF_SECURITY = (
    "spark.redaction.*", "spark.eventlog.*", "spark.driver.log.*", "spark.history.*",
    "spark.*.extrajavaoptions", "spark.*.defaultjavaoptions", "spark.*.extraclasspath", "spark.*.extralibrarypath",
    "spark.jars", "spark.jars.*", "spark.files", "spark.archives", "spark.submit.*", "spark.yarn.dist.*",
    "spark.pyspark.*", "spark.python.*", "spark.plugins", "spark.extralisteners", "spark.sql.queryexecutionlisteners",
    "spark.sql.streaming.streamingquerylisteners", "spark.sql.extensions", "spark.sql.catalog.*",
    "spark.sql.hive.metastore.jars*", "spark.*.resource.*.discoveryscript",
    "spark.executorenv.*", "spark.yarn.appmasterenv.*", "spark.kubernetes.*env.*", "spark.kubernetes.*secret*",
    "spark.kubernetes.authenticate.*", "spark.kubernetes.*podtemplate*", "spark.kubernetes.*volumes.*",
    "spark.authenticate*", "spark.acls.*", "spark.admin.acls*", "spark.modify.acls*", "spark.ui.view.acls*",
    "spark.ui.filters", "spark.ssl.*", "spark.network.crypto.*", "spark.io.encryption.*",
    "spark.kerberos.*", "spark.yarn.keytab", "spark.yarn.principal", "spark.yarn.access.*",
    "spark.hadoop.*access.key*", "spark.hadoop.*secret*", "spark.hadoop.*token*", "spark.hadoop.*credential*",
    "spark.hadoop.*password*", "spark.hadoop.*.security.*", "spark.hadoop.*account.key*",
    "spark.hadoop.*encryption.key*", "spark.hadoop.*assumed.role*", "spark.hadoop.*.auth.*", "spark.hadoop.*oauth*",
)
# Set by the product for correctness (launch.SPARK_DEFAULTS): UTC for interval bounds and timestamps,
# no speculative duplicate tasks (one manifest per partition), s3a's change detection (a landing
# object is read as one object: s3conf.CHANGE_DETECTION). No environment variable allows them.
SPARK_CONF_PRODUCT = ("spark.sql.session.timezone", "spark.speculation", "spark.hadoop.fs.s3a.change.detection.*")
ALLOW_SPARK_CONF_ENV = "EOBATCH_ALLOW_SPARK_CONF"


def check_spark_conf(conf: dict, file: str) -> dict[str, str]:
    """The pipeline's Spark settings (``spark.conf``) as strings; security and product settings are errors."""
    allowed = [p.strip().lower() for p in os.environ.get(ALLOW_SPARK_CONF_ENV, "").split(",") if p.strip()]
    for k in map(str, conf):
        key, name = f"spark.conf.{k}", k.lower()
        if not k or "=" in k or any(c.isspace() for c in k):
            raise ConfigError(file, key, "must be a Spark setting name without '=' or white space")
        if _glob_any(name, SPARK_CONF_PRODUCT):
            raise ConfigError(file, key, "is set by the product for correctness; a pipeline cannot change it")
        if _glob_any(name, SPARK_CONF_SECURITY) and not _glob_any(name, allowed):
            raise ConfigError(file, key, "is a security setting of the platform (spark-defaults or the Spark "
                                         "connection), not of a pipeline YAML; the platform can allow it with the "
                                         f"environment variable {ALLOW_SPARK_CONF_ENV} (comma-separated keys or globs)")
    return {str(k): str(v) for k, v in conf.items()}


def _glob_any(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


# ${VAR} and ${VAR:-default} are expanded only in these keys: the locations and connections that
# differ between demo, tests and clusters. Anywhere else (the description is shown in the UI; options
# and Spark settings reach the job) a variable would let a YAML copy any environment variable of the
# platform, a secret too, to where pipeline authors can read it; there it is an error.
EXPANDED_KEYS = ("source.path", "source.table", "source.bootstrap_servers", "source.topic", "schedule.asset",
                 "sink.table", "quarantine.table", "spark.conn_id")
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")


def expand_vars(raw: dict, file: str) -> None:
    """Expands the variables of EXPANDED_KEYS in the YAML's mapping ``raw``, in place; a variable
    in any other key is an error."""
    key = _var_outside_expanded_keys(raw)
    if key:
        raise ConfigError(file, key, f"holds a ${{...}}, but variables are expanded only in "
                                     f"{', '.join(EXPANDED_KEYS)}; write the value itself here")
    for key in EXPANDED_KEYS:
        section, leaf = key.split(".")
        d = raw.get(section)
        if isinstance(d, dict) and isinstance(d.get(leaf), str):
            d[leaf] = _expand(d[leaf], file, key)


def _var_outside_expanded_keys(v: Any, key: str = "") -> str | None:
    """The first key outside EXPANDED_KEYS whose string holds a ${VAR}, or None."""
    if isinstance(v, str):
        return key if key not in EXPANDED_KEYS and VAR_RE.search(v) else None
    if isinstance(v, dict):
        children = [(f"{key}.{k}" if key else str(k), x) for k, x in v.items()]
    elif isinstance(v, list):
        children = [(f"{key}[{i}]", x) for i, x in enumerate(v)]
    else:
        return None
    return next((found for k, x in children if (found := _var_outside_expanded_keys(x, k))), None)


def _expand(v: str, file: str, key: str) -> str:
    """${VAR} and ${VAR:-default}, so one YAML serves demo, tests and clusters.

    ``EOBATCH_DATA_DIR`` defaults to the repository's ``.demo/data`` folder.
    """
    def sub(m: re.Match) -> str:
        name, default = m.group(1), m.group(3)
        val = os.environ.get(name) or BUILTIN_VARS.get(name)
        if val:
            return val
        if default is None:
            raise ConfigError(file, key, f"environment variable {name} is not set (use ${{VAR:-default}})")
        return default
    return VAR_RE.sub(sub, v)
