"""In-process data plane between Arrow rows and a running BundleProcessor.

Inputs are pulled from an iterator of ``Elements.Data`` built lazily from the
partition's Arrow batches; each DATA_OUTPUT transform writes into an
``_OutputStream`` that cuts its bytes into rows as the layout asks and hands them
to a ``BatchBuilder`` — nothing holds a whole bundle.
"""
from __future__ import annotations

from typing import Callable, Iterator, Optional

from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.runners.worker import data_plane

from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.worker.rows import CHUNK_BYTES


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
            self._add_row(
                self._tag, self._key_of(data) if self._key_of else None, data)
            self._clear()

    def close(self) -> None:
        self.flush()


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
            on_timer: Optional[Callable[[str, str, bytes], None]] = None):
        self._inputs = inputs
        self._add_row = add_row
        self._outputs = outputs
        self._on_timer = on_timer

    def input_elements(self, instruction_id, expected_inputs,
                       abort_callback=None):
        return self._inputs

    def output_stream(self, instruction_id, transform_id):
        tag, layout, key_of = self._outputs[transform_id]
        return _OutputStream(tag, layout, self._add_row, key_of)

    def output_timer_stream(self, instruction_id, transform_id,
                            timer_family_id):
        if self._on_timer is None:
            raise NotImplementedError(
                f'Transform {transform_id!r} sets timers ({timer_family_id!r}) '
                'in a stage that was not planned as stateful.')
        return _TimerStream(
            lambda data: self._on_timer(transform_id, timer_family_id, data))

    def close(self) -> None:
        pass


class ChannelFactory(data_plane.DataChannelFactory):
    """Answers every port of a cached BundleProcessor with the current bundle's channel.

    BundleProcessor asks its factory for the channel at the start of every bundle,
    so one processor serves bundle after bundle, each with its own channel.
    """

    def __init__(self):
        self.current: Optional[InProcessDataChannel] = None

    def create_data_channel(self, remote_grpc_port, data_stream_id=None):
        return self.current

    def create_data_channel_from_url(self, url, data_stream_id=None):
        return self.current

    def close(self) -> None:
        pass


def key_extractor(coder, key_coder) -> Callable[[bytes], bytes]:
    """For KEYED outputs: the deterministic key bytes of one encoded element."""
    decode = coder.get_impl().decode_from_stream
    encode_key = key_coder.get_impl().encode

    def key_of(data: bytes) -> bytes:
        return encode_key(decode(create_InputStream(data), True).value[0])

    return key_of
