"""TestStream elements beside the pipeline proto (``test_stream.elements_aside``):
the runner plans a proto whose element events are empty and the source encodes
the Python events' values. The rows must be those the payload gives
(``TestStreamSource`` over Beam's own ``to_runner_api``), event for event."""

from __future__ import annotations

import contextlib
import sys

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.test_stream import WindowedValueHolder
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfo
from apache_beam.utils.windowed_value import PaneInfoTiming
from apache_beam.utils.windowed_value import WindowedValue

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming import teststream_source as ts
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.planning.planner import plan_pipeline
from tests.streaming import oracle


def _tagged() -> TestStream:
    """Two tags; timestamps below a millisecond, negative ones, the epoch."""
    return (
        TestStream(output_tags=['a', 'b'])
        .add_elements(
            [
                window.TimestampedValue(('x', 1), Timestamp(micros=1500)),
                window.TimestampedValue(('y', 2.5), Timestamp(micros=-2500)),
                ('z', None),
            ],
            tag='a',
        )
        .advance_watermark_to(1, tag='a')
        .add_elements([window.TimestampedValue('s', 3.0004)], tag='b')
        .advance_processing_time(2)
        .add_elements([], tag='b')
        .advance_watermark_to(10, tag='b')
        .add_elements([window.TimestampedValue(('w', [1, 2]), 4)], tag='a')
        .advance_watermark_to_infinity(tag='a')
        .advance_watermark_to_infinity(tag='b')
    )


def _holders() -> TestStream:
    """WindowedValues (Beam's WindowedValueHolder rows) beside plain values."""
    return (
        TestStream()
        .advance_watermark_to(3)
        .add_elements(
            [
                WindowedValueHolder(
                    WindowedValue(
                        'held',
                        Timestamp(micros=5000007),
                        [window.IntervalWindow(0, 10)],
                        PaneInfo(True, False, PaneInfoTiming.EARLY, 0, -1),
                    )
                ),
                'plain',
            ]
        )
        .advance_watermark_to_infinity()
    )


def _floats() -> TestStream:
    """Values through a coder that changes them (ints read back as floats)."""
    return (
        TestStream(coder=coders.FloatCoder())
        .add_elements([1, 2, window.TimestampedValue(3, 7)])
        .advance_watermark_to_infinity()
    )


def _sources(make, same_coder=None):
    """(source over the full payload, source over the aside proto, the
    TestStream) of a pipeline reading ``make()``."""
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    pipeline = beam.Pipeline(options=options)
    stream = make()
    outputs = pipeline | 'Events' >> stream
    for tag, pcoll in outputs.items() if isinstance(outputs, dict) else [(None, outputs)]:
        _ = pcoll | f'Read {tag}' >> beam.Map(lambda x: x)
    events = list(stream._events)
    with ts.elements_aside(pipeline) as values:
        aside = pipeline.to_runner_api()
    assert stream._events == events  # the user's TestStream as it was
    full = pipeline.to_runner_api()
    made = []
    for proto, given in ((full, None), (aside, values['Events'])):
        plan = plan_pipeline(proto, streaming=True)
        [stage] = [s for s in plan.stages if s.kind == p.TEST_STREAM_STAGE]
        context = pipeline_context.PipelineContext(
            beam_runner_api_pb2.Components.FromString(plan.components)
        )
        made.append(ts.TestStreamSource(stage, context, values=given))
    payload = beam_runner_api_pb2.TestStreamPayload.FromString(made[1].stage.descriptor)
    assert not any(e.element_event.elements for e in payload.events)
    if same_coder is not None:
        made[1]._same_coder = [same_coder] * len(made[1]._same_coder)
    return made


@pytest.mark.parametrize('make', [_tagged, _holders, _floats])
@pytest.mark.parametrize('same_coder', [None, False])
def test_aside_rows_are_the_payloads(make, same_coder):
    """Event for event, the same rows, watermarks and clock; ``same_coder``
    False: values through the TestStream's coder first (the path for a port
    whose coder is another one) give them too."""
    full, aside = _sources(make, same_coder)
    steps = 0
    while not full.exhausted:
        assert aside.step() == full.step()
        assert (aside.position, aside.clock, aside.watermarks) == (
            full.position,
            full.clock,
            full.watermarks,
        )
        steps += 1
    assert aside.exhausted and steps == len(full.events) + 1


def _many() -> TestStream:
    """One element event of ten plain values (no ``WindowedValueHolder``,
    whose row would keep its value alive), then one of one."""
    return (
        TestStream()
        .add_elements([window.TimestampedValue(('k', i), i) for i in range(10)])
        .advance_watermark_to(10)
        .add_elements([('k', 10)])
        .advance_watermark_to_infinity()
    )


@pytest.mark.parametrize('same_coder', [None, False])
def test_values_reach_the_encoder_one_at_a_time(same_coder):
    """Each windowed value is garbage once encoded: the encoder gets them one
    at a time on both paths (payload and aside), and holds none it has
    encoded. A list of a whole event's values outlived the driver's young
    collections and, promoted ~20,000 a micro-batch, set off full collections
    of every object of the program inside a stream (docs/performance.md)."""
    for source in _sources(_many, same_coder):
        given, kept = [], []

        def spy(encode, given=given, kept=kept):
            def counted(tag, values):
                def each():
                    probe = object()  # held by this frame alone
                    alone = sys.getrefcount(probe)
                    older = last = None
                    for wv in values:
                        # Nothing but this frame holds the value handed on,
                        given.append(sys.getrefcount(wv) - alone)
                        # nor the one two before it once the encoder asks
                        # for the next (its loop still names the last).
                        if older is not None:
                            kept.append(sys.getrefcount(older) - alone)
                        older, last = last, wv
                        yield wv

                return encode(tag, each())

            return counted

        source._encoders = [spy(e) for e in source._encoders]
        rows = []
        while not source.exhausted:
            rows += source.step()
        assert rows and len(given) == 11 and len(kept) == 8, (given, kept)
        assert set(given) == {0}, given
        assert set(kept) == {0}, kept


def test_events_beside_the_plan_must_match_it():
    """Python events that do not match the payload's are refused (their
    element events would replay empty)."""
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | 'Events' >> _floats() | beam.Map(lambda x: x)
    plan = plan_pipeline(pipeline.to_runner_api(), streaming=True)
    [stage] = [s for s in plan.stages if s.kind == p.TEST_STREAM_STAGE]
    context = pipeline_context.PipelineContext(
        beam_runner_api_pb2.Components.FromString(plan.components)
    )
    with pytest.raises(ValueError, match='1 events beside the payload'):
        ts.TestStreamSource(stage, context, values=[None])


def _two_tags(pipeline):
    outputs = pipeline | _tagged()
    return (
        (outputs['a'], outputs['b'] | beam.Map(lambda v: ('b', v)))
        | beam.Flatten()
        | beam.Map(lambda kv, t=beam.DoFn.TimestampParam: (kv, t.micros))
    )


def test_same_records_as_in_the_proto_and_direct(monkeypatch):
    """End to end on the debug engine: aside (the default), in the proto
    (as a pipeline given as a proto runs), and BundleBasedDirectRunner (whose
    timestamps keep their microseconds: the records compare them at the
    payload's milliseconds)."""
    aside = oracle.run(_two_tags, InProcessSparkRunner(debug=True))

    @contextlib.contextmanager
    def in_the_proto(pipeline):
        yield None

    monkeypatch.setattr(ts, 'elements_aside', in_the_proto)
    in_proto = oracle.run(_two_tags, InProcessSparkRunner(debug=True))
    assert aside == in_proto
    direct = oracle.direct(_two_tags)
    assert [r[1:] for r in aside] == [r[1:] for r in direct]
    assert sorted((r[0][0], r[0][1] // 1000) for r in aside) == sorted(
        (r[0][0], r[0][1] // 1000) for r in direct
    )
