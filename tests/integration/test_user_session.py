"""A user's own SparkSession: the runner's runtime SQL settings for its queries,
the user's values back afterwards (Spark Connect: test_spark_connect.py)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc import PipelineExecutionError
from beam_spark_inproc.spark.session import RUNTIME_SETTINGS

from . import spark_connect_pipelines as pipelines


def test_user_settings_set_for_the_run_and_restored(spark):
    entry = pipelines.runtime_settings(spark)
    assert entry['before'] == pipelines.USER_SETTINGS
    assert entry['during'] and all(d == RUNTIME_SETTINGS for d in entry['during'])
    assert entry['after'] == pipelines.USER_SETTINGS


def test_user_settings_set_for_a_stream_and_restored(spark):
    # The streaming loop's queries too (they ran on the user's values).
    entry = pipelines.runtime_settings(spark, streaming=True)
    assert entry['before'] == pipelines.USER_SETTINGS
    assert entry['during'] and all(d == RUNTIME_SETTINGS for d in entry['during'])
    assert entry['after'] == pipelines.USER_SETTINGS


def test_settings_restored_after_a_failed_run(spark):
    key = 'spark.sql.adaptive.enabled'
    before = spark.conf.get(key, None)
    spark.conf.set(key, 'true')

    def fail(x):
        raise ValueError('on purpose')

    try:
        with pytest.raises(PipelineExecutionError):
            with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
                p | beam.Create([1]) | beam.Map(fail)
        assert spark.conf.get(key) == 'true'
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def test_settings_named_in_spark_conf_are_left_alone(spark, monkeypatch):
    key = 'spark.sql.execution.arrow.maxRecordsPerBatch'
    before = spark.conf.get(key, None)
    spark.conf.set(key, '555')
    seen = []
    from beam_spark_inproc.spark.engine import SparkEngine

    collect = SparkEngine.collect

    def spying(self, data, elements=True, started=None):
        seen.append(spark.conf.get(key))
        return collect(self, data, elements, started)

    monkeypatch.setattr(SparkEngine, 'collect', spying)
    # Spark's collect is under test: on Spark, not in the driver (``execution.small``).
    options = PipelineOptions([f'--spark_conf={key}=555', '--spark_small_data_kb=0'])
    try:
        with beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options) as p:
            p | beam.Create([1, 2]) | beam.Map(lambda x: x)
        assert seen and set(seen) == {'555'}
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def _shuffle_partitions_seen(spark, monkeypatch, args=()) -> list:
    """``spark.sql.shuffle.partitions`` as each of the runner's queries saw it."""
    key = 'spark.sql.shuffle.partitions'
    seen = []
    from beam_spark_inproc.spark.engine import SparkEngine

    collect = SparkEngine.collect

    def spying(self, data, elements=True, started=None):
        seen.append(spark.conf.get(key, None))
        return collect(self, data, elements, started)

    monkeypatch.setattr(SparkEngine, 'collect', spying)
    with beam.Pipeline(
        runner=InProcessSparkRunner(spark=spark),
        options=PipelineOptions(['--spark_small_data_kb=0', *args]),
    ) as p:
        _ = (
            p
            | beam.Create([('a', 1), ('b', 2), ('a', 3)])
            | beam.GroupByKey()
            | beam.MapTuple(lambda k, vs: (k, sum(vs)))
        )
    return seen


@pytest.fixture
def unset_shuffle_partitions(spark):
    key = 'spark.sql.shuffle.partitions'
    before = spark.conf.get(key, None)
    spark.conf.unset(key)
    yield key
    if before is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, before)


def test_unset_shuffle_partitions_are_the_runs_parallelism(
    spark, monkeypatch, unset_shuffle_partitions
):
    # Spark's default (200) would stay for native stages with adaptive
    # execution off; the run uses its own parallelism, then unsets it again.
    key = unset_shuffle_partitions
    seen = _shuffle_partitions_seen(spark, monkeypatch, ['--spark_parallelism=3'])
    assert seen and set(seen) == {'3'}
    assert spark.conf.get(key, None) is None


def test_shuffle_partitions_the_user_set_are_kept(spark, monkeypatch, unset_shuffle_partitions):
    key = unset_shuffle_partitions
    spark.conf.set(key, '7')
    seen = _shuffle_partitions_seen(spark, monkeypatch, ['--spark_parallelism=3'])
    assert seen and set(seen) == {'7'}
    assert spark.conf.get(key) == '7'


def test_shuffle_partitions_left_alone_with_adaptive_execution_kept(
    spark, monkeypatch, unset_shuffle_partitions
):
    # The user's session has adaptive execution on and --spark_conf keeps it
    # for the run: it coalesces Spark's 200 partitions itself.
    key, adaptive = unset_shuffle_partitions, 'spark.sql.adaptive.enabled'
    before = spark.conf.get(adaptive, None)
    spark.conf.set(adaptive, 'true')
    try:
        seen = _shuffle_partitions_seen(
            spark, monkeypatch, ['--spark_parallelism=3', f'--spark_conf={adaptive}=true']
        )
    finally:
        if before is None:
            spark.conf.unset(adaptive)
        else:
            spark.conf.set(adaptive, before)
    assert seen and set(seen) == {None}
    assert spark.conf.get(key, None) is None
