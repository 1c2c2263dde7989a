"""User-facing Spark PTransforms, installed as ``beam_spark_inproc.transforms``.

Nothing is exported yet: reading and writing Spark DataFrames/tables from a Beam
pipeline is planned here, never as a top-level ``transforms`` package.
"""
