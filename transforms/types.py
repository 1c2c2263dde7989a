"""Schemas across Beam, Arrow and Spark, and the bulk value conversions between them.

Arrow is the middle: a Spark schema becomes Arrow with PySpark's own
``to_arrow_schema`` (and back with ``from_arrow_schema``); an Arrow schema
becomes a Beam schema with Beam's ``arrow_type_compatibility`` for the types it
knows (ints of each width, floats, bool, str, bytes, lists, maps, structs) plus
the logical types it does not (Beam issue 23817), which are mapped here:

============================  ==========================  ==========================
Spark                         Arrow                       Beam (Python type)
============================  ==========================  ==========================
TimestampType (+ NTZ on read) timestamp[us, tz=UTC]       ``Timestamp`` (micros_instant)
DateType                      date32                      ``datetime.date`` (date;
                                                          javasdk_date before Beam 2.73)
DecimalType(p, s)             decimal128(p, s)            ``decimal.Decimal`` (fixed_decimal
                                                          (p, s); ``decimal`` when written
                                                          from a Beam schema: (38, 18))
============================  ==========================  ==========================

Beam's micros vs Spark's: both count microseconds since the epoch in UTC, so
the value crosses unchanged (timestamp_ntz columns are read as UTC).

Values are converted a column at a time: Arrow hands whole columns to Python
(``to_pylist``) and takes them back (``pa.array``); only types with no Python
equivalent on the other side (timestamps, nested rows, maps) get a per-value
function, built once per schema (``to_beam`` / ``to_arrow``).

A type that cannot cross raises ``SchemaError`` naming the field and both types.
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any
from typing import Callable
from typing import Optional

import pyarrow as pa
from apache_beam.portability import common_urns
from apache_beam.portability.api import schema_pb2
from apache_beam.typehints import arrow_type_compatibility as atc
from apache_beam.typehints import schemas
from apache_beam.typehints.row_type import RowTypeConstraint
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.compat import beam as beam_compat

FIXED_DECIMAL_URN = 'beam:logical_type:fixed_decimal:v1'
DEFAULT_DECIMAL = (38, 18)  # Spark's DecimalType() default
TIMESTAMP = pa.timestamp('us', tz='UTC')
_MICROSECOND = datetime.timedelta(microseconds=1)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class SchemaError(TypeError):
    """A value type that cannot cross between Beam, Arrow and Spark."""


# --- Arrow -> Beam -----------------------------------------------------------


def _beam_fieldtype(arrow_type: pa.DataType, where: str) -> schema_pb2.FieldType:
    if pa.types.is_timestamp(arrow_type):
        return schemas.typing_to_runner_api(Timestamp)
    if pa.types.is_date32(arrow_type):
        return schemas.typing_to_runner_api(datetime.date)
    if pa.types.is_decimal(arrow_type):
        # Beam Python's fixed_decimal drops its (precision, scale) argument
        # when it makes a Python type, so decimals read as Beam's decimal.
        return schemas.typing_to_runner_api(decimal.Decimal)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return schema_pb2.FieldType(
            array_type=schema_pb2.ArrayType(
                element_type=_beam_field_type(arrow_type.value_field, where + '[]')
            )
        )
    if pa.types.is_map(arrow_type):
        return schema_pb2.FieldType(
            map_type=schema_pb2.MapType(
                key_type=_beam_field_type(arrow_type.key_field, where + '.key'),
                value_type=_beam_field_type(arrow_type.item_field, where + '.value'),
            )
        )
    if pa.types.is_struct(arrow_type):
        return schema_pb2.FieldType(
            row_type=schema_pb2.RowType(
                schema=beam_schema(
                    [arrow_type.field(i) for i in range(arrow_type.num_fields)], where
                )
            )
        )
    if pa.types.is_int8(arrow_type):
        # Beam Python's BYTE coder writes 0..255 only (Java's byte is signed):
        # Spark's tinyint (-128..127) reads as int16.
        arrow_type = pa.int16()
    if pa.types.is_large_string(arrow_type):
        arrow_type = pa.string()
    if pa.types.is_large_binary(arrow_type):
        arrow_type = pa.binary()
    try:
        return atc._beam_fieldtype_from_arrow_type(arrow_type)
    except ValueError:
        raise SchemaError(
            f'field {where!r}: Arrow type {arrow_type} has no Beam schema type'
        ) from None


def _beam_field_type(field: pa.Field, where: str) -> schema_pb2.FieldType:
    field_type = _beam_fieldtype(field.type, where)
    field_type.nullable = field.nullable
    return field_type


def beam_schema(fields, where: str = '') -> schema_pb2.Schema:
    prefix = where + '.' if where else ''
    return schema_pb2.Schema(
        fields=[
            schema_pb2.Field(name=f.name, type=_beam_field_type(f, prefix + f.name)) for f in fields
        ]
    )


def row_type(arrow_schema: pa.Schema) -> RowTypeConstraint:
    """The Beam row type (a generated NamedTuple with RowCoder) of an Arrow schema."""
    schema = beam_schema(list(arrow_schema))
    # Beam annotates ``typing_from_runner_api`` as returning ``type``; for a
    # row type it returns a RowTypeConstraint.
    return schemas.typing_from_runner_api(  # type: ignore[return-value]
        schema_pb2.FieldType(row_type=schema_pb2.RowType(schema=schema))
    )


def spark_to_arrow(spark_schema) -> pa.Schema:
    """A Spark StructType as Arrow, timestamps (with or without zone) as UTC micros."""
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    try:
        arrow = pyspark_compat.to_arrow_schema(spark_schema)
    except Exception as e:  # pyspark names the unsupported type
        bad = _first_unsupported(spark_schema)
        raise SchemaError(f'{bad}has no Arrow/Beam equivalent ({type(e).__name__}: {e})') from None
    return pa.schema([_utc(f) for f in arrow])


def _first_unsupported(spark_schema) -> str:
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    for field in spark_schema.fields:
        try:
            pyspark_compat.to_arrow_type(field.dataType)
        except Exception:
            return f'field {field.name!r}: Spark type {field.dataType.simpleString()} '
    return ''


def _utc(field: pa.Field) -> pa.Field:
    t = field.type
    if pa.types.is_timestamp(t):
        return field.with_type(TIMESTAMP)
    if pa.types.is_struct(t):
        return field.with_type(pa.struct([_utc(t.field(i)) for i in range(t.num_fields)]))
    if pa.types.is_list(t):
        return field.with_type(pa.list_(_utc(t.value_field)))
    if pa.types.is_map(t):
        return field.with_type(pa.map_(_utc(t.key_field), _utc(t.item_field)))
    return field


def arrow_to_spark(arrow_schema: pa.Schema):
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    return pyspark_compat.from_arrow_schema(arrow_schema)


# --- Beam -> Arrow -----------------------------------------------------------


def spark_row_type(spark_schema) -> tuple[pa.Schema, RowTypeConstraint]:
    """(Arrow schema, Beam row type) of a Spark schema; a field that cannot
    cross is named with its Spark type."""
    arrow = spark_to_arrow(spark_schema)
    for spark_field, arrow_field in zip(spark_schema.fields, arrow):
        try:
            _beam_field_type(arrow_field, arrow_field.name)
        except SchemaError:
            raise SchemaError(
                f'field {spark_field.name!r}: Spark type '
                f'{spark_field.dataType.simpleString()} (Arrow {arrow_field.type}) '
                'has no Beam schema type'
            ) from None
    return arrow, row_type(arrow)


def element_schema(element_type, what: str) -> schema_pb2.Schema:
    """The Beam schema of a PCollection's element type, or a SchemaError."""
    try:
        return schemas.schema_from_element_type(element_type)
    except Exception:
        name = getattr(element_type, '__name__', None) or str(element_type)
        raise SchemaError(
            f'{what} has element type {name}, which has no Beam schema: '
            'give it one (beam.Row elements, a NamedTuple registered with '
            'beam.coders.RowCoder, or .with_output_types(...)).'
        ) from None


def _arrow_type(field_type: schema_pb2.FieldType, where: str) -> pa.DataType:
    kind = field_type.WhichOneof('type_info')
    if kind == 'logical_type':
        urn = field_type.logical_type.urn
        if urn in (common_urns.micros_instant.urn, common_urns.millis_instant.urn):
            return TIMESTAMP
        if urn == beam_compat.DATE_URN:
            return pa.date32()
        if urn == common_urns.decimal.urn:
            return pa.decimal128(*DEFAULT_DECIMAL)
        if urn == FIXED_DECIMAL_URN:
            values = field_type.logical_type.argument.row_value.values
            return pa.decimal128(values[0].atomic_value.int32, values[1].atomic_value.int32)
        hint = (
            " (Beam could not infer the field's type: declare it, e.g. with "
            '.with_output_types(...) on the transform making the rows, or a '
            'NamedTuple registered with RowCoder)'
            if urn == schemas.PYTHON_ANY_URN
            else ''
        )
        raise SchemaError(
            f'field {where!r}: Beam logical type {urn} has no Arrow/Spark type' + hint
        )
    if kind == 'array_type':
        return pa.list_(_arrow_field('element', field_type.array_type.element_type, where + '[]'))
    if kind == 'iterable_type':
        return pa.list_(
            _arrow_field('element', field_type.iterable_type.element_type, where + '[]')
        )
    if kind == 'map_type':
        m = field_type.map_type
        return pa.map_(
            _arrow_field('key', m.key_type, where + '.key'),
            _arrow_field('value', m.value_type, where + '.value'),
        )
    if kind == 'row_type':
        return pa.struct(arrow_fields(field_type.row_type.schema, where))
    try:
        return atc._arrow_type_from_beam_fieldtype(field_type)
    except (ValueError, NotImplementedError):
        name = schema_pb2.AtomicType.Name(field_type.atomic_type) if kind == 'atomic_type' else kind
        raise SchemaError(f'field {where!r}: Beam type {name} has no Arrow/Spark type') from None


def _arrow_field(name: str, field_type: schema_pb2.FieldType, where: str) -> pa.Field:
    return pa.field(name, _arrow_type(field_type, where), field_type.nullable)


def arrow_fields(schema: schema_pb2.Schema, where: str = '') -> list[pa.Field]:
    prefix = where + '.' if where else ''
    return [_arrow_field(f.name, f.type, prefix + f.name) for f in schema.fields]


def arrow_schema(schema: schema_pb2.Schema) -> pa.Schema:
    return pa.schema(arrow_fields(schema))


# --- values --------------------------------------------------------------------

Convert = Optional[Callable[[Any], Any]]  # None: the value crosses as it is


def _optional(fn: Callable) -> Callable:
    return lambda v: None if v is None else fn(v)


def to_beam(arrow_type: pa.DataType, beam_type) -> Convert:
    """Per-value function from ``to_pylist`` output to Beam's language type."""
    if pa.types.is_timestamp(arrow_type):
        return _optional(
            lambda v: Timestamp(
                micros=((v if v.tzinfo else v.replace(tzinfo=datetime.timezone.utc)) - _EPOCH)
                // _MICROSECOND
            )
        )
    beam_type = _unwrap(beam_type)
    if pa.types.is_struct(arrow_type):
        user_type = beam_type.user_type if isinstance(beam_type, RowTypeConstraint) else beam_type
        names = [arrow_type.field(i).name for i in range(arrow_type.num_fields)]
        fields = [
            to_beam(arrow_type.field(i).type, t) for i, (_, t) in enumerate(_fields_of(user_type))
        ]
        return _optional(
            lambda v: user_type(
                *[v[n] if c is None or v[n] is None else c(v[n]) for n, c in zip(names, fields)]
            )
        )
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        inner = to_beam(arrow_type.value_type, _args(beam_type)[0])
        return (
            None
            if inner is None
            else _optional(lambda v: [None if x is None else inner(x) for x in v])
        )
    if pa.types.is_map(arrow_type):
        key_type, item_type = _args(beam_type)
        k = to_beam(arrow_type.key_type, key_type) or (lambda x: x)
        i = to_beam(arrow_type.item_type, item_type) or (lambda x: x)
        return _optional(lambda v: {k(a): None if b is None else i(b) for a, b in v})
    return None


def column_to_beam(column: pa.Array, beam_type) -> list:
    """One Arrow column as a list of Beam values (timestamps cast in bulk)."""
    if pa.types.is_timestamp(column.type):
        micros = column.cast(pa.int64()).to_pylist()
        return [None if m is None else Timestamp(micros=m) for m in micros]
    values = column.to_pylist()
    convert = to_beam(column.type, beam_type)
    return values if convert is None else [convert(v) for v in values]


def to_arrow(arrow_type: pa.DataType) -> Convert:
    """Per-value function from Beam's language type to what ``pa.array`` takes."""
    if pa.types.is_timestamp(arrow_type):
        return _optional(lambda v: v.micros if isinstance(v, Timestamp) else v)
    if pa.types.is_struct(arrow_type):
        fields = [
            (arrow_type.field(i).name, to_arrow(arrow_type.field(i).type))
            for i in range(arrow_type.num_fields)
        ]
        return _optional(
            lambda v: {n: (getattr(v, n) if c is None else c(getattr(v, n))) for n, c in fields}
        )
    if pa.types.is_list(arrow_type):
        inner = to_arrow(arrow_type.value_type)
        return None if inner is None else _optional(lambda v: [inner(x) for x in v])
    if pa.types.is_map(arrow_type):
        k = to_arrow(arrow_type.key_type) or (lambda x: x)
        i = to_arrow(arrow_type.item_type) or (lambda x: x)
        return _optional(lambda v: [(k(a), i(b)) for a, b in v.items()])
    return None


def column_to_arrow(values: list, field: pa.Field) -> pa.Array:
    if pa.types.is_timestamp(field.type):
        micros = [None if v is None else v.micros for v in values]
        return pa.array(micros, pa.int64()).cast(field.type)
    convert = to_arrow(field.type)
    if convert is not None:
        values = [convert(v) for v in values]
    try:
        return pa.array(values, field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        raise SchemaError(
            f'field {field.name!r}: a value does not fit Arrow type {field.type}: {e}'
        ) from None


def _fields_of(user_type) -> list:
    return list(getattr(user_type, '__annotations__', {}).items())


def _unwrap(beam_type):
    """T for Optional[T] (typing's or Beam's), else the type itself."""
    from apache_beam.typehints import typehints

    if isinstance(beam_type, typehints.UnionConstraint):
        rest = [t for t in beam_type.union_types if t is not type(None)]
        return rest[0] if len(rest) == 1 else beam_type
    args = getattr(beam_type, '__args__', None)
    if args and type(None) in args and len(args) == 2:
        return [a for a in args if a is not type(None)][0]
    return beam_type


def _args(beam_type) -> tuple:
    from apache_beam.typehints import typehints

    beam_type = _unwrap(beam_type)
    if beam_type is None:
        return (None, None)
    if isinstance(beam_type, typehints.TypeConstraint):
        inner = getattr(beam_type, 'inner_type', None)
        if inner is not None:
            return (inner, None)
        return (getattr(beam_type, 'key_type', None), getattr(beam_type, 'value_type', None))
    args = getattr(beam_type, '__args__', None) or ()
    if type(None) in args:  # Optional[T]
        return _args([a for a in args if a is not type(None)][0])
    return tuple(args) + (None,) * (2 - len(args))
