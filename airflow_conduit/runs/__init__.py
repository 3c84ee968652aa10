"""A pipeline's runs, pure Python (no airflow, no pyspark): the run report, the state directory, the
watch event, the run supervisor and the store of its state. The operators and ``airflow-conduit run``
drive the same ``RunSupervisor``; docs/architecture.md has the map."""
