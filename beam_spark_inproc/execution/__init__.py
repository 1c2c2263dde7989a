"""Execution on the driver, engine-agnostic: walking a plan against an engine.

``executor`` walks a SparkPlan stage by stage against an ``engine.Engine`` (the
few primitives a backend supplies: Spark in ``spark.engine``, in-driver lists of
Arrow batches in ``debug.engine``, tiny data in the driver in ``small``, the rest
handed over to Spark, ``spark.hand_over``; ``local`` moves the rows both in-driver engines hold);
``side_inputs`` turns a materialized side
input into the state entries workers serve; ``progress`` describes and logs each
job. Nothing here touches a SparkSession,
so a second loop over the same pieces (micro-batches, ``execution.streaming``)
can reuse them.
"""
