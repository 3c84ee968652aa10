"""The spec's JSON Schema (``airflow-conduit schema``) accepts every spec the loader accepts in this repository,
and refuses specs the loader refuses, so editors flag what ``validate`` would."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from airflow_conduit.cli.main import main
from airflow_conduit.pipeline import SpecError, load_pipeline_from_string
from airflow_conduit.pipeline import settings_schema
from airflow_conduit.pipeline.json_schema import has_json_schema, pipeline_json_schema
from airflow_conduit.pipeline.kafka_settings import ClientProperties, ConnectionId, KafkaServers, StartingOffsets
from airflow_conduit.pipeline.settings_schema import SCHEMAS_BY_ROLE, Kind
from airflow_conduit.pipeline.yaml_source import load_yaml

from pipeline_spec_samples import MINIMAL

REPO = Path(__file__).resolve().parents[3]
VALIDATOR = jsonschema.Draft202012Validator(pipeline_json_schema())


PLACEHOLDER = "placeholder"  # what an f-string's replacement fields become (paths, names, numbers as text)


def _literal_text(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's with each replacement field read as ``PLACEHOLDER``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else PLACEHOLDER for part in node.values)
    return None


def _spec_texts(path: Path) -> list[str]:
    """A YAML file's text, or every string literal (f-strings too) of a Python file that holds a ``pipeline:`` mapping."""
    if path.suffix == ".yaml":
        return [path.read_text()]
    texts = (_literal_text(node) for node in ast.walk(ast.parse(path.read_text())))
    return [text for text in texts if text and re.search(r"^pipeline:", text, re.MULTILINE)]


def _env_for(text: str) -> dict[str, str]:
    return {name: f"value-of-{name.lower()}" for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text)}


def _repo_specs() -> list[tuple[str, str]]:
    """(where, text) of every spec in examples/, dags/ and the tests."""
    files = [*REPO.glob("examples/**/*.yaml"), *REPO.glob("dags/*.py"), *REPO.glob("tests/**/*.py")]
    return [(f"{path.relative_to(REPO)}#{n}", text) for path in sorted(files) for n, text in enumerate(_spec_texts(path))]


def _loader_accepts(text: str, tmp_path: Path) -> bool:
    try:
        load_pipeline_from_string(text, env=_env_for(text), base_dir=str(tmp_path))
    except SpecError:
        return False
    return True


def _schema_problems(text: str) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(load_yaml(text).data)]


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(pipeline_json_schema())


def test_the_schema_command_prints_it(capsys):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == pipeline_json_schema()


def test_every_spec_the_loader_accepts_in_the_repository_validates(tmp_path):
    accepted = [(where, text) for where, text in _repo_specs() if _loader_accepts(text, tmp_path)]
    wheres = {where.split("#")[0] for where, _ in accepted}
    assert {"examples/orders/pipeline.yaml", "dags/conduit_events_continuous.py"} <= wheres
    assert len(accepted) >= 5, "the scan of the repository's specs found too few to mean anything"
    refused = {where: problems for where, text in accepted if (problems := _schema_problems(text))}
    assert not refused, json.dumps(refused, indent=2)


def _replace(old: str, new: str) -> str:
    assert old in MINIMAL
    return MINIMAL.replace(old, new)


INVALID = {
    "a list of pipelines": MINIMAL.replace("pipeline:", "pipelines:"),
    "an unknown top-level key": MINIMAL + "pipline: {}\n",
    "an unknown pipeline key": _replace("  id: orders\n", "  id: orders\n  sink: lake\n"),
    "no sources": _replace("  sources:\n    - id: orders-in", "  sources: []\n  unused:\n    - id: orders-in"),
    "a bad id": _replace("id: orders-in", "id: orders/in"),
    "the reserved DLQ id": _replace("id: lake", "id: dead-letter-queue"),
    "an unknown mode": _replace("  id: orders\n", "  id: orders\n  mode: streaming\n"),
    "an unknown plugin": _replace("plugin: builtin:file\n      settings:\n        path: data/in",
                                  "plugin: s3\n      settings:\n        path: data/in"),
    "a misspelt setting": _replace("format: parquet", "fromat: parquet"),
    "a setting of the wrong kind": _replace("format: parquet", "format: 7"),
    "a format that is not offered": _replace("format: parquet", "format: xml"),
    "a missing required setting": _replace("        path: out/lake\n", ""),
    "a schema missing where the format needs one": _replace('        schema: "id INT, customer STRING"\n', ""),
    "a setting outside its condition": _replace("format: parquet", "format: parquet\n        header: false"),
    "a negative window": MINIMAL + "  dead-letter-queue:\n    window-size: -1\n",
    "a bad duration": _replace("  id: orders\n", "  id: orders\n  trigger-interval: soon\n"),
    "both forms of a sql processor": _replace("  destinations:", "  processors:\n    - id: s\n      plugin: sql\n"
                                              "      settings: {select: ['*'], expression: '*'}\n  destinations:"),
    "an expectation rule without a condition": _replace(
        "  destinations:", "  processors:\n    - id: e\n      plugin: expect\n"
        "      settings: {rules: [{name: r1, action: drop}]}\n  destinations:"),
}


@pytest.mark.parametrize("text", INVALID.values(), ids=INVALID.keys())
def test_specs_the_loader_refuses_are_refused_by_the_schema(text, tmp_path):
    assert not _loader_accepts(text, tmp_path)
    assert _schema_problems(text)


def test_the_minimal_spec_is_valid_for_both(tmp_path):
    assert _loader_accepts(MINIMAL, tmp_path) and not _schema_problems(MINIMAL)


def test_every_plugin_and_setting_of_the_tables_is_in_the_schema():
    text = json.dumps(pipeline_json_schema())
    for role, plugins in SCHEMAS_BY_ROLE.items():
        for name, plugin in plugins.items():
            assert f'"{name}"' in text and f'"builtin:{name}"' in text, (role, name)
            for key in plugin.settings:
                assert f'"{key}": {{"description"' in text, (role, name, key)


# A value the loader accepts for each kind of setting, most specific kind first.
SAMPLES = (
    (KafkaServers, "broker1:9092,broker2:9092"),
    (ConnectionId, "kafka_default"),
    (ClientProperties, {"client.id": "orders", "request.timeout.ms": 60000}),
    (StartingOffsets, "earliest"),
    (settings_schema.JdbcUrl, "jdbc:postgresql://db.example:5432/orders"),
    (settings_schema.FunctionRef, "my_package.transforms:enrich"),
    (settings_schema.DDLSchema, "id INT, customer STRING"),
    (settings_schema.PathKind, "data/somewhere"),
    (settings_schema.String, "some-text"),
    (settings_schema.Integer, None),  # the kind's minimum, else 1
    (settings_schema.Number, None),
    (settings_schema.Boolean, False),
    (settings_schema.Choice, None),  # its last choice, in upper case (the loader lower-cases)
    (settings_schema.TypeMap, {"id": "INT", "name": "STRING"}),
    (settings_schema.StringMap, {"old": "new"}),
    (settings_schema.StringList, ["a", "b"]),
    (settings_schema.Expression, "amount > 0"),
    (settings_schema.ExpressionList, ["*", "amount * 100 AS cents"]),
    (settings_schema.RuleList, [{"name": "positive", "condition": "amount > 0", "action": "drop"}]),
)


def _sample(kind: Kind):
    for cls, value in SAMPLES:
        if isinstance(kind, cls):
            if cls in (settings_schema.Integer, settings_schema.Number):
                return kind.minimum if kind.minimum is not None else 1
            if cls is settings_schema.Choice:
                return kind.choices[-1].upper()
            return value
    return None


# Settings a cross-field check requires together (a JSON Schema of the tables cannot say so): given with them.
_SASL = {"sasl-username": "alice", "sasl-password": "secret", "sasl-mechanism": "plain", "security-protocol": "sasl_ssl"}
COMPANIONS = {"sasl-username": _SASL, "sasl-password": _SASL}


def _settings_with(plugin, key: str | None) -> dict:
    """The plugin's required settings (and those its conditions require), plus ``key`` with what it applies under."""
    chosen = {k: s for k, s in plugin.settings.items() if s.required or k == key}
    for group in plugin.one_of:
        if not any(k in chosen for k in group):
            chosen[group[0]] = plugin.settings[group[0]]
    values = {k: (_sample(s.kind) if not s.has_default or k == key else s.default) for k, s in chosen.items()}
    values.update({k: v for k, v in COMPANIONS.get(key, {}).items() if k in plugin.settings})
    for k, s in list(chosen.items()):
        if s.only_when:
            values[s.only_when[0]] = s.only_when[1][0]
    for k, s in plugin.settings.items():
        if s.required_when and k not in values:
            other = values.get(s.required_when[0], plugin.settings[s.required_when[0]].default
                               if plugin.settings[s.required_when[0]].has_default else None)
            if isinstance(other, str) and other.lower() in s.required_when[1]:
                values[k] = _sample(s.kind)
    return values


def _spec_using(role: str, name: str, settings: dict) -> str:
    data = load_yaml(MINIMAL).data
    entry = {"id": "under-test", "plugin": name, "settings": settings}
    if role == "source":
        data["pipeline"]["sources"].append(entry)
    elif role == "destination":
        data["pipeline"]["destinations"].append(entry)
    else:
        data["pipeline"]["processors"] = [entry]
    return yaml.safe_dump(data, sort_keys=False)


CASES = [(role, name, key) for role, plugins in SCHEMAS_BY_ROLE.items() for name, plugin in plugins.items()
         for key in (None, *plugin.settings)]


@pytest.mark.parametrize("role,name,key", CASES, ids=[f"{r}-{n}-{k or 'required only'}" for r, n, k in CASES])
def test_each_setting_of_each_plugin_agrees_with_the_loader(role, name, key, tmp_path):
    """Generated from the tables, so a new plugin is covered too: a spec using the plugin (with one setting given)
    validates when the loader accepts it; the same setting with a value of another type is refused by both."""
    plugin = SCHEMAS_BY_ROLE[role][name]
    settings = _settings_with(plugin, key)
    if key is not None and settings.get(key) is None:
        pytest.skip(f"no sample value for {type(plugin.settings[key].kind).__name__}: add one to SAMPLES")
    text = _spec_using(role, name, settings)
    assert _loader_accepts(text, tmp_path), text
    assert not _schema_problems(text), (_schema_problems(text), text)
    if key is not None:
        wrong = {**settings, key: {"not": ["a", "setting", "value"]}}
        text = _spec_using(role, name, wrong)
        assert not _loader_accepts(text, tmp_path) and _schema_problems(text), text
    misspelt = _spec_using(role, name, {**settings, "no-such-setting": 1})
    assert not _loader_accepts(misspelt, tmp_path) and _schema_problems(misspelt)


def test_every_kind_of_setting_has_a_json_schema():
    """A new kind of value needs its schema in pipeline/json_schema.py (or a parent kind that has one)."""
    kinds = {type(setting.kind) for plugins in SCHEMAS_BY_ROLE.values() for plugin in plugins.values()
             for setting in plugin.settings.values()}
    kinds |= {obj for obj in vars(settings_schema).values() if isinstance(obj, type) and issubclass(obj, Kind) and obj is not Kind}
    missing = sorted(kind.__name__ for kind in kinds if not has_json_schema(kind))
    assert not missing, missing
