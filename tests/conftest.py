"""Settings every test layer shares."""

import os

# Spark binds to loopback on these machines (no resolvable external interface needed).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
