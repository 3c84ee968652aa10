"""A wrong spec is refused with every problem, each naming the file, the key path, the line and what was expected."""

from __future__ import annotations

import copy

import pytest
import yaml

from airflow_conduit.pipeline import Problem, SpecError, load_pipeline, load_pipeline_from_string, validate_file

from pipeline_spec_samples import MINIMAL

BASE = yaml.safe_load(MINIMAL)


def problems_of(text: str, name: str = "spec.yaml", env: dict | None = None) -> list[Problem]:
    with pytest.raises(SpecError) as info:
        load_pipeline_from_string(text, name, env=env or {})
    assert info.value.problems, "SpecError without problems"
    return info.value.problems


def mutated(change) -> str:
    data = copy.deepcopy(BASE)
    change(data)
    return yaml.safe_dump(data, sort_keys=False)


def p(data):
    return data["pipeline"]


def src(data, i=0):
    return data["pipeline"]["sources"][i]


def dst(data, i=0):
    return data["pipeline"]["destinations"][i]


CASES = [
    # (name, change, key path, message fragment)
    ("unknown top key", lambda d: d.update(pipline={}), "pipline", "did you mean 'pipeline'"),
    ("unknown pipeline key", lambda d: p(d).update(destination=[]), "pipeline.destination", "did you mean 'destinations'"),
    ("unknown connector key", lambda d: src(d).update(plugn="file"), "pipeline.sources[0].plugn", "did you mean 'plugin'"),
    ("unknown setting", lambda d: src(d)["settings"].update(fromat="csv"), "pipeline.sources[0].settings.fromat", "did you mean 'format'"),
    ("unknown dlq key", lambda d: p(d).update({"dead-letter-queue": {"window-nack-treshold": 1}}),
     "pipeline.dead-letter-queue.window-nack-treshold", "did you mean 'window-nack-threshold'"),
    ("unknown retry key", lambda d: p(d).update(errors={"retry": {"delay.max.ms": 100}}),
     "pipeline.errors.retry.delay.max.ms", "did you mean 'delay.max'"),
    ("missing pipeline id", lambda d: p(d).pop("id"), "pipeline", "missing required key 'id'"),
    ("missing pipeline", lambda d: d.pop("pipeline"), "pipeline", "missing 'pipeline'"),
    ("missing sources", lambda d: p(d).pop("sources"), "pipeline.sources", "at least one is required"),
    ("empty destinations", lambda d: p(d).update(destinations=[]), "pipeline.destinations", "at least one is required"),
    ("missing connector id", lambda d: src(d).pop("id"), "pipeline.sources[0]", "missing required key 'id'"),
    ("missing plugin", lambda d: dst(d).pop("plugin"), "pipeline.destinations[0]", "missing required key 'plugin'"),
    ("missing required setting", lambda d: src(d)["settings"].pop("path"), "pipeline.sources[0].settings", "missing required setting 'path'"),
    ("schema required for json", lambda d: src(d)["settings"].pop("schema"), "pipeline.sources[0].settings",
     "missing required setting 'schema'"),
    ("unknown source plugin", lambda d: src(d).update(plugin="builtin:kinesis"), "pipeline.sources[0].plugin",
     "unknown source plugin 'builtin:kinesis'"),
    ("unknown destination plugin", lambda d: dst(d).update(plugin="s3"), "pipeline.destinations[0].plugin", "unknown destination plugin 's3'"),
    ("source plugin as destination", lambda d: dst(d).update(plugin="generator"), "pipeline.destinations[0].plugin", "available: file, jdbc, delta, kafka, log"),
    ("unknown processor plugin", lambda d: p(d).update(processors=[{"id": "x", "plugin": "field.sett", "settings": {}}]),
     "pipeline.processors[0].plugin", "did you mean 'field.set'"),
    ("standalone plugin", lambda d: src(d).update(plugin="standalone:file"), "pipeline.sources[0].plugin", "unknown source plugin"),
    ("duplicate source/destination id", lambda d: dst(d).update(id="orders-in"), "pipeline.destinations[0].id",
     "duplicate id 'orders-in': already used at pipeline.sources[0].id"),
    ("duplicate processor id across levels", lambda d: (
        src(d).update(processors=[{"id": "p", "plugin": "filter", "settings": {"condition": "true"}}]),
        dst(d).update(processors=[{"id": "p", "plugin": "filter", "settings": {"condition": "true"}}])),
     "pipeline.destinations[0].processors[0].id", "already used at pipeline.sources[0].processors[0].id"),
    ("processor id equal to a source id", lambda d: p(d).update(processors=[{"id": "lake", "plugin": "filter", "settings": {"condition": "x"}}]),
     "pipeline.processors[0].id", "duplicate id 'lake'"),
    ("reserved id", lambda d: dst(d).update(id="dead-letter-queue"), "pipeline.destinations[0].id", "reserved for the dead letter queue"),
    ("id with a slash", lambda d: src(d).update(id="a/b"), "pipeline.sources[0].id", "expected an id of letters"),
    ("bad trigger interval", lambda d: p(d).update({"trigger-interval": "5 seconds"}), "pipeline.trigger-interval", "cannot read duration"),
    ("zero trigger interval", lambda d: p(d).update({"trigger-interval": "0s"}), "pipeline.trigger-interval", "greater than 0"),
    ("negative retry timeout", lambda d: p(d).update(errors={"retry": {"timeout": "-5s"}}), "pipeline.errors.retry.timeout", "0 or more"),
    ("bad delay.max", lambda d: p(d).update(errors={"retry": {"delay.max": "soon"}}), "pipeline.errors.retry.delay.max", "cannot read duration"),
    ("bad mode", lambda d: p(d).update(mode="batch"), "pipeline.mode", "expected one of available-now, continuous"),
    ("bad format", lambda d: src(d)["settings"].update(format="xml"), "pipeline.sources[0].settings.format", "expected one of json, csv, parquet"),
    ("int as string", lambda d: src(d)["settings"].update({"max-files-per-trigger": "3"}),
     "pipeline.sources[0].settings.max-files-per-trigger", "expected an integer >= 1, got a string '3'"),
    ("bool is not an int", lambda d: src(d)["settings"].update({"max-files-per-trigger": True}),
     "pipeline.sources[0].settings.max-files-per-trigger", "got a boolean"),
    ("settings not a mapping", lambda d: src(d).update(settings=["path"]), "pipeline.sources[0].settings", "expected settings to be a mapping"),
    ("sources not a list", lambda d: p(d).update(sources={"id": "x"}), "pipeline.sources", "expected sources to be a list"),
    ("header only for csv", lambda d: src(d)["settings"].update(header=True), "pipeline.sources[0].settings.header",
     "applies only when format is csv"),
    ("bad DDL type", lambda d: src(d)["settings"].update(schema="id INTEGR"), "pipeline.sources[0].settings.schema",
     "unknown type 'INTEGR' for column 'id' (did you mean INTEGER?)"),
    ("DDL without types", lambda d: src(d)["settings"].update(schema="id, name"), "pipeline.sources[0].settings.schema",
     "expected a DDL column list"),
    ("window-size negative", lambda d: p(d).update({"dead-letter-queue": {"window-size": -1}}),
     "pipeline.dead-letter-queue.window-size", "expected an integer >= 0"),
    ("include-messages not bool", lambda d: p(d).update({"dead-letter-queue": {"include-messages": "yes"}}),
     "pipeline.dead-letter-queue.include-messages", "expected true or false"),
    ("dlq settings checked against its plugin", lambda d: p(d).update({"dead-letter-queue": {"plugin": "builtin:log", "settings": {"level": "debug"}}}),
     "pipeline.dead-letter-queue.settings.level", "expected one of info, warn, error"),
    ("dlq file needs a path", lambda d: p(d).update({"dead-letter-queue": {"plugin": "file"}}),
     "pipeline.dead-letter-queue.settings", "missing required setting 'path'"),
    ("jdbc url", lambda d: dst(d).update(plugin="jdbc", settings={"url": "postgresql://h/db", "table": "t"}),
     "pipeline.destinations[0].settings.url", "expected a JDBC URL"),
    ("jdbc url with a password", lambda d: dst(d).update(plugin="jdbc", settings={"url": "jdbc:postgresql://h/db?password=x", "table": "t"}),
     "pipeline.destinations[0].settings.url", "put it in settings.password"),
    ("jdbc key twice", lambda d: dst(d).update(plugin="jdbc", settings={"url": "jdbc:postgresql://h/db", "table": "t", "key": ["a", "a"]}),
     "pipeline.destinations[0].settings.key", "twice"),
    ("generator type", lambda d: src(d).update(plugin="generator", settings={"fields": {"a": "num"}}),
     "pipeline.sources[0].settings.fields", "field 'a': unknown type 'num'"),
    ("generator ratio", lambda d: src(d).update(plugin="generator", settings={"fields": {"a": "int"}, "bad-record-ratio": 1.5}),
     "pipeline.sources[0].settings.bad-record-ratio", "expected a number 0..1"),
    ("sql needs select or expression", lambda d: p(d).update(processors=[{"id": "q", "plugin": "sql", "settings": {}}]),
     "pipeline.processors[0].settings", "needs one of the settings select, expression"),
    ("sql not both", lambda d: p(d).update(processors=[{"id": "q", "plugin": "sql", "settings": {"select": ["*"], "expression": "*"}}]),
     "pipeline.processors[0].settings", "give only one of the settings select, expression"),
    ("unbalanced expression", lambda d: p(d).update(processors=[{"id": "f", "plugin": "filter", "settings": {"condition": "(a > 1"}}]),
     "pipeline.processors[0].settings.condition", "unclosed '('"),
    ("unterminated quote", lambda d: p(d).update(processors=[{"id": "f", "plugin": "field.set", "settings": {"field": "c", "value": "'EUR"}}]),
     "pipeline.processors[0].settings.value", "unterminated ' quote"),
    ("custom function ref", lambda d: p(d).update(processors=[{"id": "c", "plugin": "custom", "settings": {"function": "my_module.fn"}}]),
     "pipeline.processors[0].settings.function", "expected 'package.module:function'"),
    ("rename mapping type", lambda d: p(d).update(processors=[{"id": "r", "plugin": "field.rename", "settings": {"mapping": ["a", "b"]}}]),
     "pipeline.processors[0].settings.mapping", "expected a non-empty mapping"),
    ("json.decode schema required", lambda d: p(d).update(processors=[{"id": "j", "plugin": "json.decode", "settings": {"field": "p"}}]),
     "pipeline.processors[0].settings", "missing required setting 'schema'"),
    ("version", lambda d: d.update(version="2.2"), "version", "unsupported version '2.2'"),
    ("conduit's pipelines list", lambda d: d.update(pipelines=[d.pop("pipeline")]), "pipelines", "one pipeline per file"),
    ("description type", lambda d: p(d).update(description=["x"]), "pipeline.description", "expected a string"),
]


@pytest.mark.parametrize("name,change,key_path,fragment", CASES, ids=[c[0] for c in CASES])
def test_each_kind_of_problem_names_file_key_path_and_expectation(name, change, key_path, fragment):
    problems = problems_of(mutated(change))
    matching = [pr for pr in problems if pr.key_path == key_path and fragment in pr.message]
    assert matching, f"no problem at {key_path!r} containing {fragment!r}; got:\n" + "\n".join(map(str, problems))
    assert all(pr.file == "spec.yaml" for pr in problems)
    if name != "missing pipeline":  # a key absent from the file has no line
        assert matching[0].line is not None


def test_all_problems_are_collected_not_only_the_first():
    def change(d):
        p(d).update(mode="batch", sourcs=[])
        src(d)["settings"].update(format="xml")
        dst(d).update(id="orders-in", plugin="nope")
        p(d).update(errors={"retry": {"timeout": "x"}})

    problems = problems_of(mutated(change))
    paths = {pr.key_path for pr in problems}
    assert {
        "pipeline.mode",
        "pipeline.sourcs",
        "pipeline.sources[0].settings.format",
        "pipeline.destinations[0].id",
        "pipeline.destinations[0].plugin",
        "pipeline.errors.retry.timeout",
    } <= paths


def test_problems_carry_the_line_of_the_key_and_print_one_per_line(write_spec):
    path = write_spec(
        """\
        version: "1"
        pipeline:
          id: orders
          sources:
            - id: in
              plugin: file
              settings:
                path: data
                format: xml
                schema: "id INT"
          destinations:
            - id: out
              plugin: lgo
        """
    )
    with pytest.raises(SpecError) as info:
        load_pipeline(path)
    problems = info.value.problems
    assert [(pr.line, pr.key_path) for pr in problems] == [
        (9, "pipeline.sources[0].settings.format"),
        (13, "pipeline.destinations[0].plugin"),
    ]
    lines = str(info.value).splitlines()
    assert lines == [str(pr) for pr in problems]
    assert lines[0] == f"{path}:9: pipeline.sources[0].settings.format: expected one of json, csv, parquet, got a string 'xml'"
    assert lines[1].startswith(f"{path}:13: pipeline.destinations[0].plugin: unknown destination plugin 'lgo'")
    assert validate_file(path) == problems


def test_yaml_syntax_error_names_the_line(write_spec):
    path = write_spec('version: "1"\npipeline:\n  id: x\n  sources: [\n    - bad\n')
    (problem,) = validate_file(path)
    assert problem.file == str(path) and problem.key_path == ""
    assert "not valid YAML" in problem.message and problem.line is not None


def test_a_key_given_twice_is_reported(write_spec):
    path = write_spec(MINIMAL.replace("format: parquet", "format: parquet\n        format: csv"))
    problems = validate_file(path)
    assert [(pr.key_path, pr.message) for pr in problems] == [
        ("pipeline.destinations[0].settings.format", "key given twice in the same mapping")
    ]
    assert problems[0].line == 16


@pytest.mark.parametrize("text,fragment", [("", "the file is empty"), ("- a\n- b\n", "expected a mapping")])
def test_empty_or_non_mapping_files(text, fragment):
    (problem,) = problems_of(text)
    assert fragment in problem.message


def test_unknown_yaml_tags_are_refused_by_the_safe_loader():
    (problem,) = problems_of("pipeline: !!python/object:os.system {}\n")
    assert "not valid YAML" in problem.message


def test_a_folder_is_not_a_spec(tmp_path):
    (problem,) = validate_file(tmp_path)
    assert "is a folder" in problem.message


def test_missing_environment_variable_names_the_key_and_the_variable():
    text = MINIMAL.replace("path: out/lake", "path: ${LAKE_DIR}/lake")
    (problem,) = problems_of(text, env={})
    assert problem.key_path == "pipeline.destinations[0].settings.path"
    assert "environment variable 'LAKE_DIR' is not set" in problem.message


def test_malformed_reference_is_reported():
    (problem,) = problems_of(MINIMAL.replace("path: out/lake", "path: ${1BAD}"))
    assert problem.key_path == "pipeline.destinations[0].settings.path" and "malformed reference" in problem.message


def test_a_valid_file_never_builds_a_spec_when_another_part_is_wrong():
    with pytest.raises(SpecError):
        load_pipeline_from_string(mutated(lambda d: dst(d).update(plugin="nope")), "x.yaml")


def test_an_invalid_setting_does_not_cause_follow_up_problems():
    text = mutated(lambda d: src(d)["settings"].update(format="xml", header=True))
    assert [(pr.key_path, pr.message.split(",")[0]) for pr in problems_of(text)] == [
        ("pipeline.sources[0].settings.format", "expected one of json")
    ]


def test_a_connector_that_is_not_a_mapping():
    problems = problems_of(mutated(lambda d: p(d)["sources"].append("file")))
    assert [(pr.key_path, pr.message) for pr in problems] == [
        ("pipeline.sources[1]", "expected a source to be a mapping, got a string")
    ]
