"""GroupAlsoByWindow over a partition's rows, sorted by key, inside the consumer.

The shuffle (``repartition`` on the key bytes + ``sortWithinPartitions``) puts
each key's rows next to each other; here adjacent rows with equal keys become one
group. Windowing follows Beam's batch semantics through Beam's own trigger driver
(merging windows, triggers, allowed lateness, timestamp combiners), as
FnApiRunner's ``GroupingBuffer`` does; the default global windowing takes the same
shortcut it does. Two things FnApiRunner cannot do: processing-time triggers
(``BatchClock``) and custom window types (decoded with the WindowFn's own window
coder, ``plan.Grouping.window_coder_id``, where FnApiRunner keeps them opaque).

A grouping that keeps values only (``plan.Grouping.values_only``: default
windowing in batch, rows written ``plan.PACKED_VALUES``) decodes nothing: each
row already is chunks of the grouped iterable's encoding, so a grouped element
is the on-time pane's header, the key, and its rows one after the other
(``_spliced``); past the state-backed iterable's threshold the rest of a large
group is decoded, row by row in C, into the stage's ``GroupedValuesStore``.
"""

from __future__ import annotations

import functools
from typing import Iterable
from typing import Iterator

from apache_beam.coders import coder_impl
from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.coders.coders import BytesCoder
from apache_beam.coders.coders import WindowedValueCoder
from apache_beam.transforms import trigger
from apache_beam.transforms.window import GlobalWindow
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils import windowed_value
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.planning.plan import Grouping

# Encoded groups are handed to the bundle in pieces of about this size.
GROUPS_BYTES = 1 << 20


class BatchClock:
    """Processing time for a trigger driver in batch: the input is complete
    before any of it is grouped, so processing time has nothing to measure.

    It reads as the start of time while elements arrive, so a processing-time
    trigger (``AfterProcessingTime``, Nexmark query 12) sets its timer at
    ``MIN_TIMESTAMP + delay``; ``process_entire_key`` then fires every pending
    timer once the key's elements are in, as Beam's batch runners do when
    processing time ends with the input. Its panes are EARLY (the input
    watermark had not passed the window yet), and the same on every run.
    """

    def time(self) -> Timestamp:
        return MIN_TIMESTAMP


def entire_key(driver: trigger.GeneralTriggerDriver, key, windowed_values: Iterable) -> Iterator:
    """``TriggerDriver.process_entire_key`` with processing time: once the
    key's elements are in, processing time ends (its pending timers fire),
    then the watermark passes every window (event-time timers fire), again
    until no timer is left. (Beam's own compares processing-time timers with
    ``None`` and fails.)"""
    state = trigger.InMemoryUnmergedState()
    for wvalue in driver.process_elements(state, windowed_values, MIN_TIMESTAMP, MIN_TIMESTAMP):
        yield wvalue.with_value((key, wvalue.value))
    while state.timers:
        fired, _ = state.get_timers(
            clear=True, watermark=MIN_TIMESTAMP, processing_time=MAX_TIMESTAMP
        )
        if not fired:
            fired = state.get_and_clear_timers(MAX_TIMESTAMP)
        if not fired:
            break  # timers beyond the end of time never fire
        for timer_window, (name, time_domain, fire_time, _) in fired:
            for wvalue in driver.process_timer(timer_window, name, time_domain, fire_time, state):
                yield wvalue.with_value((key, wvalue.value))


class GroupAlsoByWindow:
    """Turns (key bytes, encoded windowed KVs) rows into encoded grouped elements.

    A row holds one or more elements of its key (``plan.PACKED``)."""

    def __init__(self, grouping: Grouping, context):
        pre_coder = context.coders[grouping.pre_coder_id]
        post_coder = context.coders[grouping.post_coder_id]
        if grouping.window_coder_id:
            # A custom window type: decode its windows for real (the safe
            # coders' opaque windows have the same bytes), so the WindowFn can
            # merge them and the consumer gets them back (as the SDK reads them).
            window_coder = context.coders[grouping.window_coder_id]
            pre_coder = WindowedValueCoder(pre_coder.wrapped_value_coder, window_coder)
            post_coder = WindowedValueCoder(post_coder.wrapped_value_coder, window_coder)
        self._pre_impl = pre_coder.get_impl()
        self._key_impl = pre_coder.key_coder().get_impl()
        self._post_impl = post_coder.get_impl()
        windowing = context.windowing_strategies[grouping.windowing_strategy_id]
        self._trivial = windowing.is_default()
        self._values_only = grouping.values_only
        if self._trivial:  # streamed, see ``_streamed``
            self._on_time = GlobalWindows.windowed_value(
                None,
                timestamp=GlobalWindow().max_timestamp(),
                pane_info=windowed_value.PaneInfo(
                    is_first=True,
                    is_last=True,
                    timing=windowed_value.PaneInfoTiming.ON_TIME,
                    index=0,
                    nonspeculative_index=0,
                ),
            )
            if grouping.values_only:
                self._splice_with(post_coder)
        else:
            if grouping.values_only:
                raise ValueError(
                    f'GroupByKey {grouping.gbk_label!r}: its input was written '
                    'as values only, but its windowing is not the default.'
                )
            driver = trigger.create_trigger_driver(windowing, True, clock=BatchClock())
            self._windowed_groups = (
                functools.partial(entire_key, driver)
                if isinstance(driver, trigger.GeneralTriggerDriver)
                else driver.process_entire_key
            )

    def _splice_with(self, post_coder) -> None:
        kv = post_coder.wrapped_value_coder
        iterable = kv.value_coder()
        element = iterable._get_component_coders()[0]
        self._element_impl = element.get_impl()
        # A row's chunks, decoded in C: as an iterable of unknown length.
        self._chunks_impl = coder_impl.IterableCoderImpl(self._element_impl)
        self._post_key_impl = kv.key_coder().get_impl()
        self._write_state = getattr(iterable, '_write_state', None)
        self._state_threshold = getattr(iterable, '_write_state_threshold', 0)
        # The on-time pane's timestamp, window and pane bytes (the value's
        # part of a non-nested BytesCoder is empty).
        self._header = (
            WindowedValueCoder(BytesCoder(), post_coder.window_coder)
            .get_impl()
            .encode(self._on_time.with_value(b''))
        )

    def _row_values(self, data: bytes) -> list:
        return self._chunks_impl.decode(b'\xff\xff\xff\xff' + data + b'\x00')

    def _spliced(self, rows: Iterator[tuple[bytes, bytes]]) -> Iterator[bytes]:
        """Values-only rows: a key's rows are chunks of its grouped iterable's
        unknown-length encoding (a count, the values), copied as they are."""
        header, decode_key = self._header, self._key_impl.decode
        encode_key = self._post_key_impl.encode_to_stream
        write_state, threshold = self._write_state, self._state_threshold
        rows = iter(rows)
        pending = next(rows, None)
        out = create_OutputStream()

        def rest(key_bytes):
            nonlocal pending
            while pending is not None and pending[0] == key_bytes:
                data = pending[1]
                pending = next(rows, None)
                yield from self._row_values(data)

        while pending is not None:
            key_bytes = pending[0]
            out.write(header)
            encode_key(decode_key(key_bytes), out, True)
            out.write_bigendian_int32(-1)
            start = out.size()
            while pending is not None and pending[0] == key_bytes:
                if write_state is not None and out.size() - start > threshold:
                    out.write_var_int64(-1)
                    out.write(write_state(rest(key_bytes), self._element_impl), True)
                    break
                out.write(pending[1])
                pending = next(rows, None)
            else:
                out.write_var_int64(0)
            if out.size() >= GROUPS_BYTES:
                yield out.get()
                out = create_OutputStream()
        if out.size():
            yield out.get()

    def _streamed(self, rows: Iterator[tuple[bytes, bytes]]) -> Iterator[bytes]:
        """Global window, default trigger: a key's values go from the rows to
        the encoder one by one, never all at once; past the coder's threshold
        they go to the stage's ``GroupedValuesStore`` (state-backed iterable)."""
        decode = self._pre_impl.decode_from_stream
        rows = iter(rows)
        pending = next(rows, None)
        out = create_OutputStream()

        def values(key_bytes):
            nonlocal pending
            while pending is not None and pending[0] == key_bytes:
                stream = create_InputStream(pending[1])
                pending = next(rows, None)
                while stream.size():
                    yield decode(stream, True).value[1]

        while pending is not None:
            key_bytes = pending[0]
            group = values(key_bytes)
            self._post_impl.encode_to_stream(
                self._on_time.with_value((self._key_impl.decode(key_bytes), group)), out, True
            )
            for _ in group:  # an encoder stopping early must not split a key
                raise AssertionError('grouped values left unencoded')
            if out.size() >= GROUPS_BYTES:
                yield out.get()
                out = create_OutputStream()
        if out.size():
            yield out.get()

    def _values(self, datas: Iterable[bytes]) -> list:
        decode = self._pre_impl.decode_from_stream
        values = []
        for data in datas:
            stream = create_InputStream(data)
            while stream.size():
                wkv = decode(stream, True)
                values.append(wkv.with_value(wkv.value[1]))
        return values

    def encode_group(self, key_bytes: bytes, datas: Iterable[bytes], out) -> None:
        key = self._key_impl.decode(key_bytes)
        for wkvs in self._windowed_groups(key, self._values(datas)):
            self._post_impl.encode_to_stream(wkvs, out, True)

    def grouped(self, rows: Iterator[tuple[bytes, bytes]]) -> Iterator[bytes]:
        """Encoded grouped elements for key-sorted rows, in pieces."""
        if self._trivial:
            yield from (self._spliced(rows) if self._values_only else self._streamed(rows))
            return
        out = create_OutputStream()
        # No group is open before the first row (``datas`` empty), whatever
        # its key: ``current`` needs no sentinel.
        current: bytes = b''
        datas: list[bytes] = []
        for key, data in rows:
            if key != current:
                if datas:
                    self.encode_group(current, datas, out)
                    if out.size() >= GROUPS_BYTES:
                        yield out.get()
                        out = create_OutputStream()
                current, datas = key, []
            datas.append(data)
        if datas:
            self.encode_group(current, datas, out)
        if out.size():
            yield out.get()
