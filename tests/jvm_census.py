"""A census of the JVMs a test run starts: how many, of which kind, for which test, and their CPU seconds.

Most of the suite's time is JVM start-up and Spark runs; wall times on a shared machine are noise, counts and
CPU seconds are not. ``CONDUIT_JVM_CENSUS=<file> pytest ...`` turns it on: every process the run starts inherits
a tag in its environment, a thread samples ``/proc`` a few times a second for ``java`` processes with that tag
(children of spark-submit, of the Airflow processes, of the broker fixtures alike), and at the end the census is
written to ``<file>`` (``<file>.<worker>`` under xdist) as JSON. ``python tests/jvm_census.py <file>...`` sums
one or more of them per kind and per test module. Off by default: nothing is sampled.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

ENV_OUTPUT = "CONDUIT_JVM_CENSUS"
ENV_TAG = "CONDUIT_JVM_CENSUS_TAG"
SAMPLE_SECONDS = 0.2
_TICKS = os.sysconf("SC_CLK_TCK")


def kind_of(argv: list[str]) -> str:
    """What a JVM is for, from its command line."""
    if "org.apache.spark.launcher.Main" in argv:
        return "spark-launcher"  # bin/spark-class's short JVM that builds the command of the one it then starts
    if "org.apache.spark.deploy.SparkSubmit" in argv:
        # PySpark's own gateway (an in-process SparkSession) submits "pyspark-shell"; spark-submit a file.
        return "spark-session" if "pyspark-shell" in argv else "spark-submit"
    for main, kind in (
        ("org.apache.spark.deploy.master.Master", "standalone-master"),
        ("org.apache.spark.deploy.worker.Worker", "standalone-worker"),
        ("org.apache.spark.deploy.worker.DriverWrapper", "standalone-driver"),
        ("org.apache.spark.executor.CoarseGrainedExecutorBackend", "executor"),
        ("kafka.Kafka", "kafka-broker"),
    ):
        if main in argv:
            return kind
    return "other"


class Census:
    def __init__(self, tag: str):
        self.tag = f"{ENV_TAG}={tag}".encode()
        self.test = "(setup)"
        self.jvms: dict[int, dict] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample_until_stopped, name="jvm-census", daemon=True)
        self.started = time.monotonic()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self._sample()

    def _sample_until_stopped(self) -> None:
        while not self.stopped.wait(SAMPLE_SECONDS):
            self._sample()

    def _sample(self) -> None:
        now = time.monotonic()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                with open(f"/proc/{pid}/comm", "rb") as f:
                    if f.read().strip() != b"java":
                        continue
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime
                known = self.jvms.get(pid)
                if known is None:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        if self.tag not in f.read().split(b"\0"):
                            continue
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
                    known = self.jvms[pid] = {"pid": pid, "kind": kind_of(argv), "test": self.test,
                                              "first": now, "last": now, "cpu": cpu}
                known["last"], known["cpu"] = now, cpu
            except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError, ValueError):
                continue

    def result(self) -> dict:
        """The JVMs, and this process's wall and CPU seconds (its own, and its reaped children's and theirs)."""
        own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        return {"wall": round(time.monotonic() - self.started, 1), "cpu_self": round(own.ru_utime + own.ru_stime, 1),
                "cpu_children": round(children.ru_utime + children.ru_stime, 1),
                "jvms": [{**j, "seconds": round(j["last"] - j["first"], 1)} for j in self.jvms.values()]}


_census: Census | None = None


def pytest_configure(config) -> None:
    global _census
    if not os.environ.get(ENV_OUTPUT) or _census is not None:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None and getattr(config.option, "numprocesses", None):
        return  # the xdist controller runs no test: its workers count
    tag = f"{uuid.uuid4().hex}-{worker or 'main'}"
    os.environ[ENV_TAG] = tag
    _census = Census(tag)
    _census.start()


def pytest_runtest_logstart(nodeid, location) -> None:
    if _census is not None:
        _census.test = nodeid


def pytest_unconfigure(config) -> None:
    global _census
    if _census is None:
        return
    _census.stop()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    path = os.environ[ENV_OUTPUT] + (f".{worker}" if worker else "")
    Path(path).write_text(json.dumps(_census.result(), indent=1))
    _census = None


def summarise(paths: list[str]) -> str:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    jvms = [j for run in runs for j in run["jvms"]]
    by_kind = Counter(j["kind"] for j in jvms)
    cpu_by_kind = defaultdict(float)
    per_module: dict[str, Counter] = defaultdict(Counter)
    for j in jvms:
        cpu_by_kind[j["kind"]] += j["cpu"]
        per_module[j["test"].split("::")[0]][j["kind"]] += 1
    wall, cpu = max(r.get("wall", 0) for r in runs), sum(r.get("cpu_self", 0) + r.get("cpu_children", 0) for r in runs)
    lines = [f"{len(jvms)} JVMs, {sum(j['cpu'] for j in jvms):.0f} CPU s in JVMs; the run: {wall:.0f} s wall, "
             f"{cpu:.0f} CPU s (its processes and their reaped children)"]
    lines += [f"  {kind:18} {n:4}  {cpu_by_kind[kind]:7.0f} CPU s" for kind, n in by_kind.most_common()]
    lines.append("per test module (JVMs by kind):")
    for module, kinds in sorted(per_module.items(), key=lambda kv: -sum(kv[1].values())):
        lines.append(f"  {sum(kinds.values()):3}  {module}  " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(sys.argv[1:]))
