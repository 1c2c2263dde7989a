"""Nexmark events as a Beam source: bounded, or unbounded and paced.

``ReadEvents(num_events)`` reads ``generator.event(0 .. num_events - 1)``;
each element's timestamp is its ``date_time`` (as Beam's Nexmark launcher
gives events read from a file). Both forms are splittable DoFns over an
``Impulse`` whose restriction is an **event-number range** (``OffsetRange``):
an event is a pure function of its number, so a restriction resumes, replays
or splits anywhere.

* **Bounded** (``events_per_second=None``): the initial restriction is cut
  into ranges of ``split_size`` events (parallel reads in batch), each read
  whole; the runner may split further (``try_split``).
* **Unbounded, paced** (``events_per_second=R``): one restriction, read in
  order (``unbounded_per_element``), on a schedule: event ``k`` **arrives**
  ``k / R`` seconds of wall time after the stream's start (the ``Impulse``'s
  element is stamped with the wall clock when it is read, and travels with
  every residual, so the schedule survives a checkpoint and a restart). Each
  call emits every event that has arrived and is not yet read (at most
  ``max_per_call``), moves its watermark estimator to the event time of the
  last one (events come in order, so none is ever late) and asks to resume
  (``defer_remainder``) when the next event arrives, but no sooner than
  ``period`` after the call began (at once if ``max_per_call`` cut it short).
  As a queue a stream reads from: a runner that keeps up reads about ``R *
  period`` events a call; one that falls behind reads the backlog in larger
  calls and catches up if it can, so the source runs at ``R`` events per
  second of wall time, or at what the runner sustains if that is less. The
  **lag** of a call (how long its oldest unread event has waited, seconds) is
  ``lag(start, position)``. ``num_events=None`` never ends; otherwise, once
  every event is out, the restriction is done and the watermark goes to
  +inf. Event time does not depend on the pace (``inter_event_micros``
  apart), so a stream's events and their event times equal the bounded
  read's: with in-order events and default triggers, a query's streaming
  output equals its batch output.

    events = p | ReadEvents(100_000, events_per_second=5_000)

The watermark estimator's state is the watermark itself and its initial state
comes from the restriction (the time of the event before its start), so a
stream resumed from a position (a residual, a checkpoint) keeps its watermark.
"""

from __future__ import annotations

import time
from typing import Optional

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.testing.benchmarks.nexmark import nexmark_util
from apache_beam.transforms import core
from apache_beam.transforms import window
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Duration

from beam_spark_inproc.nexmark import generator

ENDLESS = 2**62  # the end of an endless stream's event range


class _EventRange(core.RestrictionProvider):
    """The restriction: event numbers ``[start, stop)``."""

    end: int
    split_size: Optional[int]

    def initial_restriction(self, element) -> OffsetRange:
        return OffsetRange(0, self.end)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def split(self, element, restriction: OffsetRange):
        if self.split_size:
            yield from restriction.split(self.split_size, self.split_size)
        else:
            yield restriction

    def restriction_size(self, element, restriction: OffsetRange) -> int:
        return restriction.size()


class _BoundedEvents(beam.DoFn, _EventRange):
    def __init__(self, num_events: int, seed: int, inter_event_micros: int, split_size: int):
        self.end, self.split_size = num_events, split_size
        self._args = (seed, inter_event_micros)

    def process(self, element, tracker=beam.DoFn.RestrictionParam()):
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            e = generator.event(position, *self._args)
            yield window.TimestampedValue(e, e.date_time)
            position += 1


class _PacedEvents(beam.DoFn, _EventRange, core.WatermarkEstimatorProvider):
    """In order, on the schedule of the module doc; the element is the wall
    time the stream started. A manual watermark estimator whose initial
    state is the event time of the event before the restriction's first
    (MIN_TIMESTAMP for the first event)."""

    def __init__(
        self,
        num_events: Optional[int],
        seed: int,
        inter_event_micros: int,
        events_per_second: float,
        period: float,
        max_per_call: int,
    ):
        self.end = ENDLESS if num_events is None else num_events
        self.split_size = None  # one stream, in order
        self._args = (seed, inter_event_micros)
        self._rate = events_per_second
        self._period = period
        self._max = max_per_call

    def initial_estimator_state(self, element, restriction: OffsetRange):
        if restriction.start == 0:
            return MIN_TIMESTAMP
        return generator.timestamp_of(restriction.start - 1, self._args[1])

    def create_watermark_estimator(self, state) -> ManualWatermarkEstimator:
        return ManualWatermarkEstimator(state)

    def arrival(self, start: float, position: int) -> float:
        """The wall time event ``position`` arrives."""
        return start + position / self._rate

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        start,
        tracker=beam.DoFn.RestrictionParam(),
        estimator=beam.DoFn.WatermarkEstimatorParam(),
    ):
        began = time.time()
        first = tracker.current_restriction().start
        arrived = int((began - start) * self._rate) + 1  # events [0, arrived)
        stop = min(arrived, first + self._max)
        last = None
        for position in range(first, max(first, stop)):
            if not tracker.try_claim(position):
                break  # the range is done
            last = generator.event(position, *self._args)
            yield window.TimestampedValue(last, last.date_time)
        else:
            if last is not None:
                estimator.set_watermark(last.date_time)
            resume = (
                began
                if stop < arrived
                else max(self.arrival(start, max(first, stop)), began + self._period)
            )
            tracker.defer_remainder(Duration.of(max(0.0, resume - time.time())))
            return
        if last is not None:
            estimator.set_watermark(last.date_time)


def lag(
    start: float, position: int, events_per_second: float, now: Optional[float] = None
) -> float:
    """How long (seconds) event ``position`` of a paced stream started at
    ``start`` has waited at ``now`` (0 before it arrives)."""
    now = time.time() if now is None else now
    return max(0.0, now - (start + position / events_per_second))


class ReadEvents(beam.PTransform):
    """Nexmark events ``0 .. num_events - 1`` (see the module doc).

    ``events_per_second``: None for a bounded read, else an unbounded one at
    that pace (``num_events=None``: endless); a call at most every ``period``
    seconds while it keeps up, at most ``max_per_call`` events a call.
    """

    def __init__(
        self,
        num_events: Optional[int],
        seed: int = 0,
        events_per_second: Optional[float] = None,
        period: float = 0.1,
        inter_event_micros: int = generator.INTER_EVENT_MICROS,
        split_size: int = 10_000,
        max_per_call: int = 50_000,
    ):
        super().__init__()
        if events_per_second is None and num_events is None:
            raise ValueError(
                'ReadEvents: a bounded read needs num_events; pass '
                'events_per_second for an endless, paced stream.'
            )
        if events_per_second is not None and events_per_second <= 0:
            raise ValueError(
                'ReadEvents: events_per_second must be > 0, got %r' % (events_per_second,)
            )
        if max_per_call < 1:
            raise ValueError('ReadEvents: max_per_call must be >= 1, got %r' % (max_per_call,))
        self._num_events = num_events
        self._seed = seed
        self._rate = events_per_second
        self._period = period
        self._inter = inter_event_micros
        self._split_size = split_size
        self._max_per_call = max_per_call

    def expand(self, pbegin):
        nexmark_util.setup_coder()  # Beam's coders for the model classes
        if self._rate is None:
            assert self._num_events is not None  # __init__ refuses a bounded read without
            fn = _BoundedEvents(self._num_events, self._seed, self._inter, self._split_size)
        else:
            paced = _PacedEvents(
                self._num_events,
                self._seed,
                self._inter,
                self._rate,
                self._period,
                self._max_per_call,
            )
            return (
                pbegin
                | 'Impulse' >> beam.Impulse()
                | 'Start' >> beam.Map(lambda _: time.time())
                | 'Events' >> beam.ParDo(paced)
            )
        return pbegin | 'Impulse' >> beam.Impulse() | 'Events' >> beam.ParDo(fn)
