"""The file spark-submit runs: one run of one pipeline.

    spark-submit --py-files airflow_conduit.zip airflow_conduit/spark/entrypoint.py \\
        --spec PIPELINE.yaml --run-id RUN_ID --state-dir STATE_DIR [--faults JSON] [--replay JSON]

With ``--replay {"filters": {...}, "dry_run": false}`` the run is a DLQ replay
(``spark/replay.py``) instead of the pipeline: same exit codes, same report
file, whose ``replay`` key holds the replay's totals.

Exit codes (recovery/codes.py): 0 success (or graceful stop on SIGTERM), 75
transient failure (restart with backoff), 70 fatal failure (degrade), 78 the
spec was refused (before any SparkSession exists). Before a non-zero exit one
``AIRFLOW_CONDUIT_ERROR {json}`` line goes to stderr and the same structured
error into STATE_DIR/runs/<run-id>/report.json. Imports no airflow.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: the package comes from --py-files or site-packages
    sys.path[:] = [p for p in sys.path if Path(p).resolve() != Path(__file__).resolve().parent]

from airflow_conduit.spark.pyspark_path import without_redundant_pyspark_zip  # noqa: E402

sys.path[:] = without_redundant_pyspark_zip(sys.path)  # before the first pyspark import (pyspark_path.py says why)

from airflow_conduit.runs.report import RunReport, report_path, utc_now_iso  # noqa: E402
from airflow_conduit.runs.status import RunStatus  # noqa: E402
from airflow_conduit.recovery import codes  # noqa: E402
from airflow_conduit.recovery.errors import StructuredError  # noqa: E402

log = logging.getLogger("airflow_conduit.spark.entrypoint")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="airflow_conduit.spark.entrypoint", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="pipeline spec (YAML)")
    parser.add_argument("--run-id", required=True, help="id of this run (report folder name)")
    parser.add_argument("--state-dir", required=True, help="the pipeline's state directory (reused across runs)")
    parser.add_argument("--faults", default=None, help="fault injection, JSON (see docs/runs.md, fault injection)")
    parser.add_argument("--replay", default=None, help='a DLQ replay instead of the pipeline: {"filters": {...}, "dry_run": false}')
    return parser.parse_args(argv)


def _finish_with_error(report: RunReport, path: Path, error: StructuredError, exit_code: int) -> int:
    report.fail(error.to_dict())
    try:
        report.write_atomic(path)
    except OSError:  # a full state dir: the ERROR line below still says what failed
        log.warning("the run report could not be written: %s", path, exc_info=True)
    print(error.to_error_line(), file=sys.stderr, flush=True)
    return exit_code


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    args = parse_args(argv)
    log.info("run %s: driver started", args.run_id)  # the driver log's first line of ours: how long the launch took
    state_dir = Path(args.state_dir).absolute()
    path = report_path(state_dir, args.run_id)
    report = RunReport(pipeline_id=Path(args.spec).stem, run_id=args.run_id, started_at=utc_now_iso())

    from airflow_conduit.pipeline import SpecError, load_pipeline
    from airflow_conduit.spark import faults as faults_mod

    try:
        faults = faults_mod.parse_faults(args.faults)
    except ValueError as exc:
        error = StructuredError(code=codes.INVALID_SPEC, fatal=True, message=f"--faults: {exc}",
                                exception_class=type(exc).__name__, stage="runner")
        return _finish_with_error(report, path, error, codes.EXIT_INVALID_SPEC)
    try:
        spec = load_pipeline(args.spec)
    except (SpecError, OSError) as exc:
        error = StructuredError(
            code=codes.INVALID_SPEC,
            fatal=True,
            message=str(exc),
            exception_class=f"{type(exc).__module__}.{type(exc).__qualname__}",
            stage="runner",
            extra={"spec": str(args.spec)},
        )
        return _finish_with_error(report, path, error, codes.EXIT_INVALID_SPEC)
    report.pipeline_id = spec.id
    from airflow_conduit.pipeline.replay_request import ReplayRequest, ReplayRequestError

    try:
        request = ReplayRequest.from_json(args.replay) if args.replay is not None else None
    except ReplayRequestError as exc:
        error = StructuredError(code=codes.INVALID_SPEC, fatal=True, message=str(exc),
                                exception_class=type(exc).__name__, stage="runner")
        return _finish_with_error(report, path, error, codes.EXIT_INVALID_SPEC)

    from airflow_conduit.spark.runner import classify, exit_code_for

    try:
        faults_mod.check_start_faults(state_dir, faults)
    except Exception as exc:  # noqa: BLE001 - injected on purpose
        error = classify(exc, "runner", None, None)
        return _finish_with_error(report, path, error, exit_code_for(error))

    from airflow_conduit.spark.runner import PipelineRunner, RunFailed, install_sigterm_handler
    from airflow_conduit.spark.connector_jars import connectors_of
    from airflow_conduit.spark.session import build_session

    try:
        spark = build_session(f"airflow-conduit-{spec.id}", connectors=connectors_of(spec))
    except Exception as exc:  # noqa: BLE001 - no Spark, no run: report why
        error = classify(exc, "runner", None, None)
        return _finish_with_error(report, path, error, exit_code_for(error))
    log.info("run %s: session ready", args.run_id)  # the driver log's mark between Spark's start and the runner's
    if request is not None:
        try:
            return run_replay(spark, spec, request, state_dir=state_dir, run_id=args.run_id, faults=faults,
                              report=report, path=path)
        finally:
            _stop(spark)
    runner = PipelineRunner(spark, spec, state_dir=state_dir, run_id=args.run_id, faults=faults)
    install_sigterm_handler(runner)
    try:
        runner.run()
    except RunFailed as failed:
        print(failed.error.to_error_line(), file=sys.stderr, flush=True)
        return exit_code_for(failed.error)
    except OSError as exc:  # the run's own state could not be written (a full state dir): named, not a traceback
        error = classify(exc, "runner", None, None)
        return _finish_with_error(report, path, error, exit_code_for(error))
    finally:
        _stop(spark)
    return codes.EXIT_OK


def _stop(spark) -> None:
    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - the JVM may be gone already
        pass


def run_replay(spark, spec, request, *, state_dir: Path, run_id: str, faults: dict, report: RunReport, path: Path) -> int:
    """The replay mode: replay the DLQ (or dry-run it) and write the replay's totals into this run's report.

    The replay batch (counts, expectation counts) is the report's one batch, so the watcher, the UI and
    the DLQ sensor read a replay run like any run; SIGTERM is not caught: a replay killed mid-way is
    resumed, exactly once, by the next one.
    """
    from airflow_conduit.runs.report import replay_totals_text
    from airflow_conduit.spark.expectations import ExpectationFailed
    from airflow_conduit.spark.replay import replay
    from airflow_conduit.spark.runner import classify, exit_code_for

    report.status = RunStatus.RUNNING
    report.write_atomic(path)
    try:
        result = replay(spark, spec, state_dir=state_dir, filters=request.filters, dry_run=request.dry_run,
                        run_id=run_id, faults=faults, force=request.force)
    except Exception as exc:  # noqa: BLE001 - classified like a pipeline run's failure
        rule = getattr(exc, "rule", None) if isinstance(exc, ExpectationFailed) else None
        where = ("processor", rule.processor_id, "expect") if rule is not None else ("runner", None, None)
        error = classify(exc, *where)
        return _finish_with_error(report, path, error, exit_code_for(error))
    batch = result.batch
    if batch is not None:
        report.add_batch(batch["batch_id"], read=batch["read"], filtered=batch["filtered"], dlq=batch["dlq"],
                         written=batch["written"], at=batch.get("at"))
        if batch.get("expectations"):
            report.add_expectations(batch["expectations"])
        report.counters.update(result.counters)
    report.replay = replay_totals(result, request)
    report.status = RunStatus.SUCCEEDED
    report.ended_at = utc_now_iso()
    report.write_atomic(path)
    log.info("%s", replay_totals_text(report.replay))
    return codes.EXIT_OK


def replay_totals(result, request) -> dict:
    """What the run report and XCom show of a replay: replayed, now passing per destination, still failing, skipped."""
    return {
        "replay": result.replay,
        "batch_id": result.batch_id,
        "dry_run": result.dry_run,
        "resumed": result.resumed,
        "filters": request.filters.to_dict(),
        "replayed": result.selected,
        "passed": result.passed,
        "passing": dict(result.written),  # per destination (a dry run writes nothing: see passed)
        "filtered": result.filtered,
        "still_failing": result.still_failing,
        "skipped_already_replayed": int(result.skipped.get("already replayed", 0)),
        "skipped": dict(result.skipped),
        "errors": dict(result.errors),  # a dry run: what would still fail, grouped by error
        "expectations": dict(result.expectations),  # per rule: passed / failed (a dry run: would pass / fail)
    }


if __name__ == "__main__":
    sys.exit(main())
