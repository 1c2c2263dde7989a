"""A source's Arrow batches as the batches of Beam's batched DoFns, in bulk.

Beam's batched DoFns (``process_batch``; Beam's DataFrame API's
``to_dataframe`` is one: ``RowsToDataFrameFn``) declare their input batch type
with a ``BatchConverter`` (``apache_beam.typehints.batch``). Fed elements,
Beam buffers them and makes each batch with the converter's ``produce_batch``
(``GeneralPurposeConsumerSet``), a Python loop over rows. The first stage after
a ReadFromSpark (``plan.ARROW``) has Arrow batches already, so for the batch
types made here it hands a consumer that accepts batches one batch per Arrow
batch, built column by column, and builds no row objects for it:

* ``pa.Table`` (``PyarrowBatchConverter``): the batch's columns in the
  converter's Arrow schema, when each column's type is the converter's (string
  and binary widths aside); as Beam's ``produce_batch`` does, the converter's
  schema (names, nullability, metadata) is the table's;
* ``pd.DataFrame`` (``DataFrameBatchConverterDropIndex``, Beam's DataFrame API):
  each column with the pandas dtype Beam gives its field type
  (``pandas_type_compatibility.dtype_from_typehint``); numbers, strings and
  bools convert in Arrow's C++ code, other fields (timestamps, dates, decimals,
  bytes, nested types: ``object`` columns of Beam's values) are the same Python
  values the rows would hold (``types.column_to_beam``), put into the column.

The batches are large (``coalesced``): a batched consumer works per batch
(Beam's DataFrame API builds a frame and its operations per batch; a DoFn
aggregating per batch outputs per batch), so Spark's 10,000-row Arrow batches
are joined, without copying, into batches of up to ``MAX_ROWS`` rows and
``MAX_BYTES`` of Arrow data, and local Parquet files are read a row group at a
time (as Beam's ``ReadFromParquetBatched``), larger row groups split evenly
under the same cap.

Anything else (another batch type, an index kept in the DataFrame, a column
type the converter would change) returns None from ``batch_maker``: that
consumer gets Beam's ``produce_batch`` over the rows, exactly what Beam's
consumer set would have built.  ``tests/unit/test_arrow_batches.py`` checks
the batches equal ``produce_batch``'s over the type matrix.

Imported by workers: pyarrow, and pandas only when a consumer wants DataFrames.
"""

from __future__ import annotations

from typing import Any
from typing import Callable
from typing import Iterable
from typing import Iterator
from typing import Optional
from typing import Union

import pyarrow as pa

from beam_spark_inproc.transforms import types

Data = Union[pa.RecordBatch, pa.Table]
Maker = Callable[[Data], Any]

# The cap on a batched consumer's batch: rows, and bytes of Arrow data (a
# row group of a Parquet writer's default 128 MB holds at most about that).
MAX_ROWS = 1 << 20
MAX_BYTES = 64 << 20


def coalesced(
    batches: Iterable[pa.RecordBatch],
    max_rows: Optional[int] = None,
    max_bytes: Optional[int] = None,
) -> Iterator[Data]:
    """``batches`` joined (a ``pa.Table`` of their columns, no copy) or split
    evenly (slices) into batches of at most ``max_rows`` rows (default
    ``MAX_ROWS``) and about ``max_bytes`` (``MAX_BYTES``); empty batches are
    dropped."""
    max_rows = max_rows or MAX_ROWS
    max_bytes = max_bytes or MAX_BYTES
    held: list[pa.RecordBatch] = []
    rows = size = 0

    def joined() -> Data:
        return held[0] if len(held) == 1 else pa.Table.from_batches(held)

    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        nbytes = batch.nbytes
        if held and (rows + n > max_rows or size + nbytes > max_bytes):
            yield joined()
            held, rows, size = [], 0, 0
        if n > max_rows or nbytes > max_bytes:
            pieces = max(-(-n // max_rows), -(-nbytes // max_bytes))
            step = -(-n // pieces)
            for start in range(0, n, step):
                yield batch.slice(start, step)
            continue
        held.append(batch)
        rows, size = rows + n, size + nbytes
    if held:
        yield joined()


class NotColumnar(TypeError):
    """A batch this maker cannot build column by column (the caller uses the
    rows and Beam's ``produce_batch`` instead)."""


def batch_maker(converter, names: tuple[str, ...], hints: dict) -> Optional[Maker]:
    """A function making ``converter``'s batch type from an Arrow batch with
    columns ``names`` (Beam field types ``hints``), or None (use the rows).
    The function raises ``NotColumnar`` for a batch it cannot convert."""
    batch_type = getattr(converter, 'batch_type', None)
    try:
        if batch_type is pa.Table:
            return _table_maker(converter, names)
        import pandas as pd

        if batch_type is pd.DataFrame:
            return _dataframe_maker(converter, names, hints)
    except Exception:  # a converter of a shape not known here: Beam's way
        return None
    return None


# Arrow casts that keep every value: the source's type -> the converter's.
def _widening(found: pa.DataType, wanted: pa.DataType) -> bool:
    if (found, wanted) in ((pa.large_string(), pa.string()), (pa.large_binary(), pa.binary())):
        return True
    return (
        pa.types.is_signed_integer(found)
        and pa.types.is_signed_integer(wanted)
        and found.bit_width < wanted.bit_width
    )


def _table_maker(converter, names) -> Optional[Maker]:
    from apache_beam.typehints.arrow_type_compatibility import PyarrowBatchConverter

    if type(converter) is not PyarrowBatchConverter:
        return None
    schema: pa.Schema = converter._arrow_schema
    if sorted(schema.names) != sorted(names):
        return None
    position = {name: i for i, name in enumerate(names)}

    def make(batch: Data) -> pa.Table:
        columns = []
        for field in schema:
            column = batch.column(position[field.name])
            if column.type != field.type:
                if not _widening(column.type, field.type):
                    raise NotColumnar(f'field {field.name!r}: {column.type} is not {field.type}')
                column = column.cast(field.type)
            columns.append(column)
        return pa.Table.from_arrays(columns, schema=schema)

    return make


# Arrow's own pandas conversion, for the Arrow types it converts exactly.
def _columnar_type(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
    )


def _dataframe_maker(converter, names, hints) -> Optional[Maker]:
    import numpy as np
    import pandas as pd
    from apache_beam.typehints import pandas_type_compatibility as ptc

    if type(converter) is not ptc.DataFrameBatchConverterDropIndex:
        return None
    fields = list(converter._element_type._fields)
    if sorted(name for name, _ in fields) != sorted(names):
        return None
    position = {name: i for i, name in enumerate(names)}
    # Nullable ints and bools through pandas' masked dtypes (not float64/object).
    mapper = {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
    }.get
    dtypes = [(name, ptc.dtype_from_typehint(typehint)) for name, typehint in fields]
    plans = [(name, dtype, _columnar_dtype(pd, np, dtype)) for name, dtype in dtypes]

    def make(batch: Data) -> 'pd.DataFrame':
        data = {}
        for name, dtype, columnar in plans:
            column = batch.column(position[name])
            if columnar and _columnar_type(column.type):
                series = column.to_pandas(types_mapper=mapper)
            else:  # the rows' own values, as Beam's from_records takes them
                series = pd.Series(types.column_to_beam(column, hints[name]), dtype=object)
            data[name] = series.astype(dtype)
        return pd.DataFrame(data, columns=[name for name, _, _ in plans])

    return make


def _columnar_dtype(pd, np, dtype) -> bool:
    """Whether ``dtype`` is one Arrow's pandas conversion can give (numbers,
    strings, bools); else (``object``, ``bytes``) the rows' values."""
    if isinstance(dtype, (pd.StringDtype, pd.BooleanDtype)):
        return True
    if isinstance(dtype, pd.api.extensions.ExtensionDtype):
        return getattr(dtype, 'kind', '') in 'iu'
    try:
        return dtype is not object and np.dtype(dtype).kind in 'iufb'
    except TypeError:
        return False
