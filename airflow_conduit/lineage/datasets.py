"""A pipeline's datasets and what its runs did to them, in OpenLineage's terms, from the spec and the run reports.

Pure Python (no airflow, no openlineage, no pyspark): ``lineage.facets`` turns these into OpenLineage objects.
Dataset names follow OpenLineage's naming (https://openlineage.io/docs/spec/naming):

- a Kafka topic: namespace ``kafka://{first bootstrap server}``, name the topic (a ``topic-pattern``: the pattern);
- a file path: namespace ``file``, name the absolute path; a URI ``scheme://authority/path``: namespace
  ``scheme://authority``, name the path;
- a PostgreSQL table over JDBC: namespace ``postgres://host:port``, name ``database.schema.table`` (schema
  ``public`` when the table names none); another JDBC database: ``{subprotocol}://host:port``, the same name;
- a Delta table by catalog name: namespace ``spark_catalog``, name the table;
- the generator source and a ``log`` destination or DLQ are no dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

from airflow_conduit.pipeline.model import DEAD_LETTER_QUEUE_ID
from airflow_conduit.recovery import codes

# The reports' key of the DLQ's counts per source, stage and error class (spark/batch_pass.py writes them).
DLQ_KINDS_KEY = "dlq_kinds"

# A Kafka plugin's ``connection`` -> its bootstrap servers (the Airflow side reads the connection), or None.
ServersOf = Callable[[str], "str | None"]


@dataclass(frozen=True)
class DatasetName:
    namespace: str
    name: str


@dataclass(frozen=True)
class PipelineDataset:
    """One of a pipeline's datasets: the component it belongs to (``dead-letter-queue`` for the DLQ) and its name."""

    component_id: str
    plugin: str
    name: DatasetName


@dataclass(frozen=True)
class PipelineDatasets:
    inputs: tuple[PipelineDataset, ...]
    outputs: tuple[PipelineDataset, ...]  # the destinations, then the DLQ

    @property
    def dlq(self) -> PipelineDataset | None:
        return next((d for d in self.outputs if d.component_id == DEAD_LETTER_QUEUE_ID), None)


def path_dataset(path: str) -> DatasetName:
    """A file path or URI as OpenLineage names it."""
    parts = urlsplit(path)
    if parts.scheme and parts.scheme != "file" and len(parts.scheme) > 1:  # not a Windows drive letter
        return DatasetName(f"{parts.scheme}://{parts.netloc}", parts.path or "/")
    return DatasetName("file", parts.path if parts.scheme == "file" else path)


def kafka_dataset(settings: dict[str, Any], topic: str, servers_of: ServersOf | None = None) -> DatasetName:
    servers = settings.get("servers")
    if not servers and settings.get("connection") and servers_of is not None:
        servers = servers_of(str(settings["connection"]))
    first = str(servers or "").split(",")[0].strip()
    if not first:  # a connection that could not be read here: named by its id, still one dataset per topic
        first = f"connection.{settings.get('connection', 'unknown')}"
    return DatasetName(f"kafka://{first}", topic)


def jdbc_dataset(url: str, table: str) -> DatasetName:
    """``jdbc:postgresql://host:port/db`` + ``schema.table`` -> ``postgres://host:port``, ``db.schema.table``."""
    rest = url.removeprefix("jdbc:")
    subprotocol, _, address = rest.partition("://")
    authority, _, tail = address.partition("/")
    database = tail.split("?")[0].split(";")[0]
    scheme = "postgres" if subprotocol == "postgresql" else subprotocol
    if scheme == "postgres" and ":" not in authority:
        authority += ":5432"
    qualified = table if "." in table or scheme != "postgres" else f"public.{table}"
    return DatasetName(f"{scheme}://{authority}", f"{database}.{qualified}" if database else qualified)


def source_datasets(plugin: str, settings: dict[str, Any], servers_of: ServersOf | None = None) -> list[DatasetName]:
    """The datasets a source reads: one per Kafka topic, its folder for a file source, none for the generator."""
    if plugin == "kafka":
        topics = settings.get("topics") or ([settings["topic-pattern"]] if settings.get("topic-pattern") else [])
        if isinstance(topics, str):
            topics = [topics]
        return [kafka_dataset(settings, str(topic), servers_of) for topic in topics]
    if plugin == "file" and settings.get("path"):
        return [path_dataset(str(settings["path"]))]
    return []


def sink_dataset(plugin: str, settings: dict[str, Any], servers_of: ServersOf | None = None) -> DatasetName | None:
    """The dataset a destination or the DLQ writes; None for a ``log`` one."""
    if plugin == "kafka" and settings.get("topic"):
        return kafka_dataset(settings, str(settings["topic"]), servers_of)
    if plugin == "jdbc" and settings.get("url") and settings.get("table"):
        return jdbc_dataset(str(settings["url"]), str(settings["table"]))
    if plugin == "delta" and settings.get("table") and not settings.get("path"):
        return DatasetName("spark_catalog", str(settings["table"]))
    if plugin in ("file", "delta") and settings.get("path"):
        return path_dataset(str(settings["path"]))
    return None


def pipeline_datasets(spec: Any, servers_of: ServersOf | None = None) -> PipelineDatasets:
    """Every source's datasets (inputs), every destination's and the DLQ's (outputs), in spec order."""
    inputs = [PipelineDataset(source.id, source.plugin, name)
              for source in spec.sources for name in source_datasets(source.plugin, dict(source.settings), servers_of)]
    outputs = []
    for destination in spec.destinations:
        name = sink_dataset(destination.plugin, dict(destination.settings), servers_of)
        if name is not None:
            outputs.append(PipelineDataset(destination.id, destination.plugin, name))
    dlq = spec.dead_letter_queue
    name = sink_dataset(dlq.plugin, dict(dlq.settings), servers_of)
    if name is not None:
        outputs.append(PipelineDataset(DEAD_LETTER_QUEUE_ID, dlq.plugin, name))
    return PipelineDatasets(tuple(inputs), tuple(outputs))


def replay_datasets(datasets: PipelineDatasets) -> PipelineDatasets:
    """A DLQ replay's datasets: it reads the DLQ and writes the destinations and the DLQ (records still failing)."""
    dlq = datasets.dlq
    return PipelineDatasets((dlq,) if dlq is not None else (), datasets.outputs)


# -- what the runs did ------------------------------------------------------------------------------------------

@dataclass
class RunCounts:
    """A task's runs together: records read, filtered, dead-lettered, written per destination; the DLQ's records
    per source, stage and error class; each expectation rule's passed and failed counts."""

    read: int = 0
    filtered: int = 0
    dlq: int = 0
    written: dict[str, int] = field(default_factory=dict)
    dlq_kinds: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # source -> stage -> class -> n
    expectations: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # processor -> rule -> counts
    runs: int = 0

    def dlq_of_source(self, source_id: str) -> dict[str, dict[str, int]]:
        return self.dlq_kinds.get(source_id, {})


def add_kinds(into: dict[str, dict[str, dict[str, int]]], kinds: dict[str, Any], sign: int = 1) -> None:
    """Add (``sign`` -1: take out) ``source -> stage -> class -> n`` counts."""
    for source, stages in (kinds or {}).items():
        for stage, classes in (stages or {}).items():
            for error_class, n in (classes or {}).items():
                per_stage = into.setdefault(source, {}).setdefault(stage, {})
                per_stage[error_class] = per_stage.get(error_class, 0) + sign * int(n)
                if per_stage[error_class] == 0:
                    del per_stage[error_class]


def counts_over_runs(reports: Iterable[dict[str, Any] | None]) -> RunCounts:
    """The counts of a task's runs (their reports, oldest first; a missing one skipped). A batch two runs
    recorded (a run that recorded it and ended before Spark's checkpoint did) counts once, as in
    ``runs.report.totals_over_runs``, whose read/filtered/dlq/written totals these are."""
    from airflow_conduit.runs.report import totals_over_runs

    present = [report for report in reports if report]
    totals = totals_over_runs(present)
    counts = RunCounts(read=int(totals["read"]), filtered=int(totals["filtered"]), dlq=int(totals["dlq"]),
                       written=dict(totals["written"]), runs=len(present))
    seen: dict[Any, dict[str, Any]] = {}
    for report in present:
        run_totals = report.get("totals") or {}
        add_kinds(counts.dlq_kinds, run_totals.get(DLQ_KINDS_KEY) or {})
        _add_expectations(counts.expectations, run_totals.get("expectations") or {})
        for batch in report.get("batches") or []:
            earlier = seen.get(batch.get("batch_id"))
            if earlier is not None:
                add_kinds(counts.dlq_kinds, earlier.get(DLQ_KINDS_KEY) or {}, sign=-1)
                _add_expectations(counts.expectations, earlier.get("expectations") or {}, sign=-1)
            seen[batch.get("batch_id")] = batch
    counts.dlq_kinds = {source: {stage: classes for stage, classes in stages.items() if classes}
                        for source, stages in counts.dlq_kinds.items()}
    counts.dlq_kinds = {source: stages for source, stages in counts.dlq_kinds.items() if stages}
    return counts


def _add_expectations(into: dict[str, dict[str, dict[str, Any]]], counts: dict[str, Any], sign: int = 1) -> None:
    for processor, rules in (counts or {}).items():
        for name, rule in (rules or {}).items():
            total = into.setdefault(processor, {}).setdefault(name, {"action": rule.get("action"), "passed": 0, "failed": 0})
            total["action"] = rule.get("action") or total["action"]
            total["passed"] += sign * int(rule.get("passed") or 0)
            total["failed"] += sign * int(rule.get("failed") or 0)


def rule_sources(spec: Any) -> dict[str, tuple[str, ...]]:
    """Each ``expect`` processor's id -> the sources whose records it checks (a source's own processor: that
    source; the pipeline's or a destination's: every source)."""
    every = tuple(source.id for source in spec.sources)
    found: dict[str, tuple[str, ...]] = {}
    for source in spec.sources:
        for processor in source.processors:
            found[processor.id] = (source.id,)
    for processor in [*spec.processors, *(p for d in spec.destinations for p in d.processors)]:
        found.setdefault(processor.id, every)
    return found


# -- the task's runs and how they ended --------------------------------------------------------------------------

def task_run_ids(recovery: dict[str, Any] | None) -> list[str]:
    """The run ids of the supervisor a ``recovery.json`` record carries, first to last (``RunSupervisor.run_ids``)."""
    carry = (recovery or {}).get("carry") or {}
    prefix = carry.get("run_prefix")
    if not prefix:
        return []
    return [f"{prefix}-s{n:02d}" for n in range(1, int(carry.get("submissions") or 0) + 1)]


@dataclass(frozen=True)
class Failure:
    """How the pipeline's last failure was classified: fatal or transient, the code and its name, the cause."""

    fatal: bool
    code: int
    code_name: str
    message: str
    reason: str = ""
    stage: str | None = None
    exception_class: str | None = None
    degraded_reason: str | None = None

    @property
    def kind(self) -> str:
        return "fatal" if self.fatal else "transient"

    def summary(self) -> str:
        return f"{self.kind} {self.code} {self.code_name}: {self.message or self.reason or '(no message)'}"


def code_name(code: int) -> str:
    """``recovery/codes.py``'s name of ``code`` (``INJECTED_FATAL``), or the name of its range's generic code."""
    names = {value: name for name, value in vars(codes).items()
             if name.isupper() and isinstance(value, int) and not isinstance(value, bool)}
    if code in names:
        return names[code]
    return "FATAL" if codes.is_fatal_code(code) else "TRANSIENT"


def last_failure(recovery: dict[str, Any] | None) -> Failure | None:
    """The last failure's classification in a ``recovery.json`` record, or None when no run of it failed."""
    state = ((recovery or {}).get("carry") or {}).get("recovery") or {}
    found = state.get("last_classification")
    if not found:
        failed = [e for e in state.get("audit") or [] if e.get("event") == "failed"]
        found = ((failed[-1].get("details") or {}).get("classification") if failed else None)
    if not found:
        return None
    code = int(found.get("code") or codes.TRANSIENT)
    return Failure(fatal=bool(found.get("fatal")), code=code, code_name=code_name(code), message=str(found.get("message") or ""),
                   reason=str(found.get("reason") or ""), stage=found.get("stage"), exception_class=found.get("exception_class"),
                   degraded_reason=state.get("degraded_reason"))
