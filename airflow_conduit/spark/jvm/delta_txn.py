"""Delta's transaction API, through Py4J: a batch's files written by its pass, committed after its DLQ.

Delta's DataFrameWriter with ``txnAppId`` / ``txnVersion`` asks the table for the app id's last version
through ``Snapshot.transactions``, which rebuilds the table's whole state with Spark jobs on every write
(Delta's checksum lists the transaction ids too, but that path does not read it). Here a write is:

1. ``DeltaLog.startTransaction``: the transaction starts from the snapshot the batch's records were fitted to
   (read at the batch's start: one listing of ``_delta_log`` per batch), or reads the latest;
   the app id's last version comes from the snapshot's checksum (``_delta_log/<version>.crc``), or from
   ``txnVersion`` (the rebuild) for a table whose checksum does not list its transaction ids; the app id
   is registered as read, so a concurrent commit under it is a conflict Delta reports (as with ``txnVersion``);
2. ``OptimisticTransaction.writeFiles(df)``: the data files, in one Spark job (the batch's pass: an
   observation on ``df`` is reported), nothing visible yet;
3. ``commit(files + SetTransaction(appId, version), WRITE append)``: one commit; or none when the pass wrote
   no rows.

Only for a table whose schema the records have exactly (``matches``); a missing table is created by the first
batch's commit (``new_table``: its metadata in that commit): creating a Delta DLQ table, adding columns (``merge-schema``) and tables with generated, identity or default columns go through the
DataFrameWriter, which knows how.

Touches: Delta's internal Scala API (``DeltaLog.forTable / update / startTransaction``, ``Snapshot.checksumOpt``
and its ``setTransactions``, ``OptimisticTransaction.txnVersion / readTxn / writeFiles / commit /
updateMetadataForNewTable``, the case classes ``actions.Metadata`` (its ``apply`` and default arguments by
position), ``actions.SetTransaction`` and ``DeltaOperations.Write`` (nine arguments)), Delta's public
``DeltaTable.isDeltaTable``, and PySpark's ``_jvm``, ``_jsparkSession`` and ``DataFrame._jdf``. On a Delta upgrade
check each of those signatures (a case class that gains a field moves the positional arguments). This module is
the only user of Delta's Scala API; its contract (the calls it makes exist in the Delta release the project pins)
is tested in tests/spark/test_delta_txn.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from airflow_conduit.spark.jvm.refs import jvm_ref, none, some

# Field metadata of a column Delta fills itself: such a table is written by the DataFrameWriter.
_FILLED_BY_DELTA = ("delta.generationExpression", "delta.identity.start", "CURRENT_DEFAULT")


def delta_log(spark: SparkSession, location: str):
    """The table's ``DeltaLog`` (Delta caches one per path)."""
    return jvm_ref(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, location)


def is_delta_table(spark: SparkSession, location: str) -> bool:
    """Whether ``location`` holds a Delta table (Delta's ``DeltaTable.isDeltaTable``)."""
    jvm = spark.sparkContext._jvm
    return bool(jvm.io.delta.tables.DeltaTable.isDeltaTable(spark._jsparkSession, location))


def latest_snapshot(spark: SparkSession, location: str):
    """The table's latest snapshot (one listing of its ``_delta_log``)."""
    return delta_log(spark, location).update(False, none(spark), none(spark))


def checksum_versions(snapshot) -> dict[str, int] | None:
    """app id -> last version, from the snapshot's checksum file; None when the checksum does not list them
    (no checksum, or a table with more app ids than Delta keeps in one). Reads no data: no Spark job."""
    checksum = snapshot.checksumOpt()
    known = checksum.get().setTransactions() if checksum.isDefined() else checksum
    if not known.isDefined():
        return None
    versions: dict[str, int] = {}
    entries = known.get().iterator()
    while entries.hasNext():
        entry = entries.next()
        versions[str(entry.appId())] = int(entry.version())
    return versions


def _untyped(data_type: T.DataType) -> Any:
    """A type without its nullability (a record's column may be nullable where the table's is not: Delta
    checks NOT NULL columns while it writes)."""
    if isinstance(data_type, T.StructType):
        return ("struct", tuple((f.name, _untyped(f.dataType)) for f in data_type.fields))
    if isinstance(data_type, T.ArrayType):
        return ("array", _untyped(data_type.elementType))
    if isinstance(data_type, T.MapType):
        return ("map", _untyped(data_type.keyType), _untyped(data_type.valueType))
    return data_type.simpleString()


def nullable(data_type: Any) -> Any:
    """``data_type`` with every field, array element and map value nullable (Delta's ``asNullable``: the schema
    its writer gives a table it creates)."""
    if isinstance(data_type, T.StructType):
        return T.StructType([T.StructField(f.name, nullable(f.dataType), True, f.metadata) for f in data_type.fields])
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(nullable(data_type.elementType), True)
    if isinstance(data_type, T.MapType):
        return T.MapType(nullable(data_type.keyType), nullable(data_type.valueType), True)
    return data_type


def takes_transactions(table: T.StructType | None) -> bool:
    """Whether a transaction may write ``table`` at all: it exists and has no column Delta fills itself."""
    return table is not None and not any(key in f.metadata for f in table.fields for key in _FILLED_BY_DELTA)


def matches(records: T.StructType, table: T.StructType | None) -> bool:
    """Whether ``records`` can be written into ``table`` by a transaction as they are: the same columns with the
    same types, in the same order, and no column Delta fills itself."""
    return takes_transactions(table) and _untyped(records) == _untyped(table)


@dataclass
class StagedWrite:
    """Files a transaction wrote, not committed yet."""

    txn: Any
    files: Any
    app: str
    version: int

    @property
    def empty(self) -> bool:
        return bool(self.files.isEmpty())


class Transaction:
    """One Delta transaction on the table at ``location`` under ``app``."""

    def __init__(self, spark: SparkSession, location: str, app: str, snapshot: Any = None,
                 new_table: T.StructType | None = None):
        """``snapshot``: the table's snapshot to start from (the one the batch's records were fitted to), else the latest.
        ``new_table``: the schema of a table that does not exist yet, created by this transaction's commit."""
        self.spark = spark
        self.txn = delta_log(spark, location).startTransaction(none(spark), none(spark) if snapshot is None else some(spark, snapshot))
        self.app = app
        if new_table is not None:
            self._create(location, new_table)
        known = checksum_versions(self.txn.snapshot())
        if known is None:
            found = int(self.txn.txnVersion(app))  # rebuilds the state; registers the app id as read
            self.last: int | None = found if found >= 0 else None
        else:
            getattr(self.txn.readTxn(), "$plus$eq")(app)  # what txnVersion records: a concurrent commit of app conflicts
            self.last = known.get(app)

    def _create(self, location: str, schema: T.StructType) -> None:
        """Make the commit create the table with ``schema`` (its metadata and protocol in the same commit as the
        first batch's files and transaction id, as Delta's own writer creates a table)."""
        if int(self.txn.snapshot().version()) >= 0:
            raise RuntimeError(f"the Delta table at {location} was created by another writer while the batch ran; "
                               "the batch is run again on it")
        jvm = self.spark.sparkContext._jvm
        metadata = jvm.org.apache.spark.sql.delta.actions.Metadata
        default = [getattr(metadata, f"apply$default${i}")() for i in range(1, 9)]  # id, name, ..., createdTime
        schema_string = self.spark._jsparkSession.parseDataType(schema.json()).json()
        self.txn.updateMetadataForNewTable(metadata.apply(*default[:4], schema_string, *default[5:]))

    def has(self, version: int) -> bool:
        """Whether the table has ``version`` of the app id already (an earlier attempt committed it)."""
        return self.last is not None and self.last >= version

    def write_files(self, df: DataFrame, version: int) -> StagedWrite:
        """The files of ``df`` (one Spark job), to be committed by ``commit``."""
        return StagedWrite(self.txn, self.txn.writeFiles(df._jdf), self.app, version)

    @staticmethod
    def commit(spark: SparkSession, staged: StagedWrite) -> int | None:
        """Commit the files with the app id's new version; the table version made, None when there were no files."""
        if staged.empty:
            return None
        marker = jvm_ref(spark, "org.apache.spark.sql.delta.actions.SetTransaction")(
            staged.app, staged.version, some(spark, int(time.time() * 1000)))
        empty = none(spark)
        no_partitions = some(spark, staged.files.take(0))  # an empty Seq: the table is not partitioned by the write
        append = jvm_ref(spark, "SaveMode.Append", lambda jvm: jvm.org.apache.spark.sql.SaveMode.Append)
        operation = jvm_ref(spark, "org.apache.spark.sql.delta.DeltaOperations$Write")(
            append, no_partitions, empty, empty, empty, empty, empty, empty, empty
        )
        return int(staged.txn.commit(staged.files.appended(marker), operation))
