"""Airflow plugin: the batch ledger of each pipeline in the Airflow UI (eobatch.ui).

Registers the FastAPI app at ``/eobatch`` (``GET /eobatch/pipelines/<name>``, the page;
``GET /eobatch/api/pipelines/<name>/batches``, its JSON) and a "Batch ledger" tab on the DAG
page and on the DAG-run page (the run's batch highlighted). Registered by the wheel's
``airflow.plugins`` entry point, and in a checkout by ``plugins/eobatch_ui.py`` (Airflow's plugins
folder).

The tabs are on every DAG's page: Airflow 3.3's external views have a destination ("dag",
"dag_run") and no per-DAG condition or filter (its UI lists every view of a destination), so the
page of a DAG that is not a pipeline says that it is not one (``page.render_not_found``).

Every Airflow process loads plugins, task processes included: the app (Airflow's API security,
the ledger reader) is built on the api-server's first request to it, not at import.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

PREFIX = "/eobatch"


class LazyApp:
    """An ASGI app that builds ``eobatch.ui.app.create_app()`` when it is first called."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope, receive, send) -> None:
        if self._app is None:
            # FastAPI and Airflow's API app: in the API server, at the first request (every Airflow process loads plugins)
            from eobatch.ui.app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)

    def __repr__(self) -> str:
        return "eobatch.ui.app:create_app"


class EobatchLedgerPlugin(AirflowPlugin):
    name = "eobatch_ledger"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": PREFIX, "name": "eobatch batch ledger"}]
    # {DAG_ID} and {RUN_ID} are filled in (URL-encoded) by the Airflow UI, which shows the page in a tab
    external_views = [
        {"name": "Batch ledger", "href": PREFIX + "/pipelines/{DAG_ID}", "destination": "dag",
         "url_route": "eobatch-ledger"},
        {"name": "Batch ledger", "href": PREFIX + "/pipelines/{DAG_ID}?run_id={RUN_ID}", "destination": "dag_run",
         "url_route": "eobatch-ledger-run"},
    ]
