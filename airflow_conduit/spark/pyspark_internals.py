"""Where ``runner`` imports ``pyspark_internals`` from until it imports ``spark/jvm/pyspark_internals.py`` itself."""

from airflow_conduit.spark.jvm.pyspark_internals import (  # noqa: F401 - re-exported
    ask_numpy_converters_only_about_numpy,
    look_up_jvm_functions_once,
)
