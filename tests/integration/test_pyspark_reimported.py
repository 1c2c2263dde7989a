"""A run after PySpark's modules were imported again in the same process.

``mock.patch.dict('sys.modules', ...)`` drops every module first imported
inside it when it exits (Beam's ``distribopt_test`` runs its pipeline inside
one): the next use imports PySpark's classic modules again, with a ``Column``
class of their own. The engine keeps a session's column expressions
(``spark.engine._Parts``); made with the old class, a DataFrame of the new
modules rejected them (``[NOT_EXPECTED_TYPE] Argument `col` should be Column
or str, got Column``). They are made again when their class is no longer the
one PySpark's module holds.
"""

from __future__ import annotations

import sys
from unittest import mock

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.spark import engine


def _run():
    # Every stage on Spark: the GroupByKey's shuffle uses the kept key column.
    options = PipelineOptions(['--spark_small_data_kb=0'])
    with beam.Pipeline(InProcessSparkRunner(), options=options) as p:
        out = (
            p
            | beam.Create(range(10))
            | beam.Map(lambda x: (x % 2, x))
            | beam.GroupByKey()
            | beam.MapTuple(lambda k, vs: (k, sorted(vs)))
        )
        assert_that(out, equal_to([(0, [0, 2, 4, 6, 8]), (1, [1, 3, 5, 7, 9])]))


def _key_class(spark):
    return type(engine._parts(spark, engine.functions_for(spark)).key)


def test_runs_after_pyspark_modules_are_imported_again(spark):
    from pyspark.sql.classic.column import Column

    assert _key_class(spark) is Column  # the session's parts, as a run makes them
    with mock.patch.dict(sys.modules):
        for name in [n for n in sys.modules if n.startswith('pyspark.sql.classic')]:
            del sys.modules[name]
        _run()  # PySpark's classic modules imported again: another Column
        assert _key_class(spark) is not Column
    assert _key_class(spark) is Column  # the first modules back
