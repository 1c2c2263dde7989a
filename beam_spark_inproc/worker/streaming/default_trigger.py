"""A streaming GroupByKey's panes under Beam's default trigger, without the
trigger driver.

``worker.streaming.grouping`` runs Beam's ``GeneralTriggerDriver`` per key and
micro-batch: for a windowed count (1,000 keys, one or two values per key and
micro-batch, partial counts combined before the shuffle) that bookkeeping cost
more than the values it groups (a ``TriggerContext`` and a timer named
``str(window)`` per element, a ``CountCombineFn`` applied per pane index,
timers scanned and sorted, ``Timestamp`` arithmetic per window): ~20% of the
stage's time in a profile. Where the WindowFn never merges, the trigger is
Beam's ``DefaultTrigger`` and the timestamp combiner is one of the portable
three (``plan.Grouping.default_trigger``, checked again here on the objects),
this module does what that driver does with that trigger, step for step, on the
same per-key state (``dump_state``'s form: timers, per-window state tags,
global state; either path reads what the other wrote):

1. *elements* (``process_elements``, at the stage's watermarks before the
   micro-batch): an element whose window ended more than the allowed lateness
   before the input watermark is dropped; each window's values are added to
   its ``elements`` (the hold ``watermark``: the window's last timestamp for
   END_OF_WINDOW, whatever the lateness; the earliest / latest timestamp not
   before the output watermark for EARLIEST / LATEST), and its timer is set
   for the window's end; a window the input watermark has reached already
   (late data within the lateness) fires at once, the timer cleared: one pane
   per window and micro-batch, EARLY if the output watermark has not passed
   the window (held back), else LATE;
2. *timers* (``process_timer``), as the input watermark moves on: each window
   whose timer is due fires, in timer order: ON_TIME if no pane of it was
   ON_TIME or LATE before, else LATE;
3. a pane (``_output``): index and non-speculative index counted per window
   (``index`` and ``nonspeculative_index``, lists of 1s as Beam's counters
   keep them), the values (cleared in DISCARDING mode), the timestamp the
   hold's combination or the window's last timestamp; the hold is kept while
   the output watermark is before the window's end, else cleared;
4. windows past their end plus the allowed lateness, with no timer, are
   dropped (``StreamingGroupAlsoByWindow._expire``), everything at +inf.

Watermarks and window ends are compared as integer microseconds. The state
holds no empty tags (Beam's in-memory state leaves some behind when read;
they mean nothing). Other triggers and merging WindowFns keep Beam's driver.
"""

from __future__ import annotations

import logging
import pickle
from typing import Callable
from typing import Optional

from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.transforms import trigger
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import IntervalWindow
from apache_beam.transforms.window import TimestampCombiner
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import TIME_GRANULARITY
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfo
from apache_beam.utils.windowed_value import PaneInfoTiming
from apache_beam.utils.windowed_value import WindowedValue

_LOGGER = logging.getLogger(trigger.__name__)
_COMBINERS = (
    TimestampCombiner.OUTPUT_AT_EOW,
    TimestampCombiner.OUTPUT_AT_EARLIEST,
    TimestampCombiner.OUTPUT_AT_LATEST,
)
# Beam's state tags (``GeneralTriggerDriver``'s).
_ELEMENTS = trigger.GeneralTriggerDriver.ELEMENTS.tag
_TOMBSTONE = trigger.GeneralTriggerDriver.TOMBSTONE.tag
_INDEX = trigger.GeneralTriggerDriver.INDEX.tag
_NONSPECULATIVE = trigger.GeneralTriggerDriver.NONSPECULATIVE_INDEX.tag
_HOLD = 'watermark'  # GeneralTriggerDriver.WATERMARK_HOLD
_MAX_MICROS = MAX_TIMESTAMP.micros


def applies(windowing) -> bool:
    """Beam's default trigger over a WindowFn that never merges, with a
    portable timestamp combiner."""
    return (
        windowing.triggerfn == trigger.DefaultTrigger()
        and not windowing.windowfn.is_merging()
        and windowing.timestamp_combiner in _COMBINERS
    )


def _end_micros(window) -> int:
    # A window read from bytes or from pickled state: its end object (if
    # any) was made from its micros.
    if type(window) is IntervalWindow:  # pylint: disable=unidiomatic-typecheck
        return window._end_micros  # pylint: disable=protected-access
    return window.end.micros


class DefaultTriggerPanes:
    """One GroupByKey's panes, a key at a time (see module doc)."""

    def __init__(self, windowing):
        if not applies(windowing):
            raise ValueError(f'not the default trigger: {windowing}')
        self._lateness = windowing.allowed_lateness.micros
        self._discarding = windowing.accumulation_mode == trigger.AccumulationMode.DISCARDING
        combiner = windowing.timestamp_combiner
        self._end_of_window = combiner == TimestampCombiner.OUTPUT_AT_EOW
        self._combine: Callable = min if combiner == TimestampCombiner.OUTPUT_AT_EARLIEST else max
        self._names: dict = {}  # window -> its timer's name, str(window)

    def key_panes(
        self, key, state_data: Optional[bytes], datas: list[bytes], decode, step, emit: Callable
    ) -> tuple:
        """Hands the key's panes (grouped WindowedValues) to ``emit``; returns
        the key's new state and (hold, earliest event-time timer, earliest
        processing-time timer), or (None, None) if nothing is left."""
        if state_data is not None:
            timers, values, global_state = pickle.loads(state_data)
        else:
            timers, values, global_state = {}, {}, {}
        if datas:
            self._elements(key, timers, values, datas, decode, step, emit)
        self._timers(key, timers, values, step, emit)
        nw = step.next_input_watermark.micros
        if nw >= _MAX_MICROS:
            return None, None
        lateness = self._lateness
        for window in [
            w
            for w, tags in values.items()
            if not any(tags.values())
            or (
                _end_micros(w) < _MAX_MICROS
                and nw > _end_micros(w) + lateness
                and not timers.get(w)
            )
        ]:
            del values[window]
        if not timers and not values:
            return None, None
        return (
            pickle.dumps((timers, values, global_state), pickle.HIGHEST_PROTOCOL),
            _summary(timers, values),
        )

    def _elements(self, key, timers, values, datas, decode, step, emit) -> None:
        groups: dict = {}
        for data in datas:
            stream = create_InputStream(data)
            while stream.size():
                wkv = decode(stream, True)
                value, micros = wkv.value[1], wkv.timestamp_micros
                for window in wkv.windows:
                    group = groups.get(window)
                    if group is None:
                        groups[window] = [[value], [micros]]
                    else:
                        group[0].append(value)
                        group[1].append(micros)
        iw = step.input_watermark.micros
        ow = step.output_watermark.micros
        lateness = self._lateness
        for window, (new_values, stamps) in groups.items():
            end = _end_micros(window)
            if iw > end + lateness:
                continue  # expired: dropped
            tags = values.get(window)
            if tags is None:
                tags = values[window] = {}
            elif tags.get(_TOMBSTONE):
                continue
            if self._end_of_window:
                hold = window.max_timestamp()
            else:
                kept = [m for m in stamps if m >= ow]
                hold = Timestamp(micros=self._combine(kept)) if kept else None
            if hold is not None:
                tags.setdefault(_HOLD, []).append(hold)
            tags.setdefault(_ELEMENTS, []).extend(new_values)
            name = self._name(window)
            if iw >= end:  # fires at once: its timer cleared
                window_timers = timers.get(window)
                if window_timers is not None:
                    window_timers.pop((name, TimeDomain.WATERMARK, ''), None)
                    if not window_timers:
                        del timers[window]
                emit(self._pane(key, window, end, tags, values, ow, False))
            else:
                timers.setdefault(window, {})[(name, TimeDomain.WATERMARK, '')] = window.end

    def _timers(self, key, timers, values, step, emit) -> None:
        nw = step.next_input_watermark.micros
        now = step.processing_time
        due = []
        for window, window_timers in list(timers.items()):
            for slot, timestamp in list(window_timers.items()):
                domain = slot[1]
                if (
                    Timestamp.of(timestamp).micros <= nw
                    if domain == TimeDomain.WATERMARK
                    else domain == TimeDomain.REAL_TIME and timestamp <= now
                ):
                    due.append((window, domain, timestamp))
                    del window_timers[slot]
            if not window_timers:
                del timers[window]
        if not due:
            return
        due.sort(key=lambda t: (t[2], t[1] != TimeDomain.WATERMARK))
        for window, domain, timestamp in due:
            tags = values.get(window)
            if tags is not None and tags.get(_TOMBSTONE):
                continue
            end = _end_micros(window)
            at = Timestamp.of(timestamp).micros
            if at < end:  # DefaultTrigger.should_fire
                continue
            window_timers = timers.get(window)  # should_fire clears it
            if window_timers is not None:
                window_timers.pop((self._name(window), TimeDomain.WATERMARK, ''), None)
                if not window_timers:
                    del timers[window]
            if tags is None:
                tags = values[window] = {}
            emit(self._pane(key, window, end, tags, values, at, domain == TimeDomain.WATERMARK))

    def _pane(
        self,
        key,
        window,
        end: int,
        tags: dict,
        values: dict,
        output_watermark: int,
        maybe_on_time: bool,
    ) -> WindowedValue:
        """``GeneralTriggerDriver._output`` of a pane that never finishes."""
        indexes = tags.setdefault(_INDEX, [])
        index = len(indexes)
        indexes.append(1)
        nonspeculative = tags.get(_NONSPECULATIVE)
        if output_watermark < end:
            timing, nonspeculative_index = PaneInfoTiming.EARLY, -1
            if nonspeculative:
                nonspeculative_index = len(nonspeculative)
                nonspeculative.append(1)
                _LOGGER.warning(
                    'Watermark moved backwards in time or late data moved window end forward.'
                )
        else:
            nonspeculative_index = len(nonspeculative or ())
            tags.setdefault(_NONSPECULATIVE, []).append(1)
            timing = (
                PaneInfoTiming.ON_TIME
                if maybe_on_time and nonspeculative_index == 0
                else PaneInfoTiming.LATE
            )
        pane = PaneInfo(index == 0, False, timing, index, nonspeculative_index)
        grouped = tags.pop(_ELEMENTS, None) if self._discarding else tags.get(_ELEMENTS)
        holds = tags.get(_HOLD)
        if not holds:
            timestamp = window.max_timestamp()
        else:
            timestamp = max(holds) if self._end_of_window else self._combine(holds)
            if output_watermark >= end:
                del tags[_HOLD]
        if not tags:
            del values[window]
        return WindowedValue(
            (key, grouped if grouped is not None else []), timestamp, (window,), pane
        )

    def _name(self, window) -> str:
        name = self._names.get(window)
        if name is None:
            if len(self._names) >= 4096:
                self._names.clear()
            name = self._names[window] = str(window)
        return name


def _summary(timers: dict, values: dict) -> tuple:
    """(hold, earliest event-time timer, earliest processing-time timer), as
    ``InMemoryUnmergedState.get_earliest_hold`` and the timers say."""
    hold = MAX_TIMESTAMP
    for tags in values.values():
        holds = tags.get(_HOLD)
        if holds:
            hold = min(hold, min(holds) - TIME_GRANULARITY)
    event_timer, processing_timer = MAX_TIMESTAMP, float('inf')
    for window_timers in timers.values():
        for (_, domain, _), timestamp in window_timers.items():
            if domain == TimeDomain.WATERMARK:
                event_timer = min(event_timer, Timestamp.of(timestamp))
            else:
                processing_timer = min(processing_timer, float(timestamp))
    return hold, event_timer, processing_timer
