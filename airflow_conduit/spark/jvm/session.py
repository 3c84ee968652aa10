"""The driver JVM's class loader: jars added after launch, and JDBC connections made through it.

A jar in ``spark.jars`` set after the JVM started (a local session, a JDBC driver from Debian's package) reaches the
executors but not the driver's class loader; the runner's own driver-side clients (a JDBC destination's transaction,
Kafka's admin client) need their classes there.

Touches: PySpark's ``SparkContext._jvm``; that Spark's context class loader of the driver thread is a
``URLClassLoader`` with a public ``addURL`` (Spark's ``MutableURLClassLoader``). On a Spark upgrade check that
``addURL`` is still there and public. Pinned by tests/spark/test_jvm_contracts.py (``test_session_...``).
"""

from __future__ import annotations

import os
from typing import Callable, Iterable


def ensure_loadable(spark, class_name: str, jars: Callable[[], Iterable[str]]) -> None:
    """Make ``class_name`` loadable by the driver: when it is not, add ``jars()`` (paths, ``file:`` URIs; the missing
    ones skipped) to the driver's class loader. Raises, naming the class, when it is still missing."""
    jvm = spark.sparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        loader.loadClass(class_name)
        return
    except Exception:  # noqa: BLE001 - py4j wraps ClassNotFoundException
        pass
    for jar in jars():
        path = jar.removeprefix("file:")
        if os.path.exists(path):
            loader.addURL(jvm.java.io.File(path).toURI().toURL())
    loader.loadClass(class_name)  # raises with the class name when it is still missing


def jdbc_connect(spark, driver_class: str, url: str, properties: dict[str, str]):
    """A ``java.sql.Connection`` to ``url`` on the driver, by the driver class loaded from Spark's class loader
    (``spark.jars``); None when the driver does not take the URL (JDBC's own answer)."""
    jvm = spark.sparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    driver = loader.loadClass(driver_class).newInstance()
    jprops = jvm.java.util.Properties()
    for key, value in properties.items():
        jprops.setProperty(key, value)
    return driver.connect(url, jprops)
