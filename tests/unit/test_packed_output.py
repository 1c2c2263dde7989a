"""GroupByKey inputs are written packed (``plan.PACKED``): a row per key holding
many elements. These check the two things the shuffle relies on: the key bytes
taken from the key object equal those the consumer's safe coder decodes the key
from, and the packed rows carry every element once, in bounded rows."""

from __future__ import annotations

import dataclasses
import typing

import apache_beam as beam
import pytest
from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.transforms.window import GlobalWindows

from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.planning.planner import plan_pipeline
from beam_spark_inproc.protocol.rows import key_extractor
from beam_spark_inproc.worker import channel


@dataclasses.dataclass(frozen=True)
class Point:
    """A user key type (length-prefixed on the wire, as Beam does not know it)."""

    x: object
    y: object


KEYS = {
    'untyped ints': [0, 1, -5, 2**40],
    'untyped strings': ['', 'a', 'naïve', 'x' * 300],
    'untyped tuples': [(1, 'a'), ('b', (2, 3.5)), ()],
    'untyped mixed': [None, b'raw', 1.25, True, [1, 2]],
    'custom class': [Point(1, 2), Point('a', None)],
}


def _coders(keys, typed=None):
    pipeline = beam.Pipeline()
    pair = beam.FlatMap(lambda _: [(k, 1) for k in keys])
    if typed is not None:
        pair = pair.with_output_types(typed)
    _ = pipeline | beam.Create([0]) | pair | beam.GroupByKey()
    plan = plan_pipeline(pipeline.to_runner_api())
    context = pipeline_context.PipelineContext(
        beam_runner_api_pb2.Components.FromString(plan.components)
    )
    packed = [port for stage in plan.stages for port in stage.outputs if port.layout == p.PACKED]
    grouped = [port for stage in plan.stages for port in stage.inputs if port.grouping is not None]
    assert len(packed) == 1 and len(grouped) == 1
    return (context.coders[packed[0].coder_id], context.coders[grouped[0].grouping.pre_coder_id])


@pytest.mark.parametrize('name', sorted(KEYS))
def test_key_bytes_match_the_consumers_decoding(name):
    wire, safe = _coders(KEYS[name])
    key_of = key_extractor(safe, safe.key_coder())
    encode_key = channel.key_encoder(
        wire.wrapped_value_coder.key_coder(), safe.wrapped_value_coder.key_coder()
    )
    for key in KEYS[name]:
        data = wire.encode(GlobalWindows.windowed_value((key, 1)))
        assert encode_key(key) == key_of(data), key


def test_key_bytes_match_for_standard_coders():
    keys = [('a', 1), ('', -3), ('z' * 200, 2**33)]
    wire, safe = _coders(keys, typed=typing.Tuple[typing.Tuple[str, int], int])
    key_of = key_extractor(safe, safe.key_coder())
    encode_key = channel.key_encoder(
        wire.wrapped_value_coder.key_coder(), safe.wrapped_value_coder.key_coder()
    )
    for key in keys:
        data = wire.encode(GlobalWindows.windowed_value((key, 1)))
        assert encode_key(key) == key_of(data), key


def _packed_rows(monkeypatch, elements, keys=4, total=1 << 30, row=1 << 20):
    monkeypatch.setattr(channel, 'PACKED_KEYS', keys)
    monkeypatch.setattr(channel, 'PACKED_BYTES', total)
    monkeypatch.setattr(channel, 'PACKED_ROW_BYTES', row)
    wire, safe = _coders([0])
    rows = []
    stream = channel._PackedStream(3, lambda tag, key, data: rows.append((tag, key, data)))
    stream.encode = wire.get_impl().encode_to_stream
    encode_key = channel.key_encoder(
        wire.wrapped_value_coder.key_coder(), safe.wrapped_value_coder.key_coder()
    )
    for key, value in elements:
        stream.write_keyed(encode_key(key), GlobalWindows.windowed_value((key, value)))
    stream.close()
    decoded = []
    for tag, key_bytes, data in rows:
        assert tag == 3
        stream_in = create_InputStream(data)
        while stream_in.size():
            kv = wire.get_impl().decode_from_stream(stream_in, True).value
            assert encode_key(kv[0]) == key_bytes
            decoded.append(kv)
    return rows, decoded


def test_packed_rows_carry_every_element_once(monkeypatch):
    elements = [(i % 3, i) for i in range(3000)]
    rows, decoded = _packed_rows(monkeypatch, elements)
    assert sorted(decoded) == sorted(elements)
    assert len(rows) == 3  # one row per key: all fitted


def test_packed_rows_are_bounded(monkeypatch):
    # More keys than PACKED_KEYS: pending keys are written out, nothing lost;
    # keys arriving in runs still share rows.
    elements = [(i // 20 % 50, i) for i in range(1000)]
    rows, decoded = _packed_rows(monkeypatch, elements, keys=8)
    assert sorted(decoded) == sorted(elements)
    assert 50 <= len(rows) <= 100
    # A hot key: its row is cut at the row size, never one unbounded row.
    elements = [(7, i) for i in range(5000)]
    rows, decoded = _packed_rows(monkeypatch, elements, row=4096)
    assert decoded == elements
    assert len(rows) > 10 and all(len(data) < 4096 + 64 for _, _, data in rows)
    # All pending bytes over PACKED_BYTES: everything is written out.
    elements = [(i % 5, i) for i in range(5000)]
    rows, decoded = _packed_rows(monkeypatch, elements, total=2048)
    assert sorted(decoded) == sorted(elements)
    assert len(rows) > 20


class _Count(beam.DoFn):
    COUNT = beam.transforms.userstate.ReadModifyWriteStateSpec('count', beam.coders.VarIntCoder())

    def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
        n = (count.read() or 0) + 1
        count.write(n)
        yield kv[0], n


def _stateful_plan(reshuffled_too: bool = False):
    pipeline = beam.Pipeline()
    pairs = (
        pipeline
        | beam.Create([0])
        | beam.FlatMap(lambda _: [(k, 1) for k in KEYS['untyped mixed']])
    )
    _ = pairs | beam.ParDo(_Count())
    if reshuffled_too:  # the same buffer, one element per row for this reader
        _ = pairs | beam.Reshuffle()
    return plan_pipeline(pipeline.to_runner_api())


def test_stateful_inputs_are_packed_with_the_consumers_key_bytes():
    """A stateful stage reads a key's rows as one stream (``worker.batch.stateful``),
    so its input is written packed (a row per key and bundle, not per
    element), with the key bytes the KEYED_ELEMENTS layout took from each element."""
    plan = _stateful_plan()
    stateful = [s for s in plan.stages if s.stateful]
    assert len(stateful) == 1
    buffers = {port.buffer_id for port in stateful[0].inputs}
    writes = [port for stage in plan.stages for port in stage.outputs if port.buffer_id in buffers]
    assert [port.layout for port in writes] == [p.PACKED]
    context = pipeline_context.PipelineContext(
        beam_runner_api_pb2.Components.FromString(plan.components)
    )
    wire = context.coders[writes[0].coder_id]
    safe = context.coders[writes[0].key_coder_id]
    key_of = key_extractor(safe, safe.key_coder())
    encode_key = channel.key_encoder(
        wire.wrapped_value_coder.key_coder(), safe.wrapped_value_coder.key_coder()
    )
    for key in KEYS['untyped mixed']:
        data = wire.encode(GlobalWindows.windowed_value((key, 1)))
        assert encode_key(key) == key_of(data), key


def test_a_stateful_input_also_read_one_element_per_row_stays_keyed():
    plan = _stateful_plan(reshuffled_too=True)
    stateful = [s for s in plan.stages if s.stateful]
    buffers = {port.buffer_id for port in stateful[0].inputs}
    assert [
        port.layout for stage in plan.stages for port in stage.outputs if port.buffer_id in buffers
    ] == [p.KEYED_ELEMENTS]
