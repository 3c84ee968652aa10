"""The DLQ browser's data: a pipeline's dead-lettered records, one page at a time, filtered, with their context.

No Airflow here. The DLQ is named by the pipeline's spec (its ``dead-letter-queue``), which the caller found
through Airflow's records. Every kind is read on the api-server without Spark:

- ``file`` (json, csv, parquet under ``<path>/batch_id=N/``): the files, newest batch first, parquet by row
  group (pyarrow);
- ``log``: the DLQ lines the log destination wrote in the runs' driver logs;
- ``kafka``: the topic, with confluent-kafka (librdkafka) when it is installed, through the DLQ's own client
  settings and Airflow connection;
- ``delta``: the table's transaction log (``_delta_log``: its last checkpoint, then the JSON commits) gives the
  live Parquet files, read with pyarrow;
- ``jdbc`` on PostgreSQL: paged and filtered in the database (``LIMIT``/``OFFSET``, psycopg2).

Records stream through the filter: only the page asked for is kept, whatever the DLQ's size (a scan stops after
``SCAN_LIMIT`` records and says so). Filters are the replay's own (``pipeline.replay_request.ReplayFilter``), so the
records the browser shows for a filter are the ones a replay with that filter considers.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator
from urllib.parse import parse_qsl, urlparse

from airflow_conduit.pipeline.replay_request import ReplayFilter
from airflow_conduit.plugins.state_view import Redactor, RunView, _rows_of, cut, dlq_folder, kafka_dlq_row

SCAN_LIMIT = 1_000_000  # records looked at for one page at most (streamed, never held)
PAGE_LIMIT = 200  # records on one page at most
RAW_CUT = 8192  # characters of a record's raw payload shown
KAFKA_SECONDS = 20.0
INVALID_UTF8 = "airflow_conduit.spark.InvalidUtf8Error"  # spark/parsing.py: the record's payload is base64
FACETS = ("stage", "component_id", "exception_class")
FACET_VALUES = 50


class DlqUnavailable(Exception):
    """The DLQ cannot be read from the api-server (its kind, a missing client library); the message says why."""


@dataclass
class DlqPage:
    kind: str
    total: int  # records matching the filters (of the records scanned)
    offset: int
    records: list[dict[str, Any]]
    facets: dict[str, dict[str, int]] = field(default_factory=dict)  # stage / component / error class -> count
    truncated: bool = False  # the scan stopped at SCAN_LIMIT (or a Kafka read's deadline)
    scanned: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "total": self.total, "offset": self.offset, "count": len(self.records),
                "records": self.records, "facets": self.facets, "truncated": self.truncated, "scanned": self.scanned}


def iso_text(value: Any) -> Any:
    """A DLQ's ``time_of_error`` as the DLQ's JSON writes it (ISO-8601 UTC, microseconds, Z): what filters compare."""
    if isinstance(value, datetime):
        at = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value


def normal(row: dict[str, Any]) -> dict[str, Any]:
    """A row as Spark reads it for a replay: integer positions, times as text."""
    row = dict(row)
    row["time_of_error"] = iso_text(row.get("time_of_error"))
    for key in ("batch_id", "source_position", "source_split_start", "attempt", "replay_count"):
        value = row.get(key)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            row[key] = int(value)
        elif value == "":
            row[key] = None
    return row


# -- readers: every record of one kind of DLQ, newest first where the DLQ says which is newest ----------------


def _batch_number(folder: Path) -> int:
    try:
        return int(folder.name.split("=", 1)[1])
    except (IndexError, ValueError):
        return -(10**12)


def file_rows(folder: Path) -> Iterator[dict[str, Any]]:
    """A file DLQ's records, newest batch first (replays' batches, negative, last)."""
    try:
        batches = sorted((p for p in folder.iterdir() if p.is_dir() and p.name.startswith("batch_id=")), key=_batch_number,
                         reverse=True)
    except OSError:
        return
    for batch in batches:
        for part in sorted(batch.glob("part-*")):
            try:
                if part.suffix.lower() == ".parquet":
                    yield from _parquet_rows(part)
                else:
                    yield from _rows_of(part)
            except OSError:
                continue


def _parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
        yield from batch.to_pylist()


def log_rows(runs: list[RunView]) -> Iterator[dict[str, Any]]:
    from airflow_conduit.plugins.state_view import dlq_rows_from_logs

    rows, _ = dlq_rows_from_logs(runs, limit=SCAN_LIMIT)
    yield from rows


def delta_files(table: Path) -> list[Path]:
    """The live data files of a Delta table: its last checkpoint's ``add`` actions, then the JSON commits after it."""
    import pyarrow.parquet as pq

    log_dir = table / "_delta_log"
    live: dict[str, int] = {}  # path -> version it was added in
    start = -1
    from airflow_conduit.runs.report import read_json

    try:
        last = read_json(log_dir / "_last_checkpoint")
    except ValueError:
        last = None
    if isinstance(last, dict) and isinstance(last.get("version"), int):
        start = last["version"]
        parts = sorted(log_dir.glob(f"{start:020d}.checkpoint*.parquet"))
        for part in parts:
            actions = pq.read_table(part)
            for action in actions.select([c for c in ("add",) if c in actions.column_names]).to_pylist():
                add = action.get("add")
                if add and add.get("path"):
                    live[add["path"]] = start
    commits = sorted((p for p in log_dir.glob("*.json") if p.stem.isdigit() and int(p.stem) > start), key=lambda p: int(p.stem))
    for commit in commits:
        for line in commit.read_text(encoding="utf-8").splitlines():
            try:
                action = json.loads(line)
            except ValueError:
                continue
            if action.get("add"):
                if action["add"].get("deletionVector"):
                    raise DlqUnavailable("the Delta DLQ has deletion vectors, which this reader does not apply")
                live[action["add"]["path"]] = int(commit.stem)
            elif action.get("remove"):
                live.pop(action["remove"].get("path"), None)
    from urllib.parse import unquote

    return [table / unquote(path) for path, _ in sorted(live.items(), key=lambda item: -item[1])]


def delta_rows(table: Path) -> Iterator[dict[str, Any]]:
    """A Delta DLQ's records, newest commit first."""
    if not (table / "_delta_log").is_dir():
        return
    for path in delta_files(table):
        yield from _parquet_rows(path)


def kafka_client_config(settings: dict[str, Any], connections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """librdkafka's config from a Kafka plugin's settings and the Airflow connection they name (secrets revealed
    for the client only; nothing of it is returned to a page)."""
    from airflow_conduit.pipeline.kafka_settings import java_client_properties
    from airflow_conduit.pipeline.secrets import Secret

    props = java_client_properties(settings, connections)
    plain = {k: (v.get_secret_value() if isinstance(v, Secret) else v) for k, v in props.items()}
    config: dict[str, Any] = {"bootstrap.servers": plain["bootstrap.servers"]}
    if plain.get("security.protocol"):
        config["security.protocol"] = str(plain["security.protocol"]).lower()
    jaas = str(plain.get("sasl.jaas.config") or "")
    if jaas:
        import re

        found = dict(re.findall(r'(username|password)="((?:[^"\\]|\\.)*)"', jaas))
        config["sasl.mechanisms"] = str(plain.get("sasl.mechanism") or "PLAIN")
        config["sasl.username"] = found.get("username", "").replace('\\"', '"').replace("\\\\", "\\")
        config["sasl.password"] = found.get("password", "").replace('\\"', '"').replace("\\\\", "\\")
    if plain.get("ssl.truststore.location") and str(plain.get("ssl.truststore.type", "")).upper() == "PEM":
        config["ssl.ca.location"] = plain["ssl.truststore.location"]
    return config


def _confluent():
    try:
        import confluent_kafka
    except ImportError:
        raise DlqUnavailable("reading a Kafka DLQ from the api-server needs confluent-kafka (pip install confluent-kafka)") from None
    return confluent_kafka


def kafka_rows(config: dict[str, Any], topic: str, seconds: float = KAFKA_SECONDS) -> Iterator[dict[str, Any]]:
    """A Kafka DLQ topic's records, every partition from its start to its end offset when the read began."""
    ck = _confluent()
    try:
        yield from _kafka_rows(ck, config, topic, seconds)
    except ck.KafkaException as exc:  # named, never a traceback (and never a client setting)
        raise DlqUnavailable(f"the Kafka DLQ topic {topic!r} could not be read ({type(exc).__name__})") from None


def _kafka_rows(ck: Any, config: dict[str, Any], topic: str, seconds: float) -> Iterator[dict[str, Any]]:
    consumer = ck.Consumer({**config, "group.id": "airflow-conduit-ui", "enable.auto.commit": False,
                            "enable.partition.eof": False, "socket.timeout.ms": int(seconds * 1000)})
    try:
        metadata = consumer.list_topics(topic, timeout=seconds).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return
        ends: dict[int, int] = {}
        starts = []
        for partition in sorted(metadata.partitions):
            low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=seconds)
            if high > low:
                ends[partition] = high
                starts.append(ck.TopicPartition(topic, partition, low))
        if not starts:
            return
        consumer.assign(starts)
        deadline = time.monotonic() + seconds
        while ends:
            if time.monotonic() > deadline:
                raise DlqUnavailable(f"the Kafka DLQ topic {topic!r} was not read to its end within {seconds:g} s")
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            if message.partition() not in ends:
                continue
            if message.offset() >= ends[message.partition()] - 1:
                ends.pop(message.partition(), None)
            yield kafka_dlq_row(topic, message.partition(), message.offset(), message.headers(), message.value())
    finally:
        consumer.close()


# -- paging ----------------------------------------------------------------------------------------------------


def page_of(kind: str, rows: Iterable[dict[str, Any]], filters: ReplayFilter, offset: int, limit: int,
            view: Callable[[dict[str, Any]], dict[str, Any]], scan_limit: int = SCAN_LIMIT) -> DlqPage:
    """Stream ``rows`` through ``filters``: count the matches and their facets, keep only ``[offset, offset+limit)``."""
    page = DlqPage(kind=kind, total=0, offset=offset, records=[])
    facets: dict[str, dict[str, int]] = {name: {} for name in FACETS}
    for row in rows:
        if page.scanned >= scan_limit:
            page.truncated = True
            break
        page.scanned += 1
        row = normal(row)
        for name in FACETS:  # facets of the whole DLQ: the filter's choices
            value = str(row.get(name) or "")
            if len(facets[name]) < FACET_VALUES or value in facets[name]:
                facets[name][value] = facets[name].get(value, 0) + 1
        if not filters.matches(row):
            continue
        if offset <= page.total < offset + limit:
            page.records.append(view(row))
        page.total += 1
    page.facets = facets
    return page


# -- JDBC (PostgreSQL): paged and filtered by the database -----------------------------------------------------


def jdbc_target(settings: dict[str, Any]) -> dict[str, Any]:
    """psycopg2's connect arguments of a jdbc DLQ's settings (a ``jdbc:postgresql://`` URL only)."""
    from airflow_conduit.pipeline.secrets import Secret

    url = str(settings.get("url") or "")
    if not url.startswith("jdbc:postgresql://"):
        raise DlqUnavailable("a JDBC DLQ is read from the api-server on PostgreSQL only (jdbc:postgresql:// URLs)")
    parsed = urlparse(url[len("jdbc:"):])
    query = dict(parse_qsl(parsed.query))

    def plain(value: Any) -> Any:
        return value.get_secret_value() if isinstance(value, Secret) else value

    return {"host": parsed.hostname, "port": parsed.port or 5432, "dbname": parsed.path.lstrip("/") or "postgres",
            "user": plain(settings.get("user")) or query.get("user"), "password": plain(settings.get("password")) or query.get("password"),
            "connect_timeout": 10}


def _jdbc_where(filters: ReplayFilter) -> tuple[str, list[Any]]:
    clauses, params = [], []
    for column, values in (("stage", filters.stages), ("component_id", filters.components),
                           ("exception_class", filters.exception_classes)):
        if values:
            clauses.append(f"{column} = ANY(%s)")
            params.append(list(values))
    for bound, op in ((filters.since, ">="), (filters.until, "<")):  # time_of_error is ISO-8601 text, as the filter's
        if bound is not None:
            clauses.append(f"time_of_error {op} %s")
            params.append(bound)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def jdbc_page(settings: dict[str, Any], filters: ReplayFilter, offset: int, limit: int,
              view: Callable[[dict[str, Any]], dict[str, Any]]) -> DlqPage:
    import psycopg2
    from psycopg2 import sql

    table = str(settings.get("table") or "")
    ident = sql.Identifier(*table.split(".", 1)) if "." in table else sql.Identifier(table)
    where, params = _jdbc_where(filters)
    page = DlqPage(kind="jdbc", total=0, offset=offset, records=[])
    try:
        conn = psycopg2.connect(**jdbc_target(settings))
    except psycopg2.Error as exc:
        raise DlqUnavailable(f"the JDBC DLQ's database did not answer: {str(exc).splitlines()[0]}") from None
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT to_regclass(%s) IS NOT NULL"), [table])
            if not cur.fetchone()[0]:
                return page  # no table yet: nothing was dead-lettered
            cur.execute(sql.SQL("SELECT count(*) FROM {}").format(ident) + sql.SQL(where), params)
            page.total = int(cur.fetchone()[0])
            cur.execute(sql.SQL("SELECT * FROM {}").format(ident) + sql.SQL(where)
                        + sql.SQL(" ORDER BY batch_id DESC, source_position LIMIT %s OFFSET %s"), [*params, limit, offset])
            names = [d[0] for d in cur.description]
            page.records = [view(normal(dict(zip(names, row)))) for row in cur.fetchall()]
            for name in FACETS:
                cur.execute(sql.SQL("SELECT {c}, count(*) FROM {t} GROUP BY {c} ORDER BY 2 DESC LIMIT %s").format(
                    c=sql.Identifier(name), t=ident), [FACET_VALUES])
                page.facets[name] = {str(v or ""): int(n) for v, n in cur.fetchall()}
            page.scanned = page.total
    finally:
        conn.close()
    return page


# -- one record as the page shows it ----------------------------------------------------------------------------


def raw_payload(row: dict[str, Any], redactor: Redactor) -> tuple[str | None, str]:
    """The record's payload as the DLQ keeps it and how to read it: ``text``, or ``base64`` for bytes that are not
    UTF-8. Secret-looking JSON fields and known secret values are masked (as everywhere on these pages)."""
    raw = row.get("record")
    if raw is None:
        return None, "none"
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")[:RAW_CUT], "base64"
    if row.get("exception_class") == INVALID_UTF8:
        return str(raw)[:RAW_CUT], "base64"
    text = str(raw)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and redactor.data(parsed) != parsed:
        text = json.dumps(redactor.data(parsed), ensure_ascii=False)
    return cut(redactor.text(text), RAW_CUT), "text"


CONTEXT_KEYS = ("stage", "component_id", "component_type", "exception_class", "exception_message", "attempt", "time_of_error")
POSITION_KEYS = ("source_id", "source_file", "source_split_start", "source_position", "dlq_position")


def record_view(row: dict[str, Any], redactor: Redactor, history: "ReplayHistory") -> dict[str, Any]:
    raw, encoding = raw_payload(row, redactor)
    context = {k: row.get(k) for k in CONTEXT_KEYS}
    context["exception_message"] = cut(redactor.text(context["exception_message"] or ""), 2000)
    if row.get("exception_stacktrace"):
        context["exception_stacktrace"] = cut(redactor.text(row["exception_stacktrace"]), 4000)
    if row.get("configs"):
        context["configs"] = cut(redactor.text(row["configs"]), 2000)
    position = {k: (redactor.text(row[k]) if isinstance(row.get(k), str) else row.get(k)) for k in POSITION_KEYS if k in row}
    return {
        "id": history.identity(row),
        "run_id": str(row.get("run_id") or ""),
        "batch_id": row.get("batch_id"),
        "replay_count": row.get("replay_count"),
        "raw": raw,
        "encoding": encoding,
        "context": context,
        "position": position,
        "replays": history.of(row),
    }


class ReplayHistory:
    """What replays did with a DLQ record: the replays that took it (``STATE_DIR/replays/<k>/plan.json``) and,
    for a record a replay wrote back (batch ``-k``), that replay."""

    def __init__(self, state_dir: Path | None):
        from airflow_conduit.spark.replay import _plans, identity

        self.identity = identity
        self.plans = _plans(state_dir) if state_dir is not None else {}
        self.taken: dict[str, list[int]] = {}
        for number, plan in sorted(self.plans.items()):
            for key in plan.get("taken") or []:
                self.taken.setdefault(key, []).append(number)

    def _entry(self, number: int, role: str) -> dict[str, Any]:
        plan = self.plans.get(number) or {}
        result = plan.get("result") or {}
        return {"replay": number, "role": role, "status": plan.get("status"), "started_at": plan.get("started_at"),
                "ended_at": plan.get("ended_at"), "written": result.get("written"), "still_failing": result.get("still_failing")}

    def of(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        out = [self._entry(n, "taken") for n in self.taken.get(self.identity(row), [])]
        batch = row.get("batch_id")
        if isinstance(batch, int) and batch < 0:
            out.insert(0, self._entry(-batch, "written back (still failing)"))
        return out

    def summary(self) -> list[dict[str, Any]]:
        """Every replay of the pipeline, newest first (the DLQ browser's replay list)."""
        out = []
        for number in sorted(self.plans, reverse=True):
            entry = self._entry(number, "replay")
            entry["records"] = len(self.plans[number].get("taken") or [])
            entry["filters"] = self.plans[number].get("filters")
            out.append(entry)
        return out


def location_of(kind: str, settings: dict[str, Any], redactor: Redactor) -> str:
    """Where the DLQ is, for the page (credentials masked)."""
    where = settings.get("path") or settings.get("topic") or settings.get("table") or settings.get("url") or ""
    return redactor.text(f"{kind}: {where}" if where else kind)


def file_folder(settings: dict[str, Any]) -> Path | None:
    path = str(settings.get("path") or "")
    return dlq_folder(path if path.startswith("file://") else "file://" + path.removeprefix("file:"))
