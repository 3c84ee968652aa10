"""The base of every destination (and the DLQ): what the batch pass calls on it. Its own module so that a
destination plugin in its own module (``delta_sink``, ``kafka_sink``) and ``destinations.make_destination`` import it, not each other."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.pipeline.secrets import reveal


class Destination:
    carries_a_pass = True  # its write is one action over the batch (an observation on it sees every row)
    answers_commits = False  # True: ``committed`` reads the target itself and no commit marker is kept
    wants_record_id = False  # its rows come with the record's read-order number (columns.SEQ): see kafka_sink
    wants_origins = False  # as the DLQ: told its records' origins (source_lines.KEYS) from the pass, before its write
    nacked_origins: list[tuple] | None = None  # set by the batch pass when wants_origins: (source id, file, split, position)
    wants_local_rows = False  # as the DLQ: its rows as a local relation in the driver (kafka_sink produces them from there)

    def __init__(self, spark: SparkSession, component_id: str, plugin: str, settings: dict[str, Any]):
        self.spark = spark
        self.id = component_id
        self.plugin = plugin
        self.settings = reveal(dict(settings))

    def owned_folder(self):
        """The local folder this writer replaces batches in, which one pipeline alone may write
        (``runs.output_owner``); None where sharing cannot lose a record or the target is not a local folder."""
        return None

    def attach(self, state_dir, spec) -> None:
        """Told where the run keeps its state (a writer that keeps its own bookkeeping there needs it)."""

    def carried_in_entry(self, columns: list[str]) -> dict[str, Any]:
        """As the DLQ: columns (name -> Column) of a nacked record the pass carries into its DLQ entry, given the
        batch's columns (a Kafka DLQ: the Kafka record as read). Kept in the DLQ's rows after its own columns."""
        return {}

    def close(self) -> None:
        """Release what the writer keeps for the run (a Kafka admin client); called once the run ends."""

    def found_from_earlier_attempts(self) -> int:
        """Of the rows its last ``write`` was given, how many an earlier, killed attempt of the batch had written
        already (so this write did not): a writer that dedups a re-run (kafka_sink) counts them; read once."""
        return 0

    def write(self, df: DataFrame, batch_id: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def writes_rows(self) -> bool:
        """Whether ``write_rows`` may write a batch's rows that are on the driver (its format and place allow it)."""
        return False

    def write_rows(self, columns: tuple[str, ...], types: tuple[str, ...], rows: list[tuple], batch_id: int) -> bool:
        """Write a batch's rows that are on the driver (``types``: Spark's type names) without a Spark job, as
        ``write`` would; False when this destination cannot (then the caller uses ``write``)."""
        return False

    def write_in_pass(self, df: DataFrame, batch_id: int) -> None:
        """The write that carries the batch's pass; what it writes is committed by ``commit``, after the DLQ's."""
        self.write(df, batch_id)

    def discard_empty_batch(self, batch_id: int) -> None:
        """Take back what a write of no rows left in the target (a file destination's empty folder): a DLQ replay whose
        records all still fail writes nothing to a destination."""

    def commit(self, batch_id: int) -> None:
        """Make what ``write_in_pass`` wrote part of the target (a Delta transaction's commit); the runner's
        commit marker follows."""

    def committed(self, batch_id: int) -> bool | None:
        """Whether batch ``batch_id`` is in the target, when the target can tell (None: ask the commit marker)."""
        return None
