"""Where the runner reaches into PySpark's and Py4J's private API to save round trips and imports.

Touches: Py4J's ``protocol.INPUT_CONVERTER`` list and PySpark's ``NumpyScalarConverter`` / ``NumpyArrayConverter``
in it (by class name); ``pyspark.sql.functions.builtin._get_jvm_function``; ``pyspark.sql.classic.column._to_seq``
and ``pyspark.sql.classic.dataframe._to_seq``. On a PySpark upgrade check that those names still exist with the
same signatures (``_get_jvm_function(name, sc)``, ``_to_seq(sc, cols, converter=None)``).

Each change keeps PySpark's own calls and results and only removes round trips or imports a run does not
need. They are pinned by contract tests, so that a PySpark upgrade that renames what they touch fails
``make test`` instead of silently losing the speed-up:

- ``ask_numpy_converters_only_about_numpy``: ``tests/spark/test_session.py``
  (``test_jvm_calls_import_no_pandas_probes...``, ``test_numpy_values_still_reach_the_jvm_converted``);
- ``look_up_jvm_functions_once``: ``tests/spark/test_first_batch.py``
  (``test_a_function_call_is_one_round_trip_and_ten_columns_of_a_seq_two``).
"""

from __future__ import annotations

import sys

from py4j import protocol as py4j_protocol

from airflow_conduit.spark.jvm.columns import function_member, jvm_seq


class _NumpyOnly:
    """One of PySpark's NumPy argument converters, asked only about NumPy values.

    PySpark's NumPy converters (``pyspark.sql.types``) are asked about every non-string argument of every JVM
    call, and each first imports ``pyspark.testing.utils``, which imports pandas, PyArrow and gRPC to learn
    whether they are installed: the first JVM call of a session waited half a second for it. An argument that
    is not a NumPy value is refused here without that import (the converter would refuse it too); a NumPy
    value goes to the converter as before.
    """

    def __init__(self, converter):
        self.converter = converter

    def can_convert(self, obj) -> bool:
        numpy = sys.modules.get("numpy")  # a NumPy value exists only once NumPy is imported
        if numpy is None or not isinstance(obj, (numpy.generic, numpy.ndarray)):
            return False
        return self.converter.can_convert(obj)

    def convert(self, obj, gateway_client):
        return self.converter.convert(obj, gateway_client)


def ask_numpy_converters_only_about_numpy() -> None:
    """Wrap PySpark's NumPy converters in Py4J's converter list (in place: the gateway holds that list)."""
    converters = py4j_protocol.INPUT_CONVERTER
    for i, converter in enumerate(converters):
        if type(converter).__name__ in ("NumpyScalarConverter", "NumpyArrayConverter"):
            converters[i] = _NumpyOnly(converter)


def _to_seq(sc, cols, converter=None):
    """PySpark's ``_to_seq``, through ``columns.jvm_seq`` (ten elements a round trip instead of one)."""
    if converter:
        cols = [converter(c) for c in cols]
    return jvm_seq(sc, cols)


def look_up_jvm_functions_once() -> None:
    """Make each ``pyspark.sql.functions`` call one JVM round trip instead of three, for the whole process.

    PySpark finds the JVM function of every ``F.<name>(...)`` (and the ``Seq`` converter of every ``F.struct``,
    ``F.concat``, ...) by reflection, two round trips, before the one that builds the column; it hands the
    columns of a ``Seq`` over one per round trip (``jvm_seq`` takes ten). A run's plan makes
    thousands of such calls, most of them while its first batch waits; the members found are the same every
    time, so they are kept per SparkContext (the calls and their results are PySpark's own). Idempotent."""
    from pyspark.sql.classic import column as classic_column
    from pyspark.sql.classic import dataframe as classic_dataframe
    from pyspark.sql.functions import builtin

    builtin._get_jvm_function = function_member
    classic_column._to_seq = classic_dataframe._to_seq = _to_seq  # DataFrame.select, withColumns, ...
