"""The floor of the small run: a plain PySpark script that reads the example's 15 records and writes them.

What a data engineer would write by hand for the same input, without the product: start a
SparkSession (Spark's defaults, ``local[*]``), read the JSON lines with the example's schema, write
them as Parquet, stop. Run as a script of its own (``python bench/small_run_floor.py INPUT OUTPUT``)
so that its wall time includes Python's start and PySpark's import like the CLI's does; prints its
milestones (epoch seconds) as one JSON line.
"""

from __future__ import annotations

import json
import sys
import time

STARTED = time.time()  # noqa: E402 - before the pyspark import, which is part of the floor

from pyspark.sql import SparkSession  # noqa: E402

SCHEMA = "id INT, customer STRING, amount DOUBLE, currency STRING, ts TIMESTAMP, payload STRING"


def main(source: str, target: str) -> None:
    imported = time.time()
    spark = SparkSession.builder.master("local[*]").appName("small-run-floor").getOrCreate()
    session = time.time()
    spark.read.schema(SCHEMA).json(source).write.mode("overwrite").parquet(target)
    written = time.time()
    spark.stop()
    stopped = time.time()
    print(json.dumps({"started": STARTED, "imported": imported, "session": session, "written": written,
                      "stopped": stopped}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
