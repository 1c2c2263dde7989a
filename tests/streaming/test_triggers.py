"""GroupByKey with windows and triggers across micro-batches, against Beam's
BundleBasedDirectRunner on the same TestStream (debug engine)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from tests.streaming import oracle


def _timestamped(p, stream):
    return p | stream | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))


def fixed_default(p):
    stream = (
        TestStream()
        .add_elements([('a', 1), ('b', 2)])
        .advance_watermark_to(5)
        .add_elements([('a', 3)])
        .advance_watermark_to(20)
        .add_elements([('b', 4)])  # late: dropped
        .add_elements([('a', 21)])
        .advance_watermark_to_infinity()
    )
    return _timestamped(p, stream) | beam.WindowInto(window.FixedWindows(10)) | beam.GroupByKey()


def early_late_accumulating(p):
    stream = (
        TestStream()
        .add_elements([('k', 1), ('k', 2)])
        .advance_watermark_to(3)
        .add_elements([('k', 3)])
        .advance_watermark_to(12)
        .add_elements([('k', 4)])  # late, within allowed lateness
        .advance_watermark_to(30)
        .add_elements([('k', 5)])  # past allowed lateness: dropped
        .advance_watermark_to_infinity()
    )
    return (
        _timestamped(p, stream)
        | beam.WindowInto(
            window.FixedWindows(10),
            trigger=trigger.AfterWatermark(early=trigger.AfterCount(2), late=trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
            allowed_lateness=10,
        )
        | beam.GroupByKey()
    )


def processing_time_discarding(p):
    stream = (
        TestStream()
        .add_elements([('k', 1)])
        .advance_processing_time(5)
        .add_elements([('k', 2)])
        .advance_processing_time(6)  # fires the first pane
        .add_elements([('k', 3)])
        .advance_processing_time(11)  # fires the second pane
        .advance_watermark_to_infinity()
    )
    return (
        _timestamped(p, stream)
        | beam.WindowInto(
            window.GlobalWindows(),
            trigger=trigger.Repeatedly(trigger.AfterProcessingTime(10)),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        | beam.GroupByKey()
    )


def sessions(p):
    stream = (
        TestStream()
        .add_elements([('a', 1), ('a', 3), ('b', 2)])
        .advance_watermark_to(4)
        .add_elements([('a', 6), ('b', 30)])
        .advance_watermark_to(20)
        .add_elements([('a', 40), ('a', 41), ('a', 42)])
        .advance_watermark_to_infinity()
    )
    return _timestamped(p, stream) | beam.WindowInto(window.Sessions(5)) | beam.GroupByKey()


def two_groupings(p):
    """A pane of the first GroupByKey reaches the second in the same
    micro-batch as the watermark that fired it (a cascade)."""
    stream = (
        TestStream()
        .add_elements([('a', 1), ('b', 2), ('a', 12)])
        .advance_watermark_to(15)
        .add_elements([('b', 16)])
        .advance_watermark_to_infinity()
    )
    return (
        _timestamped(p, stream)
        | beam.WindowInto(window.FixedWindows(10))
        | 'First' >> beam.GroupByKey()
        | beam.Map(lambda kv: ('all', len(kv[1])))
        | 'Second' >> beam.GroupByKey()
    )


def combine_per_key(p):
    stream = (
        TestStream()
        .add_elements([('a', 1), ('a', 2)])
        .advance_watermark_to(10)
        .add_elements([('a', 13)])
        .advance_watermark_to_infinity()
    )
    return (
        _timestamped(p, stream)
        | beam.WindowInto(
            window.FixedWindows(10),
            trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
        )
        | beam.CombinePerKey(sum)
    )


def leaf_grouping_beside_a_cascade(p):
    """Two branches of two GroupByKeys each. When the first branch's second
    grouping (its stage a leaf: it only counts its panes in a counter) is
    built before the second branch's first grouping, which the second
    branch's second grouping then waits for, one job runs both, and the
    micro-batch's last job, which runs the leaves, must not run the first
    branch's leaf again (before the fix the counter doubled: on Spark the
    leaf ran twice, on the debug engine its reports were taken twice). That
    order is one of those Beam's fusion gives by set iteration (the hash
    seed); ``test_on_spark`` forces it."""
    stream = (
        TestStream().add_elements([('a', 1), ('b', 2), ('a', 12)]).advance_watermark_to_infinity()
    )
    events = _timestamped(p, stream) | beam.WindowInto(window.FixedWindows(100))
    _ = (
        events
        | 'Leaf first' >> beam.GroupByKey()
        | 'Leaf map' >> beam.Map(lambda kv: ('all', len(kv[1])))
        | 'Leaf second' >> beam.GroupByKey()
        | beam.Map(lambda kv: beam.metrics.Metrics.counter('leaf', 'panes').inc())
    )
    return (
        events
        | 'First' >> beam.GroupByKey()
        | beam.Map(lambda kv: ('all', len(kv[1])))
        | 'Z' >> beam.GroupByKey()
    )


PIPELINES = [
    fixed_default,
    early_late_accumulating,
    processing_time_discarding,
    sessions,
    two_groupings,
    combine_per_key,
    leaf_grouping_beside_a_cascade,
]


@pytest.mark.parametrize('build', PIPELINES, ids=lambda b: b.__name__)
def test_same_panes_as_direct_runner(build):
    expected = oracle.direct(build)
    assert expected, 'the oracle produced nothing: the test would prove nothing'
    assert oracle.run(build, InProcessSparkRunner(debug=True)) == expected


class BufferUntilTimer(beam.DoFn):
    """Buffers a key's values in a bag; an event-time timer at the end of each
    element's ten-second slot emits and clears the bag (state and timers
    across micro-batches)."""

    BUFFER = beam.transforms.userstate.BagStateSpec('buffer', beam.coders.VarIntCoder())
    FLUSH = beam.transforms.userstate.TimerSpec(
        'flush', beam.transforms.userstate.TimeDomain.WATERMARK
    )

    def process(
        self,
        element,
        timestamp=beam.DoFn.TimestampParam,
        buffer=beam.DoFn.StateParam(BUFFER),
        flush=beam.DoFn.TimerParam(FLUSH),
    ):
        buffer.add(element[1])
        flush.set((timestamp.micros // 10_000_000 + 1) * 10)

    @beam.transforms.userstate.on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
        self._before_flush(key)
        values = sorted(buffer.read())
        buffer.clear()
        yield key, values

    def _before_flush(self, key) -> None:
        """A subclass's hook (Beam refuses a subclass overriding ``on_flush``)."""


def stateful_timers(p):
    stream = (
        TestStream()
        .add_elements([('a', 1), ('b', 2)])
        .advance_watermark_to(5)
        .add_elements([('a', 3)])
        .advance_watermark_to(11)
        .add_elements([('a', 12), ('b', 13)])
        .advance_watermark_to(25)
        .add_elements([('b', 26)])
        .advance_watermark_to_infinity()
    )
    return _timestamped(p, stream) | beam.ParDo(BufferUntilTimer())


def stateful_then_grouped(p):
    """A stateful DoFn's timer output holds the watermark of the GroupByKey
    after it until the timer fired."""
    return (
        stateful_timers(p)
        | beam.WindowInto(window.FixedWindows(100))
        | beam.Map(lambda kv: ('all', len(kv[1])))
        | beam.GroupByKey()
    )


def test_stateful_dofn_same_as_direct_runner():
    expected = oracle.direct(stateful_timers)
    assert len(expected) == 5
    assert oracle.run(stateful_timers, InProcessSparkRunner(debug=True)) == expected


def test_timer_output_timestamp_holds_the_next_stage():
    """Computed by hand from Beam's model: five flushes (a:[1,3] and b:[2] at
    10, a:[12] and b:[13] at 20, b:[26] at 30) in one on-time pane of
    [0, 100). The flush at 30 fires only at +inf; its pending timer holds the
    stateful stage's output watermark at 30 until then, so the GroupByKey after
    it waits for it. (BundleBasedDirectRunner loses that output: its pane has
    four counts.)"""
    ON_TIME = 1
    assert oracle.run(stateful_then_grouped, InProcessSparkRunner(debug=True)) == [
        (
            ('all', (1, 1, 1, 1, 2)),
            '[0.0, 100.0)',
            window.GlobalWindow().max_timestamp().__class__(micros=99_999_000),
            ON_TIME,
            0,
            True,
            False,
        )
    ]


def flatten_bounded_and_stream(p):
    """A bounded Create (its impulse in the first micro-batch, then +inf) and
    a TestStream flattened into one GroupByKey: the stream's watermark rules."""
    stream = (
        TestStream()
        .add_elements([('a', 1)])
        .advance_watermark_to(15)
        .add_elements([('a', 16)])
        .advance_watermark_to_infinity()
    )
    bounded = p | beam.Create([('a', 2), ('b', 17)])
    return (
        (
            _timestamped(p, stream),
            bounded | 'Stamp' >> beam.Map(lambda kv: window.TimestampedValue(kv, kv[1])),
        )
        | beam.Flatten()
        | beam.WindowInto(window.FixedWindows(10))
        | beam.GroupByKey()
    )


def test_flatten_of_bounded_and_stream_same_as_direct_runner():
    expected = oracle.direct(flatten_bounded_and_stream)
    assert expected
    assert oracle.run(flatten_bounded_and_stream, InProcessSparkRunner(debug=True)) == expected
