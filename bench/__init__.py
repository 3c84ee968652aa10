"""Benchmarks of airflow-conduit (``make bench`` = ``python -m bench.run_all``); not part of ``make test``.

Each benchmark is a module with ``main(argv)`` that runs in its own process and writes its measurements
as JSON, and ``section(result)`` that renders its part of docs/benchmarks.md (``bench.sections`` holds
those of small_run and kafka_delta); ``run_all`` runs them, ``report`` assembles the page and
``targets`` judges each target from the results.
"""
