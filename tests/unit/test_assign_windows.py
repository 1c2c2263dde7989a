"""WindowInto in integer microseconds (``worker.assign_windows``): the same
windows as Beam's own ``FixedWindows.assign`` / ``SlidingWindows.assign``, and
the same elements as Beam's WindowInto DoFn in a pipeline (FnApiRunner)."""

from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_stream
from apache_beam.transforms import window
from apache_beam.transforms.window import FixedWindows
from apache_beam.transforms.window import SlidingWindows
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Duration
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.compat import beam as beam_compat
from beam_spark_inproc.planning import plan as plan_module
from beam_spark_inproc.planning import planner
from beam_spark_inproc.worker import assign_windows
from beam_spark_inproc.worker.assign_windows import assigner
from tests.integration.test_semantics import run_on
from tests.streaming import oracle

SECOND = 1_000_000
DAY = 86_400 * SECOND


def _timestamps(size: int, offset: int, period: int) -> list[int]:
    """Microseconds around the edges of windows, the epoch and the ends of
    time, plus random ones (a fixed seed)."""
    rng = random.Random(size * 31 + offset * 7 + period)
    edges = [
        0,
        1,
        -1,
        offset,
        offset - 1,
        offset + 1,
        size,
        -size,
        size - 1,
        1 - size,
        period,
        -period,
        period + 1,
        999,
        1001,
        -999,
        -1001,
        MIN_TIMESTAMP.micros,
        MIN_TIMESTAMP.micros + 1,
        MIN_TIMESTAMP.micros + size,
        MAX_TIMESTAMP.micros,
        MAX_TIMESTAMP.micros - 1,
        MAX_TIMESTAMP.micros - size,
        window.GlobalWindow().max_timestamp().micros,
    ]
    near = [
        k * step + offset + d
        for k in (-3, -1, 0, 1, 2, 1000)
        for step in (size, period)
        for d in (-1, 0, 1)
    ]
    spread = [rng.randrange(MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros) for _ in range(200)]
    small = [rng.randrange(-10 * DAY, 10 * DAY) for _ in range(300)]
    return edges + near + spread + small


def _check(windowfn, micros_list) -> int:
    assign = assigner(windowfn)
    assert assign is not None
    checked = 0
    for micros in micros_list:
        for timestamp in (
            Timestamp(micros=micros),
            # A timestamp of lower precision, as a DoFn may set (where
            # Beam's timestamps have a precision).
            Timestamp(0, micros // 1000, 3)
            if beam_compat.TIMESTAMPS_HAVE_PRECISION and micros % 1000 == 0
            else None,
        ):
            if timestamp is None:
                continue
            expected = windowfn.assign(window.WindowFn.AssignContext(timestamp))
            got = assign(micros)
            assert type(got) is list
            assert got == expected, (windowfn, micros, got, expected)
            assert [hash(w) for w in got] == [hash(w) for w in expected]
            assert [(w.start, w.end) for w in got] == [(w.start, w.end) for w in expected]
            assert [(w._start_micros, w._end_micros) for w in got] == [
                (w._start_micros, w._end_micros) for w in expected
            ]
            assert all(type(w) is type(e) for w, e in zip(got, expected))
            checked += 1
    return checked


FIXED = [
    (1, 0),
    (10, 0),
    (10, 3),
    (10, -3),
    (Duration(micros=7), 0),
    (Duration(micros=7), Timestamp(micros=5)),
    (3.5, 0.25),
    (86_400, 3_600),
    (Duration(micros=1), 0),
    (10**9, 0),
    (10**9, 10**8),
]


@pytest.mark.parametrize('size,offset', FIXED, ids=repr)
def test_fixed_windows_as_beam_assigns_them(size, offset):
    windowfn = FixedWindows(size, offset)
    assert _check(windowfn, _timestamps(windowfn.size.micros, windowfn.offset.micros, 1)) > 500


SLIDING = [
    (10, 5, 0),
    (10, 3, 0),
    (10, 3, 2),
    (10, 3, -1),
    (5, 10, 0),
    (5, 10, 7),
    (Duration(micros=7), Duration(micros=3), 0),
    (1, 1, 0),
    (3600, 60, 30),
    (2.5, 1, 0.5),
    (10**8, 10**7, 10**6),
]


@pytest.mark.parametrize('size,period,offset', SLIDING, ids=repr)
def test_sliding_windows_as_beam_assigns_them(size, period, offset):
    windowfn = SlidingWindows(size, period, offset)
    assert (
        _check(
            windowfn,
            _timestamps(windowfn.size.micros, windowfn.offset.micros, windowfn.period.micros),
        )
        > 500
    )


def test_the_window_cache_follows_the_timestamp():
    """Consecutive timestamps in one window share it; the next window is new;
    a sliding window's count of windows depends on where in the period the
    timestamp is (size not a multiple of the period)."""
    fixed = assigner(FixedWindows(10))
    first, again, other = fixed(SECOND), fixed(2 * SECOND), fixed(12 * SECOND)
    assert first[0] is again[0] and first is not again
    assert other == [window.IntervalWindow(10, 20)]
    sliding = assigner(SlidingWindows(10, 4))
    assert len(sliding(8 * SECOND)) == 3  # [8,18), [4,14), [0,10)
    assert len(sliding(10 * SECOND)) == 2  # [8,18), [4,14)
    assert sliding(9 * SECOND) == SlidingWindows(10, 4).assign(
        window.WindowFn.AssignContext(Timestamp(9))
    )


def test_other_window_fns_keep_beams_assignment():
    class MyFixed(FixedWindows):
        pass

    assert assigner(MyFixed(10)) is None
    assert assigner(window.Sessions(10)) is None
    assert assigner(window.GlobalWindows()) is None


def _urns(build) -> list[str]:
    p = beam.Pipeline()
    build(p)
    plan = planner.plan_pipeline(p.to_runner_api())
    urns = []
    for stage in plan.stages:
        if stage.descriptor:
            descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
            urns.extend(t.spec.urn for t in descriptor.transforms.values())
    return urns


def _windowed(p):
    return (
        p
        | beam.Create([1])
        | beam.Map(lambda x: window.TimestampedValue(x, x))
        | 'Fixed' >> beam.WindowInto(FixedWindows(10))
        | 'Sessions' >> beam.WindowInto(window.Sessions(10))
    )


def test_the_planner_names_only_fixed_and_sliding_windows():
    urns = _urns(_windowed)
    beams = common_urns.primitives.ASSIGN_WINDOWS.urn
    assert urns.count(plan_module.ASSIGN_WINDOWS_URN) == 1
    assert urns.count(beams) == 1  # Sessions


class _Show(beam.DoFn):
    def process(
        self,
        element,
        timestamp=beam.DoFn.TimestampParam,
        w=beam.DoFn.WindowParam,
        pane=beam.DoFn.PaneInfoParam,
    ):
        yield (f'{element!r} {timestamp.micros} [{w.start.micros}, {w.end.micros}) {pane}')


# Timestamps (micros) on both sides of the epoch, with sub-millisecond parts.
_STAMPS = [
    -25_000_001,
    -10_000_000,
    -1,
    0,
    1,
    999,
    1_500,
    4_999_999,
    5_000_000,
    9_999_999,
    10_000_000,
    12_345_678,
    37_000_001,
]


def _rewindowed(p):
    """Sliding windows, then fixed and sliding again: an element in N windows
    comes out N times (Beam's DoFn runs per window), each in the windows of
    its timestamp, its pane unknown (also after a GroupByKey's pane)."""
    stamped = (
        p
        | beam.Create(_STAMPS)
        | beam.Map(lambda m: window.TimestampedValue(m, Timestamp(micros=m)))
    )
    sliding = stamped | 'Sliding' >> beam.WindowInto(SlidingWindows(10, 4, 1))
    fixed = sliding | 'Fixed' >> beam.WindowInto(FixedWindows(3, 1))
    again = fixed | 'Again' >> beam.WindowInto(
        SlidingWindows(Duration(micros=2_500_000), Duration(micros=1_000_001))
    )
    # After a GroupByKey (an ON_TIME pane) the pane is unknown again.
    grouped = (
        fixed
        | beam.Map(lambda m: (m % 2, m))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, ms: (k, sorted(ms)))
        | 'Regrouped' >> beam.WindowInto(SlidingWindows(5, 2))
    )
    return (
        (sliding | 'ShowSliding' >> beam.ParDo(_Show())),
        (fixed | 'ShowFixed' >> beam.ParDo(_Show())),
        (again | 'ShowAgain' >> beam.ParDo(_Show())),
        (grouped | 'ShowGrouped' >> beam.ParDo(_Show())),
    ) | beam.Flatten()


def test_rewindowing_as_on_fnapi_runner(tmp_path, spark):
    expected = run_on(FnApiRunner(), _rewindowed, tmp_path / 'fnapi')
    assert len(expected) > 3 * len(_STAMPS)
    got = run_on(InProcessSparkRunner(debug=True), _rewindowed, tmp_path / 'debug')
    assert got == expected
    assert plan_module.ASSIGN_WINDOWS_URN in _urns(_rewindowed)
    # Spark's Python workers run the same operation.
    assert run_on(InProcessSparkRunner(spark=spark), _rewindowed, tmp_path / 'spark') == expected


def _stream_rewindowed(p):
    """A stream's GroupByKey panes (ON_TIME, LATE) into other windows: the
    pane is unknown again, as Beam's WindowInto DoFn makes it."""
    stream = (
        test_stream.TestStream()
        .add_elements([('a', 1), ('b', 2), ('a', 7)])
        .advance_watermark_to(10)
        .add_elements([('a', 3), ('a', 12)])
        .advance_watermark_to_infinity()
    )
    return (
        p
        | stream
        | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
        | beam.WindowInto(FixedWindows(10), allowed_lateness=5)
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: (k, sorted(vs)))
        | 'Again' >> beam.WindowInto(SlidingWindows(4, 3))
    )


def test_a_streams_panes_rewindowed_as_on_direct_runner(monkeypatch):
    expected = oracle.direct(_stream_rewindowed)
    assert {record[3] for record in expected} == {3}  # UNKNOWN
    process = assign_windows.AssignWindowsOperation.process
    calls = []

    def counted(self, o):
        calls.append(o)
        process(self, o)

    monkeypatch.setattr(assign_windows.AssignWindowsOperation, 'process', counted)
    assert oracle.run(_stream_rewindowed, InProcessSparkRunner(debug=True)) == expected
    assert any(o.pane_info.timing == 1 for o in calls)  # ON_TIME in
