"""The Airflow UI plugin: pipeline views served by the api-server (docs/ui.md).

``conduit_ui.ConduitUIPlugin`` registers them; ``app`` is the FastAPI app; ``records`` reads
what Airflow recorded (XCom, task state store); ``state_view`` reads a state directory and the
DLQ into plain dicts; ``pages`` renders HTML. Nothing here writes anything.
"""
