"""A GroupByKey in the global window with the default trigger, in batch, has
its input written as values only (``plan.PACKED_VALUES``): the writer holds
values per key (by the key object for ints, strings and bytes, else by the
key's bytes) and the consumer splices the rows into grouped elements without
decoding them. These run the debug engine (the same worker code, in this
process) against Beam's FnApiRunner on the same pipelines."""

from __future__ import annotations

import typing

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.worker import channel
from beam_spark_inproc.worker.batch import grouped_values

# Keys equal in Python but not in Beam (Beam groups by the key's encoding):
# 1, True and 1.0 are three keys, as are '1' and b'1'.
KEYS = [1, True, 1.0, '1', b'1', None, (1, 'a'), -(2**70), 'naïve', b'']
VALUES = [0, None, 'v', b'\x00\xff', 2.5, [1, 2], ('t', 3), 'x' * 5000]


def _elements(n=2000):
    return [(KEYS[i % len(KEYS)], VALUES[i % len(VALUES)]) for i in range(n)]


def _grouped(pcoll):
    # Values in a canonical order; the key with its type, which Beam keeps.
    return (
        pcoll
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: (type(k).__name__, repr(k), sorted(map(repr, vs))))
    )


def _by_hand(elements):
    """Beam's model: one group per key encoding (here: per key type and value)."""
    groups = {}
    for key, value in elements:
        groups.setdefault((type(key).__name__, repr(key)), []).append(repr(value))
    return [(t, k, sorted(vs)) for (t, k), vs in groups.items()]


def _check(build_input, expected):
    """FnApiRunner and the debug engine both give the expected groups."""
    for runner in (fn_runner.FnApiRunner(), InProcessSparkRunner(debug=True)):
        with beam.Pipeline(runner=runner) as pipeline:
            assert_that(_grouped(build_input(pipeline)), equal_to(expected))


def test_untyped_keys_group_as_on_fnapirunner():
    expected = _by_hand(_elements())
    assert len(expected) == len(KEYS)
    _check(lambda pl: pl | beam.Create([0]) | beam.FlatMap(lambda _: _elements()), expected)


def test_typed_keys_group_as_on_fnapirunner():
    # Standard coders (str, varint) on both sides of the shuffle.
    def build(pl):
        return (
            pl
            | beam.Create(list(range(3000)))
            | beam.Map(lambda i: ('k%d' % (i % 7), i)).with_output_types(typing.Tuple[str, int])
        )

    _check(build, _by_hand(('k%d' % (i % 7), i) for i in range(3000)))


def test_writes_and_rows_are_bounded(monkeypatch):
    """Held values are written out when their estimated size or number
    reaches the limit, and a key's row is cut at PACKED_ROW_BYTES: with tiny
    limits every path runs, and still every value arrives once."""
    monkeypatch.setattr(channel, 'HOLD_SAMPLE', 3)
    monkeypatch.setattr(channel, 'HOLD_BYTES', 200)
    monkeypatch.setattr(channel, 'HOLD_MAX', 50)
    monkeypatch.setattr(channel, 'PACKED_ROW_BYTES', 512)
    monkeypatch.setattr(channel, 'PACKED_KEYS', 4)
    writes, rows = [], []
    write_values = channel._PackedStream.write_values

    def spy_write(self, key, count, encoded):
        writes.append(count)
        return write_values(self, key, count, encoded)

    monkeypatch.setattr(channel._PackedStream, 'write_values', spy_write)
    flush = channel._PackedStream.flush

    def spy_flush(self):
        rows.extend(len(out.get()) for out in self._pending.values())
        return flush(self)

    monkeypatch.setattr(channel._PackedStream, 'flush', spy_flush)
    _check(
        lambda pl: pl | beam.Create([0]) | beam.FlatMap(lambda _: _elements()),
        _by_hand(_elements()),
    )
    # (assert_that groups its own few elements too)
    assert sum(writes) >= 2000 and len(writes) > 40, writes
    assert rows and max(rows) < 512 + 5100, rows  # a row, plus one held write


def test_a_large_group_continues_through_state(monkeypatch):
    """Past the state-backed iterable's threshold, the rest of a group is
    decoded from its rows into the stage's GroupedValuesStore (a lazily paged
    iterable), as on the path that decodes every value."""
    written = []
    write = grouped_values.GroupedValuesStore.write

    def spy(self, values, coder_impl):
        values = list(values)
        written.append(len(values))
        return write(self, iter(values), coder_impl)

    monkeypatch.setattr(grouped_values.GroupedValuesStore, 'write', spy)

    n = 1000  # values of ~90 bytes: the hot group's 29,000 are ~2.7 MB

    def build(pl):
        return (
            pl
            | beam.Create(list(range(30)))
            | beam.FlatMap(lambda i: (('hot' if i else 'cold', '%090d' % j) for j in range(n)))
        )

    def summary(pcoll):
        return (
            pcoll
            | beam.GroupByKey()
            | beam.MapTuple(lambda k, vs: (k, sum(map(int, vs)), sum(1 for _ in vs), len(set(vs))))
        )

    expected = [
        ('cold', sum(range(n)), n, n),
        ('hot', 29 * sum(range(n)), 29 * n, n),
    ]
    for runner in (fn_runner.FnApiRunner(), InProcessSparkRunner(debug=True)):
        with beam.Pipeline(runner=runner) as pipeline:
            assert_that(summary(build(pipeline)), equal_to(expected))
    # The hot group went past the 1 MB threshold (grouping.GROUPS_BYTES) once.
    assert len(written) == 1 and 0 < written[0] < 29 * n, written


def _layouts(monkeypatch, build, streaming=False):
    """The layouts of the plan the runner makes (and runs, debug engine)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_spark_inproc import runner as runner_module

    plans = []
    plan_pipeline = runner_module.plan_pipeline

    def spy(*args, **kwargs):
        plans.append(plan_pipeline(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(runner_module, 'plan_pipeline', spy)
    with beam.Pipeline(
        runner=InProcessSparkRunner(debug=True), options=PipelineOptions(streaming=streaming)
    ) as pipeline:
        build(pipeline)
    writes = [
        port.layout
        for stage in plans[-1].stages
        for port in stage.outputs
        if port.layout in (p.PACKED, p.PACKED_VALUES)
    ]
    reads = [
        port.grouping.values_only
        for stage in plans[-1].stages
        for port in stage.inputs
        if port.grouping is not None
    ]
    return writes, reads


@pytest.mark.parametrize(
    'case, windowed, streaming',
    [
        ('global window, batch', False, False),
        ('fixed windows', True, False),
        ('streaming', False, True),
    ],
)
def test_values_only_just_for_default_windowing_in_batch(monkeypatch, case, windowed, streaming):
    def build(pl):
        pairs = pl | beam.Create([0]) | beam.FlatMap(lambda _: [('a', 1), ('b', 2)])
        if windowed:
            pairs = pairs | beam.WindowInto(window.FixedWindows(10))
        _ = pairs | beam.GroupByKey()

    writes, reads = _layouts(monkeypatch, build, streaming)
    values_only = not windowed and not streaming
    assert writes == [p.PACKED_VALUES if values_only else p.PACKED], case
    assert reads == [values_only], case
