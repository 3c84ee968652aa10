"""What a micro-batch's file scan reads of each file, from Spark's physical scan of the batch.

The input-file check (``input_files.py``) asks, for a file still being written when the batch listed it, how many of
its bytes the batch reads: Spark's listing is the only record of that, in the ``FileScanRDD`` of the batch's plan.

Touches: PySpark's ``DataFrame._jdf``; Spark's internal ``QueryExecution.logical().rdd()`` of a micro-batch
(a ``LogicalRDD``), ``RDD.dependencies()``, ``FileScanRDD.filePartitions`` and ``PartitionedFile.filePath / start /
length``. On a Spark upgrade check those names (``FileScanRDD`` is matched by its class name's end). Pinned by
tests/spark/test_jvm_contracts.py (``test_file_scan_...``).
"""

from __future__ import annotations


def listed_lengths(batch) -> dict[str, int]:
    """The bytes of each file a micro-batch's file scan reads (what Spark listed: the end of its last split), from
    the batch's ``FileScanRDD`` (a few Py4J calls per file: asked only when a file of the batch was still written)."""
    lengths: dict[str, int] = {}
    todo = [batch._jdf.queryExecution().logical().rdd()]
    while todo:
        rdd = todo.pop()
        if rdd.getClass().getName().endswith(".FileScanRDD"):
            partitions = rdd.filePartitions()
            for k in range(partitions.size()):
                for part in partitions.apply(k).files():
                    uri = part.filePath().toString()
                    lengths[uri] = max(lengths.get(uri, 0), int(part.start()) + int(part.length()))
        dependencies = rdd.dependencies()
        todo += [dependencies.apply(k).rdd() for k in range(dependencies.size())]
    return lengths
