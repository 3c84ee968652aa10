"""Benchmark 9: OpenLineage's volume: events per micro-batch of a 100-batch Kafka -> Delta run, and its wall time, with
the Spark listener on against off, and with openlineage-spark's own filters against off (docs/lineage.md, volume)."""

import json
import time
from pathlib import Path
from typing import Any

from bench.common import (Stopwatch, alternate, at, benchmark, column, figure_table, log, ratio, run_child, run_pipeline,
                          spark_session, spread, summary, workdir)
from bench.kafka_delta import PARTITIONS, produce, runner_spec

TITLE = "9. Lineage volume"
WAYS = {"on": "the listener's defaults", "filters": "openlineage-spark's filters (lineage.spark_listener.FILTER_SETTINGS)"}


def listener_conf(events: Path, way: str) -> dict[str, str]:
    """The listener's settings of ``way``: a file transport to ``events``, and for ``filters`` its filters."""
    from airflow_conduit.lineage.spark_listener import FILTER_SETTINGS

    conf = {"spark.openlineage.transport.type": "file", "spark.openlineage.transport.location": str(events),
            "spark.openlineage.namespace": "bench", "spark.openlineage.appName": "conduit.bench-kafka-delta"}
    return {**conf, **(FILTER_SETTINGS if way == "filters" else {})}


def with_listener(spark, events: Path, way: str, run):
    """``run()`` with an OpenLineage listener of ``way`` registered on the running SparkContext, removed after it (the
    other way's runs in the same JVM get none). Registered after the application started, it reports the runs'
    SQL and RDD jobs; an application's own START and COMPLETE are 2 events more per application."""
    sc = spark.sparkContext
    conf = sc._jsc.sc().conf().clone()
    for key, value in listener_conf(events, way).items():
        conf.set(key, value)
    listener = sc._jvm.io.openlineage.spark.agent.OpenLineageSparkListener(conf)
    sc._jsc.sc().addSparkListener(listener)
    try:
        return run()
    finally:
        sc._jsc.sc().listenerBus().waitUntilEmpty()
        sc._jsc.sc().removeSparkListener(listener)


def events_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def compare(way: str, args) -> dict[str, Any]:
    """``way`` against no listener, alternating in one process (one JVM): wall time, batches, events per batch."""
    from kafka_broker import KafkaBroker  # noqa: F401 - on sys.path through bench.kafka_delta

    from airflow_conduit.lineage.spark_listener import listener_classpath

    with workdir(f"lineage-{way}") as root:
        broker = KafkaBroker(workdir=root / "broker")
        try:
            broker.format()
            broker.start()
            time.sleep(2)
            records = args.batches * args.per_batch
            topic, dlq_topic = broker.create_topic(partitions=PARTITIONS), broker.create_topic(partitions=1)
            produce(broker, topic, records, **{"batch.num.messages": 10000, "acks": "1"})
            spark = spark_session(f"airflow-conduit-bench-lineage-{way}", connectors={"kafka", "delta"},
                                  conf=listener_classpath({}))

            def run(variant: str, work: Path) -> dict[str, Any]:
                spec = runner_spec(broker.bootstrap, topic, dlq_topic, work / "lake", args.per_batch)
                if variant == "off":
                    return run_pipeline(spark, spec, work)
                events = work / "events.jsonl"
                result = with_listener(spark, events, variant, lambda: run_pipeline(spark, spec, work))
                found = events_of(events)
                kinds: dict[str, int] = {}
                for event in found:  # by job type and the job's name after the application's
                    kind = ((event["job"].get("facets") or {}).get("jobType") or {}).get("jobType") or "other"
                    name = event["job"]["name"].partition(".")[2] or "(application)"
                    kinds[f"{kind} {name}"] = kinds.get(f"{kind} {name}", 0) + 1
                return {**result, "events": len(found), "events_per_batch": len(found) / max(1, result["batches"]),
                        "bytes_per_batch": events.stat().st_size / max(1, result["batches"]) if events.exists() else 0, "kinds": kinds}

            runs = alternate([way, "off"], args.reps, run, args.warmup, label=f"{way}: ", work=root)
            spark.stop()
        finally:
            broker.stop()
    on = runs[way]
    return {"way": way, "records": records, "batches": column(on, "batches"), "events": column(on, "events"),
            "events_per_batch": summary(column(on, "events_per_batch")), "bytes_per_batch": summary(column(on, "bytes_per_batch")),
            "kinds": on[0]["kinds"] if on else {}, "ratio_over_off": ratio(runs, way, "off"),
            "seconds": summary(column(on, "seconds")), "seconds_off": summary(column(runs["off"], "seconds"))}


def child(args) -> dict[str, Any]:
    return compare(args.way, args)


def measure(args) -> dict[str, Any]:
    """Each way in a process of its own: one listener configuration per JVM (its settings are read once)."""
    figures: dict[str, Any] = {"per_batch": args.per_batch, "target_batches": args.batches, "reps": args.reps}
    with workdir("lineage-results") as scratch:
        for way in WAYS:
            figures[way] = run_child("bench.lineage_volume", scratch / f"{way}.json", way=way, batches=args.batches,
                                     per_batch=args.per_batch, reps=args.reps, warmup=args.warmup)
            log(f"{way}: {figures[way]['events_per_batch']} events per batch, ratio {figures[way]['ratio_over_off']}")
    return figures


ROWS = (("listener", lambda w: WAYS[w["way"]]), ("batches", lambda w: f"{w['batches'][0]:,}"),
        ("events per batch", at("events_per_batch"), 1), ("bytes per batch", at("bytes_per_batch"), 0),
        ("event kinds (first run)", lambda w: ", ".join(f"{k} {v:,}" for k, v in sorted(w["kinds"].items())) or "none"),
        ("wall time ÷ off", lambda w: f"**{spread(w['ratio_over_off'])}**"))


def tables(r: dict[str, Any]) -> list[str]:
    return [f"Kafka -> Delta, {r['per_batch']:,} records per batch, {r['target_batches']} batches, {r['reps']} pairs per way "
            "(the way and no listener alternating in one JVM; the listener added to the running application).",
            figure_table([r[way] for way in WAYS if way in r], ROWS)]


if __name__ == "__main__":
    benchmark("lineage_volume", __doc__, measure, child=child, batches=100, per_batch=1000, reps=3, warmup=1, way="on")
