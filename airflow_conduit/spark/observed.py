"""A pass's observed metrics, read without bringing the DLQ rows into Python.

PySpark's ``Observation.get`` pickles the whole metrics row into Python. The
pass's row holds up to ``DLQ_COLLECT_LIMIT`` DLQ rows, which then went back
to the JVM for the DLQ write: about a second per batch of 20,000 bad records,
on the driver, while the executors wait. Here the row stays in the JVM as a
one-row DataFrame (a local relation: reading it runs no Spark job); the small
metrics come to Python, the DLQ rows go to the DLQ write as a DataFrame.

PySpark's private Observation API (the JVM observation, whose ``future`` is what ``Observation.get`` waits on) is
used in ``spark/jvm/observations.py``; its contract is tested in tests/spark/test_observed.py.

The wait is bounded (``wait_seconds``): Spark fills an observation from a listener of the session that ran the
action, and waits for it without a deadline. An observation whose action ran elsewhere, or never ran, would hold
the batch (and the run) for ever; here it ends the batch with ``ObservationTimeout`` (code 1220).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from airflow_conduit.recovery.errors import BatchDeadlineExceeded
from airflow_conduit.spark.columns import JvmColumns, select
from airflow_conduit.spark.jvm import observations

PACKED = "__packed"  # the column of the sizes and fields read as one JSON text (see ObservedMetrics._values_select)
JSON_EXACT = frozenset({"string", "long", "integer", "short", "byte", "boolean"})  # types a JSON value gives back as they are
OBSERVATION_WAIT_SECONDS = 3600.0  # the longest wait for an observation when the caller gives none


class ObservationTimeout(BatchDeadlineExceeded):
    """The observed metrics did not arrive in time: the action that fills them ended without filling them."""


def _observed_row(observation: Observation, wait_seconds: float):
    """The observed row as a JVM ``Row`` (``observations.observed_row``); ``ObservationTimeout`` when it did not
    arrive within ``wait_seconds``."""
    row = observations.observed_row(observation, wait_seconds)
    if row is not None:
        return row
    raise ObservationTimeout(
        f"the observed metrics of {observations.name_of(observation)!r} did not arrive within {wait_seconds:g}s "
        "(pipeline.batch-deadline); the run ends and the batch runs again on the restart")


def observe(df: DataFrame, observation: Observation, metrics: JvmColumns) -> DataFrame:
    """``df.observe(observation, *metrics.columns)`` with the metrics' JVM list built once per run (one round trip);
    sets what ``Observation.get`` and ``_observed_row`` read (``observations.observe``)."""
    return observations.observe(df, observation, metrics.columns[0], metrics.rest)


class ObservedMetrics:
    """The metrics of one observation: ``values`` (all but ``heavy``) in Python, the ``heavy`` ones as DataFrames."""

    def __init__(
        self,
        spark: SparkSession,
        observation: Observation,
        heavy: tuple[str, ...] = (),
        fields: tuple[tuple[str, str], ...] = (),
        selects: dict | None = None,
        *,
        wait_seconds: float = OBSERVATION_WAIT_SECONDS,
    ):
        """``fields``: (heavy metric, field) pairs read with the values, in the same collect (see ``field``).
        ``selects``: where the select lists are kept between observations of the same shape (one run's batches).
        ``wait_seconds``: the longest wait for the observed action's metrics (``_observed_row``)."""
        self._selects = {} if selects is None else selects
        self._jrow = _observed_row(observation, wait_seconds)
        self.frame = observations.row_frame(spark, self._jrow, self._selects)
        self.heavy = tuple(h for h in heavy if h in self.frame.columns)
        light = [c for c in self.frame.columns if c not in self.heavy]
        sizes = {h: f"__size_of_{h}" for h in self.heavy}  # read with the values: one collect, not one more per size
        wanted = {(h, f): f"__field_{i}" for i, (h, f) in enumerate(fields) if h in self.heavy}
        key = ("values", tuple(self.frame.columns), self.heavy, tuple(wanted))
        if key not in self._selects:
            self._selects[key] = self._values_select(light, sizes, wanted)
        read, packed = self._selects[key]
        row = select(self.frame, read).collect()[0].asDict(recursive=False) if read else {}
        if packed:
            row.update(json.loads(row.pop(PACKED)))
        self._sizes = {h: int(row.pop(alias)) for h, alias in sizes.items()}
        self._fields = {key: list(row.pop(alias, None) or []) for key, alias in wanted.items()}
        self.values: dict[str, Any] = row

    def _values_select(self, light: list[str], sizes: dict[str, str], wanted: dict[tuple[str, str], str]):
        """The select list that reads the values, the heavy arrays' sizes and the wanted fields in one collect, and
        whether the sizes and fields come packed in one JSON text (``PACKED``): those of a type JSON carries exactly
        (``JSON_EXACT``) do. A field of an array of 20,000 entries is then parsed in C from one string, where as
        an array it is pickled value by value in the JVM and made into Python objects one by one."""
        element = {h: self.frame.schema[h].dataType.elementType for h in self.heavy}
        exact = {(h, f): alias for (h, f), alias in wanted.items() if element[h][f].dataType.typeName() in JSON_EXACT}
        packed = [F.coalesce(F.size(h), F.lit(0)).alias(alias) for h, alias in sizes.items()]
        packed += [F.col(h)[f].alias(alias) for (h, f), alias in exact.items()]
        rest = [F.col(h)[f].alias(alias) for (h, f), alias in wanted.items() if (h, f) not in exact]
        columns = [*[F.col(c) for c in light], *rest]
        if packed:
            columns.append(F.to_json(F.struct(*packed), {"ignoreNullFields": "false"}).alias(PACKED))
        return (JvmColumns(columns) if columns else None), bool(packed)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def size(self, name: str) -> int:
        """How many elements the heavy array metric ``name`` holds (0 when it is NULL)."""
        if name in self._sizes:
            return self._sizes[name]
        return int(self.frame.select(F.coalesce(F.size(name), F.lit(0))).collect()[0][0])

    def field(self, name: str, *path: str) -> list[Any]:
        """One (nested) field of every element of the heavy array metric ``name`` (in its order)."""
        if len(path) == 1 and (name, path[0]) in self._fields:
            return self._fields[(name, path[0])]
        column = F.col(name)
        for part in path:
            column = column[part]
        values = self.frame.select(column).collect()[0][0]
        return list(values or [])

    def fields(self, name: str, keys: tuple[str, ...]) -> list[tuple]:
        """The fields ``keys`` of every element of the heavy array metric ``name`` (in its order), read at once."""
        if all((name, key) in self._fields for key in keys):
            return list(zip(*(self._fields[(name, key)] for key in keys)))
        row = self.frame.select(*[F.col(name)[key] for key in keys]).collect()[0]
        return list(zip(*(values or [] for values in row)))

    def elements(self, name: str, field: str | None = None, *, ordinal: str | None = None) -> DataFrame:
        """The elements (structs) of the heavy array metric ``name``, one row each, in order: their fields as
        columns, or those of their struct ``field``; with ``ordinal``, also each element's index under that name."""
        key = ("elements", name, field, ordinal)
        if key not in self._selects:
            exploded = F.posexplode(name).alias(ordinal, "e") if ordinal else F.explode(name).alias("e")
            self._selects[key] = (
                JvmColumns([exploded]), JvmColumns([*([F.col(ordinal)] if ordinal else []), F.col(f"e.{field}.*" if field else "e.*")])
            )
        first, then = self._selects[key]
        return select(select(self.frame, first), then)

    def local_elements(self, name: str) -> DataFrame:
        """The elements (structs) of the heavy array metric ``name`` as rows of a local relation of their own, in
        order: a projection or filter of it is computed in the driver (Spark folds it into the relation) and
        reading it runs no Spark job, where the rows of ``elements`` (a generator over the metrics' row) take one."""
        key = ("local", name, tuple(self.frame.columns))
        if key not in self._selects:  # the array's place and element type, looked up once per shape
            index = self.frame.columns.index(name)
            self._selects[key] = (index, observations.array_element_type(self._jrow, index))
        index, element = self._selects[key]
        return observations.array_frame(self.frame.sparkSession, self._jrow, index, element)
