"""The test broker itself: it starts from the fetched jars, takes records with bytes headers and gives them back."""

from __future__ import annotations


def test_broker_round_trip(kafka):
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [b'{"id": %d}' % i for i in range(6)], keys=[b"k%d" % i for i in range(6)],
                  headers=[[("h", b"\xff\x00")]] * 6)
    messages = kafka.read_all(topic)
    assert sorted(m.value() for m in messages) == sorted(b'{"id": %d}' % i for i in range(6))
    assert all(m.headers() == [("h", b"\xff\x00")] for m in messages)
