"""How to test your own pipeline on InProcessSparkRunner with pytest.

The ``beam_spark_inproc`` pytest plugin is installed with the package
(``pip install 'beam-spark-inproc[testing]'`` brings pytest). Its fixtures
start nothing until a test's pipeline needs Spark: tiny stages run in the
driver, so these tests start no JVM except ``test_word_lengths_on_spark``,
which puts every stage on Spark:

    pytest examples/test_my_pipeline.py --spark-master 'local[2]'

Beam-style tests that build ``TestPipeline()`` themselves take their options
from ``--test-pipeline-options``:

    pytest examples/test_my_pipeline.py \\
        --test-pipeline-options="--runner=beam_spark_inproc.InProcessSparkRunner"
"""

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to


def word_lengths(lines):
    return (
        lines
        | beam.FlatMap(str.split)
        | beam.Map(lambda word: (len(word), word))
        | beam.GroupByKey()
        | beam.MapTuple(lambda n, words: (n, sorted(words)))
    )


def test_word_lengths(beam_pipeline):
    with beam_pipeline as p:
        result = word_lengths(p | beam.Create(['a bb cc', 'ddd e']))
        assert_that(result, equal_to([(1, ['a', 'e']), (2, ['bb', 'cc']), (3, ['ddd'])]))


def test_word_lengths_on_spark(spark_pipeline):
    with spark_pipeline as p:
        result = word_lengths(p | beam.Create(['a bb cc', 'ddd e']))
        assert_that(result, equal_to([(1, ['a', 'e']), (2, ['bb', 'cc']), (3, ['ddd'])]))


@pytest.mark.it_validatesrunner
def test_word_lengths_beam_style():
    with TestPipeline() as p:
        result = word_lengths(p | beam.Create(['x yy']))
        assert_that(result, equal_to([(1, ['x']), (2, ['yy'])]))
