"""TestStream as a source: the driver replays the payload's events as Beam's
BundleBasedDirectRunner does (``direct.test_stream_impl``), one micro-batch at
a time.

A micro-batch takes one event, except: an element event takes the watermark
event right after it along (its elements are judged against the watermark
before it either way, and the same bundle fires the same panes); and where
the pipeline cannot tell bundles apart (``coalesce_elements``: no GroupByKey
trigger that counts elements or fires late panes, no stateful DoFn), a run of
element events is one micro-batch, as the input available since the last
micro-batch is on a real clock.

* an element event becomes rows of the TestStream stage's output port for its
  tag, encoded as that port's consumers read them (``plan`` layouts);
* a watermark event moves the watermark of its tag's output;
* a processing-time event advances the virtual clock (Beam's ``TestClock``,
  which starts at 0).

After the last event every output's watermark goes to +inf.
"""
from __future__ import annotations

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.testing import test_stream
from apache_beam.transforms import trigger
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils import windowed_value
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.worker.channel import key_extractor

_GLOBAL = (GlobalWindow(),)


class TestStreamSource:
    """The events of one TestStream stage, replayed in order."""

    __test__ = False  # not a pytest class

    def __init__(self, stage: p.StagePlan, context):
        payload = beam_runner_api_pb2.TestStreamPayload.FromString(stage.descriptor)
        self._coder = context.coders[payload.coder_id]
        self.stage = stage
        # The payload's events, decoded one at a time as they are replayed
        # (Beam's ``Event.from_runner_api`` builds a TimestampedValue and a
        # Timestamp per element up front).
        self.events = list(payload.events)
        self.position = 0
        self.clock = 0.0  # seconds, as TestClock.time()
        self.watermarks = {tag: MIN_TIMESTAMP for tag in stage.output_tags}
        self._encoders = [_encoder(port, context) for port in stage.outputs]

    @property
    def exhausted(self) -> bool:
        return self.position > len(self.events)

    def checkpoint(self) -> dict:
        """Where the replay stands (``restart.ReplayableSource``)."""
        return {'position': self.position, 'clock': self.clock,
                'watermarks': {t: w.micros for t, w in self.watermarks.items()}}

    def restore(self, record: dict) -> None:
        self.position = record['position']
        self.clock = float(record['clock'])
        self.watermarks = {t: Timestamp(micros=w)
                           for t, w in record['watermarks'].items()}

    def watermark(self, port: int) -> Timestamp:
        return self.watermarks[self.stage.output_tags[port]]

    def step_micro_batch(self, coalesce_elements: bool = False
                         ) -> list[tuple[int, bytes | None, bytes]]:
        """Applies the events of the next micro-batch (see the module doc);
        returns the rows they add."""
        def next_is(kind: str) -> bool:
            return (self.position < len(self.events)
                    and self.events[self.position].HasField(kind))

        first_is_elements = next_is('element_event')
        rows = self.step()
        if not first_is_elements:
            return rows
        taken = 1
        while (coalesce_elements and taken < MAX_COALESCED_EVENTS
               and next_is('element_event')):
            rows += self.step()
            taken += 1
        if next_is('watermark_event'):
            rows += self.step()
        return rows

    def step(self) -> list[tuple[int, bytes | None, bytes]]:
        """Applies the next event; returns the rows it adds (tag = port)."""
        if self.position == len(self.events):
            self.position += 1
            for tag in self.watermarks:
                self.watermarks[tag] = MAX_TIMESTAMP
            return []
        event = self.events[self.position]
        self.position += 1
        if event.HasField('element_event'):
            tag = event.element_event.tag  # Beam writes 'None' for no tag
            if tag not in self.stage.output_tags:
                return []
            port = self.stage.output_tags.index(tag)
            decode, values = self._coder.decode, []
            for element in event.element_event.elements:
                value = decode(element.encoded_element)
                if isinstance(value, test_stream.WindowedValueHolder):
                    values.append(value.windowed_value)
                else:  # as GlobalWindows.windowed_value, without a Timestamp
                    values.append(windowed_value.create(
                        value, 1000 * element.timestamp, _GLOBAL))
            return self._encoders[port](port, values)
        if event.HasField('watermark_event'):
            tag = event.watermark_event.tag
            if tag in self.watermarks:
                self.watermarks[tag] = max(
                    self.watermarks[tag],
                    Timestamp(micros=1000 * event.watermark_event.new_watermark))
            return []
        if event.HasField('processing_time_event'):
            self.clock += event.processing_time_event.advance_duration / 1000
            return []
        raise ValueError(f'TestStream {self.stage.labels[0]!r}: unknown event '
                         f'{event.WhichOneof("event")!r}')


# Element events one micro-batch takes at most (so a long TestStream still
# commits, and can be cancelled, as it goes).
MAX_COALESCED_EVENTS = 1000


def bundles_invisible(plan: p.SparkPlan, context) -> bool:
    """Whether the pipeline's output cannot depend on how TestStream element
    events are cut into bundles: every GroupByKey fires on the watermark only
    (Beam's default trigger or AfterWatermark without early or late firings)
    with no allowed lateness (a late element would fire a pane per bundle), and
    no stateful DoFn (it sees the order of a key's elements)."""
    for stage in plan.stages:
        if stage.stateful:
            return False
        for port in stage.inputs:
            if port.grouping is None:
                continue
            windowing = context.windowing_strategies[
                port.grouping.windowing_strategy_id]
            fn = windowing.triggerfn
            if windowing.allowed_lateness != 0:
                return False
            if isinstance(fn, trigger.DefaultTrigger):
                continue
            if isinstance(fn, trigger.AfterWatermark) and not fn.early \
                    and not fn.late:
                continue
            return False
    return True


def _encoder(port: p.OutputPort, context):
    impl = context.coders[port.coder_id].get_impl()
    key_of = None
    if port.layout in (p.PACKED, p.KEYED):
        safe = context.coders[port.key_coder_id]
        key_of = key_extractor(safe, safe.key_coder())

    def encode(tag: int, values: list) -> list:
        if port.layout == p.CHUNKS:
            out = create_OutputStream()
            for wv in values:
                impl.encode_to_stream(wv, out, True)
            return [(tag, None, out.get())] if values else []
        rows = []
        for wv in values:
            out = create_OutputStream()
            impl.encode_to_stream(wv, out, True)
            data = out.get()
            rows.append((tag, key_of(data) if key_of else None, data))
        return rows

    return encode
