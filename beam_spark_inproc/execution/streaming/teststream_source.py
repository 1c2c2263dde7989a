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

**Elements beside the proto** (``elements_aside``): when the runner is given
the Python pipeline, its TestStreams' element events go into the pipeline
proto empty (same positions and tags) and the source takes their values from
the Python events. Beam's ``ElementEvent.to_runner_api`` builds a proto
message and encodes the value per element before the first micro-batch can
start (1.3-1.7 s for 400,000 elements on this machine), and the source then
decoded every element again; now each element is encoded once, as the rows
of its port, a micro-batch at a time (in the prefetch thread on Spark).
Values go through the TestStream's coder first when the port's coder is
another one (``decode(encode(value))``, as the proto did), and timestamps are
cut to milliseconds as the proto's are: the rows are those the payload gave.
A proto pipeline (``run_portable_pipeline``) keeps its elements in the
payload.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from typing import Any
from typing import Callable
from typing import Iterable
from typing import Iterator

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.coders.coders import LengthPrefixCoder
from apache_beam.pipeline import PipelineVisitor
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.pvalue import Row
from apache_beam.testing import test_stream
from apache_beam.transforms import trigger
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils import windowed_value
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol.rows import key_extractor

_GLOBAL = (GlobalWindow(),)


@contextlib.contextmanager
def elements_aside(pipeline) -> Iterator[dict[str, list] | None]:
    """While in the block, the pipeline's TestStreams have empty element
    events (their tags kept) for ``to_runner_api``; yields {TestStream's full
    label: its events}, the values the source replays (module doc)."""
    found: dict[str, list] = {}
    originals = []

    class _Visitor(PipelineVisitor):
        def enter_composite_transform(self, node):
            self.visit_transform(node)

        def visit_transform(self, node):
            transform = node.transform
            if isinstance(transform, test_stream.TestStream) and isinstance(
                getattr(transform, '_events', None), list
            ):
                events = transform._events
                found[node.full_label] = events
                originals.append((transform, events))
                transform._events = [
                    test_stream.ElementEvent([], e.tag)
                    if isinstance(e, test_stream.ElementEvent)
                    else e
                    for e in events
                ]

    try:
        pipeline.visit(_Visitor())
        yield found
    finally:
        for transform, events in originals:
            transform._events = events


class TestStreamSource:
    """The events of one TestStream stage, replayed in order: a
    ``source.StreamSource``."""

    __test__ = False  # not a pytest class

    def __init__(
        self,
        stage: p.StagePlan,
        context,
        spread: tuple[int, int] = (1, 0),
        values: list | None = None,
    ):
        payload = beam_runner_api_pb2.TestStreamPayload.FromString(stage.descriptor)
        self._coder = context.coders[payload.coder_id]
        self.stage = stage
        # The payload's events, decoded one at a time as they are replayed
        # (Beam's ``Event.from_runner_api`` builds a TimestampedValue and a
        # Timestamp per element up front).
        self.events = list(payload.events)
        # The Python events whose element events the payload holds empty
        # (``elements_aside``), position for position; None: the payload's.
        if values is not None and len(values) != len(self.events):
            raise ValueError(
                f'TestStream {stage.labels[0]!r}: {len(values)} events beside '
                f"the payload's {len(self.events)}"
            )
        self._values = values
        # Per port: whether its coder is the TestStream's (else a value goes
        # through the TestStream's coder first, as through the payload).
        self._same_coder = [
            _value_coder(context.coders[port.coder_id]) == self._coder for port in stage.outputs
        ]
        self.position = 0
        self.clock = 0.0  # seconds, as TestClock.time()
        self.watermarks = {tag: MIN_TIMESTAMP for tag in stage.output_tags}
        self._encoders = [_encoder(port, context, spread) for port in stage.outputs]
        # position -> future rows of that element event (``prefetch``).
        self._prefetched: dict[int, concurrent.futures.Future] = {}
        # (positions, future (rows, engine data)) of the next micro-batch's
        # element events made ahead (``prefetch(make=...)``), and the one
        # the last ``step_micro_batch`` took (``take_made``).
        self._made: tuple[tuple[int, ...], concurrent.futures.Future] | None = None
        self._taken_made: concurrent.futures.Future | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def exhausted(self) -> bool:
        return self.position > len(self.events)

    def checkpoint(self) -> dict:
        """Where the replay stands (``source.StreamSource``)."""
        return {
            'position': self.position,
            'clock': self.clock,
            'watermarks': {t: w.micros for t, w in self.watermarks.items()},
        }

    def describe_position(self) -> str:
        """Where the replay stands, for a person (``restart.describe``)."""
        if self.exhausted:
            return f'all {len(self.events)} events read'
        return f'event {min(self.position, len(self.events))} of {len(self.events)}'

    def restore(self, record: dict) -> None:
        self._prefetched.clear()
        self._made = self._taken_made = None
        self.position = record['position']
        self.clock = float(record['clock'])
        self.watermarks = {t: Timestamp(micros=w) for t, w in record['watermarks'].items()}

    def watermark(self, port: int) -> Timestamp:
        return self.watermarks[self.stage.output_tags[port]]

    def drain(self) -> None:
        """Stops at the current position: the events not replayed yet are
        dropped, the next step moves every watermark to +inf (``drain``)."""
        self._prefetched.clear()
        self._made = self._taken_made = None
        self.position = max(self.position, len(self.events))

    def _next_is(self, position: int, kind: str) -> bool:
        return position < len(self.events) and self.events[position].HasField(kind)

    def _element_events(self, coalesce_elements: bool) -> list[int]:
        """The positions of the element events the next micro-batch takes."""
        position = self.position
        taken: list[int] = []
        while self._next_is(position, 'element_event') and (
            not taken or (coalesce_elements and len(taken) < MAX_COALESCED_EVENTS)
        ):
            taken.append(position)
            position += 1
        return taken

    def step_micro_batch(
        self, coalesce_elements: bool = False
    ) -> list[tuple[int, bytes | None, bytes]]:
        """Applies the events of the next micro-batch (see the module doc);
        returns the rows they add."""
        taken = self._element_events(coalesce_elements)
        made, self._made = self._made, None
        self._taken_made = made[1] if made and made[0] == tuple(taken) else None
        if not taken:
            return self.step()
        rows = []
        for _ in taken:
            rows += self.step()
        if self._next_is(self.position, 'watermark_event'):
            rows += self.step()
        return rows

    def take_made(self) -> Any:
        """The engine data of the rows the last ``step_micro_batch`` returned,
        if ``prefetch`` made it (else None: the caller makes it)."""
        made, self._taken_made = self._taken_made, None
        if made is None:
            return None
        result = made.result()
        return None if result is None else result[1]

    def prefetch(
        self, coalesce_elements: bool = False, make: Callable[[list], Any] | None = None
    ) -> None:
        """Starts encoding the element events the next micro-batch takes, in
        a driver thread, while this one's Spark job runs (the driver mostly
        waits for it then): encoding the elements as the stage's rows costs
        ~1.5-5 us an element, off the micro-batch's path. ``step`` takes the
        rows (and any error) from there. ``make``: the rows of the next
        micro-batch as engine data, made in the same thread (``take_made``;
        on Spark a DataFrame, ~60 ms of Py4J calls a micro-batch)."""
        positions = self._element_events(coalesce_elements)
        if not positions:
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix='beam-test-stream'
            )
        for position in positions:
            if position not in self._prefetched:
                self._prefetched[position] = self._pool.submit(self._element_rows, position)
        if make is not None and (self._made is None or self._made[0] != tuple(positions)):
            futures = [self._prefetched[position] for position in positions]
            self._made = tuple(positions), self._pool.submit(_make_rows, futures, make)

    def close(self) -> None:
        self._prefetched.clear()
        self._made = self._taken_made = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

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
            future = self._prefetched.pop(self.position - 1, None)
            if future is not None:
                return future.result()
            return self._element_rows(self.position - 1)
        if event.HasField('watermark_event'):
            tag = event.watermark_event.tag
            if tag in self.watermarks:
                self.watermarks[tag] = max(
                    self.watermarks[tag],
                    Timestamp(micros=1000 * event.watermark_event.new_watermark),
                )
            return []
        if event.HasField('processing_time_event'):
            self.clock += event.processing_time_event.advance_duration / 1000
            return []
        raise ValueError(
            f'TestStream {self.stage.labels[0]!r}: unknown event {event.WhichOneof("event")!r}'
        )

    def _element_rows(self, position: int) -> list[tuple[int, bytes | None, bytes]]:
        """The rows of the element event at ``position`` (tag = port); none
        for an unknown tag."""
        element_event = self.events[position].element_event
        tag = element_event.tag  # Beam writes 'None' for no tag
        if tag not in self.stage.output_tags:
            return []
        port = self.stage.output_tags.index(tag)
        if self._values is not None:
            return self._encoders[port](port, self._python_values(self._values[position], port))
        return self._encoders[port](port, self._proto_values(element_event))

    # Both make an event's windowed values one at a time for the encoder: each
    # is garbage as soon as it is encoded. A list of them lived through the
    # young collections of the whole event and was promoted to the oldest
    # generation, ~20,000 objects a micro-batch, enough to set off a full
    # collection of the driver (all of the program's objects, the TestStream's
    # own elements among them, ~0.3 s holding the GIL) once or twice in a
    # stream of 20 such micro-batches (docs/performance.md).

    def _proto_values(self, element_event) -> Iterator:
        """An element event's windowed values from the payload."""
        # The coder's impl at once (``Coder.decode`` looks it up per element);
        # Beam's holder check (a metaclass ``__instancecheck__``, ~1 us) only
        # for Rows, which it requires.
        decode = self._coder.get_impl().decode
        create = windowed_value.create
        for element in element_event.elements:
            value = decode(element.encoded_element)
            if isinstance(value, Row) and isinstance(value, test_stream.WindowedValueHolder):
                # A Row's fields are attributes mypy does not see.
                yield value.windowed_value  # type: ignore[attr-defined]
            else:  # as GlobalWindows.windowed_value, without a Timestamp
                yield create(value, 1000 * element.timestamp, _GLOBAL)

    def _python_values(self, event, port: int) -> Iterator:
        """An element event's windowed values from its Python event, as the
        payload would have given them (module doc)."""
        create = windowed_value.create
        coder = None
        if not self._same_coder[port]:
            impl = self._coder.get_impl()
            coder = impl.decode, impl.encode
        for tv in event.timestamped_values:
            value = tv.value
            if coder is not None:
                value = coder[0](coder[1](value))
            if isinstance(value, Row) and isinstance(value, test_stream.WindowedValueHolder):
                yield value.windowed_value  # type: ignore[attr-defined]  # a Row's field
            else:  # the payload's milliseconds
                yield create(value, tv.timestamp.micros // 1000 * 1000, _GLOBAL)


def _value_coder(coder):
    """A port's windowed coder's value coder, without a length prefix (which
    frames a value and decodes it as the coder inside does)."""
    value = getattr(coder, 'wrapped_value_coder', None)
    if isinstance(value, LengthPrefixCoder):
        value = value.value_coder()
    return value


def _make_rows(futures: list, make: Callable[[list], Any]) -> tuple | None:
    """(rows, their engine data) of element events encoded ahead, in the
    order ``step_micro_batch`` returns them (None: no rows)."""
    rows = []
    for future in futures:
        rows += future.result()
    return (rows, make(rows)) if rows else None


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
            windowing = context.windowing_strategies[port.grouping.windowing_strategy_id]
            fn = windowing.triggerfn
            if windowing.allowed_lateness != 0:
                return False
            if isinstance(fn, trigger.DefaultTrigger):
                continue
            if isinstance(fn, trigger.AfterWatermark) and not fn.early and not fn.late:
                continue
            return False
    return True


def _encoder(port: p.OutputPort, context, spread: tuple[int, int] = (1, 0)):
    """An element event's values as rows of ``port``'s layout. A CHUNKS row
    holds the event's elements; ``spread`` = (parts, bytes): an event of at
    least ``bytes`` is cut into ``parts`` rows of consecutive elements (the
    loop spreads them over as many partitions: one task per core)."""
    impl = context.coders[port.coder_id].get_impl()
    parts, min_bytes = spread
    key_of = None
    if port.layout in (p.PACKED, p.KEYED_ELEMENTS):
        safe = context.coders[port.key_coder_id]
        key_of = key_extractor(safe, safe.key_coder())

    def encode(tag: int, values: Iterable) -> list:
        if port.layout == p.CHUNKS:
            out, ends = create_OutputStream(), []
            for wv in values:
                impl.encode_to_stream(wv, out, True)
                ends.append(out.size())
            if not ends:
                return []
            data = out.get()
            if parts < 2 or not min_bytes or len(data) < min_bytes:
                return [(tag, None, data)]
            n = len(ends)
            cuts = (
                [0]
                + [ends[n * i // parts - 1] for i in range(1, parts) if n * i // parts]
                + [len(data)]
            )
            return [(tag, None, data[a:b]) for a, b in zip(cuts, cuts[1:]) if b > a]
        rows = []
        for wv in values:
            out = create_OutputStream()
            impl.encode_to_stream(wv, out, True)
            data = out.get()
            rows.append((tag, key_of(data) if key_of else None, data))
        return rows

    return encode
