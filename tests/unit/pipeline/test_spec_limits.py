"""YAML that would hang or crash the reader is refused with a problem naming the file, the key and the line."""

from __future__ import annotations

import pytest

from airflow_conduit.pipeline import SpecError, load_pipeline, load_pipeline_from_string
from airflow_conduit.pipeline.yaml_source import MAX_DEPTH, MAX_SPEC_CHARS, MAX_VALUES

from pipeline_spec_samples import MINIMAL

# The 390-byte "billion laughs": nine levels of nine aliases, 10**9 strings once expanded.
BILLION_LAUGHS = 'version: "1"\na: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi")
)


def only_problem(text: str, name: str = "spec.yaml"):
    with pytest.raises(SpecError) as info:
        load_pipeline_from_string(text, name, env={})
    assert len(info.value.problems) == 1, info.value.problems
    return info.value.problems[0]


def test_billion_laughs_is_refused_quickly_naming_where_it_expands():
    assert len(BILLION_LAUGHS) < 400
    problem = only_problem(BILLION_LAUGHS, "laughs.yaml")
    assert problem.file == "laughs.yaml"
    assert f"YAML aliases expand the document to more than {MAX_VALUES:,} values" in problem.message
    assert problem.key_path == "i[0]" and problem.line == 10


def test_alias_bomb_inside_the_pipeline_names_the_key_that_uses_it():
    bomb = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" + "".join(
        f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n" for prev, name in zip("abcd", "bcde")
    )  # e expands to 10**5 values
    problem = only_problem(bomb + MINIMAL.replace('schema: "id INT, customer STRING"', "schema: *e"))
    assert problem.key_path == "pipeline.sources[0].settings.schema"
    assert f"more than {MAX_VALUES:,} values" in problem.message


def test_alias_cycle_is_refused():
    problem = only_problem('version: "1"\nloop: &loop [1, *loop]\n')
    assert "refers to a value that contains it" in problem.message
    assert problem.key_path == "loop[1]" and problem.line == 2


def test_list_nested_900_deep_is_refused_not_a_recursion_error():
    problem = only_problem('version: "1"\npipeline:\n  id: x\n  description: ' + "[" * 900 + "]" * 900 + "\n")
    assert f"nested more than {MAX_DEPTH} levels deep at line 4" in problem.message
    assert problem.key_path.startswith("pipeline.description[0][0]")
    assert problem.line == 4


def test_deep_nesting_through_aliases_is_refused():
    chain = "l0: &l0 [1]\n" + "".join(f"l{i}: &l{i} [*l{i - 1}]\n" for i in range(1, 100))
    problem = only_problem(chain)
    assert f"more than {MAX_DEPTH} levels deep" in problem.message


def test_oversized_text_is_refused_and_a_file_is_not_read_past_the_limit(tmp_path):
    assert "the limit is 1,000,000" in only_problem("# " + "x" * MAX_SPEC_CHARS).message
    huge = tmp_path / "huge.yaml"
    with huge.open("w") as handle:  # 20 MB of comment: refused after reading 1 MB
        for _ in range(20):
            handle.write("#" + "x" * 999_999 + "\n")
    with pytest.raises(SpecError) as info:
        load_pipeline(huge)
    assert str(huge) in str(info.value) and "the limit is 1,000,000" in str(info.value)


def test_ordinary_anchors_and_aliases_still_work():
    text = MINIMAL.replace("path: data/in", "path: &inbox data/in") + "  description: *inbox\n"
    spec = load_pipeline_from_string(text, "spec.yaml", env={})
    assert spec.description == "data/in"


def test_a_control_character_is_a_named_problem_not_a_crash():
    problem = only_problem('version: "1"\npipeline:\n  id: "a\x00b"\n')
    assert problem.line == 3 and "control character #x0000 is not allowed" in problem.message
