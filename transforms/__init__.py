"""User-facing Spark PTransforms, installed as ``beam_spark_inproc.transforms``.

``ReadFromSpark`` (a table, SQL query or DataFrame as a PCollection of Beam
rows), ``WriteToSpark`` (rows to a table or files, by Spark's writers) and
``SparkSql`` (Spark SQL over PCollections): runner-native transforms of
``InProcessSparkRunner`` (see ``spark_io``, ``runtime`` and docs/spark-interop.md).

Modules: ``types`` (schemas and value conversions), ``convert`` (the functions
Spark's Python workers run), ``batches`` (Arrow batches as batched DoFns'
batches), ``spark_io`` (the PTransforms), ``runtime`` (what
the executor runs for them, by URN; the runner hands it to the executor),
``local`` (their expansion on runners running DoFns in this process),
``specs`` (what those three share) and ``files`` (local Parquet scans). Exports are lazy, so a
worker unpickling a
``convert`` function loads no driver code.
"""

from __future__ import annotations

__all__ = ['ReadFromSpark', 'WriteToSpark', 'SparkSql', 'SparkInteropError']


def __getattr__(name: str):
    if name in __all__:
        from beam_spark_inproc.transforms import spark_io

        return getattr(spark_io, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
