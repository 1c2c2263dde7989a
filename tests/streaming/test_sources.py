"""Sources of a stream (debug engine): unbounded splittable DoFns whose
``defer_remainder`` residuals re-run on the same stage after their delay with
their watermark estimator holding the stage, PeriodicImpulse, several
TestStreams, bounded reads inside a stream."""

from __future__ import annotations

import time

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.utils.timestamp import Duration
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming.result import StreamingPipelineResult
from tests.streaming import oracle

_TOTAL = 12


class Ticks(beam.DoFn, beam.transforms.core.RestrictionProvider):
    """An unbounded source: emits tick i (``keys``: ``('k<i % keys>', i)``)
    at event time i for i below ``total``, ``per_bundle`` per bundle, then
    moves its watermark to the next tick and asks to resume in 10 ms. Its own
    restriction provider: the tick range."""

    def __init__(self, total: int = _TOTAL, per_bundle: int = 3, keys: int = 0):
        self._total, self._per_bundle, self._keys = total, per_bundle, keys

    def initial_restriction(self, element):
        return OffsetRange(0, self._total)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element,
        tracker=beam.DoFn.RestrictionParam(),
        estimator=beam.DoFn.WatermarkEstimatorParam(ManualWatermarkEstimator.default_provider()),
    ):
        position = tracker.current_restriction().start
        end = position + self._per_bundle
        for i in range(position, min(end, self._total)):
            if not tracker.try_claim(i):
                return
            yield window.TimestampedValue((f'k{i % self._keys}', i) if self._keys else i, i)
        estimator.set_watermark(Timestamp(end))
        if end < self._total:
            tracker.defer_remainder(Duration.of(0.01))


def _ticks(p):
    return (
        p
        | beam.Impulse()
        | beam.ParDo(Ticks())
        | beam.Map(lambda i: ('k', i))
        | beam.WindowInto(window.FixedWindows(4))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: sorted(vs))
    )


def test_unbounded_sdf_residuals_rerun_and_hold_the_watermark():
    """By hand: every tick in its window, each window one ON_TIME pane. The
    source stage's output watermark follows the estimator of its pending
    residual: without that hold the GroupByKey's windows would close after the
    first bundle and the later ticks be dropped as late."""
    records = oracle.run(_ticks, InProcessSparkRunner(debug=True))
    assert [(r[0], r[3]) for r in records] == [
        ([0, 1, 2, 3], 1),
        ([4, 5, 6, 7], 1),
        ([8, 9, 10, 11], 1),
    ]


def _two_test_streams(p):
    first = p | 'First' >> TestStream().add_elements(
        [window.TimestampedValue(('a', 1), 1)]
    ).advance_watermark_to(12).add_elements([window.TimestampedValue(('a', 2), 14)])
    second = p | 'Second' >> TestStream().advance_watermark_to(5).add_elements(
        [window.TimestampedValue(('a', 3), 6), window.TimestampedValue(('b', 4), 7)]
    )
    return (
        (first, second)
        | beam.Flatten()
        | beam.WindowInto(window.FixedWindows(10))
        | beam.GroupByKey()
    )


def test_several_test_streams():
    """By hand from Beam's model: the Flatten's watermark is the minimum of
    both TestStreams', so ('a', 2) at 14 is on time. (BundleBasedDirectRunner
    loses the first TestStream's elements here: it outputs the second's only.)"""
    records = oracle.run(_two_test_streams, InProcessSparkRunner(debug=True))
    assert [(r[0], r[1], r[3]) for r in records] == [
        (('a', (1, 3)), '[0.0, 10.0)', 1),
        (('a', (2,)), '[10.0, 20.0)', 1),
        (('b', (4,)), '[0.0, 10.0)', 1),
    ]


def _bounded_read(path):
    def build(p):
        stream = p | TestStream().advance_watermark_to(3).add_elements(
            [window.TimestampedValue('x', 5)]
        )
        lines = p | beam.io.ReadFromText(path)
        return stream | beam.Map(lambda x, ls: (x, sorted(ls)), beam.pvalue.AsList(lines))

    return build


def test_bounded_read_inside_a_stream(tmp_path):
    path = tmp_path / 'lines.txt'
    path.write_text('one\ntwo\nthree\n')
    # By hand (BundleBasedDirectRunner cannot run ReadFromText's splittable
    # DoFn: "was not replaced as expected").
    records = oracle.run(_bounded_read(str(path)), InProcessSparkRunner(debug=True))
    assert [(r[0], r[2]) for r in records] == [(('x', ('one', 'three', 'two')), Timestamp(5))]


class _Record(beam.DoFn):
    SEEN: list = []  # (window start, count)

    def process(self, element, win=beam.DoFn.WindowParam):
        _Record.SEEN.append((win.start, element[1]))


def test_periodic_impulse_runs_as_a_stream_until_cancelled():
    """Beam's PeriodicImpulse (an unbounded splittable DoFn): elements at
    start + i * interval on the wall clock, counted per one-second window,
    until the pipeline is cancelled."""
    _Record.SEEN.clear()
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=PipelineOptions())
    start = time.time()
    _ = (
        p
        | PeriodicImpulse(start_timestamp=start, fire_interval=0.2)
        | beam.Map(lambda t: ('tick', t))
        | beam.WindowInto(window.FixedWindows(1))
        | beam.combiners.Count.PerKey()
        | beam.ParDo(_Record())
    )
    result = p.run()
    assert isinstance(result, StreamingPipelineResult)
    assert result.wait_until_finish(3000) == PipelineState.RUNNING
    result.cancel()
    assert result.wait_until_finish() == PipelineState.CANCELLED
    counts = [count for _, count in sorted(_Record.SEEN)]
    # About 3 s at 5 per second; windows come out once the watermark passed
    # them, each whole (5) but the first (cut by the start).
    assert counts, 'no window closed in 3 s'
    assert 1 <= counts[0] <= 5 and all(c == 5 for c in counts[1:]), counts
