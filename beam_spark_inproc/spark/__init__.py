"""Spark side of the driver: the only package that touches a SparkSession.

``session`` finds or creates the session; ``executor`` walks a SparkPlan and
builds one DataFrame per stage (``mapInArrow`` with a StageTask, repartition and
sort for a GroupByKey, ``unionByName`` for Flatten, repartition for Reshuffle),
materializes side inputs once and runs the leaves as a single Spark job. Only
DataFrame APIs that also exist over Spark Connect are used (nothing of the
classic RDD world), so the same code runs on classic Spark and over Connect.
"""
