"""ReadFromSpark's Arrow batches as batched DoFns' batches (``transforms.batches``).

The batch a batched DoFn gets from the first stage after a ReadFromSpark is
built column by column from the source's Arrow batch; it must equal the batch
Beam's own converter (``produce_batch``) makes from the rows the element path
gives, for every type of the interop type matrix (Arrow types as Spark hands
them over), with nulls; a type the columnar maker does not build falls back to
``produce_batch``. No Spark: the Arrow batches are made here.
"""

from __future__ import annotations

import datetime
import decimal
import typing

import pandas as pd
import pyarrow as pa
import pytest
from apache_beam.typehints.arrow_type_compatibility import PyarrowBatchConverter
from apache_beam.typehints.pandas_type_compatibility import DataFrameBatchConverter

from beam_spark_inproc.transforms import types
from beam_spark_inproc.transforms.batches import NotColumnar
from beam_spark_inproc.transforms.batches import batch_maker
from beam_spark_inproc.transforms.convert import ArrowRows

UTC = datetime.timezone.utc
TS = pa.timestamp('us', tz='UTC')
# column -> (Arrow type as Spark hands it over, two values); a third row is null.
MATRIX = {
    'id': (pa.int64(), [1, 2]),
    'tinyint': (pa.int8(), [-128, 127]),
    'smallint': (pa.int16(), [-32768, 32767]),
    'int': (pa.int32(), [-(2**31), 2**31 - 1]),
    'bigint': (pa.int64(), [-(2**63), 2**63 - 1]),
    'float': (pa.float32(), [1.5, -0.25]),
    'double': (pa.float64(), [1e300, -2.5]),
    'boolean': (pa.bool_(), [True, False]),
    'string': (pa.string(), ['héllo', '']),
    'large_string': (pa.large_string(), ['x', 'yz']),
    'binary': (pa.binary(), [b'\x00\xff', b'']),
    'decimal': (
        pa.decimal128(12, 3),
        [decimal.Decimal('123456789.123'), decimal.Decimal('-0.001')],
    ),
    'timestamp': (
        TS,
        [
            datetime.datetime(2024, 2, 29, 12, 30, 15, 123456, tzinfo=UTC),
            datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        ],
    ),
    'date': (pa.date32(), [datetime.date(2024, 2, 29), datetime.date(1900, 1, 1)]),
    'struct': (
        pa.struct([('a', pa.int32()), ('b', pa.string())]),
        [{'a': 1, 'b': 'x'}, {'a': 2, 'b': None}],
    ),
    'array': (pa.list_(pa.int64()), [[1, None, 3], []]),
    'map': (pa.map_(pa.string(), pa.float64()), [[('a', 1.0)], []]),
    'nested': (
        pa.list_(pa.struct([('t', TS)])),
        [[{'t': datetime.datetime(2024, 2, 29, tzinfo=UTC)}], None],
    ),
}


def _batch(names) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(MATRIX[n][1] + [None], MATRIX[n][0]) for n in names], names=names
    )


def _source(batch):
    schema = pa.schema([types._utc(f) for f in batch.schema])
    return ArrowRows(types.row_type(schema), tuple(schema.names))


def _converter(kind, row_type):
    if kind == 'table':
        return PyarrowBatchConverter.from_typehints(row_type, pa.Table)
    return DataFrameBatchConverter.from_typehints(row_type, pd.DataFrame)


def _equal(kind, got, want) -> None:
    if kind == 'table':
        assert got.schema == want.schema, (got.schema, want.schema)
        assert got.equals(want), (got, want)
    else:
        pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize('kind', ['table', 'dataframe'])
@pytest.mark.parametrize('name', sorted(MATRIX))
def test_columnar_batch_equals_beams_produce_batch(kind, name):
    batch = _batch([name, 'id'] if name != 'id' else [name])
    source = _source(batch)
    try:
        converter = _converter(kind, source.row_type)
    except Exception as e:  # Beam has no such batched DoFn to feed
        pytest.skip(f'Beam makes no {kind} converter for {name}: {e}')
    rows = list(source.data_rows(batch))
    make, columnar = source.batch_maker(converter)
    if (kind, name) == ('dataframe', 'bigint'):
        # Beam's from_records goes through float64: +-2**63 with a null does
        # not survive; the columnar batch keeps every value.
        with pytest.raises(TypeError, match='cannot safely cast'):
            converter.produce_batch(rows)
        got = make(batch)
        assert columnar and str(got['bigint'].dtype) == 'Int64'
        assert got['bigint'].tolist() == [-(2**63), 2**63 - 1, pd.NA]
        return
    want = converter.produce_batch(rows)
    _equal(kind, make(batch), want)
    maker = batch_maker(converter, source.names, dict(source.row_type._fields))
    if columnar:  # built column by column, with no row objects
        _equal(kind, maker(batch), want)


@pytest.mark.parametrize('kind', ['table', 'dataframe'])
def test_numbers_strings_and_bools_are_columnar(kind):
    """The columns of a typical read (numbers, strings, bools, with nulls)
    convert with no row made: ``data_rows`` is never called."""
    names = ['id', 'int', 'double', 'string', 'large_string', 'boolean']
    batch = _batch(names)
    source = _source(batch)
    converter = _converter(kind, source.row_type)
    want = converter.produce_batch(list(source.data_rows(batch)))

    class NoRows(ArrowRows):
        def data_rows(self, *args, **kwargs):
            raise AssertionError('rows were made')

    make, columnar = NoRows(source.row_type, source.names).batch_maker(converter)
    assert columnar
    _equal(kind, make(batch), want)


def test_a_batch_it_cannot_convert_falls_back_to_the_rows():
    """A column whose type differs from the converter's in a way that is not a
    widening (here int64 data for an int32 field): NotColumnar, and the maker
    ``ArrowRows`` gives switches to Beam's produce_batch over the rows."""
    schema_batch = _batch(['int'])
    source = _source(schema_batch)
    converter = _converter('table', source.row_type)
    wider = pa.RecordBatch.from_arrays([pa.array([1, None], pa.int64())], names=['int'])
    maker = batch_maker(converter, source.names, dict(source.row_type._fields))
    with pytest.raises(NotColumnar, match="field 'int': int64 is not int32"):
        maker(wider)
    make, _ = source.batch_maker(converter)
    assert make(wider).equals(converter.produce_batch(list(source.data_rows(wider))))


def test_other_batch_types_get_no_columnar_maker():
    from apache_beam.typehints.batch import BatchConverter
    from apache_beam.typehints.row_type import RowTypeConstraint

    converter = BatchConverter.from_typehints(element_type=int, batch_type=typing.List[int])
    assert batch_maker(converter, ('x',), {'x': int}) is None
    keep = DataFrameBatchConverter.from_typehints(
        RowTypeConstraint.from_fields(
            [('x', int)], field_options={'x': [('beam:dataframe:index', None)]}
        ),
        pd.DataFrame,
    )
    assert batch_maker(keep, ('x',), {'x': int}) is None


def _sized(n: int, start: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(range(start, start + n), pa.int64())], names=['id'])


def test_coalesced_joins_small_batches_and_splits_large_ones_evenly():
    """Batched consumers get large batches: small ones joined (a Table over
    the same buffers, nothing copied) up to the row cap, a larger one split
    into even slices under it, empty ones dropped, rows kept in order."""
    from beam_spark_inproc.transforms.batches import coalesced

    small = [_sized(3), _sized(4, 3), _sized(0), _sized(5, 7)]
    got = list(coalesced(small, max_rows=8))
    assert [b.num_rows for b in got] == [7, 5]
    assert isinstance(got[0], pa.Table) and got[0].column('id').num_chunks == 2
    assert (
        got[0].column('id').chunk(0).buffers()[1].address == small[0].column(0).buffers()[1].address
    )  # joined, not copied
    assert isinstance(got[1], pa.RecordBatch)  # one batch alone stays a batch
    pieces = list(coalesced([_sized(2), _sized(20, 2)], max_rows=8))
    assert [b.num_rows for b in pieces] == [2, 7, 7, 6]
    joined = pa.concat_tables(
        [pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b for b in pieces]
    )
    assert joined.column('id').to_pylist() == list(range(22))
    # The byte cap: 8 bytes per int64 row, 40 bytes -> at most 5 rows.
    assert [
        b.num_rows for b in coalesced([_sized(3)] * 3 + [_sized(12)], max_rows=100, max_bytes=40)
    ] == [3, 3, 3, 4, 4, 4]
    assert list(coalesced([_sized(0)])) == []


@pytest.mark.parametrize('kind', ['table', 'dataframe'])
def test_joined_batches_convert_as_beams_produce_batch(kind):
    """A batch joined from several Arrow batches (chunked columns) converts
    to what Beam's produce_batch makes from all their rows, and its rows are
    the batches' rows, over the type matrix; rows of a table longer than
    ``files.BATCH_ROWS`` are made a slice at a time, the same rows."""
    logical = {'decimal', 'timestamp', 'date', 'nested'}  # no pa.Table converter
    names = [n for n in sorted(MATRIX) if kind == 'dataframe' or n not in logical]
    one = _batch(names)
    table = pa.Table.from_batches([one, one.slice(1), one.slice(0, 1)])
    source = _source(one)
    converter = _converter(kind, source.row_type)
    rows = list(source.data_rows(table))
    assert rows == [r for b in (one, one.slice(1), one.slice(0, 1)) for r in source.data_rows(b)]
    make, columnar = source.batch_maker(converter)
    assert columnar
    if kind == 'dataframe':  # Beam's from_records: bigint via float64 fails
        names = [n for n in names if n != 'bigint']
        table, rows = table.select(names), None
        source = _source(one.select(names))
        converter = _converter(kind, source.row_type)
        rows = list(source.data_rows(table))
        make, _ = source.batch_maker(converter)
    _equal(kind, make(table), converter.produce_batch(rows))
    from beam_spark_inproc.transforms import files

    long = pa.Table.from_batches([_sized(files.BATCH_ROWS + 7)] * 2)
    longs = _source(_sized(1))
    assert [r.id for r in longs.data_rows(long)] == list(range(files.BATCH_ROWS + 7)) * 2
