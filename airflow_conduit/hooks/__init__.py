"""Hooks: ``spark_pipeline.SparkPipelineHook`` owns the Spark connection and the job (submit, status, kill).

Imports nothing here: the driver wrapper (``backends.detached``) starts without Airflow.
"""
