"""Bag user state served from the key's entries (``worker.key_state``), debug
engine: every kind built on a bag (bag, combining, set, read-modify-write),
read after writes and clears in the same element, a state large enough to be
decoded as it is iterated, kept across micro-batches and windows; the outputs
compared with BundleBasedDirectRunner, and what each key writes back holding
that key's state only."""

from __future__ import annotations

import collections

import apache_beam as beam
from apache_beam.coders import BytesCoder
from apache_beam.coders import VarIntCoder
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import combiners
from apache_beam.transforms import userstate
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.worker import key_state
from beam_spark_inproc.worker.streaming import stateful
from tests.streaming import oracle


class _EveryBagKind(beam.DoFn):
    BAG = userstate.BagStateSpec('bag', VarIntCoder())
    SUM = userstate.CombiningValueStateSpec('count', VarIntCoder(), combiners.CountCombineFn())
    SEEN = userstate.SetStateSpec('seen', VarIntCoder())
    LAST = userstate.ReadModifyWriteStateSpec('last', VarIntCoder())
    BIG = userstate.BagStateSpec('big', BytesCoder())

    def process(
        self,
        kv,
        bag=beam.DoFn.StateParam(BAG),
        total=beam.DoFn.StateParam(SUM),
        seen=beam.DoFn.StateParam(SEEN),
        last=beam.DoFn.StateParam(LAST),
        big=beam.DoFn.StateParam(BIG),
    ):
        key, value = kv
        before = last.read()
        last.write(value)
        if value % 4 == 0:  # cleared, then added to, in the same element
            bag.clear()
            seen.clear()
        bag.add(value)
        total.add(value)
        seen.add(value % 3)
        # Past ``key_state._LIST_BYTES`` within a few elements: decoded lazily.
        big.add(b'%d' % value * 30000)
        if value % 10 == 4:
            big.clear()
        sizes = [len(b) for b in big.read()]
        yield (
            key,
            str(
                (
                    before,
                    last.read(),
                    sorted(bag.read()),
                    total.read(),
                    sorted(seen.read()),
                    sum(sizes),
                    len(sizes),
                )
            ),
        )


def _pipeline(p):
    stream = TestStream()
    for step in range(4):  # four micro-batches, each touching both keys
        stream = stream.add_elements(
            [window.TimestampedValue((f'k{i % 2}', step * 10 + i), step * 10 + i) for i in range(6)]
        ).advance_watermark_to(step * 10 + 9)
    return (
        p
        | stream.advance_watermark_to_infinity()
        | beam.WindowInto(window.FixedWindows(30))
        | beam.ParDo(_EveryBagKind())
    )


def _count_calls(monkeypatch, owner, name: str, calls: collections.Counter):
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls[name] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


def test_bag_state_kinds_match_the_direct_runner(monkeypatch):
    expected = oracle.direct(_pipeline)
    assert len(expected) == 24
    # Some element reads over _LIST_BYTES of state (the lazy path).
    assert max(eval(r[0][1])[5] for r in expected) > key_state._LIST_BYTES
    calls = collections.Counter()
    for name in ('blocking_get', 'extend', 'clear'):
        _count_calls(monkeypatch, key_state.KeyStateHandler, name, calls)
    _count_calls(monkeypatch, key_state._Lazy, '__iter__', calls)
    # What each key writes back between micro-batches: (state, ordered,
    # pending), the state's entries keyed by serialized StateKeys.
    written = []
    dumps = stateful.dumps

    def recorded(value):
        written.append(value)
        return dumps(value)

    monkeypatch.setattr(stateful, 'dumps', recorded)

    assert oracle.run(_pipeline, InProcessSparkRunner(debug=True)) == expected

    assert calls['blocking_get'] and calls['extend'] and calls['clear']
    assert calls['__iter__'], 'the large state was not read lazily'
    # Both keys write state back after each of the first micro-batches, each
    # row with its own key's entries only (a servicer reused across keys and
    # not emptied would carry the last key's entries into the next one's).
    assert len(written) >= 4
    for state, _, _ in written:
        keys = {beam_fn_api_pb2.StateKey.FromString(k).bag_user_state.key for k in state}
        assert len(keys) == 1, keys
