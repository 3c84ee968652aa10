"""A second real Kafka broker with a SASL_PLAINTEXT/PLAIN listener and ACLs (StandardAuthorizer), for the
authentication, authorization and connection tests. Users: admin (super user) and alice (no ACL until granted)."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import uuid
from pathlib import Path

import kafka_broker

ADMIN, ALICE = ("admin", "admin-secret"), ("alice", "alice-Secret-7")


@contextlib.contextmanager
def sasl_broker():
    workdir = Path(tempfile.mkdtemp(prefix="conduit-kafka-sasl-"))
    broker = kafka_broker.KafkaBroker(workdir=workdir)
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{ADMIN[0]}" password="{ADMIN[1]}" user_{ADMIN[0]}="{ADMIN[1]}" user_{ALICE[0]}="{ALICE[1]}";'
    )
    broker.extra_properties = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{broker.port},CONTROLLER://127.0.0.1:{broker.controller_port}",
        "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{broker.port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN[0]};User:ANONYMOUS",
    }
    try:
        broker.format()
        broker.start()
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def client(broker, user=ADMIN) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user[0], "sasl.password": user[1]}




def granted_and_closed_topics(broker, records: int = 3) -> dict[str, str]:
    """Two topics of ``records`` JSON values {"id": i}: ``granted`` (alice may do anything) and ``closed`` (no ACL)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                       ResourcePatternType, ResourceType)

    admin = AdminClient(client(broker))
    topics = {"granted": f"granted-{uuid.uuid4().hex[:6]}", "closed": f"closed-{uuid.uuid4().hex[:6]}"}
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics.values()]).values():
        future.result(120)
    acl = AclBinding(ResourceType.TOPIC, topics["granted"], ResourcePatternType.LITERAL, f"User:{ALICE[0]}", "*",
                     AclOperation.ALL, AclPermissionType.ALLOW)
    for future in admin.create_acls([acl]).values():
        future.result(120)
    producer = Producer(client(broker))
    for topic in topics.values():
        for i in range(records):
            producer.produce(topic, value=json.dumps({"id": i}).encode())
    assert producer.flush(120) == 0
    return topics
