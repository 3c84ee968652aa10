"""Kafka client settings shared by every Kafka plugin (source, destination, DLQ), and an Airflow ``kafka``
connection's client config mapped to the Java client's property names (pure Python).

A Kafka plugin's settings table is ``KAFKA_CLIENT_SETTINGS`` plus its own; ``KAFKA_CLIENT_CHECKS`` are its
cross-field checks. :func:`java_client_properties` turns the settings (and the connection they name, when
``connection`` is set) into the Java client's properties, e.g. ``bootstrap.servers`` and
``sasl.jaas.config``; ``spark/kafka_options.py`` prefixes them with ``kafka.`` for Spark.

The Spark job never reads Airflow: the control plane resolves each named connection and hands the job its
client config in the driver's environment (:data:`CONNECTIONS_ENV`, a JSON object ``{conn_id: {...}}``),
never in argv. The values are secrets: nothing here logs them, and :class:`Secret` wraps every value a
report could show.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from airflow_conduit.pipeline.ddl import DDLError, parse_ddl
from airflow_conduit.pipeline.secrets import Secret, is_secret_key
from airflow_conduit.pipeline.setting_kinds import (
    Boolean,
    Choice,
    DDLSchema,
    Integer,
    Kind,
    PathKind,
    PluginSchema,
    Setting,
    String,
    StringList,
    _got,
)

CONNECTIONS_ENV = "AIRFLOW_CONDUIT_CONNECTIONS"
CONNECTION_TYPE = "kafka"

SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
SASL_MECHANISMS = ("plain", "scram-sha-256", "scram-sha-512")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Client properties that are secrets although their names do not say so.
SECRET_PROPERTIES = frozenset({"sasl.jaas.config", "ssl.keystore.key", "ssl.truststore.certificates", "ssl.keystore.certificate.chain"})
# Properties Spark's Kafka connector manages itself (setting them is refused by Spark or breaks exactly once),
# and properties that have a setting of their own.
_MANAGED_PROPERTIES = {
    "key.deserializer": "Spark reads keys and values as bytes",
    "value.deserializer": "Spark reads keys and values as bytes",
    "key.serializer": "Spark writes keys and values as bytes",
    "value.serializer": "Spark writes keys and values as bytes",
    "enable.auto.commit": "offsets live in the pipeline's checkpoint",
    "auto.offset.reset": "use the setting starting-offsets",
    "interceptor.classes": "Spark's Kafka connector refuses interceptors",
    "bootstrap.servers": "use the setting servers",
    "security.protocol": "use the setting security-protocol",
    "sasl.mechanism": "use the setting sasl-mechanism",
}
_CONN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,249}\Z")
_SERVER = re.compile(r"\[?[A-Za-z0-9_.\-:]+\]?:\d{1,5}\Z")


class KafkaServers(String):
    """Bootstrap servers: ``host:port`` or a comma-separated list; a YAML list is joined."""

    doc = "host:port[,host:port...]"

    def coerce(self, value, ctx):
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            value = ",".join(v.strip() for v in value)
        value = super().coerce(value, ctx)
        servers = [s.strip() for s in value.split(",")]
        bad = [s for s in servers if not _SERVER.match(s)]
        if bad:
            raise ValueError(f"expected host:port[,host:port...], got {bad[0]!r} (no port?)")
        return ",".join(servers)


class ConnectionId(String):
    doc = "Airflow connection id"

    def coerce(self, value, ctx):
        value = super().coerce(value, ctx)
        if not _CONN_ID.match(value):
            raise ValueError(f"expected an Airflow connection id (letters, digits, '_', '.', '-'), got {value!r}")
        return value


class ClientProperties(Kind):
    """Further Kafka client properties (Java names); values become strings, secret-looking ones :class:`Secret`."""

    doc = "mapping Kafka client property -> value"

    def coerce(self, value, ctx):
        if not isinstance(value, dict) or not value:
            raise ValueError(f"expected a non-empty mapping of Kafka client property to value, got {_got(value)}")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key.strip():
                raise ValueError(f"property names must be strings, got {_got(key)}")
            name = key[len("kafka."):] if key.startswith("kafka.") else key
            if name in _MANAGED_PROPERTIES:
                raise ValueError(f"the property {key!r} cannot be set here: {_MANAGED_PROPERTIES[name]}")
            if isinstance(item, bool):
                item = "true" if item else "false"
            elif isinstance(item, (int, float)):
                item = str(item)
            elif not isinstance(item, str):
                raise ValueError(f"property {key!r}: expected a string, number or boolean, got {_got(item)}")
            out[name] = Secret(item) if is_secret_property(name) else item
        return out


def is_secret_property(name: str) -> bool:
    """True for client properties holding secrets: ``sasl.jaas.config``, ``ssl.key.password``, ..."""
    return name in SECRET_PROPERTIES or is_secret_key(name)


KAFKA_CLIENT_SETTINGS: dict[str, Setting] = {
    "servers": Setting(KafkaServers(), "bootstrap servers, host:port[,host:port...] (or `connection`)"),
    "connection": Setting(
        ConnectionId(),
        "an Airflow connection of type `kafka` whose extra holds the client config (bootstrap.servers, "
        "security.protocol, sasl.*); the other settings here override it",
    ),
    "security-protocol": Setting(Choice(SECURITY_PROTOCOLS), "Kafka's security.protocol"),
    "sasl-mechanism": Setting(Choice(SASL_MECHANISMS), "Kafka's sasl.mechanism (with sasl-username and sasl-password)"),
    "sasl-username": Setting(String(), "SASL user name (PLAIN or SCRAM)"),
    "sasl-password": Setting(String(), "SASL password (a secret: write ${ENV_VAR})"),
    "ssl-truststore-location": Setting(PathKind(), "truststore file (JKS, PKCS12 or PEM) on every Spark node"),
    "ssl-truststore-password": Setting(String(), "truststore password (a secret: write ${ENV_VAR})"),
    "options": Setting(ClientProperties(), "further Kafka client properties by their Java client names"),
}


def _sasl_complete(settings: dict[str, Any], report: Callable[[str, str], None]) -> None:
    """username and password go together; without a connection they need a mechanism and a SASL protocol."""
    for one, other in (("sasl-username", "sasl-password"), ("sasl-password", "sasl-username")):
        if one in settings and other not in settings:
            report(other, f"missing: {one} is given, so {other} is needed too")
    if "connection" in settings or "sasl-username" not in settings:
        return
    if "sasl-mechanism" not in settings:
        report("sasl-mechanism", f"missing: sasl-username needs one of {', '.join(SASL_MECHANISMS)}")
    if not str(settings.get("security-protocol", "")).startswith("sasl_"):
        report("security-protocol", "sasl-username needs security-protocol sasl_plaintext or sasl_ssl")


KAFKA_CLIENT_CHECKS = (_sasl_complete,)
# The brokers come from exactly one place: the spec or the connection (whose other settings the spec may override).
KAFKA_CLIENT_ONE_OF = (("servers", "connection"),)


# --- the source's own settings ----------------------------------------------------------------

SOURCE_FORMATS = ("json", "csv", "raw")
TOPIC_RECREATED_CHOICES = ("fail", "read-from-start")  # spark/kafka_topics.py
RAW_TYPES = ("string", "binary")


class StartingOffsets(Kind):
    """``earliest``, ``latest`` or per partition ``{topic: {partition: offset}}`` (-2 earliest, -1 latest), as JSON text."""

    doc = "earliest | latest | {topic: {partition: offset}}"

    def coerce(self, value, ctx):
        if isinstance(value, str) and value.strip().lower() in ("earliest", "latest"):
            return value.strip().lower()
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError(f"expected earliest, latest or per-partition JSON, got {value!r}") from None
        if not isinstance(value, dict) or not value:
            raise ValueError(f"expected earliest, latest or a mapping topic -> {{partition: offset}}, got {_got(value)}")
        out: dict[str, dict[str, int]] = {}
        for topic, partitions in value.items():
            if not isinstance(partitions, dict) or not partitions:
                raise ValueError(f"topic {topic!r}: expected a mapping partition -> offset, got {_got(partitions)}")
            out[str(topic)] = {}
            for partition, offset in partitions.items():
                if not re.fullmatch(r"\d+", str(partition)):
                    raise ValueError(f"topic {topic!r}: partition {partition!r} is not a partition number")
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                    raise ValueError(
                        f"topic {topic!r} partition {partition}: expected an offset >= 0 (-2 earliest, -1 latest), got {_got(offset)}"
                    )
                out[str(topic)][str(int(partition))] = offset
        return json.dumps(out, sort_keys=True)


METADATA_NAMES = ("_kafka_key", "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_headers")


def _no_metadata_names(settings: dict[str, Any], report: Callable[[str, str], None]) -> None:
    """The value's fields cannot take the names of the metadata the source adds (spark/kafka_source.py)."""
    if not settings.get("schema"):
        return
    try:
        names = [column.name for column in parse_ddl(settings["schema"])]
    except DDLError:
        return
    clash = [name for name in names if name in METADATA_NAMES]
    if clash:
        report("schema", f"field {clash[0]!r} has the name of the Kafka metadata the source adds; rename it")


def _topics_of_offsets(settings: dict[str, Any], report: Callable[[str, str], None]) -> None:
    offsets = settings.get("starting-offsets")
    if offsets in (None, "earliest", "latest") or "topics" not in settings:
        return
    unknown = sorted(set(json.loads(offsets)) - set(settings["topics"]))
    if unknown:
        report("starting-offsets", f"names topics the source does not read: {', '.join(unknown)}")


KAFKA_SOURCE_SCHEMA = PluginSchema(
    "Records of Kafka topics read by Spark's Kafka source; offsets live in the pipeline's checkpoint.",
    {
        **KAFKA_CLIENT_SETTINGS,
        "topics": Setting(StringList(allow_single=True), "topics to read"),
        "topic-pattern": Setting(String(), "Java regular expression: read every topic whose name matches"),
        "starting-offsets": Setting(
            StartingOffsets(),
            "where a new pipeline starts: earliest, latest or {topic: {partition: offset}} (-2 earliest, -1 latest); "
            "afterwards the checkpoint's offsets",
            default="earliest",
        ),
        "max-records-per-batch": Setting(
            Integer(minimum=1), "at most this many records per micro-batch (Spark's maxOffsetsPerTrigger)"
        ),
        "fail-on-data-loss": Setting(
            Boolean(),
            "stop (fatal) when records the checkpoint expects are gone (retention, deleted topic); false skips them",
            default=True,
        ),
        "on-topic-recreated": Setting(
            Choice(TOPIC_RECREATED_CHOICES),
            "a topic deleted and created again under its name (its Kafka topic id changed): fail stops the "
            "pipeline (fatal), read-from-start reads the new topic from its earliest offsets",
            default="fail",
        ),
        "format": Setting(Choice(SOURCE_FORMATS), "the value's format", default="json"),
        "schema": Setting(
            DDLSchema(),
            "Spark DDL column list of the value; NOT NULL columns make a record without them a per-record error",
            required_when=("format", ("json", "csv")),
        ),
        "raw-type": Setting(
            Choice(RAW_TYPES),
            "raw values as a `value` column: string (UTF-8; other bytes are a DLQ record) or binary",
            default="string",
            only_when=("format", ("raw",)),
        ),
    },
    checks=(*KAFKA_CLIENT_CHECKS, _topics_of_offsets, _no_metadata_names),
    one_of=(*KAFKA_CLIENT_ONE_OF, ("topics", "topic-pattern")),
)


# --- settings (and their Airflow connection) -> the Java client's properties ---------------------


class KafkaClientConfigError(ValueError):
    """A Kafka plugin's client config cannot be built: names the setting or the connection and what to do."""


# librdkafka (the Airflow Kafka provider's client) names that have no equivalent in Spark's Java client.
_LIBRDKAFKA_ONLY = {
    "ssl.certificate.location": "put the client certificate and key in a keystore: options ssl.keystore.location / ssl.keystore.type",
    "ssl.key.location": "put the client certificate and key in a keystore: options ssl.keystore.location / ssl.keystore.type",
    "ssl.certificate.pem": "use options ssl.keystore.certificate.chain with ssl.keystore.type PEM",
    "ssl.key.pem": "use options ssl.keystore.key with ssl.keystore.type PEM",
    "ssl.ca.pem": "use options ssl.truststore.certificates with ssl.truststore.type PEM",
    "enable.ssl.certificate.verification": "Java's client always verifies the certificate chain",
    "socket.timeout.ms": "Java's client uses request.timeout.ms",
    "message.max.bytes": "Java's producer uses max.request.size",
    "queue.buffering.max.ms": "Java's producer uses linger.ms",
    "statistics.interval.ms": "Spark reports its own metrics",
    "api.version.request": "Java's client always negotiates versions",
    "debug": "set log levels in Spark's log4j2 configuration",
}
# Renamed between librdkafka and Java; ``None``: dropped (handled by the JAAS config).
_RENAMED = {"metadata.broker.list": "bootstrap.servers", "sasl.mechanisms": "sasl.mechanism", "ssl.ca.location": "ssl.truststore.location"}


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jaas_config(mechanism: str, username: str, password: str) -> Secret:
    """``sasl.jaas.config`` for a user name and password (PLAIN or SCRAM), as a Secret."""
    module = _LOGIN_MODULES.get(mechanism.upper())
    if module is None:
        raise KafkaClientConfigError(
            f"a SASL user name and password need sasl mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got {mechanism!r}"
        )
    return Secret(f"{module} required username={_jaas_quote(username)} password={_jaas_quote(password)};")


def _plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, Secret) else value


def _connection_properties(conn_id: str, connection: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A resolved Airflow connection -> (Java properties, SASL user/password to fold into the JAAS config)."""
    where = f"Airflow connection {conn_id!r}"
    conn_type = connection.get("conn_type")
    if conn_type and conn_type != CONNECTION_TYPE:
        raise KafkaClientConfigError(f"{where} has type {conn_type!r}; a Kafka setting `connection` needs type {CONNECTION_TYPE!r}")
    extra = connection.get("extra") or {}
    if isinstance(extra, str):
        try:
            extra = json.loads(extra) if extra.strip() else {}
        except ValueError:
            raise KafkaClientConfigError(f"{where}: its extra is not a JSON object") from None
    if not isinstance(extra, dict):
        raise KafkaClientConfigError(f"{where}: its extra is not a JSON object")
    props: dict[str, Any] = {}
    sasl: dict[str, str] = {}
    for key, value in extra.items():
        if key in _LIBRDKAFKA_ONLY:
            raise KafkaClientConfigError(f"{where}: extra {key!r} has no equivalent in Spark's Kafka client: {_LIBRDKAFKA_ONLY[key]}")
        if not isinstance(value, (str, int, float, bool)):
            raise KafkaClientConfigError(f"{where}: extra {key!r} must be a string, number or boolean")
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if key in ("sasl.username", "sasl.password"):
            sasl[key.split(".")[1]] = text
            continue
        name = _RENAMED.get(key, key)
        if name in ("key.deserializer", "value.deserializer", "key.serializer", "value.serializer", "enable.auto.commit", "auto.offset.reset"):
            continue  # the provider's consumer settings; Spark manages these
        if key == "ssl.ca.location":
            props["ssl.truststore.type"] = "PEM"
        if name == "ssl.endpoint.identification.algorithm" and text == "none":
            text = ""
        props[name] = Secret(text) if is_secret_property(name) else text
    if "bootstrap.servers" not in props and connection.get("host"):
        port = connection.get("port")
        props["bootstrap.servers"] = f"{connection['host']}:{port}" if port else str(connection["host"])
    if "username" not in sasl and connection.get("login"):
        sasl["username"] = str(connection["login"])
    if "password" not in sasl and connection.get("password"):
        sasl["password"] = str(_plain(connection["password"]))
    return props, sasl


def java_client_properties(
    settings: Mapping[str, Any], connections: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The Java Kafka client's properties of a Kafka plugin's settings; secrets stay :class:`Secret`.

    The connection named by ``connection`` (looked up in ``connections``, the control plane's hand-over)
    gives the base; the plugin's own settings override it, and ``options`` override both.
    """
    props: dict[str, Any] = {}
    sasl: dict[str, str] = {}
    conn_id = settings.get("connection")
    if conn_id:
        if not connections or conn_id not in connections:
            raise KafkaClientConfigError(
                f"setting connection: the Airflow connection {conn_id!r} was not handed to the job; run the pipeline "
                f"through RecoveringSparkPipelineOperator or `airflow-conduit run`, which resolve it (the job reads "
                f"it from the driver's environment variable {CONNECTIONS_ENV})"
            )
        props, sasl = _connection_properties(conn_id, connections[conn_id])
    if settings.get("servers"):
        props["bootstrap.servers"] = settings["servers"]
    if settings.get("security-protocol"):
        props["security.protocol"] = settings["security-protocol"]
    if settings.get("sasl-mechanism"):
        props["sasl.mechanism"] = settings["sasl-mechanism"]
    if settings.get("sasl-username"):
        sasl = {"username": str(_plain(settings["sasl-username"])), "password": str(_plain(settings["sasl-password"]))}
    if settings.get("ssl-truststore-location"):
        props["ssl.truststore.location"] = settings["ssl-truststore-location"]
    if settings.get("ssl-truststore-password"):
        props["ssl.truststore.password"] = Secret(str(_plain(settings["ssl-truststore-password"])))
    for key in ("security.protocol", "sasl.mechanism"):
        if key in props:
            props[key] = str(props[key]).upper()
    if sasl:
        if not sasl.get("username") or not sasl.get("password"):
            raise KafkaClientConfigError(
                f"{'Airflow connection ' + repr(conn_id) if conn_id else 'settings'}: a SASL user name needs its password and the other way round"
            )
        props["sasl.jaas.config"] = jaas_config(str(props.get("sasl.mechanism", "PLAIN")), sasl["username"], sasl["password"])
        props.setdefault("sasl.mechanism", "PLAIN")
    props.update(settings.get("options") or {})
    if not props.get("bootstrap.servers"):
        source = f"the Airflow connection {conn_id!r}" if conn_id else "the settings"
        raise KafkaClientConfigError(f"setting servers: {source} give no bootstrap servers (bootstrap.servers)")
    return props
