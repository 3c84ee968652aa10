"""What a pipeline's state directory and its DLQ (file, log or Kafka) say, as plain data for the views.

No Airflow here: the paths come from the caller (who took them from Airflow's records, never
from a request), every read tolerates missing or half-written files, and every text that leaves
this module went through a :class:`Redactor`.
"""

from __future__ import annotations

import base64
import csv
import json
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterable, Iterator

from airflow_conduit.pipeline.kafka_headers import CONNECT, DLQ_COLUMNS_FROM_HEADERS
from airflow_conduit.runs.report import RunReport
from airflow_conduit.pipeline.secrets import MASK, mask_url_credentials, redact
from airflow_conduit.recovery.clock import parse_iso

RUN_SUFFIX = re.compile(r"-s(\d+)$")  # <prefix>-sNN: the operator's run ids (hooks/session.next_run_id)
LOG_TAIL_BYTES = 256 * 1024  # the driver log page shows at most this much (the end of the log)
VALUE_CUT = 200  # a DLQ record's long values are cut to this many characters
DLQ_SCAN_LIMIT = 20_000  # DLQ rows read for one page at most (newest batches first)
DLQ_GROUP_SAMPLES = 3


class Redactor:
    """Masks secrets in text: credentials inside URLs and known secret values (spec secrets, passwords)."""

    def __init__(self, secret_values: Iterable[str] = ()):
        self.values = sorted({str(v) for v in secret_values if v and len(str(v)) >= 3}, key=len, reverse=True)

    def text(self, value: Any) -> str:
        text = mask_url_credentials("" if value is None else str(value))
        for secret in self.values:
            text = text.replace(secret, MASK)
        return text

    def data(self, value: Any) -> Any:
        """A JSON-ready copy: secret-looking keys masked (as the DLQ's include-configs does), then every string."""
        cleaned = redact(value)
        if isinstance(cleaned, dict):
            return {k: self.data(v) for k, v in cleaned.items()}
        if isinstance(cleaned, list):
            return [self.data(v) for v in cleaned]
        if isinstance(cleaned, str):
            return self.text(cleaned)
        return cleaned


def cut(text: str, limit: int = VALUE_CUT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_prefix(run_id: str | None) -> str | None:
    """``manual__...-pipeline-t1-s03`` -> ``manual__...-pipeline-t1`` (the runs of one task try)."""
    if not run_id:
        return None
    return RUN_SUFFIX.sub("", run_id)


def submission_number(run_id: str) -> int | None:
    match = RUN_SUFFIX.search(run_id)
    return int(match.group(1)) if match else None


@dataclass
class RunView:
    """One run (one submission) of the Spark job: its report and where its driver log is."""

    run_id: str
    folder: Path
    report: RunReport | None

    @property
    def submission(self) -> int | None:
        return submission_number(self.run_id)

    @property
    def status(self) -> str:
        if self.report is None:
            return "no report"
        return self.report.status

    @property
    def log_path(self) -> Path:
        return self.folder / "driver.log"

    @property
    def exit_code(self) -> int | None:
        try:
            return int(json.loads((self.folder / "exit.json").read_text(encoding="utf-8"))["exit_code"])
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def runs_of(state_dir: Path | None, prefixes: Iterable[str], *, changed_since: float | None = None, newest: int = 0) -> list[RunView]:
    """The runs in ``STATE_DIR/runs/`` whose id starts with one of ``prefixes`` + ``-s`` ("" = every run).

    With ``changed_since`` (a timestamp), only runs whose report changed since then, plus the ``newest``
    ones: a long-lived pipeline has thousands of runs and the overview needs only the recent ones.
    """
    wanted = tuple(f"{p}-s" if p else "" for p in prefixes if p is not None)
    if state_dir is None or not wanted:
        return []
    found: list[RunView] = []
    try:
        folders = [p for p in (state_dir / "runs").iterdir() if p.is_dir()]
    except OSError:
        return []
    folders = [f for f in folders if f.name.startswith(wanted) and submission_number(f.name) is not None]
    if changed_since is not None:
        by_age = sorted(folders, key=lambda f: _mtime(f / "report.json"), reverse=True)
        folders = [f for i, f in enumerate(by_age) if i < newest or _mtime(f / "report.json") >= changed_since]
    for folder in folders:
        try:
            report = RunReport.read(folder / "report.json")
        except ValueError:
            report = None
        found.append(RunView(folder.name, folder, report))
    return sorted(found, key=lambda r: ((r.report.started_at if r.report else None) or "", r.run_id))


def log_tail(path: Path, redactor: Redactor, limit: int = LOG_TAIL_BYTES) -> tuple[str, bool]:
    """The end of a driver log, secrets masked; True when the beginning was left out."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return "", False
    text = data.decode("utf-8", errors="replace")
    truncated = size > limit
    if truncated:
        text = text.split("\n", 1)[-1]  # drop the cut first line
    return "\n".join(redactor.text(line) for line in text.splitlines()), truncated


# -- batches and counters ------------------------------------------------------------------------


def batch_rows(runs: list[RunView]) -> tuple[list[str], list[dict[str, Any]]]:
    """Every batch of these runs (newest first) and the destination ids seen (the table's columns)."""
    destinations: list[str] = []
    rows: list[dict[str, Any]] = []
    for run in runs:
        if run.report is None:
            continue
        for batch in run.report.batches:
            written = batch.get("written") or {}
            for dest in written:
                if dest not in destinations:
                    destinations.append(dest)
            rows.append({"run_id": run.run_id, "submission": run.submission, **batch, "written": written})
    rows.sort(key=lambda b: (b.get("at") or "", b.get("batch_id") or 0), reverse=True)
    return destinations, rows


def last_successful_batch(runs: list[RunView]) -> dict[str, Any] | None:
    """The newest batch that wrote (or acked) records: what 'last successful batch' means on the overview."""
    _, rows = batch_rows(runs)
    for row in rows:
        if int(row.get("read") or 0) > 0 or sum(int(v or 0) for v in row["written"].values()) > 0:
            return row
    return rows[0] if rows else None


def dlq_count_since(runs: list[RunView], since: datetime) -> int:
    """Records sent to the DLQ by batches committed at or after ``since`` (report batches; totals of newer runs)."""
    total = 0
    for run in runs:
        if run.report is None:
            continue
        started = parse_iso(run.report.started_at)
        if started is not None and started >= since:
            total += int(run.report.totals.get("dlq") or 0)
            continue
        total += sum(int(b.get("dlq") or 0) for b in run.report.batches if (parse_iso(b.get("at")) or since) >= since)
    return total


# -- the dead letter queue (file DLQs) -----------------------------------------------------------


def dlq_folder(location: str | None) -> Path | None:
    """The folder of a file DLQ from the operator's ``conduit_dlq`` XCom (``file:///abs/path``); None otherwise."""
    if not location or not location.startswith("file://"):
        return None
    path = Path(location[len("file://") :])
    return path if path.is_absolute() else None


def _batch_number(folder: Path) -> int:
    try:
        return int(folder.name.split("=", 1)[1])
    except (IndexError, ValueError):
        return -1


def _rows_of(path: Path) -> Iterator[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".json":
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                line = line.strip()
                if line:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(row, dict):
                        yield row
    elif suffix == ".csv":
        with path.open(encoding="utf-8", errors="replace", newline="") as handle:
            yield from csv.DictReader(handle)
    elif suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:  # pragma: no cover - pyarrow comes with pyspark's extras here
            return
        yield from pq.read_table(path).to_pylist()


def dlq_rows(folder: Path | None, run_ids: set[str], limit: int = DLQ_SCAN_LIMIT) -> tuple[list[dict[str, Any]], bool]:
    """DLQ rows written by these runs (newest batch folders first); True when ``limit`` stopped the scan."""
    if folder is None or not run_ids:
        return [], False
    try:
        batches = sorted((p for p in folder.iterdir() if p.is_dir() and p.name.startswith("batch_id=")), key=_batch_number, reverse=True)
    except OSError:
        return [], False
    rows: list[dict[str, Any]] = []
    for batch in batches:
        for part in sorted(batch.glob("part-*")):
            try:
                for row in _rows_of(part):
                    if str(row.get("run_id")) in run_ids:
                        rows.append(row)
                        if len(rows) >= limit:
                            return rows, True
            except OSError:
                continue
    return rows, False


# builtin:log DLQ lines in a driver log: "<time> WARNING airflow_conduit.spark.log.<id>: <message> [batch N]: {row}"
_LOG_DLQ_LINE = re.compile(r"airflow_conduit\.spark\.log\.[^:\s]+: .*? \[batch (\d+)\]: (\{.*\})\s*$")
_DLQ_ROW_KEYS = frozenset({"run_id", "stage", "component_id"})


def dlq_rows_from_logs(runs: list[RunView], limit: int = DLQ_SCAN_LIMIT) -> tuple[list[dict[str, Any]], bool]:
    """DLQ rows of a ``builtin:log`` DLQ: the JSON rows the log destination wrote in these runs' driver logs."""
    rows: list[dict[str, Any]] = []
    for run in reversed(runs):  # newest first, like the file DLQ
        try:
            handle = run.log_path.open(encoding="utf-8", errors="replace")
        except OSError:
            continue
        with handle:
            for line in handle:
                match = _LOG_DLQ_LINE.search(line)
                if not match:
                    continue
                try:
                    row = json.loads(match.group(2))
                except ValueError:
                    continue
                if isinstance(row, dict) and _DLQ_ROW_KEYS <= row.keys() and str(row.get("run_id")) == run.run_id:
                    rows.append(row)
                    if len(rows) >= limit:
                        return rows, True
    return rows, False


# -- Kafka DLQs: kafka://<servers>/<topic> (operators/links.py) -------------------------------------
KAFKA_DLQ_PREFIX = "kafka://"
KAFKA_READ_SECONDS = 20.0


def kafka_dlq_address(location: str | None) -> tuple[str, str] | None:
    """(bootstrap servers, topic) of a Kafka DLQ's location; None for other DLQs or one behind a connection."""
    if not location or not location.startswith(KAFKA_DLQ_PREFIX):
        return None
    servers, _, topic = location[len(KAFKA_DLQ_PREFIX):].partition("/")
    if not servers or not topic or servers.startswith("connection:"):
        return None
    return servers, topic


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def kafka_dlq_row(topic: str, partition: int, offset: int, headers, value: bytes | None) -> dict[str, Any]:
    """A Kafka DLQ record as the DLQ's row (headers -> columns, pipeline/kafka_headers.py), with its own
    position in the DLQ topic (``dlq_position``) and, for a record a Kafka source read, its partition."""
    found = {k: v.decode("utf-8", "replace") for k, v in (headers or []) if v is not None}
    row: dict[str, Any] = {column: found.get(name) for column, name, _ in DLQ_COLUMNS_FROM_HEADERS}
    for column, _, kind in DLQ_COLUMNS_FROM_HEADERS:
        if kind in ("long", "int"):
            row[column] = _int_or_none(row[column])
    if value is None:
        row["record"] = None
    else:
        try:
            row["record"] = value.decode("utf-8")
        except UnicodeDecodeError:
            row["record"] = base64.b64encode(value).decode("ascii")
    row["source_partition"] = _int_or_none(found.get(CONNECT + "partition"))
    row["dlq_position"] = f"{topic}/{partition}/{offset}"
    return row


def dlq_rows_from_kafka(
    location: str | None, run_ids: set[str], limit: int = DLQ_SCAN_LIMIT, seconds: float = KAFKA_READ_SECONDS
) -> tuple[list[dict[str, Any]], bool]:
    """The last ``limit`` records of a Kafka DLQ topic (per partition) written by these runs, newest first;
    True when older records were left unread. Read with confluent-kafka when it is installed."""
    address = kafka_dlq_address(location)
    if address is None or not run_ids:
        return [], False
    try:
        from confluent_kafka import Consumer, TopicPartition
    except ImportError:  # the records are then counted from the run reports only
        return [], False
    servers, topic = address
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "airflow-conduit-ui", "enable.auto.commit": False,
                         "socket.timeout.ms": int(seconds * 1000)})
    rows: list[dict[str, Any]] = []
    truncated = False
    try:
        metadata = consumer.list_topics(topic, timeout=seconds).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return [], False
        ends: dict[int, int] = {}
        starts: list = []
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=seconds)
            start = max(low, high - limit)
            truncated = truncated or start > low
            if high > start:
                ends[partition] = high
                starts.append(TopicPartition(topic, partition, start))
        consumer.assign(starts)
        deadline = time.monotonic() + seconds
        while ends and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            if message.offset() >= ends.get(message.partition(), 0) - 1:
                ends.pop(message.partition(), None)
            row = kafka_dlq_row(topic, message.partition(), message.offset(), message.headers(), message.value())
            if str(row.get("run_id")) in run_ids:
                rows.append(row)
    except Exception:  # noqa: BLE001 - an unreachable broker: the page shows the counts of the run reports
        return [], False
    finally:
        consumer.close()
    rows.sort(key=lambda r: (r.get("batch_id") or 0), reverse=True)
    return rows[:limit], truncated or len(rows) > limit


def _record_preview(row: dict[str, Any], redactor: Redactor) -> str:
    """The original record as the DLQ holds it (``record``: raw text), secret-looking fields masked, cut."""
    raw = row.get("record")
    if raw is None:
        return "(not kept: include-messages is false)"
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return cut(redactor.text(raw))
    if isinstance(parsed, dict):
        parsed = {k: (cut(v) if isinstance(v, str) else v) for k, v in redactor.data(parsed).items()}
        return cut(json.dumps(parsed, default=str, ensure_ascii=False), VALUE_CUT * 3)
    return cut(redactor.text(raw))


@dataclass
class DlqGroup:
    stage: str
    component: str
    error: str
    count: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)


def _source_position(row: dict[str, Any]) -> str:
    """Where the record came from: ``file:line``, or a Kafka source's ``topic/partition/offset`` (its
    ``source_file``, with the partition as ``source_split_start`` and the offset as ``source_position``)."""
    where = str(row.get("source_file") or "")
    if where and where.endswith(f"/{row.get('source_split_start')}/{row.get('source_position')}"):
        return where
    return f"{where or row.get('source_id') or ''}:{row.get('source_position') or ''}"


def dlq_sample(row: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    return {
        "run_id": str(row.get("run_id") or ""),
        "batch_id": row.get("batch_id"),
        "source": cut(redactor.text(_source_position(row))),
        "dlq_position": str(row.get("dlq_position") or ""),
        "time": str(row.get("time_of_error") or ""),
        "record": _record_preview(row, redactor),
        "message": cut(redactor.text(row.get("exception_message") or ""), VALUE_CUT * 2),
    }


def dlq_groups(rows: list[dict[str, Any]], redactor: Redactor, samples: int = DLQ_GROUP_SAMPLES) -> list[DlqGroup]:
    """Rows grouped by stage, component and error (exception class and first line of the message), biggest first."""
    groups: OrderedDict[tuple[str, str, str], DlqGroup] = OrderedDict()
    for row in rows:
        message = str(row.get("exception_message") or "").strip().splitlines()
        error = f"{row.get('exception_class') or 'error'}: {message[0] if message else ''}".strip()
        key = (str(row.get("stage") or "?"), str(row.get("component_id") or "?"), cut(redactor.text(error), 160))
        group = groups.setdefault(key, DlqGroup(*key))
        group.count += 1
        if len(group.samples) < samples:
            group.samples.append(dlq_sample(row, redactor))
    return sorted(groups.values(), key=lambda g: -g.count)


def since_hours(now: datetime, hours: float) -> datetime:
    return now - timedelta(hours=hours)
