"""Launchers: start a Spark pipeline job somewhere, tell its status, stop it.

Every launcher speaks the same small interface (``base.Launcher``) and returns
a JSON-serialisable job handle, so the handle can travel through Airflow
deferrals and be re-read by a trigger in another process.

- ``local``: spark-submit on this machine (``local[*]`` by default; YARN and
  Kubernetes masters take the same spark-submit path), driver detached from
  the calling process.
- ``standalone``: a Spark standalone cluster through the master's REST
  submission API (create, status, kill).

This package's ``__init__`` imports nothing: ``python -m
airflow_conduit.launchers.detached`` must start fast and without Airflow.
"""
