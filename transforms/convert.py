"""The functions Spark's Python workers run at a native stage's boundary.

``ArrowRows``: a source batch's columns -> Beam rows, in bulk. An ``ARROW``
stage (``plan.ARROW``: the one reader of a ReadFromSpark) calls it inside its
own ``mapInArrow`` and hands the rows straight to its bundle, so neither
``ToBeamRows`` nor any encoding runs between Spark's reader and the DoFns.

``ToBeamRows``: a DataFrame's Arrow batches -> rows of the runner's format
(``protocol.rows``: tag 0, no key, data = Beam-encoded windowed elements, many per
row), so the next stage's bundle reads them as any other stage output.

``ToArrow``: a stage's output rows -> Arrow batches with the target schema, for
Spark's writers or a temporary view.

Both decode or encode whole columns (``types.column_to_beam`` /
``column_to_arrow``); the only per-element Python work left is building each
row object and Beam's (compiled) RowCoder encoding it, which the consuming
bundle would pay anyway.  Elements read from Spark are in the global window at
the minimum timestamp, as Beam's bounded sources emit them: every element
shares one encoded windowed-value prefix, written once.

Imported by workers: only pyarrow, Beam's coders, ``protocol.rows`` and ``files``.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Iterable
from typing import Iterator
from typing import Optional

import pyarrow as pa
from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.coders.coders import Coder
from apache_beam.coders.coders import WindowedValueCoder
from apache_beam.transforms.window import GlobalWindows
from apache_beam.typehints.row_type import RowTypeConstraint

from beam_spark_inproc.protocol.rows import CHUNK_BYTES
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import DATA
from beam_spark_inproc.protocol.rows import TAG
from beam_spark_inproc.protocol.rows import BatchBuilder
from beam_spark_inproc.transforms import types
from beam_spark_inproc.transforms.files import BATCH_ROWS
from beam_spark_inproc.transforms.files import ParquetFiles


def _prefix(windowed_coder, sample) -> bytes | None:
    """The encoded windowed-value bytes before the element, if constant."""
    impl = windowed_coder.get_impl()
    row_impl = windowed_coder.wrapped_value_coder.get_impl()
    whole = impl.encode_nested(GlobalWindows.windowed_value(sample))
    row = row_impl.encode_nested(sample)
    return whole[: -len(row)] if whole.endswith(row) else None


@dataclasses.dataclass(frozen=True)
class ArrowRows:
    """Arrow batches of a source -> Beam row objects, a column at a time.

    With ``files``, a source batch holds task numbers and the data batches are
    the files those tasks read with pyarrow (``files.ParquetFiles``)."""

    row_type: RowTypeConstraint  # the Beam row type
    names: tuple[str, ...]  # the source's columns, in the row type's order
    files: Optional[ParquetFiles] = None

    def rows(self, batch: pa.RecordBatch, user_type=None) -> Iterator:
        """The batch's rows as ``user_type`` (default: the row type's own)."""
        if self.files is not None:
            return itertools.chain.from_iterable(
                self.data_rows(data, user_type) for data in self.files.read(batch)
            )
        return self.data_rows(batch, user_type)

    def data(self, batch: pa.RecordBatch, whole: bool = False) -> Iterator[pa.RecordBatch]:
        """The source batch's data batches (the files' when ``files``: with
        ``whole``, a row group each)."""
        if self.files is not None:
            return self.files.read(batch, whole)
        return iter((batch,))

    def batch_maker(self, converter, user_type=None):
        """(data batch -> ``converter``'s batch type, whether column by column).

        Column by column where ``batches.batch_maker`` can; else (or for a
        batch it cannot convert) Beam's own ``produce_batch`` over the rows."""
        from beam_spark_inproc.transforms.batches import NotColumnar
        from beam_spark_inproc.transforms.batches import batch_maker

        columnar = batch_maker(converter, self.names, dict(self.row_type._fields))

        def make(data: pa.RecordBatch):
            nonlocal columnar
            if columnar is not None:
                try:
                    return columnar(data)
                except NotColumnar:
                    columnar = None
            return converter.produce_batch(list(self.data_rows(data, user_type)))

        return make, columnar is not None

    def batched_data(self, batches: Iterable[pa.RecordBatch]) -> Iterator:
        """The source batches' data for batched consumers: a file's row groups
        whole, everything joined or split under ``batches.MAX_ROWS`` /
        ``MAX_BYTES`` (``batches.coalesced``)."""
        from beam_spark_inproc.transforms.batches import coalesced

        return coalesced(
            itertools.chain.from_iterable(self.data(batch, whole=True) for batch in batches)
        )

    def data_rows(self, batch, user_type=None) -> Iterator:
        """A data batch's (or table's) rows (``rows`` without the files'
        reading), converted ``BATCH_ROWS`` at a time."""
        n = batch.num_rows
        if not n:
            return iter(())
        if n > BATCH_ROWS:
            return itertools.chain.from_iterable(
                self.data_rows(batch.slice(start, BATCH_ROWS), user_type)
                for start in range(0, n, BATCH_ROWS)
            )
        hints = dict(self.row_type._fields)
        user_type = user_type or self.row_type.user_type
        columns = [types.column_to_beam(batch.column(n), hints[n]) for n in self.names]
        if issubclass(user_type, tuple):
            # NamedTuples: tuple.__new__ called from C (map), no Python frame
            # per row as in _make, nor functools.partial's call (-25% per row).
            return map(tuple.__new__, itertools.repeat(user_type), zip(*columns))
        return map(user_type._make, zip(*columns))


def encoded_batches(rows: Iterator[tuple[int, None, bytes]]) -> Iterator[pa.RecordBatch]:
    """Encoded rows ``(tag, key, data)`` as the row batches of
    ``protocol.rows``, each yielded as soon as it is full."""
    out: list[pa.RecordBatch] = []
    builder = BatchBuilder(out.append)
    for tag, key, data in rows:
        builder.add(tag, key, data)
        yield from out
        out.clear()
    builder.flush()
    yield from out


@dataclasses.dataclass(frozen=True)
class ToBeamRows:
    """mapInArrow function: Spark rows -> encoded Beam rows (``protocol.rows``)."""

    windowed_coder: WindowedValueCoder  # (RowCoder) of the PCollection
    row_type: RowTypeConstraint  # the Beam row type
    names: tuple[str, ...]  # the DataFrame's columns, in the row type's order
    files: Optional[ParquetFiles] = None  # see ArrowRows

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return encoded_batches(self.rows(batches))

    def rows(self, batches) -> Iterator[tuple[int, None, bytes]]:
        convert = ArrowRows(self.row_type, self.names, self.files)
        row_impl = self.windowed_coder.wrapped_value_coder.get_impl()
        wv_impl = self.windowed_coder.get_impl()
        prefix = None
        stream = create_OutputStream()
        for batch in batches:
            for row in convert.rows(batch):
                if prefix is None:
                    prefix = _prefix(self.windowed_coder, row) or b''
                if prefix:
                    stream.write(prefix)
                    row_impl.encode_to_stream(row, stream, True)
                else:
                    wv_impl.encode_to_stream(GlobalWindows.windowed_value(row), stream, True)
                if stream.size() >= CHUNK_BYTES:
                    yield 0, None, stream.get()
                    stream = create_OutputStream()
        if stream.size():
            yield 0, None, stream.get()


@dataclasses.dataclass(frozen=True)
class ToArrow:
    """mapInArrow function: a stage output's rows -> Arrow batches of ``schema``.

    Control rows (reports of upstream bundles) are dropped: the caller reads
    them from the same input separately.
    """

    windowed_coder: Coder  # the wire coder of the PCollection
    schema: pa.Schema
    max_rows: int = 8192

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        impl = self.windowed_coder.get_impl()
        pending: list = []
        for batch in batches:
            tags = batch.column(TAG).to_pylist()
            for tag, chunk in zip(tags, batch.column(DATA).to_pylist()):
                if tag == CONTROL_TAG or not chunk:
                    continue
                self.decode(create_InputStream(chunk), impl, pending)
                if len(pending) >= self.max_rows:
                    yield self.batch(pending)
                    pending = []
        if pending:
            yield self.batch(pending)

    def decode(self, stream, impl, pending: list) -> None:
        """Appends the elements of one encoded chunk to ``pending``."""
        while stream.size() > 0:
            pending.append(impl.decode_from_stream(stream, True).value)

    def batch(self, elements: list) -> pa.RecordBatch:
        return arrow_batch(elements, self.schema)


def arrow_batch(elements: list, schema: pa.Schema) -> pa.RecordBatch:
    """Beam rows as one Arrow batch of ``schema``, a column at a time."""
    return pa.RecordBatch.from_arrays(
        [types.column_to_arrow([getattr(e, f.name) for e in elements], f) for f in schema],
        schema=schema,
    )


@dataclasses.dataclass(frozen=True)
class ToTimestampedRows:
    """mapInArrow function: a streaming read's staged rows -> encoded Beam
    rows, each element at the instant of its event-time column
    (``spark_stream``), in the global window. ``one_per_row``: one element a
    row (an ``ELEMENTS`` output port, read by a Reshuffle), else chunks."""

    windowed_coder: WindowedValueCoder  # (RowCoder) of the PCollection
    row_type: RowTypeConstraint  # the Beam row type
    names: tuple[str, ...]  # the staged columns, in the row type's order
    event_time: str  # the column giving each element's timestamp
    label: str  # the transform, for errors
    one_per_row: bool = False
    tag: int = 0  # the output port the rows are for

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return encoded_batches(self.rows(batches))

    def rows(self, batches) -> Iterator[tuple[int, None, bytes]]:
        from apache_beam.transforms.window import GlobalWindow
        from apache_beam.utils import windowed_value

        convert = ArrowRows(self.row_type, self.names)
        impl = self.windowed_coder.get_impl()
        create = windowed_value.create
        windows = (GlobalWindow(),)
        stream = create_OutputStream()
        for batch in batches:
            micros = batch.column(self.names.index(self.event_time)).cast(pa.int64()).to_pylist()
            if None in micros:
                raise ValueError(
                    f'{self.label}: a row with a null event time (column '
                    f'{self.event_time!r}); filter such rows out of the '
                    'streaming DataFrame, or give them a time.'
                )
            for row, at in zip(convert.rows(batch), micros):
                impl.encode_to_stream(create(row, at, windows), stream, True)
                if self.one_per_row or stream.size() >= CHUNK_BYTES:
                    yield self.tag, None, stream.get()
                    stream = create_OutputStream()
        if stream.size():
            yield self.tag, None, stream.get()
