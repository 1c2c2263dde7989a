"""compat.pyspark on a live session: Arrow tables into Spark and back keep
their values and types exactly (``create_dataframe``, ``to_arrow``: PySpark's
own calls from 4.0, the JVM's Arrow path on 3.5), Spark's reading of them
agrees, and the tag functions cancel a running job on this release."""

from __future__ import annotations

import datetime
import decimal
import threading
import time

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from beam_spark_inproc.compat import pyspark as pyspark_compat

UTC = datetime.timezone.utc
TABLE = pa.table(
    {
        'id': pa.array([1, 2, 3], pa.int64()),
        'at': pa.array(
            [
                datetime.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
                None,
                datetime.datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
            ],
            pa.timestamp('us', tz='UTC'),
        ),
        'price': pa.array(
            [decimal.Decimal('12345.678'), decimal.Decimal('-0.001'), None], pa.decimal128(12, 3)
        ),
        'day': pa.array([datetime.date(2024, 2, 29), None, datetime.date(1, 1, 1)], pa.date32()),
        'raw': pa.array([b'\x00\xff', b'', None], pa.binary()),
        'tags': pa.array([['a', None], [], None], pa.list_(pa.field('element', pa.string()))),
        'nested': pa.array(
            [{'x': 1.5, 'y': 'one'}, None, {'x': None, 'y': 'three'}],
            pa.struct([pa.field('x', pa.float64()), pa.field('y', pa.string())]),
        ),
    }
)
SCHEMA = T.StructType(
    [
        T.StructField('id', T.LongType()),
        T.StructField('at', T.TimestampType()),
        T.StructField('price', T.DecimalType(12, 3)),
        T.StructField('day', T.DateType()),
        T.StructField('raw', T.BinaryType()),
        T.StructField('tags', T.ArrayType(T.StringType())),
        T.StructField(
            'nested',
            T.StructType([T.StructField('x', T.DoubleType()), T.StructField('y', T.StringType())]),
        ),
    ]
)


def test_table_round_trip_is_exact(spark):
    frame = pyspark_compat.create_dataframe(spark, TABLE, SCHEMA)
    assert frame.schema == SCHEMA
    back = pyspark_compat.to_arrow(frame.orderBy('id'))
    assert back.schema == pyspark_compat.to_arrow_schema(SCHEMA)
    assert back.to_pylist() == TABLE.to_pylist()


def test_spark_reads_the_values_the_table_holds(spark):
    """Spark's own functions see the table's values (not only the round trip)."""
    frame = pyspark_compat.create_dataframe(spark, TABLE, SCHEMA)
    row = (
        frame.where(F.col('id') == 1)
        .select(
            F.unix_micros('at').alias('micros'),
            (F.col('price') * 1000).cast('long').alias('milli_price'),
            F.datediff('day', F.lit('1970-01-01')).alias('days'),
            F.length('raw').alias('raw_length'),
            F.size('tags').alias('tag_count'),
            F.col('nested.y').alias('y'),
        )
        .collect()[0]
    )
    expected_micros = int(
        (TABLE['at'][0].as_py() - datetime.datetime(1970, 1, 1, tzinfo=UTC))
        / datetime.timedelta(microseconds=1)
    )
    assert row.micros == expected_micros
    assert row.milli_price == 12345678
    assert row.days == (datetime.date(2024, 2, 29) - datetime.date(1970, 1, 1)).days
    assert (row.raw_length, row.tag_count, row.y) == (2, 2, 'one')


def test_table_without_schema_takes_the_tables_types(spark):
    frame = pyspark_compat.create_dataframe(spark, TABLE.select(['id', 'price', 'raw']))
    assert [f.dataType for f in frame.schema.fields] == [
        T.LongType(),
        T.DecimalType(12, 3),
        T.BinaryType(),
    ]
    assert pyspark_compat.to_arrow(frame.orderBy('id')).to_pylist() == (
        TABLE.select(['id', 'price', 'raw']).to_pylist()
    )


def test_empty_table_and_empty_result(spark):
    empty = TABLE.slice(0, 0)
    frame = pyspark_compat.create_dataframe(spark, empty, SCHEMA)
    assert frame.count() == 0
    back = pyspark_compat.to_arrow(frame)
    assert back.num_rows == 0 and back.schema == pyspark_compat.to_arrow_schema(SCHEMA)


def test_table_of_many_batches_keeps_every_row_in_order(spark):
    n = 25_000  # over the 10,000 rows of one Arrow batch
    table = pa.table({'id': pa.array(range(n), pa.int64())})
    frame = pyspark_compat.create_dataframe(spark, table)
    back = pyspark_compat.to_arrow(frame)
    assert back.column('id').to_pylist() == list(range(n))


def test_timestamps_are_instants_whatever_the_session_time_zone(spark):
    previous = spark.conf.get('spark.sql.session.timeZone')
    spark.conf.set('spark.sql.session.timeZone', 'America/Los_Angeles')
    try:
        frame = pyspark_compat.create_dataframe(spark, TABLE.select(['id', 'at']))
        back = pyspark_compat.to_arrow(frame.orderBy('id'))
    finally:
        spark.conf.set('spark.sql.session.timeZone', previous)
    assert back.column('at').to_pylist() == TABLE.column('at').to_pylist()


def _slow(batches):
    for _ in batches:
        time.sleep(60)
        yield pa.RecordBatch.from_pydict({'id': pa.array([], pa.int64())})


def test_interrupt_tag_cancels_a_job_of_another_thread(spark):
    """``add_tag`` in the job's thread, ``interrupt_tag`` from this one."""
    tag = 'beam-compat-test-cancel'
    failed: list[BaseException] = []

    def run():
        pyspark_compat.add_tag(spark, tag)
        try:
            spark.range(2, numPartitions=2).mapInArrow(_slow, 'id long').collect()
        except BaseException as error:
            failed.append(error)
        finally:
            pyspark_compat.remove_tag(spark, tag)

    worker = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    worker.start()
    tracker = spark.sparkContext.statusTracker()
    while not tracker.getActiveJobsIds() and time.monotonic() - started < 60:
        time.sleep(0.1)
    pyspark_compat.interrupt_tag(spark, tag)
    worker.join(60)
    assert not worker.is_alive()
    assert failed, 'the job ran to its end'
    assert time.monotonic() - started < 55


@pytest.mark.skipif(
    not pyspark_compat.CLASSIC_SESSION_ARTIFACTS,
    reason=f'PySpark {pyspark_compat.VERSION_STRING}: classic sessions have no addArtifacts',
)
def test_artifacts_on_classic_session_are_the_context_files(spark, tmp_path):
    """4.x's classic ``addArtifacts`` is the Spark context's ``addFile``: the
    path 3.5 takes gives the same result."""
    from pyspark import SparkFiles

    path = tmp_path / 'beam-compat-artifact.txt'
    path.write_text('x')
    pyspark_compat.add_artifact(spark, str(path), file=True)
    assert open(SparkFiles.get(path.name)).read() == 'x'
