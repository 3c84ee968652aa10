"""A Kafka source's topics by identity: probed before the query starts, checked at every batch, watched while it runs.

Spark's checkpoint keeps a topic's offsets by its name. A topic deleted and created again under the same name
starts at offset 0, and the checkpoint's offsets would then skip its first records without a word when the new
topic holds more records than they say. Kafka gives every topic an id (KIP-516) that tells a new topic from the
old one, so the ids of the topics a checkpoint's offsets belong to are kept next to it
(``STATE_DIR/kafka-topic-ids.json``, with the checkpoint's query id: a new checkpoint starts a new record) and
compared:

- at the start, before the query starts (``TopicGuard.at_start``): one metadata request with a short timeout,
  which is also the first word on servers where no broker answers (``PROBE_SECONDS``) instead of the Kafka
  source's own minutes of retries;
- at every batch, before it writes anything (``TopicGuard.at_batch``): the batch's offsets may already be the
  new topic's;
- every ``WATCH_SECONDS`` while the query runs (``TopicWatch``): a topic deleted under a running query leaves
  Spark's Kafka source retrying until its own timeouts, minutes later, as if the broker were slow.

A changed id stops the run with ``TopicRecreated`` (fatal), unless the source's setting
``on-topic-recreated: read-from-start`` says to read the new topic from its start: the checkpoint's last
committed offsets of that topic are then set to the new topic's earliest offsets before the query starts
(``read_from_start``). A topic whose id was recorded and that no longer exists is a ``TopicDeleted`` data loss
(fatal, as Spark's own data loss). Ids recorded by no run (a state dir kept before they were) are taken as
they are found.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import FatalError, TransientError
from airflow_conduit.runs.report import read_json, utc_now_iso, write_json_atomic
from airflow_conduit.spark.batch_numbers import checkpoint_query_id
from airflow_conduit.spark.jvm import kafka_admin
from airflow_conduit.spark.kafka_options import bootstrap_servers, client_options

log = logging.getLogger(__name__)

TOPIC_IDS_FILE = "kafka-topic-ids.json"
PROBE_SECONDS = 10  # the first answer about servers where no broker answers (a broker answers metadata in ms)
WATCH_SECONDS = 5.0  # how often a running query's topics are looked at
MISSING_TIMES = 2  # a topic is taken for deleted when it is missing this many looks in a row (not one blip)
READ_FROM_START = "read-from-start"
FAIL = "fail"
_TIMEOUT = "org.apache.kafka.common.errors.TimeoutException"
_UNKNOWN_TOPIC = "org.apache.kafka.common.errors.UnknownTopicOrPartitionException"


class TopicRecreated(FatalError):
    """A source topic's id is not the one its checkpoint's offsets belong to: it was deleted and created again."""

    code = codes.KAFKA_TOPIC_RECREATED


class TopicRecreatedWhileRunning(TransientError):
    """A source topic was recreated while the run read it and the source reads a recreated topic from its start:
    the restart does (``at_start``)."""

    code = codes.KAFKA_TOPIC_CHANGED


class TopicDeleted(FatalError):
    """A topic the checkpoint's offsets belong to no longer exists: its records are gone."""

    code = codes.KAFKA_DATA_LOSS


class KafkaUnreachable(TransientError):
    """No broker answered the start's metadata request within ``PROBE_SECONDS``."""

    code = codes.KAFKA_UNREACHABLE


def recreated_message(source_id: str, topic: str, old: str, new: str) -> str:
    return (
        f"Kafka topic '{topic}' of source '{source_id}' was deleted and created again (topic id {old} -> {new}): "
        "the checkpoint's offsets are the old topic's and would skip the new topic's first records. Choose: read "
        f"the new topic from its start (set on-topic-recreated: {READ_FROM_START} in the source's settings, then "
        "run again), or reset the pipeline (delete STATE_DIR/checkpoints: every source is read again as a new "
        "pipeline, from starting-offsets)"
    )


def deleted_message(source_id: str, topic: str, running: bool) -> str:
    when = "while the pipeline was reading it" if running else "since the pipeline last read it"
    return (
        f"Kafka topic '{topic}' of source '{source_id}' was deleted {when}: records the checkpoint expects are "
        "gone (fatal data loss). Create the topic again and choose how to read it (on-topic-recreated), remove it "
        "from the source's topics, or reset the pipeline (delete STATE_DIR/checkpoints)"
    )


# -- the ids kept with the checkpoint ------------------------------------------------------------------------


class TopicIds:
    """``STATE_DIR/kafka-topic-ids.json``: ``{"query_id": ..., "sources": {source_id: {topic: id}}}``, the ids of
    the topics whose offsets the checkpoint ``query_id`` holds (none for another checkpoint)."""

    def __init__(self, state_dir: str | os.PathLike[str], checkpoint: Path):
        self.path = Path(state_dir) / TOPIC_IDS_FILE
        self.checkpoint = checkpoint

    def recorded(self) -> dict[str, dict[str, str]]:
        data = read_json(self.path)
        query_id = checkpoint_query_id(self.checkpoint)
        if not data or query_id is None or data.get("query_id") != query_id:
            return {}
        return {str(s): {str(t): str(i) for t, i in topics.items()} for s, topics in (data.get("sources") or {}).items()}

    def save(self, sources: dict[str, dict[str, str]]) -> None:
        query_id = checkpoint_query_id(self.checkpoint)
        if query_id is None:
            return
        write_json_atomic(self.path, {"query_id": query_id, "sources": sources, "at": utc_now_iso()}, durable=False)


# -- looking topics up ---------------------------------------------------------------------------------------


@dataclass
class SourceTopics:
    """One Kafka source: its named topics or pattern, and its admin client (created at the first look)."""

    spark: Any
    source_id: str
    settings: dict[str, Any]
    _admin: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def read_from_start(self) -> bool:
        return self.settings.get("on-topic-recreated", FAIL) == READ_FROM_START

    @property
    def pattern(self) -> str | None:
        return None if self.settings.get("topics") else str(self.settings.get("topic-pattern"))

    def _client(self):
        if self._admin is None:
            properties = {key.removeprefix("kafka."): value for key, value in client_options(self.settings).items()}
            properties["default.api.timeout.ms"] = str(PROBE_SECONDS * 1000)
            properties["request.timeout.ms"] = str(PROBE_SECONDS * 1000)
            self._admin = kafka_admin.create_admin(self.spark, properties)
        return self._admin

    def close(self) -> None:
        with self._lock:
            admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception:  # noqa: BLE001 - the JVM may be gone: nothing left to release
                pass

    def ids(self) -> dict[str, str | None]:
        """Each topic's id now (None: it does not exist). Raises ``KafkaUnreachable`` when no broker answered."""
        try:
            with self._lock:
                return self._ids()
        except KafkaUnreachable:
            self.close()
            raise
        except Exception as exc:
            self.close()  # a failed client is not reused
            if _java_class_in(exc, _TIMEOUT):
                raise self._unreachable() from exc
            raise

    def _unreachable(self) -> KafkaUnreachable:
        return KafkaUnreachable(
            f"no Kafka broker answered within {PROBE_SECONDS} s at {bootstrap_servers(self.settings)}: check the "
            "servers (bootstrap.servers: host names and ports) and that the brokers run; the pipeline is restarted "
            "with backoff"
        )

    def _ids(self) -> dict[str, str | None]:
        names = None if self.pattern is not None else [str(t) for t in self.settings["topics"]]
        return kafka_admin.topic_ids(self.spark, self._client(), names=names, pattern=self.pattern,
                                     timeout_ms=PROBE_SECONDS * 1000, wait_ms=PROBE_SECONDS * 1000 + 5000,
                                     unknown_topic=lambda exc: _java_class_in(exc, _UNKNOWN_TOPIC))

    def earliest_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's earliest offset of ``topic`` now."""
        with self._lock:
            return kafka_admin.earliest_offsets(self.spark, self._client(), topic, PROBE_SECONDS * 1000 + 5000)


def _java_class_in(exc: BaseException, class_name: str) -> bool:
    """Whether the Java cause chain of a Py4J error holds ``class_name``."""
    from airflow_conduit.recovery.java_errors import java_causes

    return any(cause.class_name == class_name for cause in java_causes(exc))


# -- the guard: start, batches, the watch --------------------------------------------------------------------


class TopicGuard:
    """The Kafka sources' topic ids against those the checkpoint's offsets belong to (see the module's docstring)."""

    def __init__(self, spark, sources: list[tuple[str, dict[str, Any]]], state_dir: str | os.PathLike[str], checkpoint: Path):
        self.sources = [SourceTopics(spark, source_id, dict(settings)) for source_id, settings in sources]
        self.ids = TopicIds(state_dir, checkpoint)
        self.checkpoint = checkpoint
        self.known: dict[str, dict[str, str]] = {}  # source -> topic -> the id its offsets belong to
        self._saved: dict[str, dict[str, str]] | None = None

    def __bool__(self) -> bool:
        return bool(self.sources)

    def at_start(self, where: Callable[[str], None] = lambda source_id: None) -> None:
        """Before the query starts: the first metadata request (no broker: ``KafkaUnreachable`` within
        ``PROBE_SECONDS``), a recreated topic read from its start or refused, a deleted one refused. ``where`` is
        told each source's id before its topics are looked at (a failure is reported there)."""
        recorded = self.ids.recorded()
        for source in self.sources:
            where(source.source_id)
            now = source.ids()
            before = recorded.get(source.source_id, {})
            known = self.known.setdefault(source.source_id, {})
            for topic, topic_id in now.items():
                old = before.get(topic)
                if topic_id is None:
                    if old is not None:
                        raise TopicDeleted(deleted_message(source.source_id, topic, running=False))
                    continue  # never read: Spark's source reports the unknown topic (2410)
                if old is not None and old != topic_id:
                    if not source.read_from_start:
                        raise TopicRecreated(recreated_message(source.source_id, topic, old, topic_id))
                    self._read_from_start(source, topic, old, topic_id)
                known[topic] = topic_id
        self.save()

    def _read_from_start(self, source: SourceTopics, topic: str, old: str, new: str) -> None:
        earliest = source.earliest_offsets(topic)
        problem = read_from_start(self.checkpoint, topic, earliest)
        if problem is not None:
            raise TopicRecreated(f"{recreated_message(source.source_id, topic, old, new)}; {problem}")
        log.warning(
            "Kafka topic '%s' of source '%s' was deleted and created again (topic id %s -> %s): read from its start "
            "(offsets %s), as on-topic-recreated: %s says", topic, source.source_id, old, new, earliest, READ_FROM_START,
        )

    def at_batch(self, where: Callable[[str], None] = lambda source_id: None) -> None:
        """Before a batch writes: a topic recreated or deleted since the ids were taken stops the run."""
        for source in self.sources:
            where(source.source_id)
            failure = self._changed(source, source.ids(), running=True, missing_times={}, needed=1)
            if failure is not None:
                raise failure
        self.save()

    def explain(self) -> tuple[str, Exception] | None:
        """After the query or a batch failed: (source id, the error) when a topic it reads was deleted or recreated
        (Spark's own error for it names an unknown topic or a timeout), else None (also when the topics cannot be
        looked at: the failure stands as it was classified)."""
        for source in self.sources:
            try:
                now = source.ids()
            except Exception:  # noqa: BLE001 - see the docstring
                log.debug("Kafka topics of source %s not looked at", source.source_id, exc_info=True)
                continue
            failure = self._changed(source, now, running=True, missing_times={}, needed=1)
            if failure is not None:
                return source.source_id, failure
        return None

    def _changed(self, source: SourceTopics, now: dict[str, str | None], *, running: bool,
                 missing_times: dict[str, int], needed: int = MISSING_TIMES) -> Exception | None:
        """The error for a topic of ``source`` that changed (a topic is deleted once it was missing ``needed``
        looks in a row, counted in ``missing_times``), else None; new topics are added to ``known``."""
        known = self.known.setdefault(source.source_id, {})
        for topic, topic_id in now.items():
            old = known.get(topic)
            if topic_id is None:
                if old is None or source.pattern is not None:
                    continue  # a pattern's topics come and go; never read: not this guard's
                missing_times[topic] = missing_times.get(topic, 0) + 1
                if missing_times[topic] >= needed:
                    return TopicDeleted(deleted_message(source.source_id, topic, running=running))
                continue
            missing_times.pop(topic, None)
            if old is None:
                known[topic] = topic_id
            elif old != topic_id:
                if source.read_from_start:
                    return TopicRecreatedWhileRunning(
                        f"Kafka topic '{topic}' of source '{source.source_id}' was deleted and created again while "
                        f"the pipeline read it (topic id {old} -> {topic_id}); the restart reads it from its start "
                        f"(on-topic-recreated: {READ_FROM_START})"
                    )
                return TopicRecreated(recreated_message(source.source_id, topic, old, topic_id))
        return None

    def save(self) -> None:
        """Record the known ids with the checkpoint (once the checkpoint exists; only when they changed)."""
        if self.known != self._saved and checkpoint_query_id(self.checkpoint) is not None:
            self.ids.save(self.known)
            self._saved = {s: dict(t) for s, t in self.known.items()}

    def watch(self, on_failure: Callable[[str, Exception], None]) -> "TopicWatch":
        watch = TopicWatch(self, on_failure)
        watch.start()
        return watch

    def close(self) -> None:
        for source in self.sources:
            source.close()


class TopicWatch(threading.Thread):
    """Looks at the topics every ``WATCH_SECONDS`` while the query runs; calls ``on_failure`` once with a
    deleted or recreated topic's source id and error. A look that fails (a broker outage) is the query's own
    business."""

    def __init__(self, guard: TopicGuard, on_failure: Callable[[str, Exception], None]):
        super().__init__(name="conduit-kafka-topic-watch", daemon=True)
        self.guard = guard
        self.on_failure = on_failure
        self.stopped = threading.Event()
        self.missing: dict[str, dict[str, int]] = {}

    def run(self) -> None:
        while not self.stopped.wait(WATCH_SECONDS):
            for source in self.guard.sources:
                if self.stopped.is_set():
                    return
                try:
                    now = source.ids()
                except Exception:  # noqa: BLE001 - see the class docstring
                    log.debug("Kafka topics of source %s not looked at", source.source_id, exc_info=True)
                    continue
                failure = self.guard._changed(
                    source, now, running=True, missing_times=self.missing.setdefault(source.source_id, {})
                )
                if failure is not None:
                    self.stopped.set()
                    self.on_failure(source.source_id, failure)
                    return

    def stop(self) -> None:
        self.stopped.set()


# -- the checkpoint's offsets of a recreated topic -----------------------------------------------------------


def read_from_start(checkpoint: Path, topic: str, earliest: dict[int, int]) -> str | None:
    """Set ``topic``'s offsets in the checkpoint's last committed offsets to ``earliest``: the next batch reads the
    recreated topic from there. Returns why it cannot (the last batch is not committed), else None.

    Spark's offset log (``offsets/<batch>``): a version line, the batch's metadata, then one line per source, a
    Kafka source's ``{topic: {partition: offset}}``. A committed batch is never read again, only its offsets as the
    next batch's start; an uncommitted one would be re-run over the old topic's offsets."""
    offsets_dir, commits_dir = checkpoint / "offsets", checkpoint / "commits"
    batches = sorted(int(p.name) for p in offsets_dir.iterdir() if p.name.isdigit()) if offsets_dir.is_dir() else []
    if not batches:
        return None  # no batch yet: the query starts from starting-offsets
    last = batches[-1]
    if not (commits_dir / str(last)).exists():
        return f"its last batch ({last}) is not committed: run once with the topic as it was, or reset the pipeline"
    path = offsets_dir / str(last)
    lines = path.read_text(encoding="utf-8").split("\n")
    changed = False
    for index, line in enumerate(lines[2:], start=2):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get(topic), dict):
            value[topic] = {str(p): o for p, o in sorted(earliest.items())}
            lines[index] = json.dumps(value, separators=(",", ":"))
            changed = True
    if changed:
        temp = path.with_name(f".{path.name}.conduit.tmp")
        temp.write_text("\n".join(lines), encoding="utf-8")
        os.replace(temp, path)
        (path.parent / f".{path.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old content
    return None
