"""Where the UI plugin's pages are: the app's mount point under the api-server's base path.

A leaf of the plugin: the operators' extra links, the plugin registration (``conduit_ui``) and the
FastAPI app (``app``) build their URLs from it, so none of them imports another.
"""

from __future__ import annotations

from typing import Any

APP_PREFIX = "/conduit"  # where the api-server mounts the plugin's FastAPI app
TI_QUERY = "dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"  # filled in by the UI


def base_path() -> str:
    """The path part of ``[api] base_url`` (no trailing slash): where the api-server serves everything."""
    from urllib.parse import urlparse

    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="/") or "/"
    return (urlparse(base).path if base.startswith(("http://", "https://")) else base).rstrip("/")


def plugin_page(page: str, ti_key: Any) -> str:
    """A same-origin link to the plugin's ``page`` for one task instance (``ti_key`` as Airflow passes it to links)."""
    from urllib.parse import urlencode

    query = {"dag_id": ti_key.dag_id, "run_id": ti_key.run_id, "task_id": ti_key.task_id, "map_index": ti_key.map_index}
    return f"{base_path()}{APP_PREFIX}/{page}?{urlencode(query)}"
