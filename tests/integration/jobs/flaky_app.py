"""A Spark application (no SparkSession needed) that fails as told on its first runs, counted in a file.

argv: COUNTER_FILE FAILURES KIND, KIND one of "transient" (a connection refused, exit 1) or "fatal"
(an analysis error: a table that does not exist, exit 1): what a real job's last words look like to
spark-submit's caller.
"""

import sys
from pathlib import Path

counter, failures, kind = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
runs = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(runs))
if runs <= failures:
    if kind == "fatal":
        print("pyspark.errors.exceptions.captured.AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] The table or view "
              "`sales`.`orders` cannot be found. SQLSTATE: 42P01", flush=True)
    else:
        print("java.net.ConnectException: Connection refused (Connection refused)", flush=True)
    sys.exit(1)
print(f"run {runs}: ok", flush=True)
