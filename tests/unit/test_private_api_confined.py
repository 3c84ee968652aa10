"""PySpark's handles on the JVM (``_jvm``, ``_jdf``, ``_jsc``, ``_jsparkSession``, ``_gateway``) are used only in
``airflow_conduit/spark/jvm/``, whose modules docs/architecture.md lists as the upgrade checklist: a Spark, Kafka or
Delta upgrade then has one folder to check, each module pinned by its contract test."""

from __future__ import annotations

import re
from pathlib import Path

import airflow_conduit

PACKAGE = Path(airflow_conduit.__file__).parent
REPO = PACKAGE.parent
CONFINED_TO = PACKAGE / "spark" / "jvm"
PRIVATE = re.compile(r"(?<![A-Za-z0-9_])_(?:jvm|jdf|jsc|jsparkSession|gateway)(?![A-Za-z0-9_])")

# Modules that still use the JVM handles themselves, their uses to be moved into spark/jvm/ as named functions.
# Each must still have a use (test_each_module_still_to_switch_still_uses_it): a switched module leaves the list.
STILL_TO_SWITCH: tuple[str, ...] = ()


def _uses(path: Path) -> list[str]:
    """The lines of ``path`` that name a JVM handle, as ``<line number>: <line>``."""
    return [f"{number}: {line.strip()}" for number, line in enumerate(path.read_text().splitlines(), 1) if PRIVATE.search(line)]


def _module(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_the_jvm_handles_are_used_only_in_spark_jvm():
    found = {
        _module(path): uses
        for path in sorted(PACKAGE.rglob("*.py"))
        if not path.is_relative_to(CONFINED_TO) and _module(path) not in STILL_TO_SWITCH and (uses := _uses(path))
    }
    assert not found, (
        "move these into a module of airflow_conduit/spark/jvm/ (a named function; docs/architecture.md, upgrade "
        f"checklist): {found}"
    )


def test_each_module_still_to_switch_still_uses_it():
    switched = [module for module in STILL_TO_SWITCH if not (PACKAGE / module).is_file() or not _uses(PACKAGE / module)]
    assert not switched, f"these use no JVM handle any more: remove them from STILL_TO_SWITCH: {switched}"


def test_the_pattern_finds_each_handle_and_not_names_that_contain_one():
    for text in ("spark.sparkContext._jvm.java", "df._jdf.select(seq)", "sc._jsc.hadoopConfiguration()",
                 "spark._jsparkSession", 'getattr(sc, "_gateway", None)', "x._jvm"):
        assert PRIVATE.search(text), text
    for text in ("lost_jvm_or(exc, spark)", "def _jvm_columns(columns)", "_is_jvm(cmdline)", "jvm = view",
                 "look_up_jvm_functions_once()", "self._jdf_cache"):
        assert not PRIVATE.search(text), text


def _checklist() -> str:
    """docs/architecture.md's upgrade checklist section."""
    text = (REPO / "docs" / "architecture.md").read_text()
    return text.split("\n## Upgrade checklist", 1)[1].split("\n## ", 1)[0]


def test_the_upgrade_checklist_lists_every_module_of_spark_jvm_once():
    rows = re.findall(r"^\| `([a-z_]+\.py)` \|", _checklist(), re.MULTILINE)
    modules = sorted(path.name for path in CONFINED_TO.glob("*.py") if path.name != "__init__.py")
    assert sorted(rows) == modules, "docs/architecture.md, upgrade checklist: one row per module of spark/jvm/"


def test_the_contract_tests_the_upgrade_checklist_names_exist():
    named = re.findall(r"`((?:spark|unit)/test_[a-z0-9_]+\.py)((?:::test_[a-z0-9_]+)?)`", _checklist())
    named += [(file, f"::{test}") for file, test in re.findall(r"`(spark/test_[a-z0-9_]+\.py)::[^`]+`, `::(test_[a-z0-9_]+)`", _checklist())]
    assert named
    missing = []
    for file, test in named:
        path = REPO / "tests" / file
        if not path.is_file() or (test and f"def {test.removeprefix('::')}(" not in path.read_text()):
            missing.append(file + test)
    assert not missing, f"docs/architecture.md, upgrade checklist, names tests that do not exist: {missing}"
