"""The benchmark targets as data: the figure each reads, its limit, and the verdict computed from a run's figures:
met, missed, or not run (no result, or the figure is absent). A summary is judged on its median unless ``stat="max"``
(every repetition); ``==`` needs every repetition equal to the limit."""

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from bench.common import at, spread

MET, MISSED, NOT_RUN = "met", "missed", "not run"

Result = Mapping[str, Any]


@dataclass(frozen=True)
class Target:
    measure: str
    benchmark: str
    value: Callable[[Result], Any]  # a summary (median, min, max, n), a number, a bool, or None
    op: str  # "<=", "==" or "true"
    limit: float = 0.0
    stat: str = "median"
    unit: str = ""
    digits: int = 2

    @property
    def wanted(self) -> str:
        if self.op == "true":
            return "yes"
        sign = "≤" if self.op == "<=" else "="
        return f"{sign} {self.limit:g}{self.unit}" + (" (every repetition)" if self.stat == "max" else "")

    def judge(self, result: Result | None) -> tuple[str, str]:
        """(the measured value as text, the verdict)."""
        value = self.value(result) if result is not None else None
        if value is None or (isinstance(value, Mapping) and not value.get("n", 1)):
            return "n/a", NOT_RUN
        if self.op == "true":
            return ("yes" if value else "no"), (MET if value else MISSED)
        if isinstance(value, Mapping):
            met = value["min"] == value["max"] == self.limit if self.op == "==" else value[self.stat] <= self.limit
        else:
            met = value == self.limit if self.op == "==" else value <= self.limit
        return spread(value, self.digits, self.unit), (MET if met else MISSED)


def read_twice_share(result: Result) -> float | None:
    """Records read twice by the worst restart, as a share of its in-flight batch."""
    return max((k["read_twice"] / k["batch_size"] for k in result.get("kills") or []), default=None)


def small_run_over_floor(result: Result) -> float | None:
    """The small run's median wall time minus the plain PySpark script's."""
    wall, floor = (v.get("median") if isinstance(v, Mapping) else v for v in (result.get("wall_seconds"), result.get("floor_wall_s")))
    return None if wall is None or floor is None else wall - floor


def soak_verdict(key: str) -> Callable[[Result], bool | None]:
    from bench.soak import verdicts

    return lambda result: verdicts(result)[key]


TARGETS: tuple[Target, ...] = (
    Target("1. a/p: runner ÷ streaming floor, default batch size", "error_handling", at("ratio_a_p"), "<=", 1.15),
    Target("1. t/p: runner ÷ streaming floor, both with `max-files-per-trigger` (5 in `make bench`)", "error_handling", at("ratio_t_pt"), "<=", 1.3),
    Target("1. fixed cost per micro-batch over p (method in section 1)", "error_handling", at("fixed_cost_ms"), "<=", 150, unit=" ms", digits=0),
    Target("1. a/c: runner ÷ Python UDF", "error_handling", at("ratio_a_c"), "<=", 0.5),
    Target("1. Spark jobs per micro-batch with bad records", "error_handling", at("jobs_per_batch", "with_bad"), "<=", 2, stat="max", digits=1),
    Target("1. Spark jobs per micro-batch without bad records", "error_handling", at("jobs_per_batch", "without_bad"), "==", 1, digits=1),
    *(Target(f"1b. a/p at {width} fields", "wide_schema", at("widths", str(width), "ratio_a_p"), "<=", 1.3) for width in (25, 50, 100)),
    Target("2. recovery overhead, poll 1 s", "recovery_reaction", at("by_poll", "1", "summary", "overhead"), "<=", 2.0, stat="max", unit=" s"),
    Target("2. recovery overhead, poll 5 s", "recovery_reaction", at("by_poll", "5", "summary", "overhead"), "<=", 6.0, stat="max", unit=" s"),
    Target("3. restart: records read twice ÷ the in-flight batch, worst kill", "restart_cost", read_twice_share, "<=", 1),
    Target("3. restart: records written twice", "restart_cost", at("written_twice"), "==", 0, digits=0),
    Target("3. restart: records missing", "restart_cost", at("missing"), "==", 0, digits=0),
    Target("5. soak: no memory growth trend (Python RSS, JVM heap after GC)", "soak", soak_verdict("memory_flat"), "true"),
    Target("5. soak: STATE_DIR bounded once retention windows are full", "soak", soak_verdict("state_dir_bounded"), "true"),
    Target("6. small run: wall time over a plain PySpark script's", "small_run", small_run_over_floor, "<=", 2.0, unit=" s", digits=1),
    Target("8. Kafka -> Delta: runner ÷ floor, default batch", "kafka_delta", at("default_batch", "ratio_runner_over_floor"), "<=", 1.3),
    Target("8. Kafka -> Delta: runner ÷ floor, small batches", "kafka_delta", at("per_batch", "ratio_runner_over_floor"), "<=", 1.3),
)
