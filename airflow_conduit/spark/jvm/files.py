"""Files of any Hadoop file system (s3a, hdfs, abfs, ...) read, stat'd and deleted through the driver's JVM.

Python cannot open a file of a file system only Spark's Hadoop libraries know; the driver's JVM has them, with the
session's Hadoop configuration (credentials, endpoints). A local file never comes here: its callers read it with
Python's own I/O.

Touches: PySpark's ``SparkContext._jvm`` and ``SparkContext._jsc`` (for ``hadoopConfiguration()``); Hadoop's public
``FileSystem`` / ``Path`` API and ``commons-io``'s ``IOUtils.toByteArray`` (on Spark's class path). On a Spark upgrade
check that Spark still ships ``commons-io`` and that ``InputStream.readNBytes`` comes back as ``bytes``. Pinned by
tests/spark/test_jvm_contracts.py (``test_files_...``).
"""

from __future__ import annotations

from typing import Iterator


def _file_system(spark, uri: str):
    """(the Hadoop ``Path`` of ``uri``, its ``FileSystem`` under the session's Hadoop configuration)."""
    path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(uri)
    return path, path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def stat(spark, uri: str) -> tuple[int, int] | None:
    """(size in bytes, modification time in ms) of the file at ``uri``, None when it does not exist."""
    path, fs = _file_system(spark, uri)
    if not fs.exists(path):
        return None
    status = fs.getFileStatus(path)
    return int(status.getLen()), int(status.getModificationTime())


def pieces(spark, uri: str, piece: int, *, at_least: int = 0) -> Iterator[bytes]:
    """The bytes of the file at ``uri`` in pieces of ``piece`` bytes (the last shorter), one Py4J call each; nothing
    when the file does not exist or is smaller than ``at_least`` bytes."""
    path, fs = _file_system(spark, uri)
    if not fs.exists(path) or fs.getFileStatus(path).getLen() < at_least:
        return
    stream = fs.open(path)
    try:
        while True:
            read = stream.readNBytes(piece)  # a byte[] comes back as bytes in one Py4J call
            if not read:
                return
            yield bytes(read)
    finally:
        stream.close()


def read_whole(spark, uri: str) -> bytes:
    """The whole file at ``uri``."""
    path, fs = _file_system(spark, uri)
    stream = fs.open(path)
    try:
        return bytes(spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def delete_tree(spark, uri: str) -> None:
    """Delete the file or folder (with all it holds) at ``uri``; nothing when it does not exist."""
    path, fs = _file_system(spark, uri)
    fs.delete(path, True)
