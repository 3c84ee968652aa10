"""Where ``columns`` and ``analysed_plan`` import ``jvm_member`` from until they import ``spark/jvm/refs.py`` itself."""

from airflow_conduit.spark.jvm.refs import jvm_member, jvm_ref, none, some  # noqa: F401 - re-exported
