"""What every benchmark shares: the environment, paired-run statistics, machine facts, result files.

The rule for every comparing figure: a ratio of runs measured in the
same invocation, A and B alternating, the median of at least 5 pairs, with
min and max. ``paired_ratios`` computes exactly that from per-pair samples.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
MIN_PAIRS = 5


def setup_environment() -> None:
    """The environment Spark and Airflow need on this machine (what the Makefile exports)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def isolated_airflow_home(root: Path) -> Path:
    """Point Airflow at a throw-away AIRFLOW_HOME (SQLite) before anything imports airflow."""
    home = root / "airflow-home"
    home.mkdir(parents=True, exist_ok=True)
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow.db'}"
    os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(root / "dags")
    (root / "dags").mkdir(parents=True, exist_ok=True)
    return home


# -- statistics -------------------------------------------------------------------------------------


def summary(values: Iterable[float]) -> dict[str, float]:
    """median, min, max and count of a sample."""
    vals = [float(v) for v in values]
    if not vals:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, float]:
    """Per-pair ratios num[i]/den[i] (runs of the same pair), summarised as median, min, max."""
    if len(numerators) != len(denominators):
        raise ValueError("paired samples must have the same length")
    return summary(n / d for n, d in zip(numerators, denominators))


def add_child_process_arguments(parser: argparse.ArgumentParser, *, records: int, per_file: int) -> None:
    """The arguments of a benchmark that measures in child processes (one JVM each): data size, repetitions,
    driver memory, the result file, and the hidden ones a parent passes its child."""
    parser.add_argument("--records", type=int, default=records)
    parser.add_argument("--per-file", type=int, default=per_file)
    parser.add_argument("--reps", type=int, default=MIN_PAIRS)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)


def run_child(module: str, args: argparse.Namespace, work: Path, out: Path, *extra: str) -> dict[str, Any]:
    """Run ``module``'s child (``add_child_process_arguments``) on ``work``/data in a process of its own; its result."""
    cmd = [sys.executable, "-m", module, "--child", "--reps", str(args.reps), "--driver-memory", args.driver_memory,
           "--work", str(work), "--data", str(work / "data"), "--out", str(out), *extra]
    subprocess.run(cmd, check=True, cwd=str(REPO))
    return json.loads(out.read_text())


def rotated(items: Sequence[Any], rep: int) -> list[Any]:
    """The items in the order of repetition ``rep``: rotated by one each time, so each goes first as often."""
    k = rep % len(items)
    return list(items[k:]) + list(items[:k])


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and value != value:  # NaN
        return "n/a"
    return f"{value:,.{digits}f}"


def fmt_summary(s: dict[str, float], digits: int = 2, unit: str = "") -> str:
    """``median (min–max)``."""
    return f"{fmt(s['median'], digits)}{unit} ({fmt(s['min'], digits)}–{fmt(s['max'], digits)})"


# -- timing and files -------------------------------------------------------------------------------


class Stopwatch:
    def __enter__(self) -> "Stopwatch":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.start


def write_result(name: str, data: dict[str, Any], out: str | None = None) -> Path:
    path = Path(out) if out else RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_result(name: str, results_dir: Path = RESULTS_DIR) -> dict[str, Any] | None:
    path = results_dir / f"{name}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def iso_epoch(iso: str) -> float:
    """Seconds since the epoch of an ISO-8601 UTC time as the run report writes it (trailing Z)."""
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- machine facts ----------------------------------------------------------------------------------


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        text = (out.stdout or "") + (out.stderr or "")
        return text.strip().splitlines()[0] if text.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine_facts() -> dict[str, Any]:
    """CPU, memory, OS and the versions that matter for the figures."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    versions: dict[str, str] = {}
    for module in ("pyspark", "airflow", "psutil"):
        try:
            versions[module] = __import__(module).__version__
        except Exception:  # noqa: BLE001 - a missing module is just not listed
            pass
    try:
        from importlib.metadata import version

        versions["apache-airflow-providers-apache-spark"] = version("apache-airflow-providers-apache-spark")
        versions["airflow-conduit"] = version("airflow-conduit")
    except Exception:  # noqa: BLE001
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": _first_line(["java", "-version"]),
        "versions": versions,
        "load_average_at_start": os.getloadavg(),
    }
