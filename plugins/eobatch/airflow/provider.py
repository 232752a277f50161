"""eobatch as an Airflow provider package: what ``airflow providers list`` shows of it (the
``apache_airflow_provider`` entry point of the wheel), its plugin and its Airflow option
``[eobatch] pipelines_dir``. Every Airflow process that lists providers imports this module: it
imports nothing heavy. Its options are the settings of ``eobatch.settings`` (one definition each).
"""

from __future__ import annotations

from typing import Any

from .. import __version__, settings

SECTION, OPTION = settings.SECTION, settings.PIPELINES_DIR.option  # the Airflow option of the pipelines folder


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
            settings.SECTION: {
                "description": "eobatch: exactly-once pipelines into Delta Lake.",
                "options": {s.option: {"description": s.description, "version_added": s.version_added, "type": "string",
                                       "example": s.example, "default": s.default} for s in settings.SETTINGS},
            },
        },
    }
