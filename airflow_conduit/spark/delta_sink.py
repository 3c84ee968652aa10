"""Destination ``delta``: a Delta Lake table (by path or catalog name), exactly once per batch by Delta's own
idempotent transactions, as an append or a merge (upsert) on key columns. The DLQ can be a Delta table too.

Exactly once: every write of batch ``n`` is one Delta commit carrying a transaction id
(``txnAppId`` = the pipeline, this destination and the identity of the run's checkpoint;
``txnVersion`` = ``n``). Delta records the pair in the table's transaction log in the same commit
as the data and skips a write whose version is not above the one recorded for its app id. So the
table's log is the commit marker: ``committed(n)`` reads it, and the runner writes no marker file
for this destination. Batch ids restart at 0 when a checkpoint is deleted; the checkpoint's identity
(the streaming query's id, which Spark keeps in the checkpoint's ``metadata`` file) is part of the
app id, so a new checkpoint's batches are never taken for the old ones.

An append, with the table's schema, goes through Delta's transaction API (``delta_txn``): its data files are
written by the batch's pass (``write_in_pass``: the destination carries the pass, an observation on it sees every
row) and committed after the DLQ (``commit``), with the transaction id, without the table-state rebuild Delta's
DataFrameWriter runs for ``txnVersion`` on every write. A missing table is created by the first batch's commit
(``create_table`` gives the schema its records are fitted to): a crash before that commit leaves no table, and the
re-run of the batch creates it. A write that adds columns (``merge-schema``), a merge, and the Delta DLQ (created
by its first write, and when its columns grow) go through the DataFrameWriter or MERGE, whose write is its
commit: they do not carry the pass, and read the batch again (from memory: ``batch_pass.reads_again``).

Records are fitted to the table's schema in the batch's plan (``fit_to_table``, a step after the
destination's processors): a record that does not fit (a NOT NULL column missing or null, a value
that does not cast to the column's type, a value in a field the table lacks, a NULL merge key) goes
to the DLQ; a field whose type cannot be cast to the column's at all fails the batch (fatal, 2400).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Callable

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_conduit.pipeline.model import DEAD_LETTER_QUEUE_ID
from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import FatalError
from airflow_conduit.spark import columns as C
from airflow_conduit.spark.jvm import dataframe_calls, delta_txn
from airflow_conduit.spark.destination_base import Destination

PLUGIN = "delta"
FIT_PROCESSOR = "delta.fit"  # the plan step that fits records to the table (processors.PROCESSORS)
SCHEMA_MISMATCH = "airflow_conduit.spark.SchemaMismatchError"  # exception_class of a record that does not fit
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
AUTO_MERGE_CONF = "spark.databricks.delta.schema.autoMerge.enabled"
_ORDER = "__ac_delta_order"
LOG_FOLDER = "_delta_log"


class DeltaTargetError(FatalError):
    """The spec names a Delta target that cannot be used (not a Delta table, no such table, a bad key)."""

    code = codes.INVALID_SPEC


class DeltaSchemaError(FatalError):
    """The batch as a whole does not fit the table (a field's type cannot be cast to the column's at all)."""

    code = codes.ANALYSIS


def _quote_path(location: str) -> str:
    return "delta.`" + location.replace("`", "``") + "`"


def _local_folder(location: str) -> Path | None:
    if location.startswith("file:"):
        return Path(location.removeprefix("file:").removeprefix("//"))
    if "://" in location or location.startswith(("s3a:", "hdfs:", "abfss:", "gs:")):
        return None
    return Path(location)


class DeltaDestination(Destination):
    answers_commits = True  # the table's transaction log says whether a batch is in: no marker file

    def __init__(self, spark, component_id: str, plugin: str, settings: dict[str, Any]):
        super().__init__(spark, component_id, plugin, settings)
        self.mode = str(self.settings.get("mode") or "append")
        key = self.settings.get("key")
        self.keys: list[str] = [key] if isinstance(key, str) else list(key or [])
        self.merge_schema = bool(self.settings.get("merge-schema", False))
        self.spec_file = "the pipeline spec"
        self.setting_path = f"destination {component_id!r}"
        self.scope: Callable[[], str] = lambda: "unbound"
        self._location: str | None = None
        self._last_versions: dict[str, int | None] = {}  # app id -> last version in the table (see committed)
        self._fits_table = False  # this batch's records have the table's schema (set by fit_to_table)
        self._fitted_to: T.StructType | None = None  # the table's schema this batch's records were fitted to
        self._staged: delta_txn.StagedWrite | None = None  # files the pass wrote, committed by commit()
        self._snapshot = None  # the table's snapshot this batch's records were fitted to (its transaction starts there)
        self._fits: dict[tuple, tuple] = {}  # (records' schema, table's schema) -> what fits the records (see _fit)
        self._new_table: T.StructType | None = None  # the schema of the missing table the pass's commit creates

    @property
    def carries_a_pass(self) -> bool:  # type: ignore[override]
        """An append whose records have the table's schema writes its files in the pass and commits them after
        the DLQ (see the module docstring); any other write is its own commit, which must follow the DLQ's."""
        return self.mode == "append" and not self.is_dlq and self._fits_table

    # -- what the runner tells it ------------------------------------------------------------------------

    def bind(self, scope: Callable[[], str], *, spec_file: str | None, setting_path: str) -> None:
        """``scope()``: the run's identity (pipeline and checkpoint), part of the transaction app id."""
        self.scope = scope
        self.spec_file = spec_file or self.spec_file
        self.setting_path = setting_path

    def _where(self, key: str) -> str:
        return f"{self.setting_path}.settings.{key} in {self.spec_file}"

    # -- the target ----------------------------------------------------------------------------------------

    @property
    def is_dlq(self) -> bool:
        return self.id == DEAD_LETTER_QUEUE_ID

    def location(self) -> str:
        """The table's folder: ``path``, or the location the catalog gives for ``table``."""
        if self._location is None:
            if self.settings.get("path"):
                self._location = str(self.settings["path"])
            else:
                self._location = self._catalog_location(str(self.settings["table"]))
        return self._location

    def _catalog_location(self, name: str) -> str:
        try:
            rows = self.spark.sql(f"DESCRIBE DETAIL {name}").select("format", "location").collect()
        except AnalysisException as exc:
            raise DeltaTargetError(
                f"table {name!r} ({self._where('table')}) does not exist or cannot be read: "
                f"{str(exc).splitlines()[0]}. Create it first (CREATE TABLE {name} (...) USING delta), or write by `path`"
            ) from None
        fmt, location = rows[0]["format"], rows[0]["location"]
        if str(fmt).lower() != "delta":
            raise DeltaTargetError(f"table {name!r} ({self._where('table')}) is a {fmt} table, not a Delta table")
        return str(location)

    def is_delta_table(self) -> bool:
        return delta_txn.is_delta_table(self.spark, self.location())

    def check_target(self) -> None:
        """Refuse, before the query starts, a target that is not a Delta table and a mode the DLQ cannot take."""
        if self.is_dlq and self.mode != "append":
            raise DeltaTargetError(f"a Delta dead letter queue only appends: remove `mode: {self.mode}` ({self._where('mode')})")
        location = self.location()  # a missing table is refused here
        if self.is_delta_table():
            return
        folder = _local_folder(location)
        if (folder is not None and folder.exists() and not (folder / LOG_FOLDER).is_dir()  # with one: a table being made
                and any(p for p in folder.iterdir() if not p.name.startswith("."))):
            raise DeltaTargetError(
                f"{location} ({self._where('path')}) holds files but is not a Delta table (no _delta_log): point "
                "`path` at a Delta table or at a new folder, or convert the folder first "
                f"(CONVERT TO DELTA parquet.`{location}` for Parquet files)"
            )

    @property
    def creates_tables(self) -> bool:
        """An append destination creates its missing table before the first batch's pass, so that the batch is
        written by the pass like every later one; a merge and the DLQ leave creation to their first write."""
        return self.mode == "append" and not self.is_dlq

    def create_table(self, columns: T.StructType) -> T.StructType:
        """The missing table's schema: ``columns`` made nullable (what Delta's writer creates from the first batch's
        records). The table is created by the commit of the batch's files (``write_in_pass``, ``commit``), in one
        commit with its data and transaction id, as Delta's writer creates one: a crash before it leaves no table.
        A batch that writes no file creates none; the next batch's does. The table's (empty) ``_delta_log`` folder is
        made first: a folder holding the files of a first batch that died before its commit is a table being made,
        not a folder of other files (``check_target``)."""
        folder = _local_folder(self.location())
        if folder is not None:
            (folder / LOG_FOLDER).mkdir(parents=True, exist_ok=True)
        self._new_table = delta_txn.nullable(columns)
        return self._new_table

    def table_schema(self) -> T.StructType | None:
        """The table's schema now, or None while the table does not exist (its first write creates it)."""
        if not self.is_delta_table():
            return None
        return self.spark.read.format("delta").load(self.location()).schema

    # -- exactly once ------------------------------------------------------------------------------------

    def app_id(self) -> str:
        return f"airflow-conduit/{self.scope()}/{self.id}"

    @staticmethod
    def txn_version(batch_id: int) -> int:
        """Delta versions are >= 0; a DLQ replay's batch ``-k`` is version ``k`` under its own scope."""
        return abs(int(batch_id))

    def last_version(self) -> int | None:
        """The last batch version the table's log records for this destination's app id (None: none yet).

        Read from the snapshot's checksum file (``_delta_log/<version>.crc``, which Delta writes with every
        commit and which lists the table's transaction ids) when it has them: no Spark job. Otherwise (a table
        written without checksums, or with more app ids than a checksum keeps) from the table's state, which
        Delta rebuilds with Spark jobs over the whole log.
        """
        if not self.is_delta_table():
            return None
        snapshot = delta_txn.latest_snapshot(self.spark, self.location())
        app = self.app_id()
        known = delta_txn.checksum_versions(snapshot)  # Snapshot.transactions would rebuild the state: read the file's
        if known is not None:
            return known.get(app)
        found = snapshot.transactions().get(app)
        return int(found.get()) if found.isDefined() else None

    def committed(self, batch_id: int) -> bool:
        """Whether the table has batch ``batch_id``: its log is read once per run and app id; after that the
        last version is the one this destination wrote (one driver per state dir: no one else writes under
        this app id while the run lasts)."""
        app = self.app_id()
        if app not in self._last_versions:
            self._last_versions[app] = self.last_version()
        last = self._last_versions[app]
        return last is not None and last >= self.txn_version(batch_id)

    def _wrote(self, app: str, version: int) -> None:
        """After a write: the table has ``version`` (written now, or skipped by Delta as a duplicate)."""
        if app in self._last_versions:
            last = self._last_versions[app]
            self._last_versions[app] = version if last is None else max(last, version)

    # -- writing -------------------------------------------------------------------------------------------

    def write(self, df: DataFrame, batch_id: int) -> None:
        app, version = self.app_id(), self.txn_version(batch_id)
        self._staged = None
        try:
            self._write(df, app, version)
        except BaseException:
            self._last_versions.pop(app, None)  # the write may or may not be in: ask the log next time
            raise
        self._wrote(app, version)

    def write_in_pass(self, df: DataFrame, batch_id: int) -> None:
        """The pass: the batch's files written in a transaction (one Spark job), committed by ``commit``."""
        self._staged = None
        if not delta_txn.matches(df.schema, self._fitted_to):  # fit_to_table made them so: a bug if not
            raise DeltaSchemaError(
                f"destination {self.id!r}: the records' columns ({df.schema.simpleString()}) are not those of the Delta "
                f"table at {self.location()} they were fitted to; nothing was written"
            )
        new_table, self._new_table = (self._new_table if self._snapshot is None else None), None  # no table at the fit
        txn = delta_txn.Transaction(self.spark, self.location(), self.app_id(), snapshot=self._snapshot, new_table=new_table)
        version = self.txn_version(batch_id)
        if txn.has(version):  # an earlier attempt committed the batch: the pass still runs, writing nothing
            df.write.format("noop").mode("overwrite").save()
            self._wrote(txn.app, version)
            return
        self._staged = txn.write_files(df, version)

    def commit(self, batch_id: int) -> None:
        """Commit the files ``write_in_pass`` wrote (after the DLQ committed the batch's nacked records)."""
        staged, self._staged = self._staged, None
        if staged is None:
            return
        try:
            delta_txn.Transaction.commit(self.spark, staged)
        except BaseException:
            self._last_versions.pop(staged.app, None)
            raise
        self._wrote(staged.app, staged.version)

    def _write(self, df: DataFrame, app: str, version: int) -> None:
        if self.mode == "merge" and self.is_delta_table():
            self._merge(self._last_per_key(df), app, version)
            return
        rows = self._last_per_key(df) if self.mode == "merge" else df
        if self.mode == "append" and delta_txn.matches(rows.schema, self.table_schema()):
            txn = delta_txn.Transaction(self.spark, self.location(), app)
            if not txn.has(version):
                delta_txn.Transaction.commit(self.spark, txn.write_files(rows, version))
            return
        writer = rows.write.format("delta").mode("append").option("txnAppId", app).option("txnVersion", str(version))
        if self.merge_schema or self.is_dlq:  # the DLQ's own columns grow with a replay (replay_count)
            writer = writer.option("mergeSchema", "true")
        writer.save(self.location())

    def _last_per_key(self, df: DataFrame) -> DataFrame:
        """One record per key, the one read last (Delta's MERGE refuses two source rows for one target row)."""
        columns = list(df.columns)
        ordered = df.withColumn(_ORDER, F.monotonically_increasing_id())
        keys = [F.col(C.quote(k)) for k in self.keys]
        last = F.max_by(F.struct(*[F.col(C.quote(c)) for c in columns]), F.col(_ORDER)).alias("r")
        return ordered.groupBy(*keys).agg(last).select(*[F.col("r")[c].alias(c) for c in columns])

    def _merge(self, rows: DataFrame, app: str, version: int) -> None:
        """MERGE INTO the table on the key columns, in one Delta commit carrying the batch's transaction id.

        Delta applies the session settings ``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` to
        MERGE as to writes; they are set on the batch's own session for this statement only.
        """
        spark = rows.sparkSession
        view = f"__conduit_merge_{uuid.uuid4().hex}"
        rows.createOrReplaceTempView(view)
        on = " AND ".join(f"t.{C.quote(k)} = s.{C.quote(k)}" for k in self.keys)
        settings = {TXN_APP_ID_CONF: app, TXN_VERSION_CONF: str(version)}
        if self.merge_schema:
            settings[AUTO_MERGE_CONF] = "true"
        try:
            for key, value in settings.items():
                spark.conf.set(key, value)
            spark.sql(
                f"MERGE INTO {_quote_path(self.location())} AS t USING {view} AS s ON {on} "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )
        finally:
            for key in settings:
                spark.conf.unset(key)
            spark.catalog.dropTempView(view)

    # -- reading (DLQ replay) ------------------------------------------------------------------------------

    def read_all(self) -> DataFrame | None:
        """The whole table (None while it does not exist): what a replay reads from a Delta DLQ."""
        if not self.is_delta_table():
            return None
        return self.spark.read.format("delta").load(self.location())

    # -- fitting records to the table -----------------------------------------------------------------------

    def fit_to_table(self, df: DataFrame) -> DataFrame:
        """The records as the table takes them, each one that does not fit nacked with what is wrong.

        Runs in the batch's plan (after this destination's processors), when the batch's plan is built: the table's
        schema is read at the batch's start, from the snapshot the batch's transaction then starts from (one
        read of the table's log per batch), so a column added to the table is seen by the next batch. The
        columns that fit records to a schema are built once per run for each (records' schema, table's schema);
        a batch that reuses an earlier batch's plan reads the schema with ``refit_unchanged`` instead.
        """
        user = C.user_columns(df)
        self._fits_table = False
        self._snapshot = None
        table = self._schema_now()
        typed = [df.schema[u] for u in user if not isinstance(df.schema[u].dataType, T.NullType)]
        if table is None and self.creates_tables and typed:  # a column of nulls only: Delta's writer drops it too
            table = self.create_table(T.StructType(typed))
        self._fitted_to = table
        if table is None:
            return self._with_problems(df, self._key_problems(user))
        key = (tuple((f.name, f.dataType.json()) for f in df.schema.fields), table.json())
        if key not in self._fits:
            self._fits[key] = self._fit(df, user, table)
        error, select, fits = self._fits[key]
        fitted = df if error is None else dataframe_calls.with_column(df, C.ERROR, error)
        self._fits_table = fits
        return C.select(fitted, select)

    def fit_state(self) -> tuple:
        """What the last ``fit_to_table`` fitted the records to (the table's schema, None without a table) and
        whether a transaction writes them: kept with a batch's plan that a later batch reuses (``refit_unchanged``)."""
        return self._fitted_to, self._fits_table

    def refit_unchanged(self, state: tuple) -> bool:
        """At a batch whose plan is reused instead of built: read the table's schema from its latest snapshot (which
        the batch's transaction starts from, as ``fit_to_table`` does) and, when it is the one ``state`` was fitted
        to, take that fit for this batch (True). False when the table changed: the batch's plan is built again."""
        fitted_to, fits = state
        self._fits_table = False
        self._snapshot = None
        if self._schema_now() != fitted_to:
            return False
        self._fitted_to, self._fits_table = fitted_to, fits
        return True

    def _schema_now(self) -> T.StructType | None:
        """The table's schema from its latest snapshot (kept for the batch's transaction); None while it does not exist."""
        snapshot = delta_txn.latest_snapshot(self.spark, self.location())
        if int(snapshot.version()) < 0:
            return None
        self._snapshot = snapshot
        return T.StructType.fromJson(json.loads(snapshot.schema().json()))

    def _key_problems(self, user: list[str]) -> list[tuple[Column, str]]:
        names = {u.lower(): u for u in user}
        problems: list[tuple[Column, str]] = []
        for key in self.keys:
            if key.lower() not in names:
                raise DeltaTargetError(
                    f"merge key {key!r} ({self._where('key')}) is not a field of the records destination {self.id!r} "
                    f"gets (fields: {', '.join(user)}): name fields the records have, or add it with a processor"
                )
            problems.append((F.col(C.quote(names[key.lower()])).isNull(), f"merge key {key} is null"))
        return problems

    def _fit(self, df: DataFrame, user: list[str], table: T.StructType) -> tuple[Column | None, C.JvmColumns, bool]:
        """(the new error column or None, the select list, whether a transaction can write the result) for records
        of ``df``'s schema into ``table``."""
        names = {u.lower(): u for u in user}
        problems = self._key_problems(user)
        columns = {f.name.lower(): f for f in table.fields}
        for key in self.keys:
            if key.lower() not in columns:
                raise DeltaTargetError(
                    f"merge key {key!r} ({self._where('key')}) is not a column of the table at {self.location()} "
                    f"(columns: {', '.join(f.name for f in table.fields)})"
                )
        selected: list[Column] = []
        for column in table.fields:
            name = names.get(column.name.lower())
            if name is None:
                if not column.nullable:
                    problems.append((F.lit(True), f"NOT NULL column {column.name} is missing"))
                selected.append(F.lit(None).cast(column.dataType).alias(column.name))
                continue
            value = F.col(C.quote(name))
            cast = value if df.schema[name].dataType == column.dataType else self._try_cast(df, name, column)
            if cast is not value:
                problems.append((value.isNotNull() & cast.isNull(),
                                 f"field {name} does not convert to column {column.name} {column.dataType.simpleString()}"))
            if not column.nullable:
                problems.append((value.isNull(), f"NOT NULL column {column.name} is null"))
            selected.append(cast.alias(column.name))
        extra = [u for u in user if u.lower() not in columns]
        if self.merge_schema:
            selected += [F.col(C.quote(u)) for u in extra]
        else:
            for u in extra:
                problems.append((F.col(C.quote(u)).isNotNull(),
                                 f"field {u} is not a column of the table (set merge-schema: true to add it, or drop it with field.exclude)"))
        error = self._problems_error(problems)
        fits = not (self.merge_schema and extra) and delta_txn.takes_transactions(table)
        return error, C.JvmColumns([*selected, *[F.col(C.quote(c)) for c in C.internal_columns(df)]]), fits

    def _try_cast(self, df: DataFrame, name: str, column: T.StructField) -> Column:
        cast = F.col(C.quote(name)).try_cast(column.dataType)
        try:
            df.select(cast)  # analysed now: a cast Spark does not have fails the batch with its name
        except AnalysisException:
            raise DeltaSchemaError(
                f"field {name} ({df.schema[name].dataType.simpleString()}) cannot be converted to column {column.name} "
                f"({column.dataType.simpleString()}) of the Delta table at {self.location()} (destination {self.id!r}, "
                f"{self.spec_file}): the table's schema and the records' no longer match; change the table or the "
                "pipeline's processors"
            ) from None
        return cast

    def _with_problems(self, df: DataFrame, problems: list[tuple[Column, str]]) -> DataFrame:
        error = self._problems_error(problems)
        return df if error is None else df.withColumn(C.ERROR, error)

    def _problems_error(self, problems: list[tuple[Column, str]]) -> Column | None:
        """The record's error column with the schema problems set (the first error wins), None without problems."""
        if not problems:
            return None
        failed = F.lit(False)
        for condition, _ in problems:
            failed = failed | F.coalesce(condition, F.lit(False))
        message = F.concat(
            F.lit(f"record does not fit the Delta table of destination {self.id}: "),
            F.concat_ws("; ", *[F.when(condition, F.lit(text)) for condition, text in problems]),
        )
        error = C.error_struct(stage="destination", component_id=self.id, component_type=PLUGIN,
                               exception_class=SCHEMA_MISMATCH, message=message)
        return F.coalesce(F.col(C.ERROR), F.when(C.active(), F.when(F.coalesce(failed, F.lit(False)), error)))


def fit_processor(df: DataFrame, proc, ctx) -> DataFrame:
    """``processors.PROCESSORS[FIT_PROCESSOR]``: the destination's ``fit_to_table`` as a step of its branch."""
    destination: DeltaDestination = proc.settings["destination"]
    ctx.where = ("destination", destination.id, PLUGIN)
    return destination.fit_to_table(df)
