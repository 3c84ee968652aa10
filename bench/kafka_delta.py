"""Benchmark 8: Kafka -> Delta, the runner against plain Structured Streaming (the floor), on the tests' broker
(method: docs/benchmarks.md)."""

import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import (REPO, Stopwatch, alternate, at, benchmark, column, figure_table, log, pipeline_yaml, ratio, run_pipeline,
                          spark_session, spread, step, summary, with_required, workdir)
from bench.error_handling import SCHEMA_DDL, record_line

sys.path.insert(0, str(REPO / "tests"))  # the broker the tests use

TITLE = "8. Kafka to Delta"
LATENCY_SCHEMA = "id BIGINT NOT NULL, produced_at DOUBLE NOT NULL, pad STRING"
PARTITIONS = 2  # one Spark task per partition on local[2]


def produce(broker, topic: str, n: int, value=lambda i: record_line(i).encode(), **config: Any) -> None:
    """``n`` records, ``value(i)`` each (by default benchmark 1's orders, 1 % bad), spread over the partitions."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "queue.buffering.max.messages": 2_000_000, **config})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=value(i), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(300):
        raise RuntimeError(f"records not delivered to {topic}")


def runner_spec(servers: str, topic: str, dlq_topic: str, lake: Path, per_batch: int | None, mode: str = "available-now",
                schema: str = SCHEMA_DDL) -> str:
    source = step("events", "kafka", servers=servers, topics=[topic], starting_offsets="earliest", format="json", schema=schema,
                  **({"max_records_per_batch": per_batch} if per_batch else {}))
    dlq = {"plugin": "kafka", "settings": {"servers": servers, "topic": dlq_topic}, "window-size": 0}
    return pipeline_yaml("bench-kafka-delta", [source], [step("lake", "delta", path=lake)], dlq=dlq, mode=mode, trigger_interval="1s")


def floor_query(spark, servers: str, topic: str, lake: Path, checkpoint: Path, per_batch: int | None, schema: str = SCHEMA_DDL,
                trigger: dict | None = None):
    """Spark's Kafka source, from_json, rows without their required fields dropped, foreachBatch appending to Delta."""
    from pyspark.sql import functions as F

    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers).option("subscribe", topic) \
        .option("startingOffsets", "earliest").option("failOnDataLoss", "true")
    if per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(per_batch))
    parsed = reader.load().select(F.from_json(F.col("value").cast("string"), schema.replace(" NOT NULL", "")).alias("r")).select("r.*")
    return with_required(parsed, schema).writeStream.foreachBatch(lambda df, _: df.write.format("delta").mode("append").save(str(lake))) \
        .option("checkpointLocation", str(checkpoint)).trigger(**(trigger or {"availableNow": True})).start()


def compare(spark, ctx: dict[str, Any], root: Path, per_batch: int | None, reps: int, warmup: int) -> dict[str, Any]:
    """Runner and floor alternating; ratios and the runner's cost per batch over the floor, per pair."""
    def run(way: str, work: Path) -> dict[str, Any]:
        if way == "runner":
            return run_pipeline(spark, runner_spec(ctx["servers"], ctx["topic"], ctx["dlq_topic"], work / "lake", per_batch), work)
        with Stopwatch() as sw:
            query = floor_query(spark, ctx["servers"], ctx["topic"], work / "lake", work / "checkpoint", per_batch)
            query.awaitTermination()
        return {"seconds": sw.seconds, "batches": len([p for p in (work / "checkpoint" / "commits").iterdir() if p.name.isdigit()]),
                "jobs": len(spark.sparkContext.statusTracker().getJobIdsForGroup(str(query.runId)))}

    runs = alternate(["runner", "floor"], reps, run, warmup, label=f"per batch {per_batch}: ", work=root)
    runner, floor = column(runs["runner"], "seconds"), column(runs["floor"], "seconds")
    return {"records": ctx["records"], "max_records_per_batch": per_batch, "ratio_runner_over_floor": ratio(runs, "runner", "floor"),
            "runner_records_per_second": summary(ctx["records"] / s for s in runner), "floor_records_per_second": summary(ctx["records"] / s for s in floor),
            "batches_runner": column(runs["runner"], "batches"), "batches_floor": column(runs["floor"], "batches"),
            # each query's own Spark jobs (its run id's job group), Delta's checkpoint every 10 commits included
            "jobs_runner": column(runs["runner"], "jobs"), "jobs_floor": column(runs["floor"], "jobs"),
            "ms_per_batch_over_floor": summary((r - f) / b * 1000 for r, f, b in zip(runner, floor, column(runs["runner"], "batches")))}


def delta_log(lake: Path) -> list[tuple[Path, list[dict[str, Any]]]]:
    """The Delta table's commits so far, each with its actions (read from the log; no Spark)."""
    entries = sorted((lake / "_delta_log").glob("*.json")) if (lake / "_delta_log").exists() else []
    return [(entry, [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]) for entry in entries]


def visible_count(lake: Path) -> int:
    """Rows the Delta table's log has added so far (commit stats)."""
    return sum(json.loads(a["add"]["stats"]).get("numRecords", 0) for _, actions in delta_log(lake) for a in actions
               if "add" in a and a["add"].get("stats"))


def latency(spark, broker, root: Path, way: str, rate: int, seconds: float, warmup: float) -> dict[str, Any]:
    """Continuous mode, 1 s trigger: once the first batch (the probe record) has ended, records at ``rate``/s, each carrying
    its produce time; its latency is the commit time of the Delta version that added it. Records of the first ``warmup``
    seconds not counted. (The first batch ends after its commit: the feed waits for the way's own end of it, a runner's
    batch report or the query's first progress, so that neither way's start-up is a backlog in the figure.)"""
    import pyarrow.parquet as pq

    topic, lake, work = broker.create_topic(partitions=PARTITIONS), root / f"latency-{way}" / "lake", root / f"latency-{way}"
    produce(broker, topic, 1, lambda i: json.dumps({"id": -1, "produced_at": time.time(), "pad": "first"}).encode())

    def feed(stop, first_batch_ended) -> None:
        deadline = time.time() + 600
        while not (delta_log(lake) and first_batch_ended()) and time.time() < deadline:
            time.sleep(0.2)
        base, started, total = visible_count(lake), time.time(), int(rate * (seconds + warmup))
        produce(broker, topic, total, lambda i: (time.sleep(max(0.0, started + i / rate - time.time())),
                                                 json.dumps({"id": i, "produced_at": time.time(), "pad": "x" * 60}).encode())[1], **{"linger.ms": 5})
        while visible_count(lake) < base + total and time.time() < deadline:
            time.sleep(0.5)
        stop()

    if way == "runner":
        run_pipeline(spark, runner_spec(broker.bootstrap, topic, broker.create_topic(partitions=1), lake, None, "continuous", LATENCY_SCHEMA),
                     work, on_runner=lambda r: threading.Thread(target=feed, args=(lambda: r.request_stop("benchmark done"),
                                                                                   lambda: len(r.report.batches) > 0), daemon=True).start())
    else:
        query = floor_query(spark, broker.bootstrap, topic, lake, work / "checkpoint", None, LATENCY_SCHEMA, {"processingTime": "1 seconds"})
        feed(query.stop, lambda: query.lastProgress is not None)
        query.awaitTermination(120)
    pairs = []
    for _, actions in delta_log(lake):
        committed = next((a["commitInfo"]["timestamp"] / 1000 for a in actions if "commitInfo" in a), None)
        for a in actions if committed else []:
            if "add" in a:
                pairs += [(p, committed) for p in pq.read_table(lake / a["add"]["path"], columns=["produced_at"]).column("produced_at").to_pylist()]
    start = sorted(p for p, _ in pairs)[1]  # the steady producer's first record (the smallest is the probe's)
    lat = sorted(c - p for p, c in pairs if p >= start + warmup)
    shutil.rmtree(work, ignore_errors=True)
    return {"rate": rate, "measured": len(lat), **{f"p{q}": lat[min(len(lat) - 1, int(q / 100 * len(lat)))] for q in (50, 95, 99)}, "max": lat[-1]}


def measure(args) -> dict[str, Any]:
    if args.latency_seconds <= 0:  # the latency figure needs records produced after the warm-up
        raise SystemExit(f"--latency-seconds {args.latency_seconds}: must be above 0 (the seconds of steady producing measured)")
    import psutil
    from kafka_broker import HEAP, KafkaBroker

    with workdir("kafka") as root:
        broker = KafkaBroker(workdir=root / "broker")
        try:
            broker.format()
            with Stopwatch() as started:
                broker.start()
            time.sleep(2)
            figures: dict[str, Any] = {"partitions": PARTITIONS, "bad_share": 0.01, "reps": args.reps, "default_reps": args.default_reps or args.reps,
                                       "broker": {"start_seconds": started.seconds, "heap": HEAP,
                                                  "rss_idle_mib": psutil.Process(broker.process.pid).memory_info().rss / 2**20}}
            spark = spark_session("airflow-conduit-bench-kafka-delta", connectors={"kafka", "delta"})
            figures["latency"] = {way: latency(spark, broker, root, way, args.latency_rate, args.latency_seconds, args.latency_warmup)
                                  for way in ("runner", "floor")}
            log(f"latency: {figures['latency']}")
            dlq_topic = broker.create_topic(partitions=1)
            for key, records, per_batch, reps in (("per_batch", args.small_records, args.per_batch, args.reps),
                                                  ("default_batch", args.records, None, args.default_reps or args.reps)):
                topic = broker.create_topic(partitions=PARTITIONS)
                produce(broker, topic, records, **{"batch.num.messages": 10000, "queue.buffering.max.kbytes": 1_048_576, "acks": "1"})
                ctx = {"servers": broker.bootstrap, "topic": topic, "dlq_topic": dlq_topic, "records": records}
                figures[key] = compare(spark, ctx, root, per_batch, reps, args.warmup_pairs)
            spark.stop()
        finally:
            broker.stop()
    return figures


BATCH_SIZES = (("batch size", at("label")), ("records", lambda c: f"{c['records']:,}"),
               ("batches (runner / floor)", lambda c: f"{c['batches_runner'][0]:,} / {c['batches_floor'][0]:,}"),
               ("runner records/s", at("runner_records_per_second"), 0), ("floor records/s", at("floor_records_per_second"), 0),
               ("runner ÷ floor", lambda c: f"**{spread(c['ratio_runner_over_floor'])}**"))
LATENCY = (("way", at("way")), ("produced", lambda x: f"{x['rate']:,}/s, {x['measured']:,} counted"),
           *((q, at(q), 2, " s") for q in ("p50", "p95", "p99", "max")))


def tables(r: dict[str, Any]) -> list[str]:
    p, b = r["per_batch"], r["broker"]
    sizes = [{**r["default_batch"], "label": "default (all available)"}, {**p, "label": f"max-records-per-batch {p['max_records_per_batch']:,}"}]
    return [f"{r['partitions']} partitions, {r['bad_share']:.0%} bad; {r['reps']} pairs at {p['max_records_per_batch']:,} per batch, "
            f"{r['default_reps']} at the default size. Cost per micro-batch over the floor at {p['max_records_per_batch']:,} records per batch: "
            f"**{spread(p['ms_per_batch_over_floor'], 0, ' ms')}**.",
            figure_table(sizes, BATCH_SIZES), figure_table([{**x, "way": way} for way, x in r["latency"].items()], LATENCY),
            f"Test broker (KRaft, one JVM, heap `{b['heap']}`): started in {spread(b['start_seconds'], 1, ' s')}, "
            f"RSS {spread(b['rss_idle_mib'], 0, ' MiB')} idle."]


if __name__ == "__main__":
    benchmark("kafka_delta", __doc__, measure, records=1_000_000, small_records=1_000_000, per_batch=10_000, reps=5, default_reps=0,
              warmup_pairs=1, latency_rate=100, latency_seconds=40.0, latency_warmup=15.0)
