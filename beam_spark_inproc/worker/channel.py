"""In-process data plane between Arrow rows and a running BundleProcessor.

Inputs are pulled from an iterator of ``Elements.Data`` built lazily from the
partition's Arrow batches; each DATA_OUTPUT transform writes into an
``_OutputStream`` that cuts its bytes into rows as the layout asks and hands them
to a ``BatchBuilder`` — nothing holds a whole bundle.

Outputs bound for a GroupByKey are written by ``PackedOutputOperation`` (the
planner gives their transforms ``PACKED_SINK_URN``) into a ``_PackedStream``:
one row per key holds many of the key's elements, so the shuffle moves and sorts
a row per key and bundle instead of a row per element.

A GroupByKey's input in the global window with the default trigger, in batch
(``plan.PACKED_VALUES``), is written by ``PackedValuesOutputOperation``: its
grouping drops windows, timestamps and panes, so a row holds only the key's
values, as chunks of Beam's iterable encoding (a count, then that many values);
the consumer splices rows into grouped elements without decoding them
(``worker.batch.grouping``). The operation holds the values themselves per key and
encodes each key's held values in one call, so an element costs one Python
call (``process``) and no encoding of its own.
"""

from __future__ import annotations

import functools
from typing import Any
from typing import Callable
from typing import Iterator
from typing import Optional

from apache_beam.coders import coders
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.common import NameContext
from apache_beam.runners.worker import bundle_processor
from apache_beam.runners.worker import data_plane

from beam_spark_inproc.compat import beam as beam_compat
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol.rows import CHUNK_BYTES

# A packed output holds at most this many keys' pending elements, and this
# many bytes of them, before it writes them all out as rows; a key's row is
# written as soon as it reaches PACKED_ROW_BYTES. A row of 64 KB already holds
# thousands of small elements: the JVM's cost per row no longer shows.
PACKED_KEYS = 16384
PACKED_BYTES = 16 << 20
PACKED_ROW_BYTES = 64 << 10
# PACKED_VALUES: keys of these exact types are held by the key object itself
# (equal objects of one of these types have one encoding under any coder);
# others by their encoded bytes.
_PLAIN_KEYS = frozenset([int, str, bytes])
# Held values are encoded (each key's in one call) once they are about
# HOLD_BYTES encoded or HOLD_MAX in number; their size is estimated from one
# value in every HOLD_SAMPLE.
HOLD_BYTES = 1 << 20
HOLD_MAX = 131072
HOLD_SAMPLE = 256


class _OutputStream(data_plane.ClosableOutputStream):
    """Cuts a DATA_OUTPUT's encoded stream into rows of the port's layout."""

    def __init__(self, tag: int, layout: str, add_row, key_of=None):
        super().__init__()
        self._tag = tag
        self._layout = layout
        self._add_row = add_row
        self._key_of = key_of

    def maybe_flush(self) -> None:
        # DataOutputOperation calls this after each element it encodes.
        if self._layout == p.CHUNKS:
            if self.size() >= CHUNK_BYTES:
                self.flush()
        else:
            self.flush()

    def flush(self) -> None:
        if self.size():
            data = self.get()
            self._add_row(self._tag, self._key_of(data) if self._key_of else None, data)
            self._clear()

    def close(self) -> None:
        self.flush()


class _PackedStream(data_plane.ClosableOutputStream):
    """Rows of (key bytes, encoded elements of that key) for a GroupByKey.

    Elements wait per key (``PACKED_KEYS`` keys, ``PACKED_BYTES`` in all, a row
    of ``PACKED_ROW_BYTES`` at most per key, or one element if larger); a row
    carries them in the order they were written. ``encode`` is set by the writing operation (its
    wire coder).
    """

    encode: Callable[[Any, create_OutputStream, bool], None]

    def __init__(self, tag: int, add_row):
        super().__init__()
        self._tag = tag
        self._add_row = add_row
        self._pending: dict[bytes, create_OutputStream] = {}
        self._bytes = 0

    def write_keyed(self, key: bytes, windowed_value) -> None:
        out = self._pending.get(key)
        if out is None:
            if len(self._pending) >= PACKED_KEYS:
                self.flush()
            out = self._pending[key] = create_OutputStream()
        before = out.size()
        self.encode(windowed_value, out, True)
        size = out.size()
        self._bytes += size - before
        if size >= PACKED_ROW_BYTES:
            self._add_row(self._tag, key, out.get())
            del self._pending[key]
            self._bytes -= size
        elif self._bytes >= PACKED_BYTES:
            self.flush()

    def write_values(self, key: bytes, count: int, encoded: bytes) -> None:
        """``count`` values of a key, ``encoded`` by an iterable coder (a
        32-bit count, then the values): added to the key's row as a chunk of
        the iterable's unknown-length encoding (a varint count, the values)."""
        out = self._pending.get(key)
        if out is None:
            if len(self._pending) >= PACKED_KEYS:
                self.flush()
            out = self._pending[key] = create_OutputStream()
        before = out.size()
        out.write_var_int64(count)
        out.write(encoded[4:])
        size = out.size()
        self._bytes += size - before
        if size >= PACKED_ROW_BYTES:
            self._add_row(self._tag, key, out.get())
            del self._pending[key]
            self._bytes -= size
        elif self._bytes >= PACKED_BYTES:
            self.flush()

    def maybe_flush(self) -> None:
        pass

    def flush(self) -> None:
        for key, out in self._pending.items():
            self._add_row(self._tag, key, out.get())
        self._pending = {}
        self._bytes = 0

    def close(self) -> None:
        self.flush()


def key_encoder(wire_key_coder, safe_key_coder) -> Callable[[object], bytes]:
    """The deterministic key bytes of a key object: the bytes ``key_extractor``
    gets by decoding the element with the safe coder (the consumer decodes the
    key from them with it).

    Safe coders replace each length-prefixed coder the runner does not know with
    ``BytesCoder``: nested (as the key is, inside the element) both write the
    same bytes, but in the outer context ``BytesCoder`` drops the length prefix
    (also as the last component of an outer tuple). So: the wire coder's own
    encoding when the two are one coder, the inner coder's for a bare length
    prefix, else the key's nested bytes re-read with the safe coder.
    """
    if wire_key_coder == safe_key_coder:
        return wire_key_coder.get_impl().encode
    if isinstance(wire_key_coder, coders.LengthPrefixCoder) and isinstance(
        safe_key_coder, coders.BytesCoder
    ):
        return wire_key_coder.value_coder().get_impl().encode
    wire, safe = wire_key_coder.get_impl(), safe_key_coder.get_impl()

    def encode(key) -> bytes:
        return safe.encode(safe.decode_nested(wire.encode_nested(key)))

    return encode


class PackedOutputOperation(bundle_processor.DataOutputOperation):
    """A DATA_OUTPUT bound for a GroupByKey: hands each element with its key's
    bytes to the bundle's ``_PackedStream``, without decoding what it encoded."""

    # Beam types these as any Coder and stream; a packed port's are these.
    windowed_coder: coders.WindowedValueCoder
    output_stream: _PackedStream

    def __init__(self, *args, safe_coder, **kwargs):
        super().__init__(*args, **kwargs)
        self._encode_key = key_encoder(
            self.windowed_coder.wrapped_value_coder.key_coder(),
            safe_coder.wrapped_value_coder.key_coder(),
        )

    def set_output_stream(self, output_stream) -> None:
        output_stream.encode = self.windowed_coder_impl.encode_to_stream
        super().set_output_stream(output_stream)

    def process(self, windowed_value) -> None:
        self.output_stream.write_keyed(self._encode_key(windowed_value.value[0]), windowed_value)


class PackedValuesOutputOperation(PackedOutputOperation):
    """A DATA_OUTPUT bound for a GroupByKey that keeps values only
    (``plan.PACKED_VALUES``): holds each key's values and writes them, a key
    at a time, as chunks of the iterable encoding the grouped element holds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        value_coder = self.windowed_coder.wrapped_value_coder.value_coder()
        self._value_impl = value_coder.get_impl()
        self._encode_values = coders.IterableCoder(value_coder).get_impl().encode
        self._held: dict = {}
        self._count = 0
        self._check = HOLD_SAMPLE
        self._estimate = 0

    def set_output_stream(self, output_stream) -> None:
        super().set_output_stream(output_stream)
        self._held, self._count, self._check, self._estimate = {}, 0, HOLD_SAMPLE, 0

    def process(self, windowed_value) -> None:
        key, value = windowed_value.value
        if type(key) not in _PLAIN_KEYS:
            key = (self._encode_key(key),)
        held = self._held.get(key)
        if held is None:
            self._held[key] = [value]
        else:
            held.append(value)
        self._count += 1
        if self._count >= self._check:
            self._sample(value)

    def _sample(self, value) -> None:
        # This value stands for the HOLD_SAMPLE values held since the last one.
        self._estimate += HOLD_SAMPLE * len(self._value_impl.encode_nested(value))
        if self._estimate >= HOLD_BYTES or self._count >= HOLD_MAX:
            self._write_held()
        else:
            self._check = self._count + HOLD_SAMPLE

    def _write_held(self) -> None:
        encode_key, encode_values = self._encode_key, self._encode_values
        write = self.output_stream.write_values
        for key, values in self._held.items():
            write(
                key[0] if type(key) is tuple else encode_key(key),
                len(values),
                encode_values(values),
            )
        self._held, self._count, self._check, self._estimate = {}, 0, HOLD_SAMPLE, 0

    def finish(self) -> None:
        self._write_held()
        super().finish()


def _packed_sink(
    operation_class, factory, transform_id, transform_proto, grpc_port, consumers
) -> PackedOutputOperation:
    # As Beam's own DATA_OUTPUT factory (bundle_processor.create_sink_runner),
    # plus the safe coder the planner named.
    safe_coder = factory.get_coder(transform_proto.annotations[p.SAFE_CODER_ANNOTATION].decode())
    return operation_class(
        NameContext(transform_proto.unique_name, transform_id),
        transform_proto.unique_name,
        consumers,
        factory.counter_factory,
        factory.state_sampler,
        factory.get_coder(grpc_port.coder_id),
        transform_id=transform_id,
        safe_coder=safe_coder,
        **beam_compat.data_channel_argument(factory, grpc_port),
    )


bundle_processor.BeamTransformFactory.register_urn(
    p.PACKED_SINK_URN, beam_fn_api_pb2.RemoteGrpcPort
)(functools.partial(_packed_sink, PackedOutputOperation))
bundle_processor.BeamTransformFactory.register_urn(
    p.PACKED_VALUES_SINK_URN, beam_fn_api_pb2.RemoteGrpcPort
)(functools.partial(_packed_sink, PackedValuesOutputOperation))


class _TimerStream(data_plane.ClosableOutputStream):
    """Hands each timer the SDK sets (or clears) to ``on_timer`` right away."""

    def __init__(self, on_timer: Callable[[bytes], None]):
        super().__init__()
        self._on_timer = on_timer

    def maybe_flush(self) -> None:
        self.flush()

    def flush(self) -> None:
        if self.size():
            self._on_timer(self.get())
            self._clear()

    def close(self) -> None:
        self.flush()


class InProcessDataChannel(data_plane.DataChannel):
    """One bundle's data plane: pulls inputs, pushes output rows and timers."""

    def __init__(
        self,
        inputs: Iterator,
        add_row: Callable[[int, Optional[bytes], bytes], None],
        outputs: dict[str, tuple[int, str, Optional[Callable]]],
        on_timer: Optional[Callable[[str, str, bytes], None]] = None,
    ):
        self._inputs = inputs
        self._add_row = add_row
        self._outputs = outputs
        self._on_timer = on_timer

    def input_elements(self, instruction_id, expected_inputs, abort_callback=None):
        return self._inputs

    def output_stream(self, instruction_id, transform_id):
        tag, layout, key_of = self._outputs[transform_id]
        if layout in (p.PACKED, p.PACKED_VALUES):
            return _PackedStream(tag, self._add_row)
        return _OutputStream(tag, layout, self._add_row, key_of)

    def output_timer_stream(self, instruction_id, transform_id, timer_family_id):
        on_timer = self._on_timer
        if on_timer is None:
            raise NotImplementedError(
                f'Transform {transform_id!r} sets timers ({timer_family_id!r}) '
                'in a stage that was not planned as stateful.'
            )
        return _TimerStream(lambda data: on_timer(transform_id, timer_family_id, data))

    def close(self) -> None:
        pass


class _CurrentChannel(data_plane.DataChannel):
    """The channel of the bundle its factory serves now (``ChannelFactory.current``)."""

    def __init__(self, factory: ChannelFactory):
        self._factory = factory

    def _channel(self) -> InProcessDataChannel:
        channel = self._factory.current
        if channel is None:
            raise RuntimeError('A bundle processor used its data channel outside a bundle.')
        return channel

    def input_elements(self, instruction_id, expected_inputs, abort_callback=None):
        return self._channel().input_elements(instruction_id, expected_inputs, abort_callback)

    def output_stream(self, instruction_id, transform_id):
        return self._channel().output_stream(instruction_id, transform_id)

    def output_timer_stream(self, instruction_id, transform_id, timer_family_id):
        return self._channel().output_timer_stream(instruction_id, transform_id, timer_family_id)

    def close(self) -> None:
        pass


class ChannelFactory(data_plane.DataChannelFactory):
    """Answers every port of a cached BundleProcessor with a channel that
    follows the current bundle's (``current``).

    Depending on the Beam release, the processor asks for its channels once,
    while it is built, or at the start of every bundle
    (``compat.beam.OPERATIONS_TAKE_CHANNEL_FACTORY``); either way one
    processor serves bundle after bundle, each with its own channel.
    """

    def __init__(self):
        self.current: Optional[InProcessDataChannel] = None
        self._channel = _CurrentChannel(self)

    def create_data_channel(self, remote_grpc_port, data_stream_id=None):
        return self._channel

    def create_data_channel_from_url(self, url, data_stream_id=None):
        return self._channel

    def close(self) -> None:
        pass
