"""``analysed_plan.AnalysedPlan``: a projection analysed over one ``foreachBatch`` batch, put over the next batches.

Its contract with Spark: each batch's leaf has the streaming query's output attributes (so the analysed nodes
above it fit every batch), the rebuilt plan skips the analyzer (no analyzer rule in its query's tracker)
and gives the rows the same projection built as usual gives, and a leaf with other attributes is refused.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from airflow_conduit.spark.analysed_plan import AnalysedPlan

pytestmark = pytest.mark.spark

BATCHES = 3
ROWS = 5


def _analysed(frame) -> bool:
    """Whether building ``frame`` ran Spark's analyzer: its rules, as its query's tracker counts them (before any
    action: the optimizer's rules are counted there too)."""
    return not frame._jdf.queryExecution().tracker().rules().isEmpty()


def _records(batch):
    """A projection like the records' select: the read order numbered in it, fields derived from the row."""
    return batch.where(F.col("value") >= F.lit(0)).select(
        F.monotonically_increasing_id().alias("seq"),
        (F.col("value") * F.lit(2)).alias("double"),
        F.when(F.col("value") % F.lit(2) == F.lit(0), F.struct(F.lit("even").alias("why"))).alias("error"),
    )


def test_the_first_batch_plan_is_put_over_every_later_batch_unanalysed_with_the_same_rows(spark, tmp_path):
    seen: list[dict] = []
    kept: dict[str, AnalysedPlan] = {}

    def each_batch(batch, batch_id):
        built = _records(batch)
        reused = kept["plan"].over(batch) if "plan" in kept else None
        kept.setdefault("plan", AnalysedPlan(built, batch))
        seen.append({
            "batch": batch_id,
            "built analysed": _analysed(built),
            "reused": reused is not None,
            "reused analysed": reused is not None and _analysed(reused),
            "rows": sorted(map(tuple, built.collect())),
            "reused rows": sorted(map(tuple, reused.collect())) if reused is not None else None,
        })

    for b in range(BATCHES):  # one file per batch
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / f"{b}.json").write_text("".join(f'{{"value": {b * ROWS + i}}}\n' for i in range(ROWS)))
    stream = spark.readStream.schema("value BIGINT").option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    query = (stream.writeStream.foreachBatch(each_batch).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(600)
    finally:
        query.stop()
    assert len(seen) == BATCHES, seen
    first, *later = seen
    assert first["built analysed"] and not first["reused"], first
    for batch in later:
        assert batch["built analysed"], "a projection built as usual is analysed: the check can tell"
        assert batch["reused"] and not batch["reused analysed"], batch
        assert batch["reused rows"] == batch["rows"] and len(batch["rows"]) == ROWS, batch


def test_a_leaf_with_other_output_attributes_is_refused(spark):
    rows = spark.createDataFrame([(1,), (2,)], "value BIGINT")
    plan = AnalysedPlan(_records(rows), rows)
    same_attributes = rows.where(F.lit(True))
    assert plan.over(same_attributes) is not None
    assert sorted(r["double"] for r in plan.over(same_attributes).collect()) == [2, 4]
    other = spark.createDataFrame([(1,), (2,)], "value BIGINT")  # the same schema, new attributes
    assert plan.over(other) is None


def _kept_over_itself(frame, rows) -> tuple:
    """(the plan put over a leaf with ``rows``'s attributes, or None; why it was refused)."""
    plan = AnalysedPlan(frame, rows, check_ahead=False)
    return plan.over(rows.where(F.lit(True))), plan.refused


def test_a_plan_that_reads_another_relation_or_a_subquery_or_a_seeded_function_is_refused(spark):
    rows = spark.createDataFrame([(1,), (2,)], "value BIGINT")
    other = spark.range(2).withColumnRenamed("id", "value")
    refused = {
        "union": _kept_over_itself(rows.unionByName(other), rows),
        "subquery": _kept_over_itself(rows.selectExpr("value", "(SELECT max(id) FROM range(3)) AS m"), rows),
        "rand": _kept_over_itself(rows.select("value", F.rand().alias("r")), rows),
        "shuffle": _kept_over_itself(rows.select(F.shuffle(F.array("value", F.lit(1))).alias("s")), rows),
    }
    for name, (frame, why) in refused.items():
        assert frame is None and why, (name, why)
    assert "relation other than the batch" in refused["union"][1]
    assert "subquery" in refused["subquery"][1]
    assert "Rand" in refused["rand"][1]
    kept, why = _kept_over_itself(rows.select("value", F.monotonically_increasing_id().alias("seq"),
                                              F.current_timestamp().alias("now"), F.input_file_name().alias("f")), rows)
    assert kept is not None and why is None, "stateless nondeterministic functions and the current time are kept"
    assert sorted(r["value"] for r in kept.collect()) == [1, 2]


def _check_calls(spark, plan: AnalysedPlan) -> int:
    """Py4J calls of ``plan``'s one-time check (GC releases left out)."""
    from py4j.protocol import MEMORY_COMMAND_NAME, MEMORY_DEL_SUBCOMMAND_NAME

    client = spark.sparkContext._gateway._gateway_client
    send, calls = client.send_command, []

    def counted(command, *args, **kwargs):
        if not command.startswith(MEMORY_COMMAND_NAME + MEMORY_DEL_SUBCOMMAND_NAME):
            calls.append(command)
        return send(command, *args, **kwargs)

    client.send_command = counted
    try:
        plan._check()
    finally:
        client.send_command = send
    return len(calls)


@pytest.mark.parametrize("width", [5, 60])
def test_a_plan_over_a_nondeterministic_leaf_is_checked_without_looking_into_each_expression(spark, width):
    """The pass's frames are kept over the batch's plan, whose records' select numbers the read order (not
    deterministic): each node is checked over a deterministic stand-in of its leaf, so its expressions are looked
    into only when they themselves are not deterministic: the check's JVM round trips do not grow with the columns."""
    rows = spark.createDataFrame([(1,), (2,)], "value BIGINT")
    leaf = _records(rows)
    wide = leaf.select("*", *[(F.col("double") + F.lit(i)).alias(f"c{i}") for i in range(width)]).coalesce(1)
    plan = AnalysedPlan(wide, leaf, check_ahead=False)
    assert _check_calls(spark, plan) <= 40
    assert plan.refused is None
    assert sorted(r["c0"] for r in plan.over(leaf.where(F.lit(True))).collect()) == [2, 4]
    seeded = AnalysedPlan(leaf.select("*", F.rand().alias("r"), *[F.col("double").alias(f"c{i}") for i in range(width)]), leaf,
                          check_ahead=False)
    seeded._check()
    assert seeded.refused is not None and "Rand" in seeded.refused, "a seeded function above the leaf is still refused"
