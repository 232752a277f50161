"""eobatch.ui.plugin: the Airflow plugin of the ledger page (the wheel's ``airflow.plugins`` entry
point; ``plugins/eobatch_ui.py`` in a checkout), checked against Airflow's own models of plugin
apps and external views, and its app refusing anonymous requests."""

from __future__ import annotations

import pytest

import eobatch_ui
from eobatch.ui import plugin as ui_plugin


def test_plugin_shapes_are_what_airflow_accepts():
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse, FastAPIAppResponse
    from airflow.plugins_manager import AirflowPlugin

    assert eobatch_ui.EobatchLedgerPlugin is ui_plugin.EobatchLedgerPlugin  # the checkout's plugins folder
    plugin = ui_plugin.EobatchLedgerPlugin
    assert issubclass(plugin, AirflowPlugin) and plugin.name == "eobatch_ledger"
    app, = plugin.fastapi_apps
    FastAPIAppResponse.model_validate({**app, "app": repr(app["app"])})
    assert app["url_prefix"] == "/eobatch"
    views = [ExternalViewResponse.model_validate(v) for v in plugin.external_views]
    assert [(v.destination, v.href) for v in views] == [
        ("dag", "/eobatch/pipelines/{DAG_ID}"), ("dag_run", "/eobatch/pipelines/{DAG_ID}?run_id={RUN_ID}")]
    assert len({v.url_route for v in views}) == 2  # Airflow drops a view whose route another one has


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
@pytest.mark.parametrize("path", ["/api/pipelines/orders/batches", "/pipelines/orders", "/pipelines/nope",
                                  "/api/pipelines/nope/batches", "/api/pipelines/orders/stuck"])
def test_anonymous_requests_get_401_and_nothing_of_the_ledger(path):
    from fastapi.testclient import TestClient

    client = TestClient(ui_plugin.LazyApp())
    r = client.get(path)
    assert r.status_code == 401
    assert "batch_id" not in r.text and "Batch ledger of" not in r.text
    if path.startswith("/pipelines/"):
        assert "Log in to Airflow" in r.text and "/auth/login" in r.text
    else:
        assert r.json() == {"detail": "Not authenticated"}
    assert client.get(path, headers={"Authorization": "Basic YWRtaW46YWRtaW4="}).status_code == 401
