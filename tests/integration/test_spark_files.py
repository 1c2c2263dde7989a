"""ReadFromSpark of local Parquet files read by pyarrow in the tasks.

``transforms.files`` decides in the driver whether a DataFrame is a bare scan
of local Parquet files; then the reading stage's tasks read the files with
pyarrow instead of Spark's reader handing rows over through ``mapInArrow``.
Here: which plans it takes and which keep Spark's reader, and that the values
read are those Spark's reader gives (the same Arrow -> Beam conversion over
Spark's own ``toArrow`` of the DataFrame), for every type of the type matrix,
on Spark and on the debug engine.
"""

from __future__ import annotations

import datetime
import decimal

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.compat import pyspark as pyspark_compat
from beam_spark_inproc.transforms import ReadFromSpark
from beam_spark_inproc.transforms import files
from beam_spark_inproc.transforms import types
from beam_spark_inproc.transforms.convert import ArrowRows

_TYPES = (
    'b tinyint, s smallint, i int, l long, f float, d double, ok boolean, '
    'str string, raw binary, dec decimal(12,3), ts timestamp, '
    'local timestamp_ntz, day date, '
    'nested struct<x: int, y: string>, ints array<int>, '
    'words map<string, int>'
)


def _typed_rows(n: int = 300) -> list[tuple]:
    base = datetime.datetime(2024, 2, 29, 12, 30, 15, 123456, tzinfo=datetime.timezone.utc)
    rows = []
    for i in range(n):
        null = i % 7 == 3  # every field null in some rows
        values = (
            i % 100 - 50,
            i * 3 - 400,
            i * 1000,
            i * 2**40,
            i / 8,
            i / 3,
            i % 2 == 0,
            f'w{i}-é',
            bytes([i % 256, 7]),
            decimal.Decimal(i * 1001) / 1000,
            base + datetime.timedelta(days=i, microseconds=i),
            base.replace(tzinfo=None) - datetime.timedelta(hours=i * 5),
            datetime.date(1970, 1, 1) + datetime.timedelta(days=i * 11),
            (i, f'y{i}'),
            [i, i + 1, None],
            {f'k{i}': i},
        )
        rows.append(tuple(None if null else v for v in values))
    return rows


def _spark_values(dataframe) -> list:
    """What Spark's own reader gives, converted as the runner converts it."""
    schema, row_type = types.spark_row_type(dataframe.schema)
    convert = ArrowRows(row_type, tuple(schema.names))
    table = pyspark_compat.to_arrow(dataframe)
    return [row for batch in table.to_batches() for row in convert.rows(batch)]


@pytest.fixture(scope='module')
def parquet(spark, tmp_path_factory):
    """A folder of 3 Parquet files with every type (INT96 timestamps, Spark's
    default) and one of 1 file with microsecond timestamps."""
    root = tmp_path_factory.mktemp('files')
    rows = _typed_rows()
    spark.createDataFrame(rows, _TYPES).repartition(3).write.parquet(str(root / 'int96'))
    spark.conf.set('spark.sql.parquet.outputTimestampType', 'TIMESTAMP_MICROS')
    try:
        spark.createDataFrame(rows, _TYPES).coalesce(1).write.parquet(str(root / 'micros'))
    finally:
        spark.conf.unset('spark.sql.parquet.outputTimestampType')
    (
        spark.range(40)
        .selectExpr('id', 'id % 3 AS part')
        .write.partitionBy('part')
        .parquet(str(root / 'parted'))
    )
    spark.range(10).write.option('header', True).csv(str(root / 'csv'))
    return root


def _units(dataframe, parallelism=2):
    schema, _ = types.spark_row_type(dataframe.schema)
    return files.file_units(dataframe, schema, parallelism)


def test_bare_scans_are_read_by_pyarrow(spark, parquet):
    data = spark.read.parquet(str(parquet / 'int96'))
    whole = _units(data)
    assert whole is not None and len(whole.units) == 2
    assert sorted(p for task in whole.units for p, _ in task) == sorted(
        f[len('file://') :] for f in data.inputFiles()
    )
    assert _units(data.select('ts', 'str')) is not None  # a Project of columns
    assert _units(data, parallelism=8) is not None  # 3 files: by row groups


def test_other_plans_keep_sparks_reader(spark, parquet):
    data = spark.read.parquet(str(parquet / 'int96'))
    assert _units(data.filter('i > 10')) is None
    assert _units(data.selectExpr('str AS renamed')) is None
    assert _units(data.selectExpr('i + 1 AS j')) is None
    assert _units(data.limit(5)) is None
    parted = spark.read.parquet(str(parquet / 'parted'))
    assert _units(parted) is None  # its partition column is in no file
    assert _units(parted.filter('part = 1').select('id')) is None
    assert _units(spark.read.option('header', True).csv(str(parquet / 'csv'))) is None
    assert _units(spark.range(5)) is None


@pytest.mark.parametrize('folder,engine', [('int96', 'spark'), ('micros', 'debug')])
def test_files_read_by_pyarrow_equal_sparks_reader(spark, parquet, engine, folder):
    data = spark.read.parquet(str(parquet / folder))
    assert _units(data) is not None
    expected = _spark_values(data)
    assert len(expected) == 300
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark, debug=engine == 'debug')) as p:
        assert_that(p | ReadFromSpark(dataframe=data), equal_to(expected))


def test_a_projection_reads_only_its_columns(spark, parquet):
    data = spark.read.parquet(str(parquet / 'int96')).select('words', 'l', 'ts')
    expected = _spark_values(data)
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        rows = p | ReadFromSpark(dataframe=data)
        assert_that(rows | beam.Map(tuple), equal_to([tuple(r) for r in expected]))


@pytest.mark.parametrize('folder', ['int96', 'micros'])
def test_row_groups_read_whole_equal_sparks_reader(spark, parquet, folder, monkeypatch):
    """For batched consumers a task reads its files a row group at a time
    (``whole``): the same values as Spark's reader, in every type, and larger
    batches than the element path's (which reads ``BATCH_ROWS`` at a time)."""
    import pyarrow as pa

    data = spark.read.parquet(str(parquet / folder))
    units = _units(data, parallelism=1)
    schema, row_type = types.spark_row_type(data.schema)
    convert = ArrowRows(row_type, tuple(schema.names), units)
    task = pa.RecordBatch.from_arrays([pa.array([0])], names=['task'])
    whole = list(units.read(task, whole=True))
    assert all(b.schema == schema for b in whole)
    rows = [r for b in whole for r in convert.data_rows(b)]
    assert sorted(rows, key=repr) == sorted(_spark_values(data), key=repr)
    monkeypatch.setattr(files, 'BATCH_ROWS', 50)
    assert max(b.num_rows for b in units.read(task)) == 50
    assert max(b.num_rows for b in whole) > 50
