"""Planning: Beam pipeline proto -> fused stages -> a SparkPlan of plain data.

Runs on the driver and imports no pyspark. ``phases`` applies Beam's own fusion
phases (the FnApiRunner list plus ``annotate_stateful_dofns_as_roots``, with
Reshuffle kept as a runner transform); ``planner`` turns each fused stage into a
``StagePlan`` that carries its ProcessBundleDescriptor as bytes, so a plan pickles
and travels to Spark's Python workers as it is.
"""
