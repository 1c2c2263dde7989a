"""GroupAlsoByWindow over a partition's rows, sorted by key, inside the consumer.

The shuffle (``repartition`` on the key bytes + ``sortWithinPartitions``) puts
each key's rows next to each other; here adjacent rows with equal keys become one
group. Windowing follows Beam's batch semantics through Beam's own trigger driver
(merging windows, triggers, allowed lateness, timestamp combiners), as
FnApiRunner's ``GroupingBuffer`` does; the default global windowing takes the same
shortcut it does.
"""
from __future__ import annotations

from typing import Iterable, Iterator

from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.transforms import trigger
from apache_beam.transforms.window import GlobalWindow
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils import windowed_value

from beam_spark_inproc.planning.plan import Grouping

# Encoded groups are handed to the bundle in pieces of about this size.
GROUPS_BYTES = 1 << 20


class GroupAlsoByWindow:
    """Turns (key bytes, encoded windowed KVs) rows into encoded grouped elements.

    A row holds one or more elements of its key (``plan.PACKED``)."""

    def __init__(self, grouping: Grouping, context):
        pre_coder = context.coders[grouping.pre_coder_id]
        self._pre_impl = pre_coder.get_impl()
        self._key_impl = pre_coder.key_coder().get_impl()
        self._post_impl = context.coders[grouping.post_coder_id].get_impl()
        windowing = context.windowing_strategies[grouping.windowing_strategy_id]
        self._trivial = windowing.is_default()
        if self._trivial:  # streamed, see ``_streamed``
            self._on_time = GlobalWindows.windowed_value(
                None,
                timestamp=GlobalWindow().max_timestamp(),
                pane_info=windowed_value.PaneInfo(
                    is_first=True,
                    is_last=True,
                    timing=windowed_value.PaneInfoTiming.ON_TIME,
                    index=0,
                    nonspeculative_index=0))
        else:
            self._windowed_groups = trigger.create_trigger_driver(
                windowing, True).process_entire_key

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
            self._post_impl.encode_to_stream(self._on_time.with_value(
                (self._key_impl.decode(key_bytes), group)), out, True)
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
            yield from self._streamed(rows)
            return
        out = create_OutputStream()
        current, datas = None, []
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
