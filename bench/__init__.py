"""Benchmarks of airflow-conduit (``make bench`` = ``python -m bench.run_all``); not part of ``make test``.

Each benchmark is a module with ``main(argv)`` that runs in its own process and
writes its measurements as JSON; ``run_all`` runs the four of them and renders
docs/benchmarks.md from the JSON. See docs/benchmarks.md for what is measured.
"""
