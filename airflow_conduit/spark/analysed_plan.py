"""A batch's plan, analysed once per run and put over every later batch without analysing it again.

In Spark Classic every ``DataFrame`` operation analyses its plan there and then (``Dataset.ofRows``). A batch's plan
is the same at every batch but for its leaf: the records' select (parse, per-record errors, metadata: the largest
expressions), the processors, the fates, the pass's columns. Analysing them again is most of the cost of building
a batch's plan.

``foreachBatch`` hands each batch over as a ``LogicalRDD`` whose output attributes are the streaming query's
(Spark keeps them across batches), so the analysed plan of one batch is the analysed plan of the next with the
leaf replaced. ``AnalysedPlan`` keeps a frame's analysed nodes above a leaf and puts them over another leaf
(``TreeNode.withNewChildren``), marked analysed, so that ``Dataset.ofRows`` skips the analyzer
(``Analyzer.executeAndCheck`` returns an analysed plan as it is). The optimizer still runs per batch (it replaces
``current_timestamp()`` and the like by the batch's own time). A plan is put over a new leaf only when:

- the new leaf has the output attributes the plan was analysed over (``LogicalPlan.sameOutput``);
- every path down the plan ends at that leaf: no other relation (a table, a file, a cached batch) and no subquery,
  whose data a kept plan would freeze;
- it holds no nondeterministic expression with per-plan state: the analyzer fixes ``rand``'s, ``uuid``'s and
  ``shuffle``'s seed, so a kept plan would repeat their values every batch. Only the stateless ones are taken
  (``monotonically_increasing_id``, ``input_file_name``, ``spark_partition_id`` and the file block's offset and
  length: a task initialises its own copy).

Otherwise (and on any error) ``over`` returns None and the caller builds the plan as usual. The checks run once per
plan, at its first reuse. The plans are Spark's developer API, read and rebuilt through Py4J (``spark/jvm/plans.py``
reaches them: ``Dataset.logicalPlan``, ``QueryExecution.analyzed``, ``classic.Dataset.ofRows``; their nodes' own
methods are called here: ``TreeNode.withNewChildren``, ``QueryPlan.deterministic``, ``LogicalPlan.setAnalyzed``); its
contract is tested in tests/spark/test_analysed_plan.py.
"""

from __future__ import annotations

import logging
import threading

from pyspark.sql import DataFrame

from airflow_conduit.spark.jvm import plans
from airflow_conduit.spark.jvm.plans import empty_batch_of

__all__ = ["AnalysedPlan", "Refused", "STATELESS_NONDETERMINISTIC", "empty_batch_of"]

log = logging.getLogger(__name__)

_EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions."
# Nondeterministic only because their value depends on the task that evaluates them; nothing fixed per plan.
STATELESS_NONDETERMINISTIC = frozenset(_EXPRESSIONS + name for name in (
    "MonotonicallyIncreasingID", "InputFileName", "InputFileBlockStart", "InputFileBlockLength", "SparkPartitionID"))
_UNCHECKED = object()


class Refused(Exception):
    """Why a plan is not put over another leaf (kept in ``AnalysedPlan.refused``)."""


class AnalysedPlan:
    """``frame``'s analysed nodes above ``leaf``'s plan, kept to put over another leaf with the same output (``over``).
    Keeping it is two JVM round trips, and its check a few per node (once); each reuse one per node, plus four."""

    def __init__(self, frame: DataFrame, leaf: DataFrame, *, check_ahead: bool = True):
        """``check_ahead``: check the plan on a thread of its own from now (its JVM round trips then overlap the batch's
        Spark jobs instead of adding to the next batch's); else at its first reuse."""
        self.leaf = plans.logical_plan(leaf)
        self.root = plans.analysed(frame)
        self._shape = _UNCHECKED  # (node, [children's shapes]) down to the leaf (None), once checked; None if refused
        self.refused: str | None = None
        self._checking: threading.Thread | None = None
        # Py4J members looked up once per SparkContext: each step of a lookup is a JVM round trip
        sc = frame.sparkSession.sparkContext
        self._nil = plans.scala_nil(sc)
        self._local_relation = plans.local_relation(sc)
        self._nondeterministic_class = plans.nondeterministic_class(sc)
        if check_ahead:
            self._checking = threading.Thread(target=self._check, name="conduit-plan-check", daemon=True)
            self._checking.start()

    def over(self, leaf: DataFrame) -> DataFrame | None:
        """The kept plan over ``leaf``'s, analysed (no analyzer run), or None when it may not be (see the module
        docstring; then build it as usual)."""
        new_leaf = plans.logical_plan(leaf)
        if not self.leaf.sameOutput(new_leaf):
            return None
        if self._checking is not None:
            self._checking.join()
        if self._shape is _UNCHECKED:
            self._check()
        if self._shape is None:
            return None
        node = self._rebuilt(self._shape, new_leaf)
        node.setAnalyzed()
        # in the leaf's session, never the kept frame's: an observation below is registered with the session of the
        # frame it observes and completed only by an action run in that session (foreachBatch hands each batch over
        # in the stream's own session; a plan built ahead, or over the driver's session, would run elsewhere and its
        # observation would never be filled)
        return plans.frame_of(node, leaf)

    def _rebuilt(self, shape, leaf):
        """The kept nodes over ``leaf``. A node of one child is copied with it (``withNewChildInternal``, one round
        trip: the copy does not carry the node's tags, which only tell a self-join's sides apart)."""
        if shape is None:
            return leaf
        node, children = shape
        if len(children) == 1:
            return node.withNewChildInternal(self._rebuilt(children[0], leaf))
        seq = self._nil
        for child in reversed(children):  # a Scala List, built by prepending: one round trip a child
            seq = getattr(seq, "$colon$colon")(self._rebuilt(child, leaf))
        return node.withNewChildren(seq)

    # -- the checks, once per plan ------------------------------------------------------------------------

    def _check(self) -> None:
        try:
            shape = self._walk(self.root)
            if not self.root.subqueriesAll().isEmpty():
                raise Refused("it holds a subquery")
            self._check_expressions(shape)
        except Refused as refused:
            self.refused = str(refused)
            log.info("a batch's analysed plan is not reused: %s; it is analysed at every batch", refused)
            shape = None
        except Exception as exc:  # noqa: BLE001 - reuse is an optimisation: the plan is then built at every batch
            self.refused = f"its check failed ({exc.__class__.__name__})"
            log.debug("a batch's analysed plan could not be checked", exc_info=True)
            shape = None
        self._shape = shape

    def _walk(self, node):
        """The shape of the plan from ``node`` down: every path must end at the leaf."""
        if node.equals(self.leaf):
            return None
        children = node.children()
        count = children.size()
        if count == 0:
            raise Refused(f"it reads a relation other than the batch ({node.nodeName()})")
        return node, [self._walk(children.apply(i)) for i in range(count)]

    def _check_expressions(self, shape, stand_in=None) -> None:
        """Refuse a nondeterministic expression with per-plan state in any node: a node over a deterministic stand-in
        of the leaf alone (a relation of the leaf's attributes, no rows, no expressions) tells whether its own
        expressions are deterministic; only a node that is not is looked into. Over the leaf itself, a leaf that is
        not deterministic (the records' select numbers the read order) would have every node's expressions looked
        into, one by one."""
        if shape is None:
            return
        if stand_in is None:
            stand_in = self._local_relation.apply(self.leaf.output())
        node, children = shape
        leaves = self._nil
        for _ in children:
            leaves = getattr(leaves, "$colon$colon")(stand_in)
        if not node.withNewChildren(leaves).deterministic():
            found = self._stateful(node.expressions())
            if found is not None:
                raise Refused(f"{found.rsplit('.', 1)[-1]} is nondeterministic: its seed is fixed when a plan is analysed")
        for child in children:
            self._check_expressions(child, stand_in)

    def _stateful(self, expressions) -> str | None:
        """The class of the first nondeterministic expression in ``expressions`` that is not stateless, or None."""
        for i in range(expressions.size()):
            expression = expressions.apply(i)
            if expression.deterministic():
                continue
            name = expression.getClass().getName()
            if name in STATELESS_NONDETERMINISTIC:
                continue
            if self._nondeterministic_class.isInstance(expression):
                return name
            children = expression.children()
            if all(children.apply(j).deterministic() for j in range(children.size())):
                return name  # nondeterministic itself (a UDF declared so)
            found = self._stateful(children)
            if found is not None:
                return found
        return None
