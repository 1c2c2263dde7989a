"""A stateful DoFn's state is dropped once its window expired (debug engine):
the window's end plus the allowed lateness passed by the stage's input
watermark. The checkpoint's commit records show the state held per micro-batch;
the outputs are compared with BundleBasedDirectRunner."""

from __future__ import annotations

import glob
import json
import os

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import userstate
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Duration

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from tests.streaming import oracle


class _Seen(beam.DoFn):
    """Emits how many elements its key saw in the window so far."""

    SEEN = userstate.BagStateSpec('seen', VarIntCoder())

    def process(self, kv, seen=beam.DoFn.StateParam(SEEN)):
        seen.add(kv[1])
        yield kv[0], len(list(seen.read()))


def _expiring(p):
    stream = (
        TestStream()
        .add_elements([window.TimestampedValue((f'k{i}', i), i) for i in range(3)])
        .advance_watermark_to(12)  # [0, 10) + 5 of lateness: still live
        .add_elements([window.TimestampedValue(('k0', 9), 9)])
        .advance_watermark_to(15)  # expired: the state is dropped
        .add_elements([window.TimestampedValue(('k1', 21), 21)])
        # A micro-batch takes an element event with the watermark step
        # after it; this one keeps k1's state in a micro-batch of its own.
        .advance_processing_time(1)
        .advance_watermark_to(40)
        .advance_watermark_to_infinity()
    )
    return (
        p
        | stream
        | beam.WindowInto(window.FixedWindows(10), allowed_lateness=Duration(seconds=5))
        | beam.ParDo(_Seen())
    )


def _held_keys(location: str) -> list[int]:
    """Keys of state held by the stateful stage after each micro-batch."""
    commits = sorted(
        glob.glob(os.path.join(location, 'commits', '*.json')),
        key=lambda n: int(os.path.basename(n)[:-5]),
    )
    records = [json.load(open(name)) for name in commits]
    stateful = [i for i, s in enumerate(records[0]['stages']) if s['buckets']]
    assert len(stateful) == 1
    return [sum(b['keys'] for b in r['stages'][stateful[0]]['buckets'].values()) for r in records]


def test_state_of_an_expired_window_is_dropped(tmp_path, monkeypatch):
    # Keep every commit record to read them afterwards.
    monkeypatch.setattr(CheckpointStore, 'RETAIN', 1000)
    location = str(tmp_path / 'checkpoint')
    expected = oracle.direct(_expiring)
    assert sorted(r[0] for r in expected) == [('k0', 1), ('k0', 2), ('k1', 1), ('k1', 1), ('k2', 1)]
    assert (
        oracle.run(_expiring, InProcessSparkRunner(debug=True), f'--checkpoint_location={location}')
        == expected
    )
    held = _held_keys(location)
    # elements and watermark 12: 3 keys kept; k0 late but within lateness,
    # then watermark 15: [0, 10) expired, nothing held; k1 in [20, 30): 1 key,
    # still after the clock step; watermark 40: expired; +inf: nothing.
    assert held[:6] == [3, 0, 1, 1, 0, 0], held


def test_expiry_of_windows_is_cached_boundedly(monkeypatch):
    """A worker's processor meets new windows for as long as the stream runs:
    the expiries it decoded are kept up to ``CACHED_WINDOWS`` windows, and
    each window's state is still dropped once its expiry passed (window end
    + 5 s of lateness), whatever the cache held."""
    from apache_beam.coders.coders import IntervalWindowCoder
    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.portability.api import beam_runner_api_pb2
    from apache_beam.utils.timestamp import Timestamp

    from beam_spark_inproc.worker.streaming import state_expiry

    monkeypatch.setattr(state_expiry, 'CACHED_WINDOWS', 8)
    p = beam.Pipeline()
    _ = (
        p
        | beam.Create([('k', 1)])
        | beam.WindowInto(window.FixedWindows(10), allowed_lateness=Duration(seconds=5))
        | beam.ParDo(_Seen())
    )
    components = p.to_runner_api().components
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor(
        transforms=components.transforms,
        pcollections=components.pcollections,
        windowing_strategies=components.windowing_strategies,
        coders=components.coders,
    )
    [stateful] = [
        tid
        for tid, t in components.transforms.items()
        if t.spec.urn == 'beam:transform:pardo:v1'
        and beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).state_specs
    ]
    expiry = state_expiry.StateExpiry(descriptor)
    coder = IntervalWindowCoder()

    def entry(start: int) -> bytes:
        return beam_fn_api_pb2.StateKey(
            bag_user_state=beam_fn_api_pb2.StateKey.BagUserState(
                transform_id=stateful,
                user_state_id='seen',
                key=b'k',
                window=coder.encode(window.IntervalWindow(start, start + 10)),
            )
        ).SerializeToString()

    for n in range(50):  # window [10n, 10n + 10) expires at 10n + 15
        state = {entry(10 * m): [b'x'] for m in range(n, n + 3)}
        earliest = expiry.drop(state, {}, Timestamp(10 * n + 15))
        assert sorted(state) == sorted(entry(10 * m) for m in (n + 1, n + 2))
        assert earliest == Timestamp(10 * n + 25)
        assert len(expiry._cache) <= 8
