"""What the Spark PTransforms (``spark_io``) and the code that runs them
(``runtime`` on InProcessSparkRunner, ``local`` on runners running DoFns in
this process) share: the DataFrames handed to ReadFromSpark by token, the
schema encoding of a transform's spec, the one error type, and the schema a
write checks a table against. A module of its own so that none of the three
imports another for them.
"""

from __future__ import annotations

import base64
from typing import Any
from typing import Optional

import pyarrow as pa

from beam_spark_inproc.transforms import types

# DataFrames given to ReadFromSpark, by token, for the runner in this process
# (classic or Spark Connect ones: typed Any).
_DATAFRAMES: dict[str, Any] = {}


class SparkInteropError(ValueError):
    """Bad input to ReadFromSpark, WriteToSpark or SparkSql."""


def encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def applied_label(pipeline, label: str) -> str:
    """The full label (``'Outer/Write totals'``) of the transform being
    applied to ``pipeline``, called from its ``expand``; else ``label``."""
    current = getattr(pipeline, '_current_transform', None)
    applied = current() if current is not None else None
    return getattr(applied, 'full_label', None) or label


def spark_error(what: str, error: Exception) -> SparkInteropError:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith('An error occurred while calling'):
        # A JVM exception PySpark left as Py4J's error: its first line names
        # only the Java call, the next one the exception and its message.
        lines = [lines[1].lstrip(': ')]
    return SparkInteropError(f'{what}: {lines[0] if lines else repr(error)}')


def view_kind(session, table: str) -> Optional[str]:
    """``'temporary'``, ``'global temporary'`` or ``'permanent'`` when
    ``table`` names a view of the session (as Spark resolves the name: a
    temporary view first), else None. ``catalog.getTable``: PySpark 3.4 and
    later, classic and Spark Connect alike; ``DESCRIBE TABLE EXTENDED`` says
    nothing of a temporary view."""
    try:
        found = session.catalog.getTable(table)
    except Exception:  # no such table: the caller says so
        return None
    kind = (found.tableType or '').upper()
    if found.isTemporary or kind == 'TEMPORARY':
        global_db = session.conf.get('spark.sql.globalTempDatabase', 'global_temp')
        namespace = list(found.namespace or [])
        return 'global temporary' if namespace[-1:] == [global_db] else 'temporary'
    return 'permanent' if kind == 'VIEW' else None


# What Spark's saveAsTable does with each kind of view, i.e. why a batch
# WriteToSpark refuses them.
_BATCH_VIEW_WRITES = {
    'temporary': 'Spark would write a permanent table of that name, hidden behind the view',
    'global temporary': "Spark's writer cannot write into the global temporary database",
    'permanent': 'Spark refuses to append to a view, and overwrite would replace it with a table',
}


def target_schema(session, spec: dict, arrow: pa.Schema, what: str) -> pa.Schema:
    """The Arrow schema to write: the table's, when appending to a table that
    exists (checked against the PCollection's); else the PCollection's.
    Raises for a view, and for error-if-exists on an existing table."""
    table, mode = spec['table'], spec['mode']
    try:
        exists = session.catalog.tableExists(table)
    except Exception as e:
        raise spark_error(what, e) from None
    if not exists:
        return arrow
    view = view_kind(session, table)
    if view is not None:
        raise SparkInteropError(
            f'{what}: {table!r} is a view ({view}); WriteToSpark writes to a '
            f'table ({_BATCH_VIEW_WRITES[view]}). Write to another table name, '
            'or to the table the view reads.'
        )
    if mode in ('error', 'errorifexists'):
        raise SparkInteropError(
            f'{what}: table {table!r} already exists and mode is {mode!r}: '
            "use mode='append' or 'overwrite', or another table."
        )
    if mode != 'append':
        return arrow
    table_arrow = types.spark_to_arrow(session.table(table).schema)
    problems = mismatches(arrow, table_arrow, 'the table')
    if problems:
        raise SparkInteropError(
            f"{what}: the PCollection's schema does not match table {table!r}: "
            + '; '.join(problems)
            + '. Convert the elements (e.g. with beam.Select '
            "or beam.Map), or write with mode='overwrite'."
        )
    return table_arrow


def path_schema(session, spec: dict, arrow: pa.Schema, what: str) -> pa.Schema:
    """For an append to a path that holds data already: its schema, checked
    against the PCollection's (the window/pane columns included); else the
    PCollection's. A path with nothing Spark can read is written as new."""
    import os
    import urllib.parse

    parsed = urllib.parse.urlparse(spec['path'])
    if parsed.scheme in ('', 'file') and not os.path.exists(
        parsed.path if parsed.scheme else spec['path']
    ):
        return arrow  # nothing there yet (Spark would log a failed read)
    try:
        found = session.read.format(spec['format'] or 'parquet').load(spec['path']).schema
    except Exception:  # no such path, or nothing to infer a schema from
        return arrow
    theirs = types.spark_to_arrow(found)
    problems = mismatches(arrow, theirs, 'the data at the path')
    if problems:
        raise SparkInteropError(
            f"{what}: the PCollection's schema does not match the data "
            f'already at {spec["path"]!r}: '
            + '; '.join(problems)
            + '. Convert the elements (e.g. with beam.Select or beam.Map), or '
            'write to another path.'
        )
    return pa.schema(
        [
            theirs.field(theirs.get_field_index(f.name))
            if theirs.get_field_index(f.name) >= 0
            else f
            for f in arrow
        ]
    )


def mismatches(arrow: pa.Schema, target: pa.Schema, where: str) -> list[str]:
    """What keeps rows of schema ``arrow`` from being appended to ``target``
    (case-insensitive names, ``_compatible`` types)."""
    ours = {f.name.lower(): f for f in arrow}
    theirs = {f.name.lower(): f for f in target}
    problems = []
    for name in sorted(set(ours) | set(theirs)):
        if name not in theirs:
            problems.append(f'field {ours[name].name!r} is not a column of {where}')
        elif name not in ours:
            problems.append(
                f'column {theirs[name].name!r} of {where} is not a field of the PCollection'
            )
        elif not _compatible(ours[name].type, theirs[name].type):
            problems.append(
                f'field {ours[name].name!r}: Beam gives {_spark_type(ours[name])}, '
                f'{where} has {_spark_type(theirs[name])}'
            )
    return problems


def _spark_type(field: pa.Field) -> str:
    return types.arrow_to_spark(pa.schema([field])).fields[0].dataType.simpleString()


def _compatible(ours: pa.DataType, theirs: pa.DataType) -> bool:
    """Same type, decimals of any precision (Beam's carry none), int16 into
    tinyint, and nested
    types compared field by field."""
    if pa.types.is_decimal(ours) and pa.types.is_decimal(theirs):
        return True
    if pa.types.is_int16(ours) and pa.types.is_int8(theirs):
        return True  # tinyint reads as int16: writing it back checks the range
    if pa.types.is_struct(ours) and pa.types.is_struct(theirs):
        return ours.num_fields == theirs.num_fields and all(
            ours.field(i).name == theirs.field(i).name
            and _compatible(ours.field(i).type, theirs.field(i).type)
            for i in range(ours.num_fields)
        )
    if pa.types.is_list(ours) and pa.types.is_list(theirs):
        return _compatible(ours.value_type, theirs.value_type)
    if pa.types.is_map(ours) and pa.types.is_map(theirs):
        return _compatible(ours.key_type, theirs.key_type) and _compatible(
            ours.item_type, theirs.item_type
        )
    return ours == theirs


def write_dataframe(session, spec: dict, dataframe, label: str) -> None:
    """Writes the DataFrame as the WriteToSpark spec says: one Spark job."""
    # Spark Connect knows 'error' but not its alias 'errorifexists'.
    mode = 'error' if spec['mode'] == 'errorifexists' else spec['mode']
    writer = dataframe.write.mode(mode).options(**spec['options'])
    if spec['format']:
        writer = writer.format(spec['format'])
    if spec['partition_by']:
        writer = writer.partitionBy(*spec['partition_by'])
    target = spec['table'] or spec['path']
    try:
        if spec['table']:
            writer.saveAsTable(spec['table'])
        else:
            writer.save(spec['path'])
    except Exception as e:
        from pyspark.errors import PythonException

        if isinstance(e, PythonException):
            raise  # a Beam transform upstream failed: the runner names it
        raise spark_error(f'{label}: writing {target}', e) from None
