"""Spark side of the driver: the only package that touches a SparkSession.

``session`` finds or creates the session; ``engine`` supplies the primitives of
``execution.engine`` as DataFrame steps (``mapInArrow`` with a StageTask,
repartition and sort for a GroupByKey, ``unionByName`` for Flatten, repartition
for Reshuffle); ``shipping`` sends driver-only code and large side inputs to the
executors. Only DataFrame APIs that also exist over Spark Connect are used
(nothing of the classic RDD world), so the same code runs on classic Spark and
over Connect. The executor that walks a plan is engine-agnostic (``execution``).
"""
