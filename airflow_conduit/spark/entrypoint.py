"""The file spark-submit runs: one run of one pipeline.

    spark-submit --py-files airflow_conduit.zip airflow_conduit/spark/entrypoint.py \\
        --spec PIPELINE.yaml --run-id RUN_ID --state-dir STATE_DIR [--faults JSON]

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

from airflow_conduit.pipeline.report import RunReport, report_path, utc_now_iso  # noqa: E402
from airflow_conduit.recovery import codes  # noqa: E402
from airflow_conduit.recovery.errors import StructuredError  # noqa: E402

log = logging.getLogger("airflow_conduit.spark.entrypoint")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="airflow_conduit.spark.entrypoint", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="pipeline spec (YAML)")
    parser.add_argument("--run-id", required=True, help="id of this run (report folder name)")
    parser.add_argument("--state-dir", required=True, help="the pipeline's state directory (reused across runs)")
    parser.add_argument("--faults", default=None, help="fault injection, JSON (see docs/pipelines.md)")
    return parser.parse_args(argv)


def _finish_with_error(report: RunReport, path: Path, error: StructuredError, exit_code: int) -> int:
    report.fail(error.to_dict())
    report.write_atomic(path)
    print(error.to_error_line(), file=sys.stderr, flush=True)
    return exit_code


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    args = parse_args(argv)
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

    from airflow_conduit.spark.runner import classify, exit_code_for

    try:
        faults_mod.check_start_faults(state_dir, faults)
    except Exception as exc:  # noqa: BLE001 - injected on purpose
        error = classify(exc, "runner", None, None)
        return _finish_with_error(report, path, error, exit_code_for(error))

    from airflow_conduit.spark.runner import PipelineRunner, RunFailed, install_sigterm_handler
    from airflow_conduit.spark.session import build_session

    try:
        spark = build_session(f"airflow-conduit-{spec.id}")
    except Exception as exc:  # noqa: BLE001 - no Spark, no run: report why
        error = classify(exc, "runner", None, None)
        return _finish_with_error(report, path, error, exit_code_for(error))
    runner = PipelineRunner(spark, spec, state_dir=state_dir, run_id=args.run_id, faults=faults)
    install_sigterm_handler(runner)
    try:
        runner.run()
    except RunFailed as failed:
        print(failed.error.to_error_line(), file=sys.stderr, flush=True)
        return exit_code_for(failed.error)
    finally:
        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - the JVM may be gone already
            pass
    return codes.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
