"""Destination connectors (also used for the DLQ), each idempotent per batch.

- file: ``<path>/batch_id=<n>/`` is overwritten as a whole for batch n, so
  re-running a batch replaces its partial output. Written in parallel: one
  file per input partition, records in read order within a file, no order
  across files. Read the folder with Spark and ``batch_id`` appears as a
  partition column. Rows already on the driver (a DLQ's) are written by it as
  one file when the folder is local and the format json or parquet
  (``write_rows``, ``local_batch_files``).
- jdbc: Spark writes the batch to a staging table ``<table>__conduit_b<n>``;
  then, in one database transaction, rows of batch n are deleted from the
  target, the staging rows inserted (upserted on ``key`` columns with
  PostgreSQL's ``ON CONFLICT`` when ``key`` is set) and the staging table
  dropped. The target gets a ``_conduit_batch_id`` column. A crash before the
  commit leaves the target untouched; after it, the re-run replaces the rows.
- delta: a Delta Lake table, exactly once by Delta's idempotent transactions (``delta_sink.py``).
- log: each record is logged on the driver at ``level`` (secrets redacted).
  A log cannot be rolled back: a crash between logging and the commit marker
  logs that batch again (at least once).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_conduit.pipeline.secrets import redact
from airflow_conduit.spark import local_batch_files
from airflow_conduit.spark.jvm import files as hadoop_files
from airflow_conduit.spark.jvm import session as jvm_session
from airflow_conduit.spark.destination_base import Destination  # noqa: F401 - re-exported: callers import it here

BATCH_COLUMN = "_conduit_batch_id"
LEVELS = {"info": logging.INFO, "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR}


class FileDestination(Destination):
    def owned_folder(self):
        return local_batch_files.local_folder(str(self.settings["path"]))

    def batch_path(self, batch_id: int) -> str:
        return f"{str(self.settings['path']).rstrip('/')}/batch_id={batch_id}"

    def write(self, df: DataFrame, batch_id: int) -> None:
        fmt = self.settings.get("format", "json")
        writer = df.write.mode("overwrite")
        if fmt == "csv":
            writer = writer.option("header", str(bool(self.settings.get("header", True))).lower())
        writer.format(fmt).save(self.batch_path(batch_id))

    def discard_empty_batch(self, batch_id: int) -> None:
        """Delete ``batch_id=<n>/``, written with no rows (only Spark's marker files), through Hadoop's file system."""
        hadoop_files.delete_tree(self.spark, self.batch_path(batch_id))

    @property
    def writes_rows(self) -> bool:
        return local_batch_files.can_write(str(self.settings["path"]), str(self.settings.get("format", "json")), ())

    def write_rows(self, columns: tuple[str, ...], types: tuple[str, ...], rows: list[tuple], batch_id: int) -> bool:
        """A local json or parquet folder: one file written by the driver (``local_batch_files``)."""
        fmt, path = str(self.settings.get("format", "json")), str(self.settings["path"])
        if not local_batch_files.can_write(path, fmt, types):
            return False
        local_batch_files.write_batch(path, batch_id, fmt, columns, types, rows)
        return True


def _quote_ident(name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


class JdbcDestination(Destination):
    def _properties(self) -> dict[str, str]:
        props = {"driver": str(self.settings.get("driver", "org.postgresql.Driver"))}
        if self.settings.get("user"):
            props["user"] = str(self.settings["user"])
        if self.settings.get("password"):
            props["password"] = str(self.settings["password"])
        return props

    def connect(self):
        """A java.sql.Connection on the driver, loading the driver class from Spark's class loader (spark.jars)."""
        props = self._properties()
        credentials = {key: props[key] for key in ("user", "password") if key in props}
        conn = jvm_session.jdbc_connect(self.spark, props["driver"], str(self.settings["url"]), credentials)
        if conn is None:
            raise ConnectionError(f"JDBC driver {props['driver']} does not accept the URL of destination {self.id!r}")
        return conn

    def write(self, df: DataFrame, batch_id: int) -> None:
        url = str(self.settings["url"])
        table = str(self.settings["table"])
        staging = f"{table}__conduit_b{batch_id}"
        props = self._properties()
        rows = df.withColumn(BATCH_COLUMN, F.lit(batch_id).cast("long"))
        rows.write.jdbc(url, staging, mode="overwrite", properties=props)
        empty = self.spark.createDataFrame([], rows.schema)  # not rows.limit(0): that would run the batch again
        empty.write.jdbc(url, table, mode="append", properties=props)  # creates the target if missing
        cols = ", ".join(_quote_ident(c) for c in rows.columns)
        insert = f"INSERT INTO {_quote_ident(table)} ({cols}) SELECT {cols} FROM {_quote_ident(staging)}"
        key = self.settings.get("key")
        if key:
            keys = [key] if isinstance(key, str) else list(key)
            updates = ", ".join(f"{_quote_ident(c)} = EXCLUDED.{_quote_ident(c)}" for c in rows.columns if c not in keys)
            conflict = ", ".join(_quote_ident(k) for k in keys)
            insert += f" ON CONFLICT ({conflict}) DO " + (f"UPDATE SET {updates}" if updates else "NOTHING")
        conn = self.connect()
        try:
            conn.setAutoCommit(False)
            stmt = conn.createStatement()
            stmt.executeUpdate(f"DELETE FROM {_quote_ident(table)} WHERE {_quote_ident(BATCH_COLUMN)} = {int(batch_id)}")
            stmt.executeUpdate(insert)
            stmt.executeUpdate(f"DROP TABLE {_quote_ident(staging)}")
            conn.commit()
        except Exception:
            try:
                conn.rollback()
            finally:
                raise
        finally:
            conn.close()


def redact_record(record: dict[str, Any], secret_values: tuple[str, ...] = ()) -> str:
    """A record as a JSON line for a log: secret-looking fields masked, known secret values masked anywhere."""
    text = json.dumps(redact(record), default=str, sort_keys=False)
    for value in secret_values:
        if value and len(value) >= 3:
            text = text.replace(value, "***")
    return text


class LogDestination(Destination):
    carries_a_pass = False  # toLocalIterator: the action returns before the rows are read
    secret_values: tuple[str, ...] = ()

    def write(self, df: DataFrame, batch_id: int) -> None:
        logger = logging.getLogger(f"airflow_conduit.spark.log.{self.id}")
        level = LEVELS.get(str(self.settings.get("level", "warn")).lower(), logging.WARNING)
        message = str(self.settings.get("message", "record delivery failed"))
        for row in df.coalesce(1).toLocalIterator():  # one job, rows streamed (not one job per partition)
            logger.log(level, "%s [batch %s]: %s", message, batch_id, redact_record(row.asDict(recursive=True), self.secret_values))


PLUGINS = {"file": FileDestination, "jdbc": JdbcDestination, "log": LogDestination}


def plugin_class(plugin: str, component_id: str) -> type[Destination]:
    """The class writing ``plugin``; Kafka's and Delta's modules are imported only by pipelines that use them."""
    if plugin == "kafka":
        from airflow_conduit.pipeline.model import DEAD_LETTER_QUEUE_ID
        from airflow_conduit.spark.kafka_sink import KafkaDeadLetterQueue, KafkaDestination

        return KafkaDeadLetterQueue if component_id == DEAD_LETTER_QUEUE_ID else KafkaDestination
    if plugin == "delta":
        from airflow_conduit.spark.delta_sink import DeltaDestination

        return DeltaDestination
    return PLUGINS[plugin]


def make_destination(
    spark: SparkSession, component_id: str, plugin: str, settings: dict[str, Any], secret_values: tuple[str, ...] = ()
) -> Destination:
    plugin = plugin.removeprefix("builtin:")
    dest = plugin_class(plugin, component_id)(spark, component_id, plugin, settings)
    dest.secret_values = secret_values
    return dest
