"""eobatch as an Airflow provider package: what ``airflow providers list`` shows of it (the
``apache_airflow_provider`` entry point of the wheel), its plugin and its Airflow option
``[eobatch] pipelines_dir``. Every Airflow process that lists providers imports this module: it
imports nothing heavy. Its options: ``[eobatch] pipelines_dir`` and ``access_policy``
(``eobatch.config.access``).
"""

from __future__ import annotations

from typing import Any

from .. import __version__

SECTION, OPTION = "eobatch", "pipelines_dir"  # the Airflow option of the pipelines folder


def get_provider_info() -> dict[str, Any]:
    """The provider's description, as Airflow's ``provider_info.schema.json`` asks it."""
    return {
        "package-name": "eobatch",
        "name": "eobatch",
        "description": "Exactly-once micro-batch pipelines into Delta Lake: plan, stage with spark-submit, "
                       "verify, commit (a two-phase commit per batch), with a batch ledger page.",
        "versions": [__version__],
        "plugins": [{"name": "eobatch_ledger", "plugin-class": "eobatch.ui.plugin.EobatchLedgerPlugin"}],
        "config": {
            SECTION: {
                "description": "eobatch: exactly-once pipelines into Delta Lake.",
                "options": {
                    OPTION: {
                        "description": "The folder of pipeline YAML files: the ledger page lists its pipelines, "
                                       "and pipeline_dags() builds their DAGs when it is not given a folder. "
                                       "PIPELINES_DIR overrides it.",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "/opt/airflow/pipelines",
                        "default": None,
                    },
                    "access_policy": {
                        "description": "A platform-owned file (YAML) of rules saying which Airflow connections and "
                                       "which storage locations the pipelines of a folder or name pattern may use; "
                                       "checked when a pipeline file is loaded and again by each of its tasks. "
                                       "Unset: everything is allowed (eobatch doctor says so). See the docs' "
                                       "security page.",
                        "version_added": "0.3.0",
                        "type": "string",
                        "example": "/etc/eobatch/access-policy.yaml",
                        "default": None,
                    },
                    "allowed_notifiers": {
                        "description": "The Airflow notifier classes (dotted paths, comma separated) that a "
                                       "pipeline file's alerts.notify may name with notifier:. Empty: only "
                                       "email: entries (the product's own e-mail notifier). A class not "
                                       "listed is refused when the file is loaded, and never imported.",
                        "version_added": "0.3.0",
                        "type": "string",
                        "example": "airflow.providers.slack.notifications.slack.SlackNotifier",
                        "default": "",
                    },
                },
            },
        },
    }
