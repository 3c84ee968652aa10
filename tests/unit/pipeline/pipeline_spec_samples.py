"""Spec texts shared by the pipeline spec tests."""

MINIMAL = """\
version: "1"
pipeline:
  id: orders
  sources:
    - id: orders-in
      plugin: builtin:file
      settings:
        path: data/in
        schema: "id INT, customer STRING"
  destinations:
    - id: lake
      plugin: builtin:file
      settings:
        path: out/lake
        format: parquet
"""
