"""``ConduitUIPlugin``: the pipeline views in Airflow's UI (registered by provider info and an entry point).

- a FastAPI app mounted by the api-server at ``/conduit`` (``plugins/app.py``);
- external views pointing into it: "Pipelines" in the navigation, a "Pipeline" tab on every task
  instance (a one-line note for tasks that are not pipelines) and a "Pipelines" tab on DAG runs.

The UI fills ``{DAG_ID}``, ``{RUN_ID}``, ``{TASK_ID}`` and ``{MAP_INDEX}`` in the hrefs and shows the
page in an iframe on the same origin, so the session cookie authenticates it.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_conduit.plugins.urls import APP_PREFIX, TI_QUERY, base_path


class LazyApp:
    """An ASGI app that builds the real one on its first request.

    Plugins are imported by every Airflow component (scheduler, triggerer, workers); only the
    api-server serves these pages, so only it pays for importing the api_fastapi modules.
    """

    def __init__(self) -> None:
        self._app = None

    async def __call__(self, scope, receive, send) -> None:
        if self._app is None:
            from airflow_conduit.plugins.app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


def external_views(base: str) -> list[dict]:
    app = base + APP_PREFIX
    icon = f"{app}/icon.svg"
    return [
        {
            "name": "Pipelines",
            "href": f"{app}/pipelines",
            "destination": "nav",
            "url_route": "conduit-pipelines",
            "nav_top_level": True,
            "icon": icon,
            "icon_dark_mode": icon,
        },
        {
            "name": "Pipeline",
            "href": f"{app}/ti?{TI_QUERY}",
            "destination": "task_instance",
            "url_route": "conduit-pipeline",
            "icon": icon,
        },
        {
            "name": "Pipelines",
            "href": f"{app}/dag-run?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
            "destination": "dag_run",
            "url_route": "conduit-dag-run",
            "icon": icon,
        },
    ]


class ConduitUIPlugin(AirflowPlugin):
    name = "airflow_conduit"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": APP_PREFIX, "name": "airflow-conduit pipelines"}]
    external_views = external_views(base_path())
