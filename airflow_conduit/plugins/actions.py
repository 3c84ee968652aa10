"""The plugin's JSON answers: a DLQ page, a replay preview, the Kafka lag. No Airflow import here: the caller
(``app``) authorized the request, found the task's records, its spec and a connection lookup.

Nothing here writes: the actions themselves (start a replay, stop a pipeline) are calls the page makes to
Airflow's own REST API with the user's session, which Airflow authorizes and audits.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

from airflow_conduit.pipeline.replay_request import ReplayFilter
from airflow_conduit.plugins import dlq_browse, kafka_lag
from airflow_conduit.plugins.dlq_browse import DlqUnavailable, ReplayHistory
from airflow_conduit.plugins.state_view import Redactor, RunView, runs_of

ConnectionLookup = Callable[[str], "dict[str, Any] | None"]
DEFAULT_PAGE = 50


def _connections(settings: dict[str, Any], lookup: ConnectionLookup) -> dict[str, dict[str, Any]]:
    conn_id = settings.get("connection")
    if not conn_id:
        return {}
    found = lookup(str(conn_id))
    if found is None:
        raise DlqUnavailable(f"the Airflow connection {conn_id!r} the pipeline names does not exist here")
    return {str(conn_id): found}


def every_run(task: Any) -> list[RunView]:
    """Every run in the pipeline's state dir: a DLQ belongs to the pipeline, not to one task instance."""
    return runs_of(task.state_dir, [""]) if task.state_dir is not None else []


def dlq_kind(spec: Any) -> str:
    return spec.dead_letter_queue.plugin.removeprefix("builtin:") if spec is not None else "unknown"


def dlq_rows(task: Any, spec: Any, lookup: ConnectionLookup) -> Iterator[dict[str, Any]]:
    """Every record of the pipeline's DLQ, streamed (a JDBC DLQ is paged by its database instead: ``dlq_page``)."""
    from airflow_conduit.pipeline.secrets import reveal

    if spec is None:
        raise DlqUnavailable("the pipeline's spec cannot be read any more: its DLQ is unknown")
    kind = dlq_kind(spec)
    settings = reveal(dict(spec.dead_letter_queue.settings))
    if kind == "file":
        folder = dlq_browse.file_folder(settings)
        return dlq_browse.file_rows(folder) if folder is not None else iter(())
    if kind == "log":
        return dlq_browse.log_rows(list(reversed(every_run(task))))
    if kind == "kafka":
        config = dlq_browse.kafka_client_config(spec.dead_letter_queue.settings, _connections(settings, lookup))
        return dlq_browse.kafka_rows(config, str(settings["topic"]))
    if kind == "delta":
        if not settings.get("path"):
            raise DlqUnavailable("a Delta DLQ named by a catalog table is not read from the api-server (give it a path)")
        return dlq_browse.delta_rows(Path(str(settings["path"]).removeprefix("file:")))
    raise DlqUnavailable(f"a {kind!r} DLQ keeps no records the api-server can read")


def parse_filters(stage: str | None, component: str | None, error_class: str | None, since: str | None,
                  until: str | None) -> ReplayFilter:
    """The browser's filters as the replay's (a bad time raises ``ReplayRequestError`` naming the key)."""
    return ReplayFilter.from_mapping({"stages": stage, "components": component, "exception_classes": error_class,
                                      "since": since, "until": until}, where="filters")


def dlq_page(task: Any, spec: Any, redactor: Redactor, filters: ReplayFilter, offset: int, limit: int,
             lookup: ConnectionLookup) -> dict[str, Any]:
    history = ReplayHistory(task.state_dir)

    def view(row: dict[str, Any]) -> dict[str, Any]:
        return dlq_browse.record_view(row, redactor, history)

    kind = dlq_kind(spec)
    location = dlq_browse.location_of(kind, dict(spec.dead_letter_queue.settings), redactor) if spec is not None else ""
    try:
        if kind == "jdbc":
            from airflow_conduit.pipeline.secrets import reveal

            page = dlq_browse.jdbc_page(reveal(dict(spec.dead_letter_queue.settings)), filters, offset, limit, view)
        else:
            page = dlq_browse.page_of(kind, dlq_rows(task, spec, lookup), filters, offset, limit, view)
    except (DlqUnavailable, ValueError) as exc:  # ValueError: a Kafka client setting that cannot be used (named)
        return {"kind": kind, "location": location, "readable": False, "reason": redactor.text(str(exc)),
                "total": 0, "offset": offset, "count": 0, "records": [], "facets": {}, "replays": history.summary()}
    return {**page.to_dict(), "location": location, "readable": True, "limit": limit, "replays": history.summary()}


FINGERPRINT_RULE = (
    "A replay takes a DLQ record when no earlier replay took it, it matches the filters, it kept its payload, its "
    "source is still in the spec, and the part of the spec that decides its fate (its source's fingerprint) changed "
    "since it failed; a forced replay also takes records whose fingerprint is unchanged."
)


def replay_preview(task: Any, spec: Any, filters: ReplayFilter, force: bool, lookup: ConnectionLookup,
                   redactor: Redactor) -> dict[str, Any]:
    """The dry-run selection of ``spark/replay.replay`` (its own ``select``, without Spark): how many records a replay
    with these filters takes, of which error classes, and why the others are left; nothing is written."""
    from airflow_conduit.pipeline.fingerprint import spec_fingerprints
    from airflow_conduit.spark.replay import UNCHANGED, FailedUnder, _plans, select

    if spec is None or task.state_dir is None:
        raise DlqUnavailable("the pipeline's spec or state directory cannot be read any more")
    plans = _plans(task.state_dir)
    pending = sorted(k for k, p in plans.items() if p.get("status") != "done")
    fingerprints = spec_fingerprints(spec)
    if pending:  # the next replay resumes this one, whatever the filters
        plan = plans[pending[0]]
        return {"selected": len(plan.get("records") or []), "resumes": pending[0], "error_classes": {}, "stages": {},
                "components": {}, "skipped": {}, "rule": FINGERPRINT_RULE, "fingerprints": fingerprints,
                "filters": filters.to_dict(), "force": force}
    taken = {i for p in plans.values() for i in p.get("taken", [])}
    if dlq_kind(spec) == "jdbc":
        rows: Any = _jdbc_every_row(spec)
    else:
        rows = (dlq_browse.normal(r) for r in dlq_rows(task, spec, lookup))
    chosen, skipped = select(rows, spec, taken, filters, FailedUnder(task.state_dir, plans), force=force)
    return {
        "selected": len(chosen),
        "resumes": None,
        "error_classes": dict(Counter(str(r.get("exception_class") or "") for r in chosen).most_common()),
        "stages": dict(Counter(str(r.get("stage") or "") for r in chosen).most_common()),
        "components": dict(Counter(str(r.get("component_id") or "") for r in chosen).most_common()),
        "skipped": skipped,
        "unchanged": skipped.get(UNCHANGED, 0),
        "rule": FINGERPRINT_RULE,
        "fingerprints": fingerprints,
        "filters": filters.to_dict(),
        "force": force,
    }


def _jdbc_every_row(spec: Any) -> Iterator[dict[str, Any]]:
    """Every record of a JDBC DLQ (PostgreSQL), fetched in pieces by a server-side cursor."""
    import psycopg2
    from psycopg2 import sql

    from airflow_conduit.pipeline.secrets import reveal

    settings = reveal(dict(spec.dead_letter_queue.settings))
    table = str(settings.get("table") or "")
    conn = psycopg2.connect(**dlq_browse.jdbc_target(settings))
    try:
        with conn.cursor() as probe:
            probe.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
            if not probe.fetchone()[0]:
                return
        ident = sql.Identifier(*table.split(".", 1)) if "." in table else sql.Identifier(table)
        with conn.cursor(name="conduit_ui_preview") as cur:
            cur.itersize = 2000
            cur.execute(sql.SQL("SELECT * FROM {}").format(ident))
            names = None
            for row in cur:
                names = names or [d[0] for d in cur.description]
                yield dlq_browse.normal(dict(zip(names, row)))
    finally:
        conn.close()


def replay_conf(params: list[str], filters: ReplayFilter, force: bool) -> dict[str, Any]:
    """The conf a replay DAG run is triggered with: the reference DAG's params, only those the DAG declares."""
    values: dict[str, Any] = {"replay": True, "dry_run": False, "force": force,
                              "stages": list(filters.stages), "components": list(filters.components),
                              "error_classes": list(filters.exception_classes), "since": filters.since, "until": filters.until}
    return {k: v for k, v in values.items() if k in params}


def lag_view(task: Any, spec: Any, live: bool, lookup: ConnectionLookup) -> dict[str, Any]:
    """Per source topic partition: offsets behind the topic's end, and the last runs' lag and rows per second."""
    if spec is None or not kafka_lag.kafka_sources(spec):
        return {"kafka": False}
    runs = every_run(task)
    out: dict[str, Any] = {"kafka": True, "history": kafka_lag.history(runs), "partitions": [], "mode": None, "reason": None}
    if live and runs:
        rows = kafka_lag.running_lag(runs[-1])
        if rows is not None:
            out.update(mode="running", partitions=rows)
            return out
    if task.state_dir is None:
        return out
    from airflow_conduit.pipeline.secrets import reveal

    committed = kafka_lag.committed_offsets(task.state_dir)
    try:
        for source in kafka_lag.kafka_sources(spec):
            settings = reveal(dict(source.settings))
            config = dlq_browse.kafka_client_config(source.settings, _connections(settings, lookup))
            topics = kafka_lag.source_topics(source) or sorted(committed)
            ends = kafka_lag.broker_end_offsets(config, topics)
            out["partitions"] += kafka_lag.between_runs_lag(task.state_dir, ends)
        out["mode"] = "between runs"
    except (kafka_lag.LagUnavailable, DlqUnavailable) as exc:
        out["reason"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a client error: named, never a traceback (and never a setting)
        out["reason"] = f"the broker could not be asked ({type(exc).__name__})"
    return out
