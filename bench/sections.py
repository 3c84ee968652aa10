"""The report's sections of bench/small_run.py and bench/kafka_delta.py, rendered from their result keys."""

from __future__ import annotations

from typing import Any, Mapping

from bench.markdown import section_text, spread, table

SMALL_RUN_TITLE = "6. A small run, as a new user runs it"
SMALL_RUN_ABOUT = """
`airflow-conduit run` on a copy of `examples/orders` (15 records in two files, `max-files-per-trigger: 1`), each
time a new process and a new state directory. Wall time is from the command's start to its exit. The phases
add up to the wall time; their sources are this process's clock, the run report's times, the launcher's exit
record and the driver log (Spark's start lines, Structured Streaming's progress reports). The floor, when
measured, is a plain PySpark script that starts a SparkSession, reads the same 15 records and writes them.
"""


def _seconds(value: Any) -> float | None:
    return value.get("median") if isinstance(value, Mapping) else value


def small_run_section(r: dict[str, Any]) -> str:
    wall = r["wall_seconds"]
    phases = r.get("phases") or {}
    order = r.get("phase_order") or list(phases)
    total = _seconds(wall) or 1.0
    phase_rows = [[name, spread(phases[name], 1, " s"), f"{100 * (_seconds(phases[name]) or 0) / total:.0f} %"] for name in order]
    head = [["wall time, `airflow-conduit run` → exit", spread(wall, 1, " s")]]
    if r.get("floor_wall_s") is not None:
        head.append(["plain PySpark script (SparkSession, read, write)", spread(r["floor_wall_s"], 1, " s")])
    facts = f"`{r.get('command', '?')}`, {len(r.get('runs') or [])} run(s)."
    batch_rows = []
    first, later = r.get("first_batch") or {}, r.get("later_batches") or {}
    for key, label in (("batch_seconds", "trigger start → commit"), ("foreach_batch_seconds", "… in foreachBatch (the runner)"),
                       ("planning_seconds", "… query planning"), ("offsets_and_commit_seconds", "… offsets and commit logs")):
        if key in first:
            batch_rows.append([label, spread(first[key], 2, " s"), spread(later.get(key), 2, " s")])
    return section_text(SMALL_RUN_TITLE, SMALL_RUN_ABOUT, facts, table(["measure", "seconds"], head),
                        table(["phase", "seconds", "share"], phase_rows) if phase_rows else "",
                        table(["per micro-batch", "first batch", "later batches"], batch_rows) if batch_rows else "")


KAFKA_DELTA_TITLE = "8. Kafka to Delta"
KAFKA_DELTA_ABOUT = """
A topic of generated JSON orders (a share of them bad: not JSON, a wrong type, a missing required field) on the
test broker, read from its start into a fresh Delta table by two ways in one `local[2]` session, alternating
in rotated order after warm-up pairs: the **runner** (source `kafka`, destination `delta` append, DLQ `kafka`,
exactly once) and the **floor** (Spark's Kafka source, `from_json`, rows without their required fields dropped,
`foreachBatch` appending to Delta; no DLQ). At the default batch size and at a small `max-records-per-batch`.
Latency is from a record's production to its Delta commit, in continuous mode at a steady rate.
"""


def kafka_delta_section(r: dict[str, Any]) -> str:
    d, p = r["default_batch"], r["per_batch"]

    def way_row(label: str, c: dict[str, Any]) -> list[str]:
        return [label, f"{c['records']:,}", f"{c['batches_runner'][0]:,} / {c['batches_floor'][0]:,}",
                spread(c["runner_records_per_second"], 0), spread(c["floor_records_per_second"], 0),
                f"**{spread(c['ratio_runner_over_floor'])}**"]

    facts = (f"{r['partitions']} partitions, {r['bad_share']:.0%} bad; {r['reps']} pairs at {p['max_records_per_batch']:,} per batch, "
             f"{r.get('default_reps', r['reps'])} at the default size. Cost per micro-batch over the floor at "
             f"{p['max_records_per_batch']:,} records per batch: **{spread(p.get('ms_per_batch_over_floor'), 0, ' ms')}**.")
    ways = table(["batch size", "records", "batches (runner / floor)", "runner records/s", "floor records/s", "runner ÷ floor"],
                 [way_row("default (all available)", d), way_row(f"max-records-per-batch {p['max_records_per_batch']:,}", p)])
    latency = [[way, f"{x['rate']:,}/s, {x['measured']:,} counted", f"{x['p50']:.2f} s", f"{x['p95']:.2f} s", f"{x['p99']:.2f} s",
                f"{x['max']:.2f} s"] for way, x in (r.get("latency") or {}).items()]
    b = r.get("broker") or {}
    broker = (f"Test broker (KRaft, one JVM, heap `{b.get('heap', '?')}`): started in {spread(b.get('start_seconds'), 1, ' s')}, "
              f"RSS {spread(b.get('rss_idle_mib'), 0, ' MiB')} idle.") if b else ""
    return section_text(KAFKA_DELTA_TITLE, KAFKA_DELTA_ABOUT, facts, ways,
                        table(["way", "produced", "p50", "p95", "p99", "max"], latency) if latency else "", broker)
