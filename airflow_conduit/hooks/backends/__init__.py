"""Where a pipeline's Spark driver runs: the strategies of ``SparkPipelineHook``.

- ``local``: spark-submit on this machine (``local[*]``, a standalone master in
  client mode, YARN, Kubernetes), the driver detached from the worker under a
  wrapper (``detached.py``) that holds the state dir's driver lease (``lease.py``).
- ``standalone``: a Spark standalone cluster through the master's REST
  submission API (create, status, kill).

Every backend speaks ``base.JobBackend`` and returns a JSON-serialisable job
handle (ids and paths), so the handle travels in trigger kwargs and a backend
can be rebuilt from it in another process without a connection lookup.

This package's ``__init__`` imports nothing: ``python -m
airflow_conduit.hooks.backends.detached`` must start fast and without Airflow.
"""
