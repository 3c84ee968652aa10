"""JVM options of the driver and executors that run a pipeline (no pyspark import: the launchers use it too).

Spark compiles each stage of a batch into one Java method (whole-stage code generation). The runner's
first stage carries, per schema field, the field's value, its error checks and its DLQ context, so its
method grows with the schema and passes HotSpot's size limit for JIT compilation at about ten fields
(``-XX:+DontCompileHugeMethods``, on by default): the whole per-record loop of the pass would then run in
the bytecode interpreter. Compiling it anyway is faster than Spark's own fallback
(``spark.sql.codegen.hugeMethodLimit``, which gives up whole-stage code generation for such a stage);
benchmark 1b (docs/benchmarks.md) compares the two.
"""

from __future__ import annotations

from typing import Any

JIT_OPTIONS = ("-XX:-DontCompileHugeMethods",)  # compile the pass's large generated method like any other
JAVA_OPTION_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def with_jit_options(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with ``JIT_OPTIONS`` appended to the driver's and the executors' Java options. A user's own
    options are kept, in front; a flag the user already set either way (``-XX:+...`` or ``-XX:-...``) is theirs."""
    out = dict(conf)
    for key in JAVA_OPTION_KEYS:
        options = str(out.get(key) or "").split()
        options += [option for option in JIT_OPTIONS if not any(_flag(option) == _flag(o) for o in options)]
        out[key] = " ".join(options)
    return out


def _flag(option: str) -> str:
    """The name of a ``-XX:[+-]Name`` or ``-XX:Name=value`` option, else the option itself."""
    if option.startswith("-XX:"):
        return option[4:].lstrip("+-").split("=", 1)[0]
    return option
