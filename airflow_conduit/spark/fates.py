"""Every record's fate as flags on its own row: fan-out to destination processors without joins.

A destination with processors gets its own copy of the record, computed in
the same row: the record's fields are set aside (``__ac_m_*``), each
destination's processors run on a copy and their result is set aside under
that destination (``__ac_b<i>_*``, with its error and filter flag), then the
record is restored. Projections only: one plan, one pass, no row ids, no
joins.

Fates (non-null flags, exactly one per record): nacked (an error anywhere,
also in one destination's processors: the record goes to the DLQ and to no
destination), filtered (by a pipeline processor, or by the processors of
every destination), or written to every destination that did not filter it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_conduit.pipeline.model import DestinationSpec
from airflow_conduit.spark import columns as C
from airflow_conduit.spark.jvm.columns import jvm_column, where
from airflow_conduit.spark.processors import ProcessorContext, apply_processors

NACKED = "__ac_nacked"
FILTERED_ALL = "__ac_filtered_all"
_MAIN = "__ac_m_"
_MAIN_ERROR = "__ac_me"
_MAIN_FILTERED = "__ac_mf"


def written(index: int) -> str:
    """Flag: the record is written to destination ``index``."""
    return f"__ac_w{index}"


@dataclass(frozen=True)
class Branch:
    """Where destination ``index`` finds its record: (column in the row, field name) pairs, and its flags."""

    index: int
    fields: tuple[tuple[str, str], ...]
    error: str | None = None  # its processors' error column (None: no processors)
    filtered: str | None = None


def _except(df: DataFrame, *names: str) -> list[Column]:
    return [C.col(c) for c in df.columns if c not in names]


def _select(df: DataFrame, ctx: ProcessorContext, key: tuple, build) -> DataFrame:
    """``df.select(*build())``, the list built once per run for ``key`` (the columns it reads) and handed to the JVM once."""
    return C.select(df, ctx.once(("fates", *key), lambda: C.JvmColumns(build())))


def with_branches(records: DataFrame, destinations: tuple[DestinationSpec, ...], ctx: ProcessorContext) -> tuple[DataFrame, list[Branch]]:
    """Run each destination's processors on its own copy of the record; returns (rows, one Branch per destination)."""
    user = C.user_columns(records)
    main_fields = tuple((u, u) for u in user)
    if not any(d.processors for d in destinations):
        return records, [Branch(i, main_fields) for i in range(len(destinations))]
    # each select list built once per run for the columns it sees (ctx.once): a Column call per column is a JVM round trip
    df = _select(records, ctx, ("main", tuple(records.columns)), lambda: [
        *_except(records, C.ERROR, C.FILTERED, *user),
        F.col(C.ERROR).alias(_MAIN_ERROR),
        F.col(C.FILTERED).alias(_MAIN_FILTERED),
        *[C.col(u).alias(_MAIN + u) for u in user],
    ])
    branches: list[Branch] = []
    for index, dest in enumerate(destinations):
        if not dest.processors:
            branches.append(Branch(index, tuple((_MAIN + u, u) for u in user)))
            continue
        copy = _select(df, ctx, ("copy", tuple(user)), lambda: [
            F.col("*"),
            F.col(_MAIN_ERROR).alias(C.ERROR),
            F.col(_MAIN_FILTERED).alias(C.FILTERED),
            *[C.col(_MAIN + u).alias(u) for u in user],
        ])
        out = apply_processors(copy, dest.processors, ctx)
        out_user = C.user_columns(out)
        prefix = f"__ac_b{index}_"
        error, filtered = f"__ac_e{index}", f"__ac_f{index}"
        df = _select(out, ctx, ("branch", index, tuple(out.columns)), lambda: [
            *_except(out, C.ERROR, C.FILTERED, *out_user),
            F.col(C.ERROR).alias(error),
            F.col(C.FILTERED).alias(filtered),
            *[C.col(u).alias(prefix + u) for u in out_user],
        ])
        branches.append(Branch(index, tuple((prefix + u, u) for u in out_user), error, filtered))
    restored = _select(df, ctx, ("restored", tuple(df.columns), tuple(user)), lambda: [
        *_except(df, _MAIN_ERROR, _MAIN_FILTERED, *[_MAIN + u for u in user]),
        F.col(_MAIN_ERROR).alias(C.ERROR),
        F.col(_MAIN_FILTERED).alias(C.FILTERED),
        *[C.col(_MAIN + u).alias(u) for u in user],
    ])
    return restored, [Branch(b.index, main_fields, b.error, b.filtered) if b.error is None else b for b in branches]


def with_fates(df: DataFrame, branches: list[Branch]) -> DataFrame:
    """Add the fate flags; the record's error becomes the first error anywhere (its own, then per destination)."""
    return Fates().apply(df, branches)


class Fates:
    """``with_fates`` with its columns built once per run (the branches are the same every batch) and handed to
    the JVM as one list each (``columns.JvmColumns``): two round trips a batch, whatever the destinations."""

    def __init__(self) -> None:
        self._built: dict[tuple[Branch, ...], tuple[C.JvmColumns | None, C.JvmColumns]] = {}
        self._rows: dict[tuple, object] = {}  # per branch: its select list (columns.jvm_strings) and its where (JVM)

    def apply(self, df: DataFrame, branches: list[Branch]) -> DataFrame:
        key = tuple(branches)
        if key not in self._built:
            self._built[key] = _fate_columns(branches)
        error, flags = self._built[key]
        return C.with_columns(C.with_columns(df, error) if error else df, flags)

    def rows(self, branch: Branch, status: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
        """The records ``branch``'s destination writes, with only the record's own fields (and the internal
        ``keep``); the select list is built once per run."""
        key = (branch, keep)
        if key not in self._rows:  # as SQL text: a few round trips, where Column calls take several per field
            self._rows[key] = C.jvm_strings([*(f"{C.quote(c)} AS {C.quote(name)}" for c, name in branch.fields),
                                             *(C.quote(k) for k in keep)])
            self._rows[("where", branch.index)] = jvm_column(F.col(written(branch.index)))
        return C.select_expr(where(status, self._rows[("where", branch.index)]), self._rows[key])


def _fate_columns(branches: list[Branch]) -> tuple[C.JvmColumns | None, C.JvmColumns]:
    """The new error column (None when it is the record's own), then the flags, which read that new error."""
    errors = [F.col(C.ERROR)] + [F.col(b.error) for b in branches if b.error]
    error = C.JvmColumns([F.coalesce(*errors)], [C.ERROR]) if len(errors) > 1 else None
    nacked = F.col(C.ERROR).isNotNull()
    filtered = [
        F.col(C.FILTERED) | F.coalesce(F.col(b.filtered), F.lit(False)) if b.filtered else F.col(C.FILTERED) for b in branches
    ]
    everywhere = functools.reduce(lambda a, b: a & b, filtered) if filtered else F.col(C.FILTERED)
    flags = {NACKED: nacked, FILTERED_ALL: ~nacked & everywhere}
    flags.update({written(b.index): ~nacked & ~flag for b, flag in zip(branches, filtered)})
    return error, C.JvmColumns(list(flags.values()), list(flags))
