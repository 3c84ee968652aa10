"""The FastAPI app the api-server mounts at ``/conduit``: the pipeline pages.

Every page depends on Airflow's auth manager (``airflow.api_fastapi.core_api.security``): the JWT
from the ``Authorization`` header or the UI's session cookie, then DAG-level read access for the
DAG named in the query (task instance pages) or the list of readable DAGs (the overview). The
query only names a task instance; files are found through what Airflow recorded for it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated

from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse, Response

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow_conduit.plugins import pages, records
from airflow_conduit.plugins.urls import APP_PREFIX, base_path
from airflow_conduit.plugins.state_view import log_tail
from airflow_conduit.plugins.view import overview_row, pipeline_page

ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#0d9488" stroke-width="2" '
    'stroke-linecap="round" stroke-linejoin="round"><path d="M3 12h4l3-7 4 14 3-7h4"/></svg>'
)

# The pages run no script at all; only Airflow's own UI (same origin) may frame them.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; frame-ancestors 'self'",
}

ReadTaskInstances = Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))
ReadRuns = Depends(requires_access_dag("GET", DagAccessEntity.RUN))


def links() -> pages.Links:
    return pages.Links(base_path(), APP_PREFIX)


def _map_index(value: str | None) -> int:
    """The UI fills ``{MAP_INDEX}`` only for mapped tasks; anything that is not a number means unmapped."""
    try:
        return int(value) if value is not None else -1
    except ValueError:
        return -1


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=PAGE_HEADERS)


def _missing(what: str) -> HTMLResponse:
    return _html(pages.layout("Not found", f'<p class="muted" id="not-found">{pages._e(what)}</p>'), 404)


def _now() -> datetime:
    return datetime.now(timezone.utc)


TaskQuery = tuple[str, str, str, int]


def task_query(
    dag_id: Annotated[str, Query(min_length=1)],
    run_id: Annotated[str, Query(min_length=1)],
    task_id: Annotated[str, Query(min_length=1)],
    map_index: Annotated[str | None, Query()] = None,
) -> TaskQuery:
    return dag_id, run_id, task_id, _map_index(map_index)


def create_app() -> FastAPI:
    app = FastAPI(title="airflow-conduit pipelines", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/icon.svg", include_in_schema=False)
    def icon() -> Response:
        return Response(ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

    @app.get("/pipelines", response_class=HTMLResponse)
    def pipelines(user: GetUserDep, session: SessionDep) -> HTMLResponse:
        """Every pipeline (dag, task) in a DAG the user may read, its latest task instance first."""
        readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
        now = _now()
        rows = [overview_row(t, records.redactor_for(session, t), now=now) for t in records.latest_pipeline_tasks(session, readable)]
        return _html(pages.overview_page(rows, links(), now))

    @app.get("/dag-run", response_class=HTMLResponse, dependencies=[ReadRuns])
    def dag_run(dag_id: Annotated[str, Query(min_length=1)], run_id: Annotated[str, Query(min_length=1)], session: SessionDep) -> HTMLResponse:
        now = _now()
        tasks = records.run_pipeline_tasks(session, dag_id, run_id)
        rows = [overview_row(t, records.redactor_for(session, t), now=now) for t in tasks]
        if not rows:
            return _html(pages.layout("Pipelines", '<p class="muted" id="not-a-pipeline">This DAG run has no pipeline tasks.</p>'))
        return _html(pages.overview_page(rows, links(), now, title=f"Pipelines of run {run_id}"))

    @app.get("/ti", response_class=HTMLResponse, dependencies=[ReadTaskInstances])
    def task_instance(key: Annotated[TaskQuery, Depends(task_query)], session: SessionDep) -> HTMLResponse:
        task = records.load_task(session, *key)
        if task is None:
            return _missing("No such task instance.")
        if not task.is_pipeline:
            return _html(pages.not_a_pipeline(task.task_id))
        redactor = records.redactor_for(session, task)
        return _html(pages.pipeline_view(pipeline_page(task, redactor), links(), redactor.text))

    @app.get("/dlq", response_class=HTMLResponse, dependencies=[ReadTaskInstances])
    def dead_letter_queue(key: Annotated[TaskQuery, Depends(task_query)], session: SessionDep) -> HTMLResponse:
        task = records.load_task(session, *key)
        if task is None or not task.is_pipeline:
            return _missing("No pipeline task instance here.")
        redactor = records.redactor_for(session, task)
        return _html(pages.dlq_page(pipeline_page(task, redactor, dlq_samples=10), links()))

    @app.get("/log", response_class=HTMLResponse, dependencies=[ReadTaskInstances])
    def driver_log(
        key: Annotated[TaskQuery, Depends(task_query)],
        session: SessionDep,
        run: Annotated[str | None, Query(max_length=200)] = None,
    ) -> HTMLResponse:
        """One run's driver log (default: the current run). ``run`` is matched against the task's own runs only."""
        task = records.load_task(session, *key)
        if task is None or not task.is_pipeline:
            return _missing("No pipeline task instance here.")
        redactor = records.redactor_for(session, task)
        page = pipeline_page(task, redactor)
        chosen = page.current_run if run is None else next((r for r in page.runs if r.run_id == run), None)
        if chosen is None:
            return _missing("This task instance has no such run.")
        text, truncated = log_tail(chosen.log_path, redactor)
        live_ui = pages.web_url(task.job.get("spark_ui")) if page.live and chosen is page.current_run else None
        return _html(pages.log_page(task, chosen, text, truncated, live_ui, links()))

    return app

