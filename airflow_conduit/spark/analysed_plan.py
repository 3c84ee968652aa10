"""A batch's first projection, analysed once per run and put over every later batch without analysing it again.

In Spark Classic every ``DataFrame.select`` analyses its plan there and then (``Dataset.ofRows``). The select
that turns a batch's rows into records (``sources.SourceRecords``) holds the parse, the per-record errors and
the metadata: the largest expressions of the batch's plan, and the same at every batch. Analysing them is
the most expensive step of building a batch's plan.

``foreachBatch`` hands each batch over as a ``LogicalRDD`` whose output attributes are the streaming query's
(Spark keeps them across batches), so the analysed projection of one batch is the analysed projection of the
next with the leaf replaced. ``AnalysedPlan`` keeps the first batch's analysed nodes above the leaf and puts
them over the next batch's leaf (``TreeNode.withNewChildren``), marked analysed, so that ``Dataset.ofRows``
skips the analyzer (``Analyzer.executeAndCheck`` returns an analysed plan as it is). It does so only when the
new leaf has the same output attributes as the one the plan was analysed over (``LogicalPlan.sameOutput``), and
only for plans whose expressions hold no per-analysis state: the records' select has no random seed
(``rand``, ``uuid``: the analyzer fixes their seed), only ``monotonically_increasing_id``, which is stateless
until a task initialises its own copy. Otherwise the caller builds the plan as usual.

This uses Spark's developer-facing plan API through Py4J (``Dataset.logicalPlan``, ``QueryExecution.analyzed``,
``TreeNode.withNewChildren``, ``LogicalPlan.setAnalyzed``, ``classic.Dataset.ofRows``); its contract is
tested in tests/spark/test_analysed_plan.py.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.spark import columns as C
from airflow_conduit.spark.jvm_refs import jvm_member


class AnalysedPlan:
    """``frame``'s analysed nodes between its root and ``leaf``'s plan (a chain of one-child nodes), kept to put
    over another leaf with the same output (``over``). Built once per run: a few JVM round trips per node."""

    def __init__(self, frame: DataFrame, leaf: DataFrame):
        self._session = frame.sparkSession._jsparkSession
        self.leaf = leaf._jdf.logicalPlan()
        spine = []
        node = frame._jdf.queryExecution().analyzed()
        while not node.equals(self.leaf):
            children = node.children()
            if children.size() != 1:  # not a chain above the leaf: nothing to reuse
                spine = None
                break
            spine.append(node)
            node = children.head()
        self.spine = spine[::-1] if spine else None  # from the leaf's parent up to the root
        # Py4J members looked up once per SparkContext: each step of a lookup is a JVM round trip
        sc = frame.sparkSession.sparkContext
        self._single = jvm_member(sc, "Collections.singletonList", lambda jvm: jvm.java.util.Collections.singletonList)
        self._to_seq = jvm_member(sc, "PythonUtils.toSeq", lambda jvm: jvm.PythonUtils.toSeq)
        self._of_rows = jvm_member(sc, "classic.Dataset.ofRows", lambda jvm: getattr(jvm, "org.apache.spark.sql.classic.Dataset").ofRows)

    def over(self, leaf: DataFrame) -> DataFrame | None:
        """The kept plan over ``leaf``'s, analysed (no analyzer run), or None when ``leaf``'s output attributes are
        not the ones it was analysed over (then build it as usual). Three JVM round trips per node, plus four."""
        if not self.spine:
            return None
        new_leaf = leaf._jdf.logicalPlan()
        if not self.leaf.sameOutput(new_leaf):
            return None
        node = new_leaf
        for parent in self.spine:
            node = parent.withNewChildren(self._to_seq(self._single(node)))
        node.setAnalyzed()
        return C.frame(self._of_rows(self._session, node), leaf)
