"""A pipeline's runs, pure Python (no airflow, no pyspark): the run loop (``service.RunService``), the job
handle, the watch event, the run supervisor, the store of its state, the run report and the state directory.
The operators and ``airflow-conduit run`` follow the same ``RunService``; docs/architecture.md has the map."""
