"""What every batch of a run executes the same, built once per run: the ``RunPlan``.

A batch's plan is the same at every batch but for its rows (docs/architecture.md, the data path): the sources'
record columns, the processors' and fates' columns, the pass's select lists and the DLQ's columns. Every ``Column``
call is a JVM round trip, so they are built once per run and read by every batch.

Lifecycle, in three named steps:

1. ``RunPlan.build`` (once per run, after setup): the record columns, the fates, the DLQ's columns, what the pass
   needs to know of the destinations. The runner builds it on a thread of its own while the query starts
   (``PlanAhead``): the first batch waits for it instead of building it while the executors wait.
2. ``PassColumns``: the pass's own columns and select lists, which depend on the batch plan's columns (the same at
   every batch) and on the pass's ``PassShape``; each shape's are built by the first pass of that shape (a run has
   one shape but for a batch an earlier attempt half committed), on the stand-in batch when there is one.
3. ``KeptPlans``: the analysed plans put over each later batch's rows (``analysed_plan``), kept by the first batch
   (or the stand-in batch) and kept again when a batch could not reuse them.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from pyspark.sql import DataFrame

from airflow_conduit.spark.analysed_plan import AnalysedPlan
from airflow_conduit.spark.dlq import PendingReasons, dlq_entry
from airflow_conduit.spark.fates import Fates
from airflow_conduit.spark.source_lines import SourceLines
from airflow_conduit.spark.sources import FILE, SPLIT, SourcePlan, SourceRecords
from airflow_conduit.spark import columns as C

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from airflow_conduit.pipeline.model import PipelineSpec
    from airflow_conduit.spark.destinations import Destination
    from airflow_conduit.spark.fates import Branch

log = logging.getLogger(__name__)


class PassShape(NamedTuple):
    """What a pass observes, which decides its columns: whether it gathers the DLQ's entries, whether it feeds the
    nack window, and how many destinations' branches it counts."""

    dlq: bool
    window: bool
    branches: int


@dataclass(frozen=True)
class ShapeColumns:
    """The observation's columns of a pass of one ``PassShape``, handed to the JVM once each."""

    inputs: C.JvmColumns  # the observation's inputs (BatchPass._observed_inputs)
    metrics: C.JvmColumns  # the observation's aggregates (BatchPass._metrics)


class PassColumns:
    """The pass's columns and select lists, built at their first use and read by every later pass of the run.

    What a nacked record carries into its DLQ entry depends on the batch plan's columns (the same at every batch):
    built by the first pass. The observation's columns depend on the ``PassShape``: built by the first pass of each
    shape. The crossing select list (``BatchPass._crossing``) depends on the columns above the observation's inputs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entry: tuple[tuple[Column, ...], tuple[str, ...]] | None = None
        self._shapes: dict[PassShape, ShapeColumns] = {}
        self._crossing: dict[tuple[str, ...], Any] = {}
        self._dlq_types: tuple[tuple[str, ...] | None] | None = None
        self.observed_selects: dict = {}  # observed.ObservedMetrics' select lists, kept between observations

    def entry(self, build: Callable[[], tuple[tuple[Column, ...], tuple[str, ...]]]):
        """(the DLQ entry's columns, the names of what the DLQ carries in it): built by the first pass."""
        with self._lock:
            if self._entry is None:
                self._entry = build()
            return self._entry

    def of_shape(self, shape: PassShape, build: Callable[[], ShapeColumns]) -> ShapeColumns:
        with self._lock:
            if shape not in self._shapes:
                self._shapes[shape] = build()
            return self._shapes[shape]

    def crossing(self, columns: tuple[str, ...], build: Callable[[], Any]):
        with self._lock:
            if columns not in self._crossing:
                self._crossing[columns] = build()
            return self._crossing[columns]

    def dlq_types(self, build: Callable[[], tuple[str, ...] | None]) -> tuple[str, ...] | None:
        """The DLQ columns' Spark type names, read from the first observation that gathered DLQ entries."""
        with self._lock:
            if self._dlq_types is None:
                self._dlq_types = (build(),)
            return self._dlq_types[0]


class FrameKey(NamedTuple):
    """Which of a pass's frames an analysed plan is kept for: ``inputs`` (the observation's inputs in one task per
    core, of one ``PassShape``) or ``rows`` (a destination's rows, over the observed pass or over the batch)."""

    kind: str
    part: tuple


class KeptPlans:
    """Analysed plans kept to be put over later batches' rows (``analysed_plan.AnalysedPlan``).

    The batch's whole plan (records, processors, fates; with its branches and the fits of the destinations that fit
    records to their table) and the pass's frames over it. Kept by the first batch, or by the stand-in batch built
    while the query starts; a batch that could not reuse one builds its frame and keeps that instead. A plan refused
    for what it holds (a seed fixed at analysis) is never kept again.
    """

    def __init__(self) -> None:
        self.batch: tuple[AnalysedPlan, list, list] | None = None  # (plan, branches, [(destination, fit state)])
        self.batch_refused = False
        self._frames: dict[FrameKey, AnalysedPlan] = {}

    def frame(self, key: FrameKey, leaf: DataFrame, build: Callable[[DataFrame], DataFrame]) -> DataFrame:
        """``build(leaf)``, analysed once per run where it can be: the kept frame put over ``leaf`` when ``leaf`` is
        the batch plan put over this batch (same output attributes); built, and kept, otherwise."""
        kept = self._frames.get(key)
        if kept is not None:
            try:
                frame = kept.over(leaf)
            except Exception:  # noqa: BLE001 - reuse is an optimisation: the frame is then built as usual
                frame = None
            if frame is not None:
                return frame
        frame = build(leaf)
        try:  # checked ahead once: a plan kept again, after a batch that could not reuse it, is checked at its reuse
            self._frames[key] = AnalysedPlan(frame, leaf, check_ahead=kept is None)
        except Exception:  # noqa: BLE001 - as above
            self._frames.pop(key, None)
        return frame


@dataclass(frozen=True)
class RunPlan:
    """What every batch of the run executes the same (see the module docstring)."""

    spark: "SparkSession"
    spec: "PipelineSpec"
    run_id: str
    sources: tuple[SourcePlan, ...]
    destinations: tuple["Destination", ...]
    dlq: "Destination"
    keep_originals: bool  # the fields as read kept for the DLQ (a later stage can fail a record)
    rules: tuple  # the expect processors' rules (spark/expectations.py), counted in every pass
    records: tuple[SourceRecords, ...]  # each source's record columns
    pending_reasons: PendingReasons  # the DLQ's columns (its reason columns built when a batch first has one pending)
    source_lines: SourceLines  # each DLQ record's line number and bytes, put in after the pass
    cores: int  # the tasks of a pass: one per core (batch_pass.in_tasks_per_core)
    fates: Fates = field(default_factory=Fates)  # the fate columns and each destination's select list
    processor_columns: dict = field(default_factory=dict)  # what processors build the same (ProcessorContext.once)
    columns: PassColumns = field(default_factory=PassColumns)
    kept: KeptPlans = field(default_factory=KeptPlans)

    @classmethod
    def build(cls, spark: "SparkSession", spec: "PipelineSpec", *, run_id: str, sources: list[SourcePlan],
              destinations: list["Destination"], dlq: "Destination", keep_originals: bool, rules: list) -> "RunPlan":
        """The run's plan, its record columns built (hundreds of JVM round trips at a hundred fields)."""
        single = len(sources) == 1
        return cls(
            spark=spark, spec=spec, run_id=run_id, sources=tuple(sources), destinations=tuple(destinations), dlq=dlq,
            keep_originals=keep_originals, rules=tuple(rules),
            records=tuple(SourceRecords(plan, single_source=single, keep_originals=keep_originals) for plan in sources),
            pending_reasons=PendingReasons(spec, list(sources)),
            source_lines=SourceLines(list(sources), include_messages=spec.dead_letter_queue.include_messages),
            cores=spark.sparkContext.defaultParallelism,
        )

    @property
    def window_size(self) -> int:
        return self.spec.dead_letter_queue.window_size

    @property
    def dlq_may_hold_pending_reasons(self) -> bool:
        """A JSON source's rejected lines not ``parsing.decidable_in_the_pass`` get their reason after the pass
        (``dlq.PendingReasons``)."""
        return any(plan.parser == "json" for plan in self.sources)

    @property
    def dlq_on_driver(self) -> bool:
        """Whether the DLQ may be written from the driver (``Destination.write_rows``): a local json or parquet file
        DLQ (one whose records' origins go to its writer, a Kafka DLQ, is not)."""
        return self.dlq.writes_rows and not self.dlq.wants_origins

    @property
    def generators(self) -> list[SourcePlan]:
        """The sources that end once they generated their records (a generator's last offset is observed)."""
        return [plan for plan in self.sources if plan.records is not None]

    def read_below_only(self) -> frozenset[str]:
        """The internal columns nothing above the pass's coalesce reads (``BatchPass._crossing``): the observation reads
        the source and position only for a generator's last offset, the read order only for an expectation's first
        offender (the DLQ's and the window's come in ``NACKED_SEQ``), a write only where it dedups on it (Kafka)."""
        below = {C.RAW, C.ERROR, C.FILTERED, C.SOURCE_INDEX, FILE, SPLIT}
        if not self.generators:
            below |= {C.SOURCE_ID, C.POSITION}
        if not self.rules and not any(dest.wants_record_id for dest in self.destinations):
            below.add(C.SEQ)
        return frozenset(below)

    def dlq_entry(self, status: DataFrame) -> tuple[tuple["Column", ...], tuple[str, ...]]:
        """The columns of a nacked record's DLQ entry and the names of what the DLQ carries in it (a Kafka DLQ: the
        record as read), for the batch plan ``status`` (its columns are every batch's): built by the run's first pass."""
        def build():
            carried = self.dlq.carried_in_entry(status.columns)  # a schema read: once per run
            entry = [*dlq_entry(self.spec, list(self.sources), keep_originals=self.keep_originals),
                     *[column.alias(name) for name, column in carried.items()]]
            return tuple(entry), tuple(carried)

        return self.columns.entry(build)


class PlanAhead:
    """The run's plan, built on a thread of its own while the query starts (``start``), taken by the first batch
    (``result``), which waits for it: it would build the same. A failure there is left to the batch, which builds it
    again and reports it where it happens (``result`` returns None)."""

    def __init__(self) -> None:
        self._future: concurrent.futures.Future | None = None
        self._thread: threading.Thread | None = None

    def start(self, build: Callable[[], RunPlan]) -> None:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(build())
            except BaseException as exc:  # noqa: BLE001 - handed to the batch (see the class docstring)
                future.set_exception(exc)

        self._future = future
        self._thread = threading.Thread(target=run, name="conduit-plan-ahead", daemon=True)
        self._thread.start()

    def result(self) -> RunPlan | None:
        """The plan built ahead (waiting for it), once: None when none was started, it failed or it was taken."""
        future, self._future = self._future, None
        if future is None:
            return None
        try:
            return future.result()
        except Exception:  # noqa: BLE001 - see the class docstring
            log.debug("the run's plan not built ahead of the first batch", exc_info=True)
            return None

    def join(self) -> None:
        """Wait for the thread to end: it marks stages, which a failure is classified by."""
        if self._thread is not None:
            self._thread.join()
