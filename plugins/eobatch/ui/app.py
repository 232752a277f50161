"""The FastAPI app of the ledger page, mounted by Airflow's api-server at ``/eobatch``:

    GET /eobatch/pipelines/<name>[?page=1&per_page=25&run_id=<DAG run id>&batch=<id>]   HTML, with the timeline
    GET /eobatch/api/pipelines/<name>/batches[?limit=&offset=]               JSON: `make ledger FORMAT=json`
    GET /eobatch/api/pipelines/<name>/stuck                                  JSON: the stuck detector's finding

Authentication and authorisation are Airflow's own: ``requires_access_dag("GET",
DagAccessEntity.RUN)`` of the core API (``airflow.api_fastapi.core_api.security``), i.e. read access
to the DAG runs of DAG ``<name>`` (what Airflow's own ``GET /api/v2/dags/<name>/dagRuns`` asks: the
ledger is the runs' data; reading the DAG alone is not enough) for the user of the request's ``Authorization: Bearer <JWT>`` header (from ``POST /auth/token``) or of the UI's
``_token`` session cookie. Without either: 401 (403 for a token that is not valid), and nothing of
the ledger; the HTML route answers it with a page linking to Airflow's login. A DAG that is not a
pipeline: 404, naming no other pipeline. What one request costs is bounded (``view``): ``limit``
defaults to ``JSON_LIMIT_DEFAULT`` and is at most ``JSON_LIMIT_MAX``.

Only imported by Airflow's processes (the plugin module); the rendering is in ``page``, the
reading in ``view``.
"""

from __future__ import annotations

from airflow.api_fastapi.app import API_ROOT_PATH, get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from ..airflow import connections as airflow_conn  # noqa: F401 - a Kafka backlog reads its connection
from .page import MAX_PER_PAGE, render_message, render_not_found, render_page
from .view import JSON_LIMIT_DEFAULT, JSON_LIMIT_MAX, UnknownPipeline, batches_json, find, page_view, stuck_json


def airflow_base() -> str:
    """The Airflow UI's root path ("" when it is served at /; ``[api] base_url``'s path otherwise)."""
    return API_ROOT_PATH.rstrip("/")


def create_app() -> FastAPI:
    app = FastAPI(title="eobatch batch ledger", docs_url=None, redoc_url=None, openapi_url=None)
    # read access to the pipeline's DAG runs: the route's path parameter is named dag_id for it
    dag_read = [Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN))]

    @app.get("/pipelines/{dag_id}", response_class=HTMLResponse, dependencies=dag_read)
    def ledger_page(dag_id: str, page: int = Query(1, ge=1), per_page: int = Query(25, ge=1, le=MAX_PER_PAGE),
                    run_id: str | None = Query(None, max_length=250),
                    batch: int | None = Query(None, ge=1)) -> HTMLResponse:
        try:
            cfg = find(dag_id)
        except UnknownPipeline as e:
            return HTMLResponse(render_not_found(e.name, airflow_base()), status_code=404)
        view = page_view(cfg, page=page, per_page=per_page, run_id=run_id or None, airflow_base=airflow_base(),
                         batch=batch)
        return HTMLResponse(render_page(view), headers={"Cache-Control": "no-store"})

    @app.get("/api/pipelines/{dag_id}/batches", dependencies=dag_read)
    def ledger_json(dag_id: str, limit: int = Query(JSON_LIMIT_DEFAULT, ge=1, le=JSON_LIMIT_MAX),
                    offset: int = Query(0, ge=0)) -> Response:
        try:
            cfg = find(dag_id)
        except UnknownPipeline as e:
            return JSONResponse({"detail": f"no pipeline named {e.name!r}"}, status_code=404)
        return Response(batches_json(cfg, limit, offset), media_type="application/json",
                        headers={"Cache-Control": "no-store"})

    @app.get("/api/pipelines/{dag_id}/stuck", dependencies=dag_read)
    def ledger_stuck(dag_id: str) -> Response:
        try:
            cfg = find(dag_id)
        except UnknownPipeline as e:
            return JSONResponse({"detail": f"no pipeline named {e.name!r}"}, status_code=404)
        return Response(stuck_json(cfg), media_type="application/json", headers={"Cache-Control": "no-store"})

    @app.exception_handler(HTTPException)
    async def refused(request: Request, exc: HTTPException) -> Response:
        """401/403 of the page as a page (a link to Airflow's login); of the API as Airflow's JSON."""
        page = "/pipelines/" in request.url.path and "/api/pipelines/" not in request.url.path
        if page and exc.status_code in (401, 403):
            try:
                login = get_auth_manager().get_url_login(next_url=str(request.url))
            except RuntimeError:  # no auth manager initialised (not under the api-server)
                login = f"{airflow_base()}/auth/login"
            text = ("Log in to Airflow to see this pipeline's batch ledger." if exc.status_code == 401 else
                    "Your Airflow user may not read this pipeline's DAG runs, or your session is no longer valid.")
            return HTMLResponse(render_message("Not authorised" if exc.status_code == 403 else "Log in first", text,
                                               (login, "Log in to Airflow")),
                                status_code=exc.status_code, headers=exc.headers)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    return app
