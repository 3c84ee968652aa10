"""Spark Declarative Pipelines (SDP) under the recovery engine: the runner, its events, expectations and quarantine."""
