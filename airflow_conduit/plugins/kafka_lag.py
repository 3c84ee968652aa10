"""Kafka lag of a pipeline's source topics, per partition, for the Pipelines page. No Airflow here.

- **While a run is live**: from the query's last progress event (``spark/progress.py`` keeps them in
  ``runs/<run-id>/progress.json``): a partition's ``latestOffset`` (the topic's end when the batch was planned)
  minus the batch's ``endOffset``.
- **Between runs**: the broker's end offsets (confluent-kafka, with the source's own client settings and the
  Airflow connection it names) minus the offsets of the checkpoint's last committed batch
  (``STATE_DIR/checkpoints/pipeline/offsets/<n>``, one JSON line per source after the header lines).

Only topics, partitions and numbers leave this module: no server address, no client setting.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow_conduit.plugins.state_view import RunView
from airflow_conduit.runs.report import read_json

CHECKPOINT = Path("checkpoints") / "pipeline"  # spark/runner.QUERY_NAME
PROGRESS_FILE = "progress.json"  # spark/progress.PROGRESS_FILE
HISTORY_RUNS = 10
BROKER_SECONDS = 10.0


class LagUnavailable(Exception):
    """The broker could not be asked (no client library, unreachable): the message says why, without secrets."""


def _offsets_map(value: Any) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": 12}}`` (a Kafka source's offsets as Spark writes them) -> {topic: {partition: offset}}."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            return {}  # not a Kafka source's offsets (a file source's {"logOffset": n})
        try:
            out[str(topic)] = {int(p): int(o) for p, o in partitions.items()}
        except (TypeError, ValueError):
            return {}
    return out


def committed_offsets(state_dir: Path) -> dict[str, dict[int, int]]:
    """The Kafka offsets of the checkpoint's last committed batch (every Kafka source's topics); {} when none."""
    checkpoint = state_dir / CHECKPOINT
    try:
        committed = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    except OSError:
        return {}
    if not committed:
        return {}
    try:
        lines = (checkpoint / "offsets" / str(max(committed))).read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    out: dict[str, dict[int, int]] = {}
    for line in lines[2:]:  # "v1", the batch's metadata, then one line per source
        out.update(_offsets_map(line.strip()))
    return out


def _progress(run: RunView) -> list[dict[str, Any]]:
    data = read_json(run.folder / PROGRESS_FILE) if run.folder else None
    entries = (data or {}).get("progress") if isinstance(data, dict) else None
    return [e for e in entries or [] if isinstance(e, dict)]


def running_lag(run: RunView) -> list[dict[str, Any]] | None:
    """Per partition: latestOffset - endOffset of the run's last progress event; None without a Kafka source in it."""
    entries = _progress(run)
    if not entries:
        return None
    rows = []
    for source in entries[-1].get("sources") or []:
        latest, end = _offsets_map(source.get("latest_offset")), _offsets_map(source.get("end_offset"))
        for topic, partitions in sorted(latest.items()):
            for partition, top in sorted(partitions.items()):
                done = end.get(topic, {}).get(partition)
                rows.append({"topic": topic, "partition": partition, "end_offset": top, "committed_offset": done,
                             "lag": max(top - done, 0) if done is not None else None})
    return rows or None


def broker_end_offsets(config: dict[str, Any], topics: list[str], seconds: float = BROKER_SECONDS) -> dict[str, dict[int, tuple[int, int]]]:
    """{topic: {partition: (low, high)}} from the broker."""
    try:
        import confluent_kafka as ck
    except ImportError:
        raise LagUnavailable("reading offsets from the api-server needs confluent-kafka (pip install confluent-kafka)") from None
    consumer = ck.Consumer({**config, "group.id": "airflow-conduit-ui-lag", "enable.auto.commit": False,
                            "socket.timeout.ms": int(seconds * 1000)})
    try:
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for topic in topics:
            metadata = consumer.list_topics(topic, timeout=seconds).topics.get(topic)
            if metadata is None or metadata.error is not None:
                continue
            out[topic] = {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=seconds) for p in sorted(metadata.partitions)}
        return out
    except ck.KafkaException as exc:
        raise LagUnavailable(f"the Kafka broker did not answer ({type(exc).__name__})") from None
    finally:
        consumer.close()


def between_runs_lag(state_dir: Path, ends: dict[str, dict[int, tuple[int, int]]]) -> list[dict[str, Any]]:
    """Per partition: the broker's end offset minus the checkpoint's (a partition the checkpoint has not read yet:
    everything the broker keeps of it)."""
    committed = committed_offsets(state_dir)
    rows = []
    for topic, partitions in sorted(ends.items()):
        for partition, (low, high) in sorted(partitions.items()):
            done = committed.get(topic, {}).get(partition)
            start = done if done is not None and done >= 0 else low
            rows.append({"topic": topic, "partition": partition, "end_offset": high, "committed_offset": done,
                         "lag": max(high - max(start, low), 0)})
    return rows


def history(runs: list[RunView], limit: int = HISTORY_RUNS) -> list[dict[str, Any]]:
    """The last runs' batches: offsets behind latest (summed over partitions) and records per second, oldest first."""
    points = []
    for run in runs[-limit:]:
        for entry in _progress(run):
            behind = 0
            known = False
            for source in entry.get("sources") or []:
                latest, end = _offsets_map(source.get("latest_offset")), _offsets_map(source.get("end_offset"))
                for topic, partitions in latest.items():
                    for partition, top in partitions.items():
                        done = end.get(topic, {}).get(partition)
                        if done is not None:
                            behind += max(top - done, 0)
                            known = True
            points.append({"run_id": run.run_id, "batch_id": entry.get("batch_id"), "at": entry.get("at"),
                           "lag": behind if known else None, "rows_per_second": entry.get("processed_rows_per_second"),
                           "rows": entry.get("num_input_rows")})
    return points


def kafka_sources(spec: Any) -> list[Any]:
    return [s for s in spec.sources if s.plugin == "kafka"]


def source_topics(source: Any) -> list[str]:
    """The topics a Kafka source names (none for ``topic-pattern``: the checkpoint's topics are used then)."""
    topics = source.settings.get("topics")
    if isinstance(topics, str):
        return [topics]
    return [str(t) for t in topics or []]
