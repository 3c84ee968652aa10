"""The harness every benchmark shares: environment, alternating pairs, medians and ranges, Spark helpers,
child processes, machine facts, and result files that carry the run they come from."""

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from functools import reduce
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
MIN_PAIRS = 5
STARTED = time.time()
LOAD_AT_START = os.getloadavg()


def setup_environment(airflow_root: Path | None = None) -> None:
    """What the Makefile exports; with ``airflow_root``, a throw-away AIRFLOW_HOME (SQLite) there."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    if airflow_root is not None:
        home = airflow_root / "airflow-home"
        (airflow_root / "dags").mkdir(parents=True, exist_ok=True)
        os.environ.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__UNIT_TEST_MODE="False",
                          AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
                          AIRFLOW__CORE__DAGS_FOLDER=str(airflow_root / "dags"),
                          AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "local[2]"}))


def benchmark(name: str, doc: str | None, measure: Callable[[argparse.Namespace], dict[str, Any]],
              child: Callable[[argparse.Namespace], dict[str, Any]] | None = None, **defaults: Any) -> None:
    """Every benchmark's command line: ``--name-with-dashes`` for every default (typed as it) and ``--out`` (the result
    file); its figures written with the run's metadata. With ``child``, ``--child 1`` runs that part instead in a process
    (and JVM) of its own and writes its JSON to --out."""
    parser = argparse.ArgumentParser(description=doc)
    for option, default in {**defaults, "out": None, **({"child": 0} if child else {})}.items():
        parser.add_argument("--" + option.replace("_", "-"), default=default, type=str if default is None else type(default))
    args = parser.parse_args()
    setup_environment()
    if child and args.child:
        Path(args.out).write_text(json.dumps(child(args), default=str), encoding="utf-8")
    else:
        write_result(name, measure(args), args.out)


def run_child(module: str, out: Path, **options: Any) -> dict[str, Any]:
    """``python -m module --child 1 --name value ... --out out`` (see ``benchmark``); its JSON."""
    flags = [x for key, value in options.items() for x in ("--" + key.replace("_", "-"), str(value))]
    subprocess.run([sys.executable, "-m", module, "--child", "1", "--out", str(out), *flags], check=True, cwd=str(REPO))
    return json.loads(out.read_text())


def dashed(settings: dict[str, Any]) -> dict[str, Any]:
    """Spec keys are written with dashes; paths as text."""
    return {key.replace("_", "-"): str(value) if isinstance(value, Path) else value for key, value in settings.items()}


def step(id: str, plugin: str, **settings: Any) -> dict[str, Any]:
    """A source, processor or destination of a pipeline spec."""
    return {"id": id, "plugin": plugin, "settings": dashed(settings)}


def pipeline_yaml(id: str, sources: list[dict], destinations: list[dict], processors: list[dict] | None = None,
                  dlq: dict | None = None, mode: str = "available-now", **options: Any) -> str:
    """A pipeline spec as YAML, from the parts in which the benchmarks' pipelines differ."""
    import yaml

    spec = {"id": id, "mode": mode, **dashed(options), "sources": sources, **({"processors": processors} if processors else {}),
            "destinations": destinations, **({"dead-letter-queue": dlq} if dlq else {})}
    return yaml.safe_dump({"version": "1", "pipeline": spec}, sort_keys=False, width=1000)


def file_dlq(path: Path, format: str = "parquet", plugin: str = "builtin:file", **options: Any) -> dict[str, Any]:
    """A dead letter queue written to files."""
    return {"plugin": plugin, "settings": {"path": str(path), "format": format}, **dashed(options)}


def write_lines(folder: Path, records: int, per_file: int, line: Callable[[int], str]) -> None:
    """Input files: ``line(i)`` for every record, ``per_file`` lines a file."""
    folder.mkdir(parents=True, exist_ok=True)
    for start in range(0, records, per_file):
        text = "\n".join(line(i) for i in range(start, min(start + per_file, records)))
        (folder / f"part-{start:09d}.jsonl").write_text(text + "\n", encoding="utf-8")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def summary(values: Iterable[float | None]) -> dict[str, float]:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, float]:
    """Per-pair ratios (runs of the same repetition), summarised."""
    return summary(n / d for n, d in zip(numerators, denominators, strict=True))


def alternate(variants: Sequence[str], reps: int, run: Callable[[str, Any], dict[str, Any]], warmup: int = 1, label: str = "",
              work: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every variant once per repetition in rotated order, after ``warmup`` uncounted rounds (rep < 0). ``run`` gets the
    variant and the repetition, or with ``work`` a fresh folder there, removed after the run."""
    out: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for rep in range(-warmup, reps):
        k = max(rep, 0) % len(variants)
        for variant in [*variants[k:], *variants[:k]]:
            folder = work / f"{variant}{rep}" if work else None
            result = run(variant, folder or rep)
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
            shown = {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items() if isinstance(v, (int, float))}
            log(f"{label}{'warm-up' if rep < 0 else f'rep {rep}'} {variant}: {shown}")
            if rep >= 0:
                out[variant].append(result)
    return out


def column(samples: list[dict[str, Any]], key: str) -> list[Any]:
    """One figure of every sample."""
    return [s[key] for s in samples]


def by_way(runs: Mapping[str, list[dict[str, Any]]], key: str = "seconds") -> dict[str, dict[str, float]]:
    """One figure of every way's runs, summarised per way."""
    return {way: summary(column(samples, key)) for way, samples in runs.items()}


def ratio(runs: Mapping[str, list[dict[str, Any]]], num: str, den: str, key: str = "seconds") -> dict[str, float]:
    """``num``'s figure over ``den``'s, per repetition (the two ran side by side), summarised."""
    return ratios(column(runs[num], key), column(runs[den], key))


class Stopwatch:
    def __enter__(self) -> "Stopwatch":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.start


def utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def iso_epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()  # Python 3.10 reads no "Z"


def spark_session(app: str, driver_memory: str = "2g", *, jit: bool = True, connectors=frozenset(),
                  conf: Mapping[str, Any] | None = None):
    """A local[2] session with the runner's settings (spark/session.py); ``jit`` False leaves out the JVM options the
    launchers pass (spark/jvm/options.py); ``conf``: settings the JVM reads once, at its start."""
    settings = "".join(f"--conf {key}={value} " for key, value in (conf or {}).items())
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {driver_memory} {settings}pyspark-shell"
    from pyspark.sql import SparkSession

    from airflow_conduit.spark.session import SESSION_SETTINGS, build_session

    if jit:
        spark = build_session(app, master="local[2]", connectors=connectors)
    else:  # build_session's settings without the launchers' JVM options
        conf = {**SESSION_SETTINGS, "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"}
        spark = SparkSession.builder.appName(app).master("local[2]").config(map=conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def next_job_id(spark) -> int:
    value = spark.sparkContext._jsc.sc().dagScheduler().nextJobId()
    return value if isinstance(value, int) else int(value.get())


def seconds_in_jobs(spark, first: int, end: int) -> float:
    """Wall time covered by Spark jobs first..end-1 (the union of their submission -> completion spans)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    total, reach = 0, None
    for start, stop in sorted((store.job(j).submissionTime().get().getTime(), store.job(j).completionTime().get().getTime())
                              for j in range(first, end)):
        if reach is None or start > reach:
            total, reach = total + stop - start, stop
        elif stop > reach:
            total, reach = total + stop - reach, stop
    return total / 1000


def cpu_clock(spark) -> Callable[[], float]:
    """CPU seconds of the driver's JVM (all threads, from /proc) plus this Python process."""
    stat = Path(f"/proc/{int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())}/stat")
    return lambda: stat_seconds(stat.read_text()) + sum(os.times()[:2])


def stat_seconds(stat: str) -> float:
    """User and system CPU seconds in a ``/proc/.../stat`` line (its 14th and 15th fields)."""
    return sum(int(x) for x in stat.rsplit(")", 1)[1].split()[11:13]) / os.sysconf("SC_CLK_TCK")


def measure_ways(spark, work: Path, data: Path, todo: Mapping[str, Callable], reps: int, warmup: int = 1,
                 label: str = "") -> dict[str, list[dict[str, Any]]]:
    """``todo``'s ways alternating on ``data``: each run's own figures with its CPU time, its time in and outside Spark
    jobs, its time window and, for the ways that write files themselves, the rows they wrote (counted after the timed
    region)."""
    clock = cpu_clock(spark)

    def run(way: str, folder: Path) -> dict[str, Any]:
        first, cpu, started = next_job_id(spark), clock(), time.time()
        result = todo[way](spark, data, folder)
        in_jobs = seconds_in_jobs(spark, first, next_job_id(spark))
        result.update(cpu=clock() - cpu, in_jobs=in_jobs, outside_jobs=result["seconds"] - in_jobs, window=(started, time.time()))
        if "lake" in result:
            result.update(written=spark.read.parquet(str(result["lake"])).count(),
                          bad=spark.read.parquet(str(result["dlq"])).count() if "dlq" in result else None)
        return result

    return alternate(list(todo), reps, run, warmup, label, work)


def with_required(df, ddl: str):
    """The rows that have every NOT NULL field of ``ddl`` (Spark's readers take a schema without NOT NULL)."""
    from pyspark.sql import functions as F

    for name in (field.split()[0] for field in ddl.split(", ") if field.endswith(" NOT NULL")):
        df = df.where(F.col(name).isNotNull())
    return df


def run_pipeline(spark, text: str, root: Path, on_runner: Callable[[Any], None] = lambda runner: None) -> dict[str, Any]:
    """The runner in-process (the code spark-submit runs) on a pipeline YAML; its time, batches, counts and Spark jobs."""
    from airflow_conduit.pipeline import load_pipeline_from_string
    from airflow_conduit.spark.runner import execute

    spec = load_pipeline_from_string(text, str(root / "pipeline.yaml"), base_dir=str(root))
    runners: list[Any] = []
    with Stopwatch() as sw:
        code, report = execute(spark, spec, state_dir=root / "state", run_id="bench",
                             on_runner=lambda r: (runners.append(r), on_runner(r)))
    if code != 0:
        raise RuntimeError(f"runner exited {code}: {report.error}")
    query = getattr(runners[0], "query", None)
    return {"seconds": sw.seconds, "batches": len(report.batches), "written": sum((report.totals.get("written") or {}).values()),
            "bad": int(report.totals.get("dlq", 0)), "totals": report.totals,
            "jobs": len(spark.sparkContext.statusTracker().getJobIdsForGroup(str(query.runId))) if query else None}


@contextlib.contextmanager
def workdir(name: str):
    """A temporary folder for a benchmark's data and outputs, removed at the end."""
    with tempfile.TemporaryDirectory(prefix=f"conduit-bench-{name}-", ignore_cleanup_errors=True) as folder:
        yield Path(folder)


@contextlib.contextmanager
def processes(*commands: list[str], **popen: Any):
    """The commands started in sessions of their own; their process groups killed on the way out."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, **popen) for cmd in commands]
    try:
        yield procs
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


RUN_KEYS = ("benchmark", "id", "commit", "started_at", "finished_at", "command", "machine", "load_average")


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=str(REPO))
        return ((out.stdout or "") + (out.stderr or "")).strip().splitlines()[0] if out.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return ""


def machine_facts() -> dict[str, Any]:
    from importlib.metadata import version

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return {"cpu": next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), ""),
            "cores": os.cpu_count(), "memory_gib": round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1),
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(), "java": _first_line(["java", "-version"]),
            "versions": {package: version(package) for package in ("pyspark", "apache-airflow", "airflow-conduit")}}


def write_result(name: str, figures: dict[str, Any], out: str | None) -> Path:
    """The figures of this run, with the run's metadata; ``parts`` names the run of every figure (one run per file)."""
    commit = _first_line(["git", "rev-parse", "HEAD"]) or "unknown (not a git checkout)"
    dirty = bool(_first_line(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"]))  # earlier results are not code
    run = {"benchmark": name, "id": f"{name}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(STARTED))}-{os.getpid()}",
           "commit": commit + (" (with uncommitted changes)" if dirty else ""), "started_at": utc(STARTED),
           "finished_at": utc(time.time()), "seconds": time.time() - STARTED,
           "command": " ".join(["python -m", f"bench.{name}", *(a for i, a in enumerate(sys.argv[1:]) if "--out" not in sys.argv[i:i + 2])]),
           "machine": machine_facts(), "load_average": {"start": LOAD_AT_START, "end": os.getloadavg()},
           **({"note": os.environ["CONDUIT_BENCH_NOTE"]} if os.environ.get("CONDUIT_BENCH_NOTE") else {})}
    path = Path(out) if out else RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"run": run, "parts": {key: run["id"] for key in figures}, "figures": figures}
    path.with_suffix(".tmp").write_text(json.dumps(data, indent=1, sort_keys=True, default=str), encoding="utf-8")
    os.replace(path.with_suffix(".tmp"), path)
    log(f"written to {path}")
    return path


def fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None or value != value else f"{value:,.{digits}f}"


def spread(value: Any, digits: int = 2, unit: str = "") -> str:
    """A summary as ``median (min–max)`` (the median alone when all agree), a number as itself."""
    if isinstance(value, Mapping):
        if not value.get("n", 1):
            return "n/a"
        if value["min"] == value["max"]:
            return f"{fmt(value['median'], digits)}{unit}"
        return f"{fmt(value['median'], digits)}{unit} ({fmt(value['min'], digits)}–{fmt(value['max'], digits)})"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{fmt(float(value), digits)}{unit}"
    return "n/a" if value is None else str(value)


def at(*path: str) -> Callable[[Mapping[str, Any]], Any]:
    """The value at ``path`` in a result (nested keys), or None when a key is missing."""
    return lambda result: reduce(lambda value, key: value.get(key) if isinstance(value, Mapping) else None, path, result)


def cells(item: Any, spec: Sequence[tuple]) -> list[str]:
    """``item``'s figures as text, one per (header, getter, digits, unit) of ``spec`` (digits and unit as ``spread``'s)."""
    return [spread(get(item), *fmt) for _, get, *fmt in spec]


def figure_table(items: Iterable[Any], spec: Sequence[tuple]) -> str:
    """A table with a row per item and a column per (header, getter, digits, unit) of ``spec``."""
    return table([header for header, *_ in spec], [cells(item, spec) for item in items])


def facts_table(result: Mapping[str, Any], spec: Sequence[tuple], header: Sequence[str] = ("measure", "value")) -> str:
    """A two-column table: a row per (label, getter, digits, unit) of ``spec``, its figure from ``result``."""
    return table(header, [[row[0], *cells(result, [row])] for row in spec])


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])
