"""Benchmark 8: Kafka -> Delta, this runner against plain Structured Streaming (the floor).

A real single-node broker (tests/kafka_broker.py, the one the tests use) holds a topic of generated JSON
records (1 % bad: not JSON, a wrong type, a missing required field), produced with confluent-kafka. In one
process and one local[2] SparkSession, alternating in rotated order, each repetition reads the whole topic
from the start (a fresh checkpoint and a fresh Delta table each time) two ways:

  runner  this project's runner (``airflow_conduit.spark.runner.execute``, the code spark-submit runs): source
          ``kafka`` (json with a schema, PERMISSIVE, bad values to the DLQ), destination ``delta`` (append,
          exactly once by txnAppId/txnVersion), DLQ ``kafka`` (a topic, Kafka Connect headers, exactly once);
  floor   Spark's Kafka source, ``from_json`` of the value, rows without their required fields dropped (bad
          records vanish), ``foreachBatch`` appending to Delta; no DLQ, no bookkeeping.

At the default batch size (no ``max-records-per-batch``: everything available in one batch) and at
``max-records-per-batch`` 10,000 (on a topic of ``--small-records``). Time runner / time floor per pair; the
per-micro-batch cost over the floor at 10,000 records per batch is (runner - floor) / batches per pair.

Latency: the runner (and the floor) in continuous mode with a 1 s trigger interval while a producer writes at
a steady rate; each record carries the time it was produced; the time it became visible is the commit time
of the Delta version that added it (``commitInfo.timestamp`` in ``_delta_log``), its files read with pyarrow.

The broker: seconds from the start of its JVM to "Kafka Server started" (after formatting its storage,
timed apart), and its resident memory (RSS) idle and after holding the topics.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, Stopwatch, log, paired_ratios, rotated, setup_environment, summary, write_result

sys.path.insert(0, str(REPO / "tests"))  # the broker the tests use

SCHEMA = "id BIGINT NOT NULL, customer STRING NOT NULL, amount DOUBLE, currency STRING, ts TIMESTAMP"
FLOOR_SCHEMA = "id BIGINT, customer STRING, amount DOUBLE, currency STRING, ts TIMESTAMP"
LATENCY_SCHEMA = "id BIGINT NOT NULL, produced_at DOUBLE NOT NULL, pad STRING"
BAD_EVERY = 100  # 1 % bad
PARTITIONS = 2  # one Spark task per partition on local[2]
TRIGGER_SECONDS = 1.0


def record(i: int) -> bytes:
    if i % BAD_EVERY == 7:
        kind = (i // BAD_EVERY) % 3
        if kind == 0:
            return b'{"id": %d, "customer": "c' % i  # cut off: not JSON
        if kind == 1:
            return b'{"id": %d, "customer": "c%d", "amount": "twelve"}' % (i, i % 997)  # wrong type
        return b'{"id": %d, "amount": 1.5}' % i  # missing required customer
    currency = '"EUR"' if i % 3 else "null"
    return (b'{"id": %d, "customer": "c%d", "amount": %d.25, "currency": %s, "ts": "2026-03-01T10:%02d:%02dZ"}'
            % (i, i % 997, i % 5000, currency.encode(), (i // 60) % 60, i % 60))


def produce_topic(broker, topic: str, n: int) -> float:
    """``n`` records as fast as confluent-kafka goes (records spread over the partitions); seconds taken."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1_048_576,
                         "acks": "1"})
    with Stopwatch() as sw:
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, value=record(i), partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 10000 == 0:
                producer.poll(0)
        left = producer.flush(300)
    if left:
        raise RuntimeError(f"{left} records not delivered to {topic}")
    return sw.seconds


def broker_rss_mib(broker) -> float:
    import psutil

    return psutil.Process(broker.process.pid).memory_info().rss / 2**20


# -- the two ways ---------------------------------------------------------------------------------------


def runner_spec(servers: str, topic: str, dlq_topic: str, lake: Path, per_batch: int | None, mode: str = "available-now",
                schema: str = SCHEMA):
    from airflow_conduit.pipeline.loader import load_pipeline_from_string

    batch = f"\n        max-records-per-batch: {per_batch}" if per_batch else ""
    text = f"""\
version: "1"
pipeline:
  id: bench-kafka-delta
  mode: {mode}
  trigger-interval: {TRIGGER_SECONDS}s
  sources:
    - id: events
      plugin: kafka
      settings:
        servers: "{servers}"
        topics: [{topic}]
        starting-offsets: earliest
        format: json
        schema: "{schema}"{batch}
  destinations:
    - id: lake
      plugin: delta
      settings: {{path: "{lake}"}}
  dead-letter-queue:
    plugin: kafka
    settings: {{servers: "{servers}", topic: {dlq_topic}}}
    window-size: 0
"""
    return load_pipeline_from_string(text, "bench-kafka-delta.yaml")


def run_runner(spark, ctx: dict[str, Any], work: Path, per_batch: int | None) -> dict[str, Any]:
    from airflow_conduit.spark.runner import execute

    spec = runner_spec(ctx["servers"], ctx["topic"], ctx["dlq_topic"], work / "lake", per_batch)
    with Stopwatch() as sw:
        code, report = execute(spark, spec, state_dir=work / "state", run_id="bench")
    if code != 0:
        raise RuntimeError(f"runner failed: {report.error}")
    totals = report.totals
    return {"seconds": sw.seconds, "batches": len(report.batches), "read": totals["read"], "dlq": totals["dlq"],
            "written": sum((totals.get("written") or {}).values())}


def floor_query(spark, servers: str, topic: str, lake: Path, checkpoint: Path, per_batch: int | None,
                schema: str = FLOOR_SCHEMA, required: tuple[str, ...] = ("id", "customer"), trigger: dict | None = None):
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("failOnDataLoss", "true"))
    if per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(per_batch))
    parsed = reader.load().select(F.from_json(F.col("value").cast("string"), schema).alias("r")).select("r.*")
    for name in required:
        parsed = parsed.where(F.col(name).isNotNull())

    def append(df, batch_id):  # noqa: ARG001
        df.write.format("delta").mode("append").save(str(lake))

    return (parsed.writeStream.foreachBatch(append).option("checkpointLocation", str(checkpoint))
            .trigger(**(trigger or {"availableNow": True})).start())


def run_floor(spark, ctx: dict[str, Any], work: Path, per_batch: int | None) -> dict[str, Any]:
    with Stopwatch() as sw:
        query = floor_query(spark, ctx["servers"], ctx["topic"], work / "lake", work / "checkpoint", per_batch)
        query.awaitTermination()
    batches = len([p for p in (work / "checkpoint" / "commits").iterdir() if p.name.isdigit()])
    return {"seconds": sw.seconds, "batches": batches}


WAYS = {"runner": run_runner, "floor": run_floor}


def jobs_started(spark) -> int:
    """Spark jobs started in this session so far (the scheduler's next job id)."""
    value = spark.sparkContext._jsc.sc().dagScheduler().nextJobId()
    return int(value if isinstance(value, int) else value.get())


def compare(spark, ctx: dict[str, Any], root: Path, per_batch: int | None, reps: int, label: str,
            warmup_pairs: int = 1) -> dict[str, Any]:
    """``reps`` repetitions of both ways in rotated order (after ``warmup_pairs`` not counted); ratios and
    per-batch costs per pair."""
    samples: dict[str, list[dict[str, Any]]] = {w: [] for w in WAYS}
    for rep in range(-warmup_pairs, reps):  # negative: a warm-up pair, not counted
        for way in rotated(list(WAYS), max(rep, 0)):
            work = root / f"{label}-{way}-{rep}"
            jobs = jobs_started(spark)
            result = WAYS[way](spark, ctx, work, per_batch)
            result["jobs"] = jobs_started(spark) - jobs
            shutil.rmtree(work, ignore_errors=True)
            log(f"{label} {'warm-up' if rep < 0 else f'rep {rep}'} {way}: {result['seconds']:.1f} s, {result['batches']} batches, "
                f"{result['jobs']} Spark jobs")
            if rep >= 0:
                samples[way].append(result)
    runner = [s["seconds"] for s in samples["runner"]]
    floor = [s["seconds"] for s in samples["floor"]]
    batches = [s["batches"] for s in samples["runner"]]
    over = [(r - f) / b * 1000 for r, f, b in zip(runner, floor, batches)]
    return {
        "records": ctx["records"], "max_records_per_batch": per_batch,
        "ratio_runner_over_floor": paired_ratios(runner, floor),
        "runner_seconds": summary(runner), "floor_seconds": summary(floor),
        "runner_records_per_second": summary(ctx["records"] / s for s in runner),
        "floor_records_per_second": summary(ctx["records"] / s for s in floor),
        "batches_runner": batches, "batches_floor": [s["batches"] for s in samples["floor"]],
        "ms_per_batch_over_floor": summary(over),
        "jobs_per_batch": {way: summary(s["jobs"] / max(s["batches"], 1) for s in samples[way]) for way in WAYS},
        "runner_counts": {k: samples["runner"][-1][k] for k in ("read", "dlq", "written")},
    }


# -- latency --------------------------------------------------------------------------------------------


def visible_at(lake: Path) -> list[tuple[float, float]]:
    """(produced_at, commit time) of every row of the Delta table, from its log and files (no Spark)."""
    import pyarrow.parquet as pq

    pairs: list[tuple[float, float]] = []
    for entry in sorted((lake / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
        committed = next((a["commitInfo"]["timestamp"] for a in actions if "commitInfo" in a), None)
        if committed is None:
            continue
        for action in actions:
            if "add" in action:
                table = pq.read_table(lake / action["add"]["path"], columns=["produced_at"])
                pairs += [(p, committed / 1000) for p in table.column("produced_at").to_pylist()]
    return pairs


def steady_producer(broker, topic: str, rate: int, seconds: float, stop: threading.Event) -> threading.Thread:
    """A thread producing ``rate`` records a second for ``seconds``, each with its produce time."""
    from confluent_kafka import Producer

    def produce() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        started = time.time()
        sent = 0
        pad = "x" * 60
        while not stop.is_set() and time.time() - started < seconds:
            due = int((time.time() - started) * rate)
            while sent < due:
                value = json.dumps({"id": sent, "produced_at": time.time(), "pad": pad})
                producer.produce(topic, value=value.encode(), partition=sent % PARTITIONS)
                sent += 1
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(60)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    return thread


def _visible_count(lake: Path) -> int:
    """Rows the Delta table's log has added so far (from the commit stats; no Spark)."""
    count = 0
    for entry in sorted((lake / "_delta_log").glob("*.json")) if (lake / "_delta_log").exists() else []:
        for line in entry.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action and action["add"].get("stats"):
                count += json.loads(action["add"]["stats"]).get("numRecords", 0)
    return count


def _steady_then_drain(broker, topic: str, lake: Path, rate: int, seconds: float, stop_way) -> threading.Thread:
    """A thread that waits for the way's first commit (the query runs), produces at ``rate`` for ``seconds``,
    waits until every record is visible (or a deadline), then stops the way."""

    def run() -> None:
        deadline = time.time() + 600
        while not (lake / "_delta_log").exists() and time.time() < deadline:
            time.sleep(0.2)
        base = _visible_count(lake)
        thread = steady_producer(broker, topic, rate, seconds, threading.Event())
        thread.join()
        holder["produced"] = int(rate * seconds)
        while _visible_count(lake) < base + holder["produced"] and time.time() < deadline:
            time.sleep(0.5)
        stop_way()

    holder: dict[str, int] = {}
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def measure_latency(spark, broker, root: Path, way: str, rate: int, seconds: float, warmup: float) -> dict[str, Any]:
    """One continuous run of ``way``: once its first batch is committed (one record produced ahead), records
    arrive at ``rate``/s for ``seconds``; the latency of each record produced after ``warmup`` seconds."""
    from confluent_kafka import Producer

    topic = broker.create_topic(partitions=PARTITIONS)
    work = root / f"latency-{way}"
    lake = work / "lake"
    first = Producer({"bootstrap.servers": broker.bootstrap})
    first.produce(topic, value=json.dumps({"id": -1, "produced_at": time.time(), "pad": "first"}).encode(), partition=0)
    first.flush(60)
    if way == "runner":
        from airflow_conduit.spark.runner import execute

        dlq_topic = broker.create_topic(partitions=1)
        spec = runner_spec(broker.bootstrap, topic, dlq_topic, lake, None, mode="continuous", schema=LATENCY_SCHEMA)
        code, report = execute(
            spark, spec, state_dir=work / "state", run_id="latency",
            on_runner=lambda r: _steady_then_drain(broker, topic, lake, rate, seconds + warmup,
                                                   lambda: r.request_stop("benchmark done")),
        )
        if code != 0:
            raise RuntimeError(f"runner failed: {report.error}")
    else:
        query = floor_query(spark, broker.bootstrap, topic, lake, work / "checkpoint", None,
                            schema="id BIGINT, produced_at DOUBLE, pad STRING", required=("id",),
                            trigger={"processingTime": f"{TRIGGER_SECONDS} seconds"})
        _steady_then_drain(broker, topic, lake, rate, seconds + warmup, query.stop).join()
        query.awaitTermination(120)
    pairs = visible_at(lake)
    start = sorted(p for p, _ in pairs)[1]  # the steady producer's first record (the smallest is the probe's)
    latencies = sorted(c - p for p, c in pairs if p >= start + warmup)
    shutil.rmtree(work, ignore_errors=True)

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return {"records": len(pairs), "measured": len(latencies), "rate": rate, "seconds": seconds,
            "p50": pct(0.5), "p95": pct(0.95), "p99": pct(0.99), "max": latencies[-1], "trigger_seconds": TRIGGER_SECONDS}


# -- main -----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records of the topic read at the default batch size")
    parser.add_argument("--small-records", type=int, default=1_000_000,
                        help="records of the topic read --per-batch records per batch")
    parser.add_argument("--per-batch", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--default-reps", type=int, default=None, help="pairs at the default batch size (default: --reps)")
    parser.add_argument("--warmup-pairs", type=int, default=1, help="uncounted pairs before each comparison")
    parser.add_argument("--latency-rate", type=int, default=100)
    parser.add_argument("--latency-seconds", type=float, default=40.0)
    parser.add_argument("--latency-warmup", type=float, default=15.0)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--parts", default="latency,per_batch,default_batch",
                        help="what to measure; the others are kept from an earlier result file --out")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    setup_environment()
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} pyspark-shell"
    import kafka_broker

    root = Path(tempfile.mkdtemp(prefix="conduit-bench-kafka-"))
    earlier = Path(args.out) if args.out else None
    kept = json.loads(earlier.read_text()) if earlier and earlier.exists() and parts != {"latency", "per_batch", "default_batch"} else {}
    result: dict[str, Any] = {**kept, "partitions": PARTITIONS, "bad_share": 1 / BAD_EVERY, "reps": args.reps,
                              "default_reps": args.default_reps or args.reps, "warmup_pairs": args.warmup_pairs,
                              "load_average_at_start": os.getloadavg()}
    broker = kafka_broker.KafkaBroker(workdir=root / "broker")
    try:
        with Stopwatch() as fmt_sw:
            broker.format()
        with Stopwatch() as start_sw:
            broker.start()
        time.sleep(2)
        result["broker"] = {"format_seconds": fmt_sw.seconds, "start_seconds": start_sw.seconds,
                            "rss_idle_mib": broker_rss_mib(broker), "heap": kafka_broker.HEAP}
        log(f"broker: formatted in {fmt_sw.seconds:.1f} s, started in {start_sw.seconds:.1f} s, RSS {result['broker']['rss_idle_mib']:.0f} MiB")
        from airflow_conduit.spark.session import build_session

        spark = build_session("airflow-conduit-bench-kafka-delta", connectors={"kafka", "delta"})
        spark.sparkContext.setLogLevel("ERROR")
        if "latency" in parts:
            result["latency"] = {way: measure_latency(spark, broker, root, way, args.latency_rate, args.latency_seconds,
                                                      args.latency_warmup) for way in ("runner", "floor")}
            for way, lat in result["latency"].items():
                log(f"latency {way}: p50 {lat['p50']:.2f} s, p95 {lat['p95']:.2f} s over {lat['measured']:,} records")
            write_result("kafka_delta", result, args.out)
        if parts & {"per_batch", "default_batch"}:
            big, small = broker.create_topic(partitions=PARTITIONS), broker.create_topic(partitions=PARTITIONS)
            result["produce_seconds"] = {"big": produce_topic(broker, big, args.records),
                                         "small": produce_topic(broker, small, args.small_records)}
            log(f"produced {args.records:,} records in {result['produce_seconds']['big']:.1f} s, "
                f"{args.small_records:,} in {result['produce_seconds']['small']:.1f} s")
            dlq_topic = broker.create_topic(partitions=1)
            big_ctx = {"servers": broker.bootstrap, "topic": big, "dlq_topic": dlq_topic, "records": args.records}
            small_ctx = {"servers": broker.bootstrap, "topic": small, "dlq_topic": dlq_topic, "records": args.small_records}
        if "per_batch" in parts:
            result["per_batch"] = compare(spark, small_ctx, root, args.per_batch, args.reps, f"per{args.per_batch}",
                                          args.warmup_pairs)
            write_result("kafka_delta", result, args.out)
        if "default_batch" in parts:
            result["default_batch"] = compare(spark, big_ctx, root, None, args.default_reps or args.reps, "default",
                                              args.warmup_pairs)
            write_result("kafka_delta", result, args.out)
        result["broker"]["rss_after_mib"] = broker_rss_mib(broker)
        result["load_average_at_end"] = os.getloadavg()
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    write_result("kafka_delta", result, args.out)
    for key in [k for k in ("per_batch", "default_batch") if k in result]:
        log(f"{key}: runner/floor {result[key]['ratio_runner_over_floor']['median']:.2f}, "
            f"{result[key]['ms_per_batch_over_floor']['median']:.0f} ms per batch over the floor")
    return 0


if __name__ == "__main__":
    random.seed(0)
    sys.exit(main())
