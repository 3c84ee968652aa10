"""Benchmarks of airflow-conduit: ``make bench`` (``python -m bench.run_all``); method and figures in docs/benchmarks.md."""
