"""The platform's settings of eobatch: the options of Airflow's section ``[eobatch]``, one definition
each, read the same way by every process that asks (the command line, the DAG file, the tasks, the
ledger page, doctor).

A setting's value, first found:

1. its override variable, where it has one (``PIPELINES_DIR`` for ``pipelines_dir``), when not empty;
2. ``AIRFLOW__EOBATCH__<OPTION>``, when set (an empty value unsets the option: Airflow's rule);
3. Airflow's configuration as Airflow reads it (airflow.cfg of ``AIRFLOW_HOME``, the ``_cmd`` and
   ``_secret`` forms), through the reader that ``eobatch.airflow`` registers on import: every
   process that imports it (all those above) reads airflow.cfg; a process that never imports
   Airflow (the Spark job) reads only the environment;
4. none (the caller's default).

``eobatch.airflow.provider`` describes the same settings to Airflow (``airflow config list``).
Imports nothing of eobatch, and nothing of Airflow: config/ asks here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

SECTION = "eobatch"


@dataclass(frozen=True)
class Setting:
    option: str  # the option of Airflow's [eobatch] section
    description: str
    example: str
    version_added: str
    default: str | None = None
    override: str | None = None  # an environment variable of eobatch's own that wins over the option

    @property
    def env(self) -> str:
        """Airflow's environment variable of the option."""
        return f"AIRFLOW__{SECTION.upper()}__{self.option.upper()}"

    @property
    def where(self) -> str:
        """How a message names it: the option, and the variables that set it."""
        return f"[{SECTION}] {self.option} in airflow.cfg ({self.env}" + (f", or {self.override}" if self.override else "") + ")"


PIPELINES_DIR = Setting(
    "pipelines_dir",
    "The folder of pipeline YAML files: the ledger page lists its pipelines, the eobatch command reads "
    "them, and pipeline_dags() builds their DAGs when it is not given a folder. PIPELINES_DIR overrides it.",
    "/opt/airflow/pipelines", "0.2.0", override="PIPELINES_DIR")
ACCESS_POLICY = Setting(
    "access_policy",
    "A platform-owned file (YAML) of rules saying which Airflow connections and which storage locations the "
    "pipelines of a folder or name pattern may use; checked when a pipeline file is loaded and again by each of "
    "its tasks. Unset: everything is allowed (eobatch doctor says so). See the docs' security page.",
    "/etc/eobatch/access-policy.yaml", "0.3.0")
ALLOWED_NOTIFIERS = Setting(
    "allowed_notifiers",
    "The Airflow notifier classes (dotted paths, comma separated) that a pipeline file's alerts.notify may name "
    "with notifier:. Empty: only email: entries (the product's own e-mail notifier). A class not listed is "
    "refused when the file is loaded, and never imported.",
    "airflow.providers.slack.notifications.slack.SlackNotifier", "0.3.0", default="")
SETTINGS = (PIPELINES_DIR, ACCESS_POLICY, ALLOWED_NOTIFIERS)

_reader: Callable[[str, str], str | None] | None = None


def register_reader(reader: Callable[[str, str], str | None] | None) -> None:
    """``reader(section, option)``: Airflow's configuration (``eobatch.airflow`` registers it)."""
    global _reader
    _reader = reader


def value(setting: Setting) -> str | None:
    """The setting's value in this process (the module docstring's order), stripped; None: unset."""
    if setting.override and os.environ.get(setting.override, "").strip():
        return os.environ[setting.override].strip()
    if setting.env in os.environ:
        found: str | None = os.environ[setting.env]
    elif _reader is not None:
        found = _reader(SECTION, setting.option)
    else:
        found = None
    found = str(found or "").strip()
    return found or None
