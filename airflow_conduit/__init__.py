"""airflow-conduit: Conduit-style recovering pipelines on Spark, orchestrated by Airflow.

This top-level module must stay import-free of airflow and pyspark: the pure
parts (recovery/, runs/, pipeline/) and spark/ are shipped to Spark clusters where
Airflow is not installed.
"""

__version__ = "0.3.1"
