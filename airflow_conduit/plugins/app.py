"""The FastAPI app the api-server mounts at ``/conduit``: the pipeline pages.

Every page depends on Airflow's auth manager (``airflow.api_fastapi.core_api.security``): the JWT
from the ``Authorization`` header or the UI's session cookie, then DAG-level read access for the
DAG named in the query (task instance pages) or the list of readable DAGs (the overview). The
query only names a task instance; files are found through what Airflow recorded for it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse, JSONResponse, Response

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow_conduit.plugins import actions, pages, records
from airflow_conduit.plugins.urls import APP_PREFIX, base_path
from airflow_conduit.plugins.state_view import log_tail
from airflow_conduit.plugins.view import is_live, overview_row, pipeline_page

ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#0d9488" stroke-width="2" '
    'stroke-linecap="round" stroke-linejoin="round"><path d="M3 12h4l3-7 4 14 3-7h4"/></svg>'
)

# The pages run only the plugin's own script (no inline script), which talks to this origin only; only Airflow's
# own UI (same origin) may frame them.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src 'self'; "
        "frame-ancestors 'self'; form-action 'none'; base-uri 'none'"
    ),
}
JSON_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
SCRIPT = Path(__file__).with_name("conduit.js")

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


def _json(value: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(value, status_code=status, headers=JSON_HEADERS)


def may(user: Any, method: str, entity: DagAccessEntity, dag_id: str) -> bool:
    """What Airflow's auth manager lets ``user`` do on the DAG: the page enables an action only then (Airflow's
    REST API checks the same again when the action is made)."""
    return get_auth_manager().is_authorized_dag(method=method, access_entity=entity, details=DagDetails(id=dag_id), user=user)


def action_rights(user: Any, task: records.PipelineTask, session: Any) -> pages.Actions:
    replay = records.replay_dag(session, task)
    return pages.Actions(
        replay_dag=replay,
        can_trigger=bool(replay) and may(user, "POST", DagAccessEntity.RUN, replay["dag_id"]),
        can_stop=may(user, "PUT", DagAccessEntity.TASK_INSTANCE, task.dag_id),
    )


def create_app() -> FastAPI:
    app = FastAPI(title="airflow-conduit pipelines", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/icon.svg", include_in_schema=False)
    def icon() -> Response:
        return Response(ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

    @app.get("/conduit.js", include_in_schema=False)
    def script() -> Response:
        """The pages' one script: the DLQ browser, the replay, the stop, the Kafka lag (fetch() to this origin)."""
        return Response(SCRIPT.read_text(encoding="utf-8"), media_type="text/javascript",
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})

    @app.get("/pipelines", response_class=HTMLResponse)
    def pipelines(user: GetUserDep, session: SessionDep) -> HTMLResponse:
        """Every pipeline (dag, task) in a DAG the user may read, its latest task instance first."""
        readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
        now = _now()
        tasks = records.latest_pipeline_tasks(session, readable)
        rows = [overview_row(t, records.redactor_for(session, t), now=now) for t in tasks]
        rights = {id(t): action_rights(user, t, session) for t in tasks}
        kafka = {id(t) for t in tasks if _is_kafka(t)}
        return _html(pages.overview_page(rows, links(), now, rights=rights, kafka=kafka))

    @app.get("/dag-run", response_class=HTMLResponse, dependencies=[ReadRuns])
    def dag_run(dag_id: Annotated[str, Query(min_length=1)], run_id: Annotated[str, Query(min_length=1)], session: SessionDep) -> HTMLResponse:
        now = _now()
        tasks = records.run_pipeline_tasks(session, dag_id, run_id)
        rows = [overview_row(t, records.redactor_for(session, t), now=now) for t in tasks]
        if not rows:
            return _html(pages.layout("Pipelines", '<p class="muted" id="not-a-pipeline">This DAG run has no pipeline tasks.</p>'))
        return _html(pages.overview_page(rows, links(), now, title=f"Pipelines of run {run_id}"))

    @app.get("/ti", response_class=HTMLResponse, dependencies=[ReadTaskInstances])
    def task_instance(key: Annotated[TaskQuery, Depends(task_query)], user: GetUserDep, session: SessionDep) -> HTMLResponse:
        task = records.load_task(session, *key)
        if task is None:
            return _missing("No such task instance.")
        if not task.is_pipeline:
            return _html(pages.not_a_pipeline(task.task_id))
        redactor = records.redactor_for(session, task)
        return _html(pages.pipeline_view(pipeline_page(task, redactor), links(), redactor.text,
                                         actions=action_rights(user, task, session), kafka=_is_kafka(task)))

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

    # -- JSON for the pages' script: reading needs what reading the DAG's task instances needs ------------------

    def _pipeline(key: TaskQuery, session: Any) -> records.PipelineTask | None:
        task = records.load_task(session, *key)
        return task if task is not None and task.is_pipeline else None

    @app.get("/api/dlq", dependencies=[ReadTaskInstances])
    def dlq_records(
        key: Annotated[TaskQuery, Depends(task_query)],
        session: SessionDep,
        offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
        limit: Annotated[int, Query(ge=1, le=200)] = actions.DEFAULT_PAGE,
        stage: Annotated[str | None, Query(max_length=200)] = None,
        component: Annotated[str | None, Query(max_length=200)] = None,
        error_class: Annotated[str | None, Query(max_length=500)] = None,
        since: Annotated[str | None, Query(max_length=64)] = None,
        until: Annotated[str | None, Query(max_length=64)] = None,
    ) -> JSONResponse:
        """One page of the pipeline's DLQ records, filtered (the replay's filters), each with its context."""
        from airflow_conduit.pipeline.replay_request import ReplayRequestError

        task = _pipeline(key, session)
        if task is None:
            return _json({"detail": "No pipeline task instance here."}, 404)
        try:
            filters = actions.parse_filters(stage, component, error_class, since, until)
        except ReplayRequestError as exc:
            return _json({"detail": str(exc)}, 400)
        redactor = records.redactor_for(session, task)
        return _json(actions.dlq_page(task, records.spec_of(task), redactor, filters, offset, limit, records.connection_dict))

    @app.get("/api/replay-preview", dependencies=[ReadTaskInstances])
    def replay_preview(
        key: Annotated[TaskQuery, Depends(task_query)],
        user: GetUserDep,
        session: SessionDep,
        stage: Annotated[str | None, Query(max_length=200)] = None,
        component: Annotated[str | None, Query(max_length=200)] = None,
        error_class: Annotated[str | None, Query(max_length=500)] = None,
        since: Annotated[str | None, Query(max_length=64)] = None,
        until: Annotated[str | None, Query(max_length=64)] = None,
        force: bool = False,
    ) -> JSONResponse:
        """What a replay with these filters would take (the dry-run selection); nothing is written. With the DAG run
        conf a Start would send and whether this user may send it."""
        from airflow_conduit.pipeline.replay_request import ReplayRequestError
        from airflow_conduit.plugins.dlq_browse import DlqUnavailable

        task = _pipeline(key, session)
        if task is None:
            return _json({"detail": "No pipeline task instance here."}, 404)
        try:
            filters = actions.parse_filters(stage, component, error_class, since, until)
        except ReplayRequestError as exc:
            return _json({"detail": str(exc)}, 400)
        redactor = records.redactor_for(session, task)
        try:
            preview = actions.replay_preview(task, records.spec_of(task), filters, force, records.connection_dict, redactor)
        except (DlqUnavailable, ValueError) as exc:  # ValueError: a Kafka client setting that cannot be used (named)
            return _json({"detail": redactor.text(str(exc))}, 409)
        rights = action_rights(user, task, session)
        replay = rights.replay_dag
        preview["replay_dag"] = replay and {"dag_id": replay["dag_id"], "task_id": replay["task_id"],
                                            "conf": actions.replay_conf(replay["params"], filters, force)}
        preview["can_trigger"] = rights.can_trigger
        return _json(preview)

    @app.get("/api/lag", dependencies=[ReadTaskInstances])
    def kafka_lag(key: Annotated[TaskQuery, Depends(task_query)], session: SessionDep) -> JSONResponse:
        """Per source topic partition: offsets behind the topic's end (while running: the query's progress; between
        runs: the broker's end offsets minus the checkpoint's), and the last runs' lag and rows per second."""
        task = _pipeline(key, session)
        if task is None:
            return _json({"detail": "No pipeline task instance here."}, 404)
        return _json(actions.lag_view(task, records.spec_of(task), is_live(task), records.connection_dict))

    return app


def _is_kafka(task: records.PipelineTask) -> bool:
    spec = records.spec_of(task)
    return spec is not None and any(s.plugin == "kafka" for s in spec.sources)

