"""The example pipelines validate, and their sample data holds the bad records that examples/orders/expected.json promises."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from airflow_conduit.pipeline import load_pipeline, validate_file
from airflow_conduit.pipeline.ddl import parse_ddl

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SPECS = sorted(EXAMPLES.rglob("*.yaml"))
ORDERS = EXAMPLES / "orders"


def _env_for(path: Path) -> dict[str, str]:
    """A value for every ${VAR} the example references (the examples take hosts and passwords from the environment;
    a Kafka bootstrap servers variable gets a host:port)."""
    names = re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", path.read_text())
    return {name: "kafka.example:9092" if name.endswith("BOOTSTRAP_SERVERS") else f"example-{name.lower()}" for name in names}


def test_there_are_examples():
    assert ORDERS / "pipeline.yaml" in SPECS


@pytest.mark.parametrize("path", SPECS, ids=[str(p.relative_to(EXAMPLES)) for p in SPECS])
def test_every_example_spec_validates(path):
    assert validate_file(path, env=_env_for(path)) == []


def test_the_postgres_example_takes_its_password_from_the_environment():
    path = ORDERS / "pipeline-postgres.yaml"
    problems = validate_file(path, env={})
    assert {p.key_path for p in problems} == {
        "pipeline.destinations[0].settings.url",
        "pipeline.destinations[0].settings.password",
    }
    spec = load_pipeline(path, env=_env_for(path))
    assert "example-orders_db_password" not in repr(spec)


# -- the sample data ----------------------------------------------------------------------------

_PY_TYPES = {"INT": int, "BIGINT": int, "DOUBLE": (int, float), "STRING": str, "TIMESTAMP": str}


def _classify(record_text: str, columns, json_field: str, filter_customer: str) -> tuple[str, str]:
    """(where, why) for one input line, following the rules the example pipeline states in its comments."""
    try:
        record = json.loads(record_text)
    except json.JSONDecodeError:
        return "dlq", "malformed JSON line"
    for column in columns:
        value = record.get(column.name)
        if value is None:
            if not column.nullable:
                return "dlq", f"missing field: {column.name} (NOT NULL)"
            continue
        expected = _PY_TYPES[column.type]
        if isinstance(value, bool) or not isinstance(value, expected):
            return "dlq", f"wrong type: {column.name} is a {type(value).__name__}"
        if column.type == "TIMESTAMP":
            datetime.fromisoformat(value.replace("Z", "+00:00"))
    try:
        json.loads(record[json_field])
    except (json.JSONDecodeError, TypeError):
        return "dlq", f"{json_field} is not valid JSON"
    if record["customer"] == filter_customer:
        return "filtered", "test order"
    return "written", ""


def test_sample_data_matches_expected_json():
    spec = load_pipeline(ORDERS / "pipeline.yaml")
    source = spec.sources[0]
    columns = parse_ddl(source.settings["schema"])
    decode = spec.component("decode-payload").settings["field"]
    assert spec.component("drop-test-orders").settings["condition"] == "customer <> 'test'"
    expected = json.loads((ORDERS / "expected.json").read_text())

    written, filtered, dlq, lines = [], [], [], 0
    for path in sorted(Path(source.settings["path"]).glob("*.jsonl")):
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            lines += 1
            where, why = _classify(text, columns, decode, "test")
            if where == "dlq":
                dlq.append((path.name, number, why.split(":")[0]))
            else:
                ident = json.loads(text)["id"]
                (written if where == "written" else filtered).append(ident)

    assert lines == expected["input_lines"]
    assert written == expected["written_ids"]
    assert filtered == expected["filtered_ids"]
    assert dlq == [(d["file"], d["line"], d["reason"].split(":")[0]) for d in expected["dlq"]]
    assert len(written) + len(filtered) + len(dlq) == lines
    # The sample holds every kind of bad record the issue asks for.
    reasons = {d["reason"].split(":")[0] for d in expected["dlq"]}
    assert {"malformed JSON line", "wrong type", "missing field", "payload is not valid JSON"} <= reasons
