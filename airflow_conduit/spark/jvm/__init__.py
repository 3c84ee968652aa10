"""Spark's, Kafka's and Delta's private and internal API, one module per concern (docs/architecture.md)."""
