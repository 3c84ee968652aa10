"""Pipeline spec: the pure model of a Conduit-style pipeline (no airflow, no pyspark)."""
