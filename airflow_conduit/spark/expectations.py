"""Expectations: named data-quality rules (Spark SQL boolean expressions) checked in the batch's one pass.

The ``expect`` processor adds, per rule, an internal column holding the
rule's verdict for each record that reached it (TRUE: failed, FALSE: passed,
NULL: the record was not active there, already nacked or filtered). A rule
whose expression is NULL for a record counts as failed. Then, by action:

- ``warn``: only counted; the record goes on;
- ``drop``: the record is nacked with the rule as its error (quarantine: it
  goes to the DLQ like any failed record);
- ``fail``: like ``drop``, and once the batch is committed (DLQ first, then
  every destination) the run stops with a fatal error naming the rule and the
  first offending record's position. The offending records are then in the
  DLQ, so nothing is lost and a DLQ replay can bring them back after a fix.

Counting costs no Spark job: the verdict columns are counted by the batch
pass's observation (``metrics``), on the same pass that writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_conduit.pipeline.model import PipelineSpec, ProcessorSpec
from airflow_conduit.recovery import codes
from airflow_conduit.recovery.errors import FatalError, ProcessorError
from airflow_conduit.spark import columns as C
from airflow_conduit.spark.sources import SourcePlan, origin_file, origin_position

PLUGIN = "expect"
ACTIONS = ("warn", "drop", "fail")
EXCEPTION_CLASS = "airflow_conduit.spark.ExpectationFailed"  # exception_class of a DLQ record a rule dropped


class ExpectationFailed(ProcessorError):
    """A ``fail`` rule failed on a record: fatal (code 2200, a processor's verdict), after the batch was committed."""

    rule: "Rule | None" = None


class InvalidRule(FatalError):
    """A rule that is not a valid Spark SQL boolean expression: the spec is wrong (code 2100)."""

    code = codes.INVALID_SPEC
    rule: "Rule | None" = None


@dataclass(frozen=True)
class Rule:
    """One rule of one expect processor, and the internal column holding its per-record verdict."""

    processor_id: str
    index: int  # position among all the spec's rules: names its metrics
    name: str
    condition: str
    action: str

    @property
    def column(self) -> str:
        return f"{C.PREFIX}x{self.index}"

    def expression(self) -> Column:
        """The condition as a Column; parenthesised so a trailing word is never read as an alias."""
        return F.expr(parenthesised(self.condition))

    def message(self) -> str:
        return f"expectation {self.name!r} ({self.action}) failed: {self.condition}"


def parenthesised(condition: str) -> str:
    return f"(\n{condition}\n)"  # newlines: a trailing -- comment cannot swallow the closing parenthesis


def _expect_processors(spec: PipelineSpec) -> list[ProcessorSpec]:
    stages = [*(s.processors for s in spec.sources), spec.processors, *(d.processors for d in spec.destinations)]
    return [p for stage in stages for p in stage if p.plugin.removeprefix("builtin:") == PLUGIN]


def rules_of(spec: PipelineSpec) -> list[Rule]:
    """Every rule of every expect processor, in pipeline order (sources, pipeline, destinations)."""
    rules: list[Rule] = []
    for proc in _expect_processors(spec):
        for item in proc.settings.get("rules") or ():
            rules.append(Rule(proc.id, len(rules), str(item["name"]), str(item["condition"]), str(item.get("action", "warn"))))
    return rules


# -- validation at the start of the run ------------------------------------------------------------------


def parse_problem(spark: SparkSession, condition: str) -> str | None:
    """Why Spark's SQL parser refuses ``condition`` (None: it parses). Only parses: no columns are resolved.

    Spark's parser itself (``jvm.columns.parse_expression``, not a public API): pyspark has no public parse-only
    call, and an analysis would need the columns at that processor.
    """
    from pyspark.errors import ParseException

    from airflow_conduit.spark.jvm.columns import parse_expression

    try:
        parse_expression(spark, parenthesised(condition))
    except ParseException as exc:
        return " ".join(str(exc).split())[:500]
    return None


def unparsable_rule(spark: SparkSession, spec: PipelineSpec, rules: list[Rule]) -> "InvalidRule | None":
    """The error for the first rule Spark's parser refuses (None: all parse); checked before the first batch."""
    where = f" in {spec.source_file}" if spec.source_file else ""
    for rule in rules:
        problem = parse_problem(spark, rule.condition)
        if problem:
            error = InvalidRule(
                f"expect processor {rule.processor_id!r}{where}: rule {rule.name!r}: condition {rule.condition!r} "
                f"is not valid Spark SQL: {problem}"
            )
            error.rule = rule
            return error
    return None


# -- the processor ---------------------------------------------------------------------------------------


def apply_expect(df: DataFrame, proc: ProcessorSpec, rules: list[Rule]) -> DataFrame:
    """Add each rule's verdict column (for the records active here) and nack records a drop/fail rule failed.

    All rules see the record as it entered the processor; the record's error names the first failing
    drop or fail rule in the order they are written.
    """
    mine = [r for r in rules if r.processor_id == proc.id]
    conditions = [r.expression() for r in mine]
    _check_boolean(df, proc, mine, conditions)
    active = C.active()
    df = df.withColumns({r.column: F.when(active, ~F.coalesce(cond, F.lit(False))) for r, cond in zip(mine, conditions)})
    error = None
    for rule in reversed([r for r in mine if r.action in ("drop", "fail")]):
        struct = C.error_struct(
            stage="processor",
            component_id=proc.id,
            component_type=PLUGIN,
            exception_class=EXCEPTION_CLASS,
            message=rule.message(),
        )
        error = F.when(F.col(rule.column), struct) if error is None else F.when(F.col(rule.column), struct).otherwise(error)
    return df if error is None else C.with_error_column(df, error)


def _check_boolean(df: DataFrame, proc: ProcessorSpec, rules: list[Rule], conditions: list[Column]) -> None:
    """Resolve the rules against the record's fields (analysis only, no job): unknown fields or non-boolean results are refused."""
    from pyspark.errors import AnalysisException

    for rule, cond in zip(rules, conditions):
        try:
            data_type = df.select(cond.alias("r")).schema["r"].dataType.simpleString()
        except AnalysisException as exc:
            raise InvalidRule(
                f"expect processor {proc.id!r}: rule {rule.name!r}: {' '.join(str(exc).split())[:500]}"
            ) from None
        if data_type not in ("boolean", "void"):
            raise InvalidRule(
                f"expect processor {proc.id!r}: rule {rule.name!r}: condition {rule.condition!r} gives {data_type}, "
                "not a boolean"
            )


# -- counting (in the batch pass's observation) ----------------------------------------------------------


def _offender(rule: Rule) -> str:
    return f"__ac_x{rule.index}_first"


def offender_columns(rules: list[Rule], plans: list[SourcePlan]) -> dict[str, Column]:
    """Per fail rule, where a failing record came from (NULL for the others): added to the batch before the
    observation (file and position are read from the reading task, which an aggregate cannot do)."""
    out: dict[str, Column] = {}
    for rule in rules:
        if rule.action == "fail":
            where = F.struct(
                F.col(C.SEQ).alias("seq"),
                F.col(C.SOURCE_ID).alias("source_id"),
                origin_file(plans).alias("file"),
                origin_position(plans).alias("position"),
            )
            out[_offender(rule)] = F.when(F.col(rule.column), where)
    return out


def metrics(rules: list[Rule]) -> list[Column]:
    """Observation metrics: per rule the records that passed / failed it; per fail rule its first offender."""
    out: list[Column] = []
    for rule in rules:
        verdict = F.col(rule.column)
        out.append(F.count_if(~verdict).alias(f"x{rule.index}p"))
        out.append(F.count_if(verdict).alias(f"x{rule.index}f"))
        if rule.action == "fail":
            out.append(F.min_by(F.col(_offender(rule)), F.when(verdict, F.col(C.SEQ))).alias(f"x{rule.index}first"))
    return out


def counts(rules: list[Rule], observed: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per processor, per rule: {action, passed, failed} from the observation."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for rule in rules:
        out.setdefault(rule.processor_id, {})[rule.name] = {
            "action": rule.action,
            "passed": int(observed.get(f"x{rule.index}p") or 0),
            "failed": int(observed.get(f"x{rule.index}f") or 0),
        }
    return out


def first_failure(rules: list[Rule], observed: dict[str, Any], batch_id: int) -> ExpectationFailed | None:
    """The error that stops the run: the fail rule whose first offending record was read first (None: none failed)."""
    found: list[tuple[int, Rule, Any]] = []
    for rule in rules:
        if rule.action == "fail" and int(observed.get(f"x{rule.index}f") or 0) > 0:
            first = observed.get(f"x{rule.index}first")
            found.append((first["seq"] if first is not None else 0, rule, first))
    if not found:
        return None
    _, rule, first = min(found, key=lambda item: item[0])
    failed = int(observed[f"x{rule.index}f"])
    where = ""
    if first is not None:
        where = f" first at record {first['position']} of {first['file'] or 'source'} (source {first['source_id']!r})"
    error = ExpectationFailed(
        f"expectation {rule.name!r} of processor {rule.processor_id!r} failed on {failed} record(s) of batch "
        f"{batch_id},{where}: {rule.condition}; the batch's failing records are in the DLQ"
    )
    error.rule = rule
    return error
