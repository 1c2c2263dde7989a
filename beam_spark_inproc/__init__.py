"""beam-spark-inproc: run Apache Beam Python pipelines on Apache Spark, in-process.

    import apache_beam as beam
    from beam_spark_inproc import InProcessSparkRunner

    with beam.Pipeline(runner=InProcessSparkRunner()) as p:
        ...

or ``--runner=beam_spark_inproc.InProcessSparkRunner`` on the command line.
Data flow: pipeline proto -> ``capabilities.check`` -> ``planning`` (Beam's
fusion phases, one ProcessBundleDescriptor per fused stage) -> ``spark`` (one
DataFrame per stage; DoFns run by Beam's BundleProcessor in ``worker``).
"""
from beam_spark_inproc.errors import PipelineExecutionError
from beam_spark_inproc.errors import UnsupportedPipelineError
from beam_spark_inproc.options import SparkRunnerOptions
from beam_spark_inproc.runner import InProcessSparkRunner

__all__ = [
    'InProcessSparkRunner',
    'PipelineExecutionError',
    'SparkRunnerOptions',
    'UnsupportedPipelineError',
]
