"""OpenLineage for pipeline tasks: dataset names and counts (``datasets``, pure), the Spark listener's settings
(``spark_listener``) and the task's facets (``facets``); docs/lineage.md."""
