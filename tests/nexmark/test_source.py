"""``beam_spark_inproc.nexmark``: the generator and ``ReadEvents``'s DoFns,
driven by hand as Beam's SDK harness drives a splittable DoFn (no runner)."""

from __future__ import annotations

import collections
import time

import pytest
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.runners import sdf_utils
from apache_beam.utils.timestamp import MIN_TIMESTAMP

from beam_spark_inproc.nexmark import ReadEvents
from beam_spark_inproc.nexmark import generator
from beam_spark_inproc.nexmark import source


def test_events_are_a_pure_function_of_their_number():
    first = list(generator.events(600))
    assert [repr(e) for e in generator.events(600, start=250)] == [repr(e) for e in first[250:]]
    assert [repr(generator.event(n)) for n in (0, 7, 599)] == [repr(first[n]) for n in (0, 7, 599)]
    assert repr(generator.event(5, seed=1)) != repr(first[5])
    kinds = collections.Counter(type(e).__name__ for e in first)
    assert kinds == {'Person': 12, 'Auction': 36, 'Bid': 552}
    # Ids in order of making, counted from the number alone.
    persons = [e.id for e in first if type(e).__name__ == 'Person']
    auctions = [e.id for e in first if type(e).__name__ == 'Auction']
    assert persons == list(range(1000, 1012))
    assert auctions == list(range(1000, 1036))
    times = [e.date_time for e in first]
    assert times == sorted(times)
    assert times[1] - times[0] == generator.timestamp_of(1) - generator.BASE_TIME


def _call(fn, restriction: OffsetRange, watermark, start: float):
    """One process call for a stream started at wall time ``start``:
    (outputs, watermark after, deferred residual)."""
    tracker = sdf_utils.ThreadsafeRestrictionTracker(fn.create_tracker(restriction))
    estimator = fn.create_watermark_estimator(watermark)
    out = list(
        fn.process(start, tracker=sdf_utils.RestrictionTrackerView(tracker), estimator=estimator)
    )
    return out, estimator.current_watermark(), tracker.deferred_status()


def _paced(max_per_call=100):
    return source._PacedEvents(
        1000,
        0,
        generator.INTER_EVENT_MICROS,
        events_per_second=1000,
        period=0.1,
        max_per_call=max_per_call,
    )


def test_paced_events_resume_from_any_position():
    """Behind the schedule (every event has arrived): a call reads
    ``max_per_call`` of the backlog and asks to resume at once."""
    fn = _paced()
    restriction = OffsetRange(500, 1000)
    state = fn.initial_estimator_state(None, restriction)
    assert state == generator.timestamp_of(499)
    assert fn.initial_estimator_state(None, fn.initial_restriction(None)) == MIN_TIMESTAMP
    out, watermark, deferred = _call(fn, restriction, state, time.time() - 10)
    assert [repr(tv.value) for tv in out] == [repr(e) for e in generator.events(600, start=500)]
    assert [tv.timestamp for tv in out] == [tv.value.date_time for tv in out]
    assert watermark == generator.timestamp_of(599)
    residual, delay = deferred
    assert (residual.start, residual.stop) == (600, 1000)
    assert delay.micros <= 1_000  # at once (less the time since it asked)


def test_paced_events_read_what_has_arrived_then_wait_for_the_next():
    """On schedule: a call reads the events arrived so far (event k at
    start + k / 1000 s) and resumes when the next one arrives, no sooner
    than ``period`` after it began."""
    fn = _paced(max_per_call=1000)
    start = time.time() - 0.55
    out, watermark, deferred = _call(fn, OffsetRange(500, 1000), generator.timestamp_of(499), start)
    # 550-551 events had arrived when the call began (a few more by the end
    # of a slow call): 50-60 of them are new.
    assert 50 <= len(out) <= 60
    stop = 500 + len(out)
    assert watermark == generator.timestamp_of(stop - 1)
    residual, delay = deferred
    assert (residual.start, residual.stop) == (stop, 1000)
    assert 0 < delay.micros <= 100_000
    # Ahead of the schedule: nothing read, the watermark stays, the call
    # resumes when the next event arrives (0.5 s from now).
    out, watermark, deferred = _call(
        fn, OffsetRange(500, 1000), generator.timestamp_of(499), time.time()
    )
    assert out == [] and watermark == generator.timestamp_of(499)
    residual, delay = deferred
    assert (residual.start, residual.stop) == (500, 1000)
    assert 400_000 < delay.micros <= 500_000
    assert source.lag(start, 500, 1000, now=start + 0.75) == pytest.approx(0.25)
    assert source.lag(start, 500, 1000, now=start + 0.25) == 0


def test_paced_events_end_with_the_range():
    out, watermark, deferred = _call(
        _paced(), OffsetRange(950, 1000), generator.timestamp_of(949), time.time() - 100
    )
    assert len(out) == 50 and deferred is None
    assert watermark == generator.timestamp_of(999)


def test_bounded_events_split_into_ranges():
    fn = source._BoundedEvents(25_000, 0, generator.INTER_EVENT_MICROS, 10_000)
    ranges = list(fn.split(None, fn.initial_restriction(None)))
    # Beam's OffsetRange.split joins a last piece under the minimum size.
    assert [(r.start, r.stop) for r in ranges] == [(0, 10_000), (10_000, 25_000)]


@pytest.mark.parametrize(
    'args, message',
    [
        ((None,), 'a bounded read needs num_events'),
        ((10,), None),
    ],
)
def test_read_events_arguments(args, message):
    if message is None:
        ReadEvents(*args)
        ReadEvents(None, events_per_second=5)
        return
    with pytest.raises(ValueError, match=message):
        ReadEvents(*args)
    with pytest.raises(ValueError, match='events_per_second must be > 0'):
        ReadEvents(10, events_per_second=0)
    with pytest.raises(ValueError, match='max_per_call must be >= 1'):
        ReadEvents(10, events_per_second=5, max_per_call=0)
