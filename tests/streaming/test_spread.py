"""A large TestStream micro-batch runs as one task per core
(``--spark_stream_spread_kb``, ``feed.Feed.rows``): the same
panes and state as Beam's BundleBasedDirectRunner, and the stage after the
source ran as that many bundles (one with the option at 0, or with a stateful
DoFn in the pipeline and ``--spark_stream_stateful_whole``); a stateful DoFn
gets each key's elements in the event's order either way; TestStream events
encoded ahead (``prefetch``) are the same rows."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_stream
from apache_beam.transforms import trigger
from apache_beam.transforms import userstate
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from tests.streaming import oracle

# 6,000 elements (~25 bytes each encoded, ~150 KB) in one element event.
BIG = 6000


class _CountBundles(beam.DoFn):
    """Counts the bundles that saw elements, per event time of the first."""

    def start_bundle(self):
        self._seen = 0

    def process(self, element):
        self._seen += 1
        yield element

    def finish_bundle(self):
        if self._seen:
            beam.metrics.Metrics.counter('spread', 'bundles').inc()


def _source(p):
    stream = (
        test_stream.TestStream()
        .add_elements([window.TimestampedValue((f'k{i % 7}', i), i % 3) for i in range(BIG)])
        .advance_watermark_to(2)  # windows [0, 1) and [1, 2) close
        .add_elements([window.TimestampedValue(('k1', -1), 1)])  # late
        .add_elements([window.TimestampedValue(('k8', -2), 0.5)])  # late
        .advance_watermark_to(10)
        .add_elements([window.TimestampedValue(('k2', -3), 1.5)])  # dropped
        .advance_watermark_to_infinity()
    )
    return p | stream | beam.ParDo(_CountBundles())


def windowed_sum(p):
    """Several windows per key, late panes within the allowed lateness, a
    late element past it dropped."""
    return (
        _source(p)
        | beam.WindowInto(
            window.FixedWindows(1),
            trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
            allowed_lateness=5,
            accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
        )
        | beam.CombinePerKey(sum)
    )


class _RunningCount(beam.DoFn):
    """A count per key, and an output for each of the big event's elements
    that comes after a later one of its key (none on the DirectRunner)."""

    COUNT = userstate.ReadModifyWriteStateSpec('count', beam.coders.VarIntCoder())
    LAST = userstate.ReadModifyWriteStateSpec('last', beam.coders.VarIntCoder())

    def process(self, kv, count=beam.DoFn.StateParam(COUNT), last=beam.DoFn.StateParam(LAST)):
        n = (count.read() or 0) + 1
        count.write(n)
        if kv[1] < 0:  # the small events' (a key's order within one is free)
            yield kv[0], n
            return
        if kv[1] < (last.read() or 0):
            yield kv[0], 'out of order'
        last.write(kv[1])


def stateful(p):
    """A count per key in state, across the big micro-batch's two tasks:
    each key's elements in the event's order."""
    return _source(p) | beam.ParDo(_RunningCount())


def bundles(result) -> int:
    [counter] = result.metrics().query(MetricsFilter().with_name('bundles'))['counters']
    return counter.committed


@pytest.mark.parametrize(
    'build, whole, parts',
    [
        (windowed_sum, (), 2),
        (windowed_sum, ('--spark_stream_stateful_whole',), 2),
        (stateful, ('--spark_stream_stateful_whole',), 1),
        (stateful, (), 2),
    ],
    ids=['windowed_sum', 'windowed_sum_whole_flag', 'stateful_whole', 'stateful_spread'],
)
def test_a_large_event_spreads_over_the_cores(build, whole, parts):
    """Spread, also when a stateful DoFn reads the stream, unless
    ``--spark_stream_stateful_whole`` (which leaves a pipeline without a
    stateful DoFn spread); spread or not, a stateful DoFn gets each key's
    elements in the event's order, as on the DirectRunner."""
    expected = oracle.direct(build)
    assert len(expected) >= 3
    results = []
    flags = ('--spark_parallelism', '2', '--spark_stream_spread_kb', '16')
    assert (
        oracle.run(build, InProcessSparkRunner(debug=True), *flags, *whole, results=results)
        == expected
    )
    # The big event as one bundle per part, then the three small ones.
    assert bundles(results[0]) == parts + 3
    assert (
        oracle.run(build, InProcessSparkRunner(debug=True), *flags[:3], '0', results=results)
        == expected
    )
    assert bundles(results[1]) == 1 + 3


@pytest.mark.parametrize('build', [windowed_sum, stateful], ids=['windowed_sum', 'stateful_spread'])
def test_a_large_event_spreads_over_the_cores_on_spark(spark, build):
    results = []
    expected = oracle.direct(build)
    assert (
        oracle.run(
            build,
            InProcessSparkRunner(spark=spark),
            '--spark_parallelism',
            '2',
            '--spark_stream_spread_kb',
            '16',
            results=results,
        )
        == expected
    )
    assert bundles(results[0]) == 2 + 3


def test_a_negative_spread_is_refused():
    p = beam.Pipeline(
        runner=InProcessSparkRunner(debug=True),
        options=beam.options.pipeline_options.PipelineOptions(
            ['--streaming', '--spark_stream_spread_kb', '-1']
        ),
    )
    _ = p | test_stream.TestStream().add_elements([1]) | beam.Map(print)
    with pytest.raises(ValueError, match='--spark_stream_spread_kb must be >= 0'):
        p.run()


def test_prefetched_micro_batches_are_the_same_rows():
    """``TestStreamSource.prefetch`` (on Spark: the next micro-batch encoded
    in a thread while one runs) yields the rows stepping without it yields,
    micro-batch by micro-batch, with the same watermarks and clock; with
    ``make``, the engine data of exactly those rows (``take_made``)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.portability.api import beam_runner_api_pb2
    from apache_beam.runners import pipeline_context

    from beam_spark_inproc.execution.streaming.teststream_source import TestStreamSource
    from beam_spark_inproc.planning import plan as p
    from beam_spark_inproc.planning.planner import plan_pipeline

    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    pipeline = beam.Pipeline(options=options)
    _ = (
        pipeline
        | test_stream.TestStream()
        .add_elements([('a', i) for i in range(3000)])
        .advance_processing_time(5)
        .add_elements([('b', 1)])
        .add_elements([('c', 2)])
        .advance_watermark_to(10)
        .add_elements([('d', 3)])
        .advance_watermark_to_infinity()
        | beam.WindowInto(window.FixedWindows(1))
        | beam.GroupByKey()
    )
    plan = plan_pipeline(pipeline.to_runner_api(), streaming=True)
    [stage] = [s for s in plan.stages if s.kind == p.TEST_STREAM_STAGE]
    context = pipeline_context.PipelineContext(
        beam_runner_api_pb2.Components.FromString(plan.components)
    )
    plain, ahead = (TestStreamSource(stage, context, (2, 1024)) for _ in range(2))
    made = []

    def make(rows):  # the engine data of the next micro-batch's rows
        made.append(list(rows))
        return ('data', len(made) - 1)

    for coalesce, with_data in ((True, False), (False, False), (True, True), (False, True)):
        plain.position = ahead.position = 0
        batches = 0
        ahead.prefetch(coalesce, make if with_data else None)
        while not plain.exhausted:
            rows = ahead.step_micro_batch(coalesce)
            data = ahead.take_made()
            if with_data and rows:  # made from the same rows
                assert data[0] == 'data' and made[data[1]] == rows
            else:
                assert data is None
            ahead.prefetch(coalesce, make if with_data else None)
            assert rows == plain.step_micro_batch(coalesce)
            assert (ahead.position, ahead.clock, ahead.watermarks) == (
                plain.position,
                plain.clock,
                plain.watermarks,
            )
            batches += 1
        assert ahead.exhausted and batches == (5 if coalesce else 6)
    assert ahead._pool is not None  # the rows came from its thread
    ahead.close()
