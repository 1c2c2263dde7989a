"""The type matrix of docs/spark-interop.md, one test per row, without Spark.

Each row: a Spark type becomes an Arrow type (PySpark's ``to_arrow_schema``) and
a Beam schema type; Arrow values become Beam values (checked against values
written here by hand), survive Beam's RowCoder, and turn back into the same
Arrow values; the Spark type written back is the one the docs promise.
(The same matrix runs through Spark, classic and Connect, in
``tests/integration/spark_interop_pipelines.py::type_matrix``.)
"""

from __future__ import annotations

import datetime
import decimal

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.portability import common_urns
from apache_beam.portability.api import schema_pb2
from apache_beam.utils.timestamp import Timestamp
from pyspark.sql import types as st

from beam_spark_inproc.compat import beam as beam_compat
from beam_spark_inproc.transforms import types
from tests.integration.spark_interop_pipelines import _plain

UTC = datetime.timezone.utc
T0 = datetime.datetime(2024, 2, 29, 12, 30, 15, 123456, tzinfo=UTC)
T0_MICROS = 1709209815123456  # date -u -d '2024-02-29 12:30:15' +%s, then the micros


def atomic(kind):
    return lambda t: t.atomic_type == kind


def logical(urn):
    return lambda t: t.logical_type.urn == urn


# name: (Spark type, Arrow values, Beam values, Beam type check, Spark type written back)
MATRIX = {
    'tinyint': (st.ByteType(), [-128, 127], [-128, 127], atomic(schema_pb2.INT16), 'smallint'),
    'smallint': (st.ShortType(), [-32768, 7], [-32768, 7], atomic(schema_pb2.INT16), 'smallint'),
    'int': (
        st.IntegerType(),
        [-(2**31), 2**31 - 1],
        [-(2**31), 2**31 - 1],
        atomic(schema_pb2.INT32),
        'int',
    ),
    'bigint': (
        st.LongType(),
        [-(2**63), 2**63 - 1],
        [-(2**63), 2**63 - 1],
        atomic(schema_pb2.INT64),
        'bigint',
    ),
    'float': (st.FloatType(), [1.5, -0.25], [1.5, -0.25], atomic(schema_pb2.FLOAT), 'float'),
    'double': (st.DoubleType(), [1e300, -2.5], [1e300, -2.5], atomic(schema_pb2.DOUBLE), 'double'),
    'boolean': (
        st.BooleanType(),
        [True, False],
        [True, False],
        atomic(schema_pb2.BOOLEAN),
        'boolean',
    ),
    'string': (st.StringType(), ['héllo', ''], ['héllo', ''], atomic(schema_pb2.STRING), 'string'),
    'binary': (
        st.BinaryType(),
        [b'\x00\xff', b''],
        [b'\x00\xff', b''],
        atomic(schema_pb2.BYTES),
        'binary',
    ),
    'decimal': (
        st.DecimalType(12, 3),
        [decimal.Decimal('123456789.123')],
        [decimal.Decimal('123456789.123')],
        logical(common_urns.decimal.urn),
        'decimal(38,18)',
    ),
    'timestamp': (
        st.TimestampType(),
        [T0],
        [Timestamp(micros=T0_MICROS)],
        logical(common_urns.micros_instant.urn),
        'timestamp',
    ),
    'timestamp_ntz': (
        st.TimestampNTZType(),
        [T0.replace(tzinfo=None)],
        [Timestamp(micros=T0_MICROS)],
        logical(common_urns.micros_instant.urn),
        'timestamp',
    ),
    'date': (
        st.DateType(),
        [datetime.date(2024, 2, 29)],
        [datetime.date(2024, 2, 29)],
        logical(beam_compat.DATE_URN),
        'date',
    ),
    'struct': (
        st.StructType(
            [st.StructField('a', st.IntegerType()), st.StructField('b', st.StringType())]
        ),
        [{'a': 1, 'b': 'x'}, {'a': 2, 'b': None}],
        [(1, 'x'), (2, None)],
        lambda t: [f.name for f in t.row_type.schema.fields] == ['a', 'b'],
        'struct<a:int,b:string>',
    ),
    'array': (
        st.ArrayType(st.LongType()),
        [[1, None, 3], []],
        [[1, None, 3], []],
        lambda t: t.array_type.element_type.nullable,
        'array<bigint>',
    ),
    'map': (
        st.MapType(st.StringType(), st.DoubleType()),
        [[('a', 1.0)], []],
        [{'a': 1.0}, {}],
        lambda t: t.HasField('map_type'),
        'map<string,double>',
    ),
    'nested timestamps': (
        st.ArrayType(st.StructType([st.StructField('t', st.TimestampType())])),
        [[{'t': T0}]],
        [[(Timestamp(micros=T0_MICROS),)]],
        lambda t: t.HasField('array_type'),
        'array<struct<t:timestamp>>',
    ),
}


@pytest.mark.parametrize('name', list(MATRIX))
def test_type_matrix_row(name):
    spark_type, arrow_values, beam_values, check, written = MATRIX[name]
    spark_schema = st.StructType([st.StructField('c', spark_type, True)])
    arrow_schema, row_type = types.spark_row_type(spark_schema)
    field_type = types.beam_schema(list(arrow_schema)).fields[0].type
    assert field_type.nullable
    assert check(field_type), field_type

    column = pa.array(arrow_values + [None], arrow_schema.field('c').type)
    values = types.column_to_beam(column, dict(row_type._fields)['c'])
    assert [_plain(v) for v in values] == beam_values + [None]

    coder = beam.coders.registry.get_coder(row_type)
    rows = [row_type.user_type(v) for v in values]
    decoded = [coder.decode(coder.encode(r)) for r in rows]
    assert [_plain(r.c) for r in decoded] == beam_values + [None]

    # Back: the Beam schema decides the Arrow/Spark type of a new table.
    back_schema = types.arrow_schema(types.element_schema(row_type, 'test'))
    assert types.arrow_to_spark(back_schema).fields[0].dataType.simpleString() == written
    back = types.column_to_arrow([r.c for r in decoded], back_schema.field('c'))
    if written == spark_type.simpleString():
        assert back.equals(column.cast(back.type)), (back, column)
    else:  # widened (tinyint, decimal) or made UTC (timestamp_ntz): same values
        assert (
            back.cast(pa.string()).to_pylist()[: len(beam_values)]
            == column.cast(back.type).cast(pa.string()).to_pylist()[: len(beam_values)]
        )


@pytest.mark.parametrize(
    'spark_type', [st.DayTimeIntervalType(), st.NullType()], ids=lambda t: t.simpleString()
)
def test_spark_type_without_beam_type_names_field(spark_type):
    schema = st.StructType([st.StructField('ok', st.LongType()), st.StructField('bad', spark_type)])
    with pytest.raises(
        types.SchemaError, match=rf"field 'bad': Spark type {spark_type.simpleString()}"
    ):
        types.spark_row_type(schema)


def test_beam_type_without_spark_type_names_field():
    row = beam.typehints.row_type.RowTypeConstraint.from_fields(
        [('ok', int), ('bad', beam.typehints.Any)]
    )
    with pytest.raises(
        types.SchemaError,
        match=r"field 'bad': Beam logical type "
        r'beam:logical:pythonsdk_any:v1 has no Arrow/Spark type',
    ):
        types.arrow_schema(types.element_schema(row, 'test'))


def test_value_that_does_not_fit_names_field():
    with pytest.raises(types.SchemaError, match=r"field 'x': a value does not fit"):
        types.column_to_arrow([300], pa.field('x', pa.int8()))


def test_non_nullable_fields_stay_non_nullable():
    """The nullability row of the matrix, its other half: a Spark field that is
    not nullable (here a bigint and an array of non-null bigints) is a
    non-Optional Beam field, survives RowCoder, and a table written from the
    Beam schema gets the same non-nullable Spark fields back."""
    spark_schema = st.StructType(
        [
            st.StructField('c', st.LongType(), False),
            st.StructField('e', st.ArrayType(st.LongType(), False), False),
            st.StructField('d', st.StringType(), True),
        ]
    )
    arrow_schema, row_type = types.spark_row_type(spark_schema)
    fields = types.beam_schema(list(arrow_schema)).fields
    assert [(f.name, f.type.nullable) for f in fields] == [('c', False), ('e', False), ('d', True)]
    assert not fields[1].type.array_type.element_type.nullable
    coder = beam.coders.registry.get_coder(row_type)
    row = row_type.user_type(2**63 - 1, [1, 2], None)
    assert tuple(coder.decode(coder.encode(row))) == (2**63 - 1, [1, 2], None)
    back = types.arrow_to_spark(types.arrow_schema(types.element_schema(row_type, 't')))
    assert back == spark_schema, back
