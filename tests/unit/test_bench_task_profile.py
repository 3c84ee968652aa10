"""Benchmark 1c's attribution of sampled stacks (bench/bookkeeping_cost.py): the figures in docs/benchmarks.md
depend on it, so it is pinned here on hand-made samples in Java Flight Recorder's JSON shape."""

from bench.bookkeeping_cost import CPU_LABELS, attribute, tables, task_part
from bench.common import thread_cpu_clock, thread_cpu_used, thread_group


def frame(cls: str, method: str) -> dict:
    return {"method": {"type": {"name": cls}, "name": method}}


def sample(at: str, thread: str, *frames: dict) -> dict:
    return {"values": {"startTime": at, "sampledThread": {"javaName": thread}, "stackTrace": {"frames": list(frames)}}}


READER = frame("com/fasterxml/jackson/core/json/UTF8StreamJsonParser", "nextToken")
GENERATED = frame("org/apache/spark/sql/catalyst/expressions/GeneratedClass$GeneratedIteratorForCodegenStage1", "processNext")
OBSERVATION = frame("org/apache/spark/sql/execution/AggregatingAccumulator", "add")
PARQUET = frame("org/apache/parquet/column/impl/ColumnWriterBase", "write")


def test_a_sample_belongs_to_the_first_part_found_from_the_sampled_frame_down():
    # the generated code pulls rows from the reader: a sample inside the reader is the reader's
    assert task_part([READER, GENERATED]) == "json_reader"
    # the observation's aggregates run under the write's generated code: theirs, not the generated code's
    assert task_part([frame("java/util/HashMap", "get"), OBSERVATION, GENERATED]) == "observation"
    assert task_part([GENERATED, OBSERVATION]) == "generated_code"
    assert task_part([PARQUET, GENERATED]) == "parquet_writer"
    assert task_part([frame("java/lang/String", "equals")]) == "other"
    assert task_part([]) == "other"


def test_samples_are_counted_per_run_of_the_way_whose_window_holds_them():
    windows = {
        "a": [(1_700_000_000.0, 1_700_000_010.0), (1_700_000_100.0, 1_700_000_110.0)],
        "b": [(1_700_000_020.0, 1_700_000_030.0)],
    }
    task, driver = "Executor task launch worker for task 0.0 in stage 1.0 (TID 1)", "dag-scheduler-event-loop"
    samples = [
        sample("2023-11-14T22:13:25Z", task, READER),  # 1_700_000_005: a, first run
        sample("2023-11-14T22:15:05Z", task, READER),  # 1_700_000_105: a, second run
        sample("2023-11-14T22:15:06Z", task, PARQUET),
        sample("2023-11-14T22:15:07Z", driver, READER),  # not a task thread: the driver's
        sample("2023-11-14T22:13:45Z", task, GENERATED),  # 1_700_000_025: b
        sample("2023-11-14T22:14:00Z", task, READER),  # 1_700_000_040: between the ways' runs
    ]
    profile = attribute(samples, windows)
    assert profile["a"] == {"json_reader": 1.0, "parquet_writer": 0.5, "driver": 0.5}  # per run: a ran twice
    assert profile["b"] == {"generated_code": 1.0}


def test_a_jvm_thread_is_grouped_by_the_name_proc_shows():
    # /proc keeps 15 characters of a thread's name
    assert thread_group("Executor task l") == "tasks"
    assert thread_group("C2 CompilerThre") == thread_group("C1 CompilerThre") == "jit"
    assert thread_group("GC Thread#0") == thread_group("G1 Conc#0") == thread_group("G1 Refine#0") == "gc"
    assert thread_group("dag-scheduler-e") == thread_group("Thread-12") == "driver"


def test_the_thread_cpu_clock_counts_a_process_s_cpu_once_and_the_pythons_own():
    import os
    import time

    clock = thread_cpu_clock(os.getpid())  # this Python process: no thread of it is a task, compiler or collector
    before = clock()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    used = thread_cpu_used(before, clock())
    assert set(used) == {"tasks", "jit", "gc", "driver", "python"}
    assert used["tasks"] == used["jit"] == used["gc"] == 0
    assert used["driver"] >= 0.2 and used["python"] >= 0.2  # the process's total, less no group, and os.times()'s


def test_a_thread_that_ends_takes_only_its_time_between_the_readings_with_it():
    before = {"jvm": 100.0, "python": 1.0, "threads": {"1": ("tasks", 40.0), "2": ("tasks", 30.0), "3": ("jit", 10.0)}}
    # thread 2 (idle since the last run) ended; thread 1 worked 5 s, the compiler 2 s, a new task thread 1 s
    after = {"jvm": 108.5, "python": 1.5, "threads": {"1": ("tasks", 45.0), "3": ("jit", 12.0), "4": ("tasks", 1.0)}}
    assert thread_cpu_used(before, after) == {"tasks": 6.0, "jit": 2.0, "gc": 0.0, "driver": 0.5, "python": 0.5}


def test_the_cpu_table_shows_each_thread_group_per_way():
    one = {"median": 1.5, "min": 1.0, "max": 2.0, "n": 3}
    result = {"seconds": {w: one for w in ("a", "p", "b")}, "ratio_to_b": {w: one for w in ("a", "p", "b")},
              "rows_written": {w: 10 for w in ("a", "p", "b")}, "steps": {}, "task_samples_per_run": {},
              "thread_cpu": {w: {group: one for group in CPU_LABELS} for w in ("a", "p", "b")}}
    text = "\n".join(tables(result))
    assert "| CPU seconds per run | a | p | b |" in text
    assert "| the JIT compilers (C1, C2) | 1.50 s (1.00–2.00) | 1.50 s (1.00–2.00) | 1.50 s (1.00–2.00) |" in text
