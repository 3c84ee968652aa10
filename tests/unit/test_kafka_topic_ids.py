"""The pure parts of a Kafka source's topic identity (spark/kafka_topics.py): the ids kept with the checkpoint, the
verdict on a topic's id as looked at, and a recreated topic's offsets set in the checkpoint's offset log. The
real broker's side is tests/spark/test_kafka_topic_identity.py."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_conduit.spark.kafka_topics import (
    SourceTopics,
    TopicDeleted,
    TopicGuard,
    TopicIds,
    TopicRecreated,
    TopicRecreatedWhileRunning,
    read_from_start,
)


def checkpoint(tmp_path: Path, query_id: str = "q-1") -> Path:
    folder = tmp_path / "checkpoints" / "pipeline"
    folder.mkdir(parents=True)
    (folder / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    return folder


def test_ids_belong_to_their_checkpoint(tmp_path):
    ids = TopicIds(tmp_path, checkpoint(tmp_path))
    ids.save({"in": {"orders": "id-a"}})
    assert ids.recorded() == {"in": {"orders": "id-a"}}
    (tmp_path / "checkpoints" / "pipeline" / "metadata").write_text(json.dumps({"id": "q-2"}) + "\n")
    assert ids.recorded() == {}  # a new checkpoint (a reset): the old ids say nothing about its offsets


def guard(tmp_path, **settings) -> tuple[TopicGuard, SourceTopics]:
    g = TopicGuard(None, [("in", {"topics": ["orders"], **settings})], tmp_path, checkpoint(tmp_path))
    g.known = {"in": {"orders": "id-a"}}
    return g, g.sources[0]


def test_a_changed_id_is_a_recreated_topic_and_read_from_start_makes_it_a_restart(tmp_path):
    g, source = guard(tmp_path)
    assert g._changed(source, {"orders": "id-a"}, running=True, missing_times={}) is None
    assert isinstance(g._changed(source, {"orders": "id-b"}, running=True, missing_times={}), TopicRecreated)
    g, source = guard(tmp_path / "other", **{"on-topic-recreated": "read-from-start"})
    assert isinstance(g._changed(source, {"orders": "id-b"}, running=True, missing_times={}), TopicRecreatedWhileRunning)


def test_the_watch_takes_a_topic_for_deleted_only_when_missing_twice_in_a_row(tmp_path):
    g, source = guard(tmp_path)
    missing: dict[str, int] = {}
    assert g._changed(source, {"orders": None}, running=True, missing_times=missing) is None
    assert g._changed(source, {"orders": "id-a"}, running=True, missing_times=missing) is None  # back: a blip
    assert g._changed(source, {"orders": None}, running=True, missing_times=missing) is None
    failure = g._changed(source, {"orders": None}, running=True, missing_times=missing)
    assert isinstance(failure, TopicDeleted) and "was deleted while the pipeline was reading it" in str(failure)
    assert isinstance(g._changed(source, {"orders": None}, running=True, missing_times={}, needed=1), TopicDeleted)


def test_a_pattern_s_topics_may_go_and_a_new_topic_is_taken_as_found(tmp_path):
    g = TopicGuard(None, [("in", {"topic-pattern": "orders.*"})], tmp_path, checkpoint(tmp_path))
    g.known = {"in": {"orders-1": "id-a"}}
    source = g.sources[0]
    assert g._changed(source, {"orders-1": None, "orders-2": "id-c"}, running=True, missing_times={}, needed=1) is None
    assert g.known["in"] == {"orders-1": "id-a", "orders-2": "id-c"}


def offset_log(folder: Path, batch: int, sources: list[dict], committed: bool) -> Path:
    (folder / "offsets").mkdir(exist_ok=True)
    (folder / "commits").mkdir(exist_ok=True)
    path = folder / "offsets" / str(batch)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}
    path.write_text("\n".join(["v1", json.dumps(meta), *(json.dumps(s) for s in sources)]))
    (folder / "offsets" / f".{batch}.crc").write_bytes(b"crc")
    if committed:
        (folder / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return path


def test_a_recreated_topic_s_offsets_in_the_last_committed_batch_become_its_earliest(tmp_path):
    folder = checkpoint(tmp_path)
    offset_log(folder, 0, [{"orders": {"0": 5}}], committed=True)
    path = offset_log(folder, 1, [{"orders": {"0": 20, "1": 7}, "other": {"0": 3}}, {"logOffset": 4}], committed=True)
    assert read_from_start(folder, "orders", {0: 0, 1: 0, 2: 0}) is None
    lines = path.read_text().split("\n")
    assert lines[0] == "v1" and json.loads(lines[1])["batchTimestampMs"] == 1
    assert json.loads(lines[2]) == {"orders": {"0": 0, "1": 0, "2": 0}, "other": {"0": 3}}
    assert json.loads(lines[3]) == {"logOffset": 4}
    assert not (folder / "offsets" / ".1.crc").exists()  # the checksum of the old content would refuse the new
    assert json.loads((folder / "offsets" / "0").read_text().split("\n")[2]) == {"orders": {"0": 5}}


def test_an_uncommitted_last_batch_is_not_rewritten(tmp_path):
    folder = checkpoint(tmp_path)
    path = offset_log(folder, 0, [{"orders": {"0": 20}}], committed=False)
    before = path.read_text()
    problem = read_from_start(folder, "orders", {0: 0})
    assert problem is not None and "last batch (0) is not committed" in problem
    assert path.read_text() == before
