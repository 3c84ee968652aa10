"""The package is an Airflow provider, and its layers keep their import rules."""

from __future__ import annotations

import ast
import importlib.metadata
import pkgutil
import subprocess
import sys
from pathlib import Path

import airflow_conduit
from airflow_conduit.get_provider_info import PACKAGE_NAME, get_provider_info

PACKAGE_DIR = Path(airflow_conduit.__file__).parent


def test_provider_entry_point_is_registered_and_names_the_distribution():
    entry_points = importlib.metadata.entry_points(group="apache_airflow_provider")
    ours = [ep for ep in entry_points if ep.value.startswith("airflow_conduit.")]
    assert len(ours) == 1
    info = ours[0].load()()
    assert info["package-name"] == PACKAGE_NAME == "airflow-conduit"
    assert importlib.metadata.version(PACKAGE_NAME) == airflow_conduit.__version__
    assert info["versions"][0] == importlib.metadata.version(PACKAGE_NAME)  # the installed one, from its metadata


def test_requires_python_admits_the_pythons_the_tests_run_on():
    """Each Python the Makefile tests has its constraints file, and the metadata admits exactly those Pythons:
    pip refuses the package on any other."""
    from packaging.specifiers import SpecifierSet

    repo = Path(__file__).resolve().parents[2]
    makefile = (repo / "Makefile").read_text()
    tested: set[str] = set()
    for line in makefile.splitlines():
        if line.startswith(("MAIN_PYTHON :=", "OTHER_PYTHONS :=")):
            tested |= set(line.split(":=")[1].split())
    assert tested == {"3.10", "3.11", "3.12", "3.13"}
    requires = SpecifierSet(importlib.metadata.metadata(PACKAGE_NAME)["Requires-Python"])
    for minor in range(6, 16):
        assert (f"3.{minor}" in tested) == requires.contains(f"3.{minor}.0"), f"3.{minor}"
    for python in tested:
        assert (repo / "constraints" / f"constraints-{python}.txt").is_file()


def test_provider_config_section_carries_conduit_defaults():
    options = get_provider_info()["config"]["conduit"]["options"]
    defaults = {name: option["default"] for name, option in options.items()}
    assert defaults["min_delay"] == "1s"
    assert defaults["max_delay"] == "10m"
    assert defaults["backoff_factor"] == "2"
    assert defaults["max_retries"] == "-1"
    assert defaults["max_retries_window"] == "5m"


def test_provider_modules_listed_in_provider_info_exist():
    info = get_provider_info()
    modules = [m for key in ("operators", "sensors", "hooks", "triggers") for group in info.get(key, []) for m in group["python-modules"]]
    for module in modules:
        assert pkgutil.find_loader(module) is not None, module


def _modules_under(subpackage: str) -> list[str]:
    folder = PACKAGE_DIR / subpackage
    return sorted(
        "airflow_conduit." + ".".join(path.relative_to(PACKAGE_DIR).with_suffix("").parts).removesuffix(".__init__")
        for path in folder.rglob("*.py")
    )


def _import_with_blocked(modules: list[str], blocked: list[str]) -> subprocess.CompletedProcess:
    """Import modules in a fresh interpreter where the blocked top-level packages cannot be imported."""
    script = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        f"import importlib\nfor m in {modules!r}: importlib.import_module(m)\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_pure_layers_import_neither_airflow_nor_pyspark():
    modules = ["airflow_conduit"] + _modules_under("recovery") + _modules_under("runs") + _modules_under("pipeline")
    result = _import_with_blocked(modules, ["airflow", "pyspark"])
    assert result.returncode == 0, result.stderr


def test_lineage_names_and_counts_import_neither_airflow_nor_openlineage():
    """``lineage.datasets`` maps a spec and run reports to dataset names and counts without Airflow, OpenLineage or
    Spark; the package works without the OpenLineage provider (the operators import ``lineage.facets`` only when
    the provider's listener asks for facets)."""
    modules = ["airflow_conduit.lineage", "airflow_conduit.lineage.datasets"]
    result = _import_with_blocked(modules, ["airflow", "pyspark", "openlineage"])
    assert result.returncode == 0, result.stderr


def test_operators_import_without_the_openlineage_provider():
    script = ("import sys\nfor name in ['openlineage', 'openlineage.client', 'airflow.providers.openlineage.conf', 'airflow.providers.openlineage.utils', 'airflow.providers.openlineage.extractors']: sys.modules[name] = None\n"
              "from airflow_conduit.operators.pipeline import RecoveringSparkPipelineOperator\n"
              "from airflow_conduit.lineage.spark_listener import lineage_enabled\n"
              "assert not lineage_enabled()\n"
              "op = RecoveringSparkPipelineOperator(task_id='t', spec='s.yaml', state_dir='/tmp/s', spark_conf={'a': 'b'})\n"
              "assert op.lineage_spark_conf(op.spark_conf) is op.spark_conf\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_spark_layer_imports_no_airflow():
    modules = _modules_under("spark")
    result = _import_with_blocked(modules, ["airflow"])
    assert result.returncode == 0, result.stderr


def test_driver_wrapper_starts_without_airflow():
    """``python -m airflow_conduit.hooks.backends.detached`` runs once per job: it must not pull in Airflow."""
    modules = ["airflow_conduit.hooks.backends.detached", "airflow_conduit.hooks.backends.lease",
               "airflow_conduit.runs.state_dir", "airflow_conduit.runs.report"]
    result = _import_with_blocked(modules, ["airflow", "pyspark"])
    assert result.returncode == 0, result.stderr


def test_cli_run_path_imports_no_airflow():
    """``airflow-conduit run --master local[*]`` submits, watches and stops its run through these modules: Airflow's
    import is most of the command's start-up, so they load it only on the paths that need it (a connection, a
    ``[conduit]`` option, a Kafka connection, a control-plane error)."""
    modules = ["airflow_conduit.cli.main", "airflow_conduit.cli.run_cmd", "airflow_conduit.hooks.backends.kinds",
               "airflow_conduit.hooks.backends.local", "airflow_conduit.hooks.backends.watch",
               "airflow_conduit.hooks.kafka_connections", "airflow_conduit.hooks.spark_submit_adapter"]
    result = _import_with_blocked(modules, ["airflow"])
    assert result.returncode == 0, result.stderr


# The layers, lowest first (docs/architecture.md, layers). A module imports from its own package or from a
# lower layer, never from a higher one nor from another package of its own layer. "names" and "__init__"
# are the package's leaf modules (airflow_conduit/names.py, compat.py, __init__.py).
LAYERS = (
    ("__init__", "names", "compat"),
    ("get_provider_info",),
    ("recovery",),
    ("runs",),
    ("pipeline",),
    ("spark",),
    ("hooks", "utils"),
    ("lineage",),
    ("triggers", "plugins"),
    ("operators", "sensors"),
    ("cli",),
)
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


def _module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, not ``.__init__``)."""
    root = PACKAGE_DIR.parent
    return {".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
            for path in PACKAGE_DIR.rglob("*.py")}


def _imported_modules(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its text: top level, in functions, under
    ``TYPE_CHECKING``. ``from package import name`` counts as importing the submodule when ``name`` is one."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {name for name in found if name in known and name != module}


def _import_graph() -> dict[str, set[str]]:
    known = _module_files()
    return {module: _imported_modules(module, path, known) for module, path in known.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def _part(module: str) -> str:
    """The layer entry of a module: its subpackage (``recovery``), or the top-level module's own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _climbs(graph: dict[str, set[str]]) -> list[str]:
    climbs = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            here, there = _part(module), _part(target)
            if here != there and RANK[there] >= RANK[here]:
                climbs.append(f"{module} -> {target} ({here} is layer {RANK[here]}, {there} is layer {RANK[there]})")
    return climbs


def test_every_module_belongs_to_a_layer():
    unplaced = sorted({_part(module) for module in _import_graph()} - set(RANK))
    assert not unplaced, f"place these in LAYERS (and in docs/architecture.md, layers): {unplaced}"


def test_no_import_cycles_between_modules():
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles (each list imports itself round): " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_import_climbs_a_layer():
    """recovery/ below runs/ below pipeline/ below spark/ below the Airflow shell: an import never goes up or sideways."""
    climbs = _climbs(_import_graph())
    assert not climbs, "imports that climb the layers:\n" + "\n".join(climbs)


def test_cycle_and_climb_detection_sees_what_it_is_meant_to_see():
    """The rules above would pass on an empty graph: check them on small graphs with a known answer."""
    graph = {"airflow_conduit.recovery.a": {"airflow_conduit.recovery.b"},
             "airflow_conduit.recovery.b": {"airflow_conduit.recovery.c"},
             "airflow_conduit.recovery.c": {"airflow_conduit.recovery.a", "airflow_conduit.pipeline.d"},
             "airflow_conduit.pipeline.d": set()}
    assert _cycles(graph) == [["airflow_conduit.recovery.a", "airflow_conduit.recovery.b", "airflow_conduit.recovery.c"]]
    assert _climbs(graph) == ["airflow_conduit.recovery.c -> airflow_conduit.pipeline.d (recovery is layer 2, pipeline is layer 4)"]
    graph = _import_graph()
    assert "airflow_conduit.recovery.policies" in graph["airflow_conduit.recovery.options"]  # a top-level import
    assert "airflow_conduit.runs.service" in graph["airflow_conduit.cli.run_cmd"]  # one inside a function
    assert "airflow_conduit.plugins.app" in graph["airflow_conduit.plugins.conduit_ui"]  # one inside a method
    assert "airflow_conduit.spark.commits" in graph["airflow_conduit.spark.batch_pass"]  # one under TYPE_CHECKING
