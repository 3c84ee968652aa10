"""The package is an Airflow provider, and its layers keep their import rules."""

from __future__ import annotations

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
    modules = ["airflow_conduit"] + _modules_under("recovery") + _modules_under("pipeline")
    result = _import_with_blocked(modules, ["airflow", "pyspark"])
    assert result.returncode == 0, result.stderr


def test_spark_layer_imports_no_airflow():
    modules = _modules_under("spark")
    result = _import_with_blocked(modules, ["airflow"])
    assert result.returncode == 0, result.stderr


def test_driver_wrapper_starts_without_airflow():
    """``python -m airflow_conduit.hooks.backends.detached`` runs once per job: it must not pull in Airflow."""
    modules = ["airflow_conduit.hooks.backends.detached", "airflow_conduit.hooks.backends.lease",
               "airflow_conduit.pipeline.state_store"]
    result = _import_with_blocked(modules, ["airflow", "pyspark"])
    assert result.returncode == 0, result.stderr
