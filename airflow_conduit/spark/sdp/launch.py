"""The command line of an SDP run: the spark-submit argv the Spark provider builds, launched as ``spark-pipelines`` is.

``spark-pipelines`` is ``spark-class org.apache.spark.deploy.SparkPipelines <cli.py> [spark-submit options] [args]``:
SparkPipelines hands the options to spark-submit with ``--conf spark.api.mode=connect --remote <remote>`` and the
rest to the Python file (a local Spark Connect server runs the flows). An SDP run of ours is the same command with our
runner (``spark/sdp/runner.py``) in place of ``cli.py``. Spark refuses ``--remote`` beside ``--master`` and
``--deploy-mode``, so the connection's master becomes the remote: ``local``/``local[N]`` start a local Connect
server, ``sc://host:port`` is a Connect server already running. Pure: no pyspark import.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PIPELINES_CLASS = "org.apache.spark.deploy.SparkPipelines"
MAX_FLOW_RETRIES_CONF = "spark.sql.pipelines.maxFlowRetryAttempts"  # 0: the recovery engine owns retries
LAUNCH_OPTION = "spark-pipelines"  # the local backend's ``launch`` option for an SDP run
_REMOTE = re.compile(r"local(\[[0-9*]+\])?|sc://\S+")
_DROPPED = {"--master", "--deploy-mode", "--name"}  # --name would reach the runner: SparkPipelines passes it on


class UnsupportedMaster(ValueError):
    """A master an SDP run cannot use: SDP runs on Spark Connect only (a local server or ``sc://``)."""


def remote_for(master: str) -> str:
    """The ``--remote`` of a connection's master; ``UnsupportedMaster`` for one SDP cannot run on."""
    if _REMOTE.fullmatch(master or ""):
        return master
    raise UnsupportedMaster(
        f"Spark Declarative Pipelines run on Spark Connect only: the connection's master {master!r} is neither "
        "local[...] (a Connect server started for the run) nor sc://host:port (a Connect server); use such a connection")


def pipelines_command(submit_argv: list[str], application: str, application_args: list[str]) -> list[str]:
    """``spark-class SparkPipelines <application> <spark-submit options> --remote R <args>`` from a spark-submit argv.

    ``submit_argv`` is ``[spark-submit, options..., application, *application_args]`` as the provider builds it.
    """
    tail = len(application_args) + 1
    if submit_argv[-tail] != application or submit_argv[len(submit_argv) - len(application_args):] != application_args:
        raise ValueError("the spark-submit command line does not end with the application and its arguments")
    options, master = [], None
    items = submit_argv[1:-tail]
    index = 0
    while index < len(items):
        item = items[index]
        if item in _DROPPED and index + 1 < len(items):
            if item == "--master":
                master = items[index + 1]
            index += 2
            continue
        options.append(item)
        index += 1
    spark_class = str(Path(submit_argv[0]).with_name("spark-class")) if os.sep in submit_argv[0] else "spark-class"
    return [spark_class, PIPELINES_CLASS, application, *options, "--remote", remote_for(master or "local"),
            *application_args]


def runner_path() -> str:
    """The runner's file, as spark-pipelines is given ``cli.py``."""
    return str(Path(__file__).with_name("runner.py"))
