"""Benchmark 1c's attribution of sampled stacks (bench/bookkeeping_cost.py): the figures in docs/benchmarks.md
depend on it, so it is pinned here on hand-made samples in Java Flight Recorder's JSON shape."""

from bench.bookkeeping_cost import attribute, task_part


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
