"""The data plane: the PySpark job that runs a pipeline spec (never imports airflow).

``entrypoint.py`` is the file spark-submit runs; ``runner.PipelineRunner`` is
the Structured Streaming job; ``packaging`` builds the ``--py-files`` archive.
Importing this package imports no pyspark: the runner modules do that.
"""
