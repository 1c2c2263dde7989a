"""Windows and panes as columns, and back: what workers run for Spark-native
transforms over windowed PCollections (``spark_io``'s ``window_columns``).

``WindowedToArrow``: like ``convert.ToArrow`` (a stage output's rows -> Arrow
batches for Spark's writer or a temporary view), plus the element's window
and pane in the columns the transform names: ``window_start`` and
``window_end`` (timestamps; the global window's bounds are Beam's ends of
time), ``pane_timing`` (``EARLY``, ``ON_TIME``, ``LATE`` or ``UNKNOWN``) and
``pane_index``. An element in several windows is a row per window, as Beam's
windowed values are one element per window.

``WindowedToBeamRows``: like ``convert.ToBeamRows`` (a DataFrame's Arrow
batches -> rows of the runner's format), but each row goes into the
``IntervalWindow`` its ``window_start``/``window_end`` columns name (the
global window, for a query over global-window panes), at the window's last
instant (``max_timestamp``): a ``SparkSql`` result back in the window its
input rows came from.

Imported by workers: only pyarrow, Beam's coders and windows, ``convert``.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import pyarrow as pa
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.coders.coders import WindowedValueCoder
from apache_beam.transforms.window import GlobalWindow
from apache_beam.transforms.window import IntervalWindow
from apache_beam.typehints.row_type import RowTypeConstraint
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfoTiming
from apache_beam.utils.windowed_value import WindowedValue

from beam_spark_inproc.protocol.rows import CHUNK_BYTES
from beam_spark_inproc.transforms import types
from beam_spark_inproc.transforms.convert import ArrowRows
from beam_spark_inproc.transforms.convert import ToArrow
from beam_spark_inproc.transforms.convert import encoded_batches

# What each window/pane column holds, by its role, and its Arrow type.
WINDOW_COLUMNS = {
    'window_start': types.TIMESTAMP,
    'window_end': types.TIMESTAMP,
    'pane_timing': pa.string(),
    'pane_index': pa.int64(),
}


def column_fields(columns: dict[str, str]) -> list[pa.Field]:
    """Arrow fields of the window/pane columns ``{role: column name}``, in
    ``WINDOW_COLUMNS`` order."""
    return [
        pa.field(columns[role], WINDOW_COLUMNS[role])
        for role in WINDOW_COLUMNS
        if columns.get(role)
    ]


def _value(role: str, window, pane):
    if role == 'window_start':
        return window.start.micros
    if role == 'window_end':
        return window.end.micros
    if role == 'pane_timing':
        return PaneInfoTiming.to_string(pane.timing)
    return pane.index


@dataclasses.dataclass(frozen=True)
class WindowedToArrow(ToArrow):
    """mapInArrow function: rows -> Arrow batches of ``schema``, whose last
    fields are the window/pane ``columns`` ({role: name})."""

    columns: tuple[tuple[str, str], ...] = ()  # (role, column name)

    def decode(self, stream, impl, pending: list) -> None:
        """An element in each of its windows, with its pane."""
        while stream.size() > 0:
            wv = impl.decode_from_stream(stream, True)
            for window in wv.windows:
                pending.append((wv.value, window, wv.pane_info))

    def batch(self, elements: list) -> pa.RecordBatch:
        roles = {name: role for role, name in self.columns}
        arrays = []
        for f in self.schema:
            role = roles.get(f.name)
            if role is None:
                arrays.append(
                    types.column_to_arrow([getattr(e, f.name) for e, _, _ in elements], f)
                )
                continue
            values = [_value(role, w, pane) for _, w, pane in elements]
            if pa.types.is_timestamp(f.type):
                arrays.append(pa.array(values, pa.int64()).cast(f.type))
            else:
                arrays.append(pa.array(values, f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


@dataclasses.dataclass(frozen=True)
class WindowedToBeamRows:
    """mapInArrow function: a query result's Arrow batches -> encoded Beam
    rows (``protocol.rows``), each in the window its ``start``/``end``
    columns name."""

    windowed_coder: WindowedValueCoder  # (RowCoder) of the output
    row_type: RowTypeConstraint
    names: tuple[str, ...]
    start: str
    end: str
    global_window: bool = False  # the input was in the global window
    label: str = 'SparkSql'  # the transform, for errors

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return encoded_batches(self.rows(batches))

    def rows(self, batches) -> Iterator[tuple[int, None, bytes]]:
        impl = self.windowed_coder.get_impl()
        convert = ArrowRows(self.row_type, self.names)
        stream = create_OutputStream()
        for batch in batches:
            starts = batch.column(self.start).cast(pa.int64()).to_pylist()
            ends = batch.column(self.end).cast(pa.int64()).to_pylist()
            for row, start, end in zip(convert.rows(batch), starts, ends):
                if start is None or end is None:
                    raise ValueError(
                        f'{self.label}: a result row has no window: its {self.start!r}'
                        f' or {self.end!r} column is null ({row}).'
                    )
                window = (
                    GlobalWindow()
                    if self.global_window
                    else IntervalWindow(Timestamp(micros=start), Timestamp(micros=end))
                )
                impl.encode_to_stream(
                    WindowedValue(row, window.max_timestamp(), (window,)), stream, True
                )
                if stream.size() >= CHUNK_BYTES:
                    yield 0, None, stream.get()
                    stream = create_OutputStream()
        if stream.size():
            yield 0, None, stream.get()
