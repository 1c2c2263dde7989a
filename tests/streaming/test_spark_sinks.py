"""WriteToSpark on an unbounded PCollection (issue #34,
``execution.streaming.spark_sinks``): each micro-batch's panes appended to a
path exactly once, the window and pane in columns; equal to Beam's
BundleBasedDirectRunner on the same TestStream, across a driver SIGKILLed in
the middle of publishing a micro-batch and after publishing one (before its
commit record); the same into catalog tables (``transforms.stream_tables``:
a managed partitioned ORC table on Spark, an external partitioned Parquet
table across the SIGKILL and the fault). Bad input fails while the pipeline
is built, naming the transform, nothing written.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.errors import UnsupportedPipelineError
from beam_spark_inproc.transforms import SparkInteropError
from beam_spark_inproc.transforms import SparkSql
from beam_spark_inproc.transforms import WriteToSpark
from tests.streaming import oracle
from tests.streaming import spark_sink_pipeline as sink

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope='module')
def expected():
    rows = sink.expected()
    assert {r[4] for r in rows} == {'ON_TIME', 'LATE'}  # late panes too
    return rows


def _query(totals, spark):
    return totals | sink.query(spark)


@pytest.fixture(scope='module')
def expected_panes():
    return sink.expected_panes()


def _windows(records: list) -> list:
    return sink.windows(records)


def test_sql_per_pane_equals_beams_panes_on_the_debug_engine(spark, tmp_path, expected_panes):
    records = oracle.run(
        lambda p: _query(sink.totals(p), spark),
        InProcessSparkRunner(debug=True, spark=spark),
        f'--checkpoint_location={tmp_path / "ck"}',
    )
    assert _windows(records) == expected_panes


@pytest.fixture
def managed_orc(spark):
    """A managed ORC table partitioned by pane_timing, dropped after."""
    name = 'sink_totals_orc'
    spark.sql(f'DROP TABLE IF EXISTS {name}')
    spark.sql(
        f'CREATE TABLE {name} (key STRING, total BIGINT, window_start '
        'TIMESTAMP, window_end TIMESTAMP, pane_index BIGINT, pane_timing '
        'STRING) USING orc PARTITIONED BY (pane_timing)'
    )
    yield name
    spark.sql(f'DROP TABLE IF EXISTS {name}')


def test_write_and_sql_equal_beams_on_spark(spark, tmp_path, expected, expected_panes, managed_orc):
    """The write (to a path and to a managed, partitioned ORC table) and the
    query in one stream on Spark."""
    out = str(tmp_path / 'out')

    def build(p):
        totals = sink.totals(p)
        _ = totals | WriteToSpark(path=out, mode='append', spark=spark, **sink.COLUMNS)
        _ = totals | 'To table' >> WriteToSpark(
            managed_orc, mode='append', spark=spark, **sink.COLUMNS
        )
        return _query(totals, spark)

    records = oracle.run(
        build, InProcessSparkRunner(spark=spark), f'--checkpoint_location={tmp_path / "ck"}'
    )
    assert sink.table(out) == expected
    assert sink.table_rows(spark, managed_orc) == expected
    assert _windows(records) == expected_panes


def _driver(out: str, checkpoint: str, *flags: str):
    return subprocess.run(
        [sys.executable, '-m', 'tests.streaming.spark_sink_pipeline', out, checkpoint, *flags],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_driver_killed_while_and_after_publishing(spark, tmp_path, expected, monkeypatch):
    """The stream writes a path and an external Parquet table partitioned by
    key. A driver SIGKILLed after renaming a micro-batch's files into the
    table's folder and before its published record; restarted (here, in this
    process, the table registered again over its folder), it fails after
    publishing a later micro-batch and before that micro-batch's commit
    record (the replay must not write it again); the third run finishes:
    each row once in the path and in the table, every partition in the
    catalog."""
    from beam_spark_inproc.transforms import stream_runtime as spark_sinks

    out, checkpoint = str(tmp_path / 'out'), str(tmp_path / 'ck')
    location = str(tmp_path / 'table')
    first = _driver(out, checkpoint, '--kill-mid', str(tmp_path / 'mid'), '--table', location)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    # Micro-batches up to KILL_MID are in the table's folder, its files
    # without its record.
    partial = pq_rows(location)
    assert 0 < len(partial) < len(expected) and set(partial) <= set(expected)
    write = spark_sinks.PathSink.write
    published = []

    def failing(self, micro_batch, *args):
        files = write(self, micro_batch, *args)
        published.append(micro_batch)
        if micro_batch >= sink.KILL_AFTER and files:
            raise RuntimeError('driver lost after publishing')
        return files

    monkeypatch.setattr(spark_sinks.PathSink, 'write', failing)
    spark.sql(f'DROP TABLE IF EXISTS {sink.TABLE}')  # the killed driver's
    try:
        runner = InProcessSparkRunner(debug=True, spark=spark)
        with pytest.raises(Exception, match='driver lost after publishing'):
            sink.run(runner, out, checkpoint, spark, location)
        assert published[0] == sink.KILL_MID  # replayed from its commit
        monkeypatch.setattr(spark_sinks.PathSink, 'write', write)
        assert sink.run(runner, out, checkpoint, spark, location) == 'DONE'
        assert sink.table(out) == expected
        assert sink.table_rows(spark) == expected
        partitions = {r[0] for r in spark.sql(f'SHOW PARTITIONS {sink.TABLE}').collect()}
        assert partitions == {f'key=k{i}' for i in range(sink.KEYS)}
    finally:
        spark.sql(f'DROP TABLE IF EXISTS {sink.TABLE}')
    # Spark's reader sees the data files only (not the sink's own folder);
    # no staging folder is left.
    assert spark.read.parquet(out).count() == len(expected)
    for folder in (out, location):
        [sink_id] = os.listdir(os.path.join(folder, '_beam_spark_sink'))
        assert os.listdir(os.path.join(folder, '_beam_spark_sink', sink_id)) == ['published.json']


def pq_rows(location: str) -> list:
    """The rows of the partitioned table's folder, read with pyarrow (its
    partition column from the folder names), as ``sink.expected`` gives them."""
    import pyarrow.dataset as ds

    return sink.arrow_rows(
        ds.dataset(
            location, format='parquet', partitioning='hive', ignore_prefixes=['_', '.']
        ).to_table()
    )


# -- bad input: errors while building, naming the transform ---------------


def _stream(p):
    return (
        p
        | TestStream().add_elements([sink.Total('a', 1)]).advance_watermark_to_infinity()
        | 'Typed' >> beam.Map(lambda t: t).with_output_types(sink.Total)
    )


def _pipeline(spark, *flags):
    options = PipelineOptions(list(flags))
    options.view_as(StandardOptions).streaming = True
    return beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options)


@pytest.mark.parametrize(
    'kwargs, message',
    [
        (
            dict(table='t_stream', mode='append'),
            r"^'Write totals' \(WriteToSpark table='t_stream'\): table 't_stream' does "
            r'not exist\. A stream appends to an existing table',
        ),
        (dict(path='OUT', mode='overwrite'), r"mode 'overwrite' is a batch mode"),
        (dict(path='OUT'), r"mode 'errorifexists' is a batch mode"),
        (dict(path='s3a://bucket/x', mode='append'), r'renaming files in the driver'),
        (
            dict(path='OUT', mode='append', format='delta'),
            r"format 'delta' keeps its own transaction log",
        ),
        (
            dict(path='OUT', mode='append', window_start='key'),
            r"window/pane column names \['key'\] must differ",
        ),
    ],
)
def test_bad_streaming_writes_fail_while_building(spark, tmp_path, kwargs, message):
    out = str(tmp_path / 'out')
    kwargs = {k: (out if v == 'OUT' else v) for k, v in kwargs.items()}
    with pytest.raises(SparkInteropError, match=message):
        _stream(_pipeline(spark)) | 'Write totals' >> WriteToSpark(spark=spark, **kwargs)
    assert not os.path.exists(out)


@pytest.mark.parametrize(
    'ddl, message',
    [
        (
            "CREATE TABLE {t} (key STRING, total BIGINT) USING csv LOCATION '{loc}'",
            r"table '{t}' has provider 'csv'; a stream appends exactly once to "
            r'file-backed datasource tables \(USING parquet, orc, json\)',
        ),
        (
            "CREATE TABLE {t} (key STRING, other DOUBLE) USING parquet LOCATION '{loc}'",
            r"the PCollection's schema does not match table '{t}': column 'other' of the "
            r"table is not a field of the PCollection; field 'total' is not a column",
        ),
    ],
)
def test_bad_streaming_table_writes_fail_while_building(spark, tmp_path, ddl, message):
    """A table a stream cannot append to exactly once, or whose columns are
    not the PCollection's fields: refused while building, nothing written."""
    name, location = 'bad_stream_target', str(tmp_path / 'table')
    spark.sql(f'DROP TABLE IF EXISTS {name}')
    spark.sql(ddl.format(t=name, loc=location))
    try:
        with pytest.raises(
            SparkInteropError,
            match=rf"^'Write totals' \(WriteToSpark table='{name}'\): " + message.format(t=name),
        ):
            _stream(_pipeline(spark)) | 'Write totals' >> WriteToSpark(
                name, mode='append', spark=spark
            )
        assert not os.path.exists(location) or not os.listdir(location)
    finally:
        spark.sql(f'DROP TABLE IF EXISTS {name}')


@pytest.mark.parametrize('view', ['temporary', 'global temporary', 'permanent'])
def test_a_stream_into_any_kind_of_view_is_refused_as_a_view(spark, view):
    """Temporary views have no detail rows in DESCRIBE TABLE EXTENDED: they
    are told apart by the catalog, and refused as views, saying which kind."""
    rows = spark.createDataFrame([('a', 1)], 'key string, total long')
    if view == 'temporary':
        name = 'tmp_stream_totals'
        rows.createOrReplaceTempView(name)
        drop = f'DROP VIEW IF EXISTS {name}'
    elif view == 'global temporary':
        rows.createOrReplaceGlobalTempView('gtmp_stream_totals')
        name = 'global_temp.gtmp_stream_totals'
        drop = f'DROP VIEW IF EXISTS {name}'
    else:
        name = 'perm_stream_totals'
        spark.sql(f"CREATE OR REPLACE VIEW {name} AS SELECT 'a' AS key, 1L AS total")
        drop = f'DROP VIEW IF EXISTS {name}'
    try:
        with pytest.raises(SparkInteropError) as info:
            _stream(_pipeline(spark)) | 'Write totals' >> WriteToSpark(
                name, mode='append', spark=spark
            )
        assert str(info.value) == (
            f"'Write totals' (WriteToSpark table={name!r}): {name!r} is a view ({view}); "
            'a stream appends to a table. Write to a parquet, orc or json table, or to path=.'
        )
    finally:
        spark.sql(drop)


def test_a_path_holding_other_columns_is_refused(spark, tmp_path):
    out = str(tmp_path / 'out')
    spark.createDataFrame([(1, 2.0)], 'id long, other double').write.parquet(out)
    with pytest.raises(SparkInteropError) as info:
        _stream(_pipeline(spark)) | 'Write' >> WriteToSpark(path=out, mode='append', spark=spark)
    message = str(info.value)
    assert message.startswith(f"'Write' (WriteToSpark path={out!r}): ")
    assert "field 'key' is not a column of the data at the path" in message
    assert "column 'other' of the data at the path is not a field" in message


def test_streaming_flag_with_a_batch_mode_is_refused_before_running(spark, tmp_path):
    """Bounded input run with --streaming: refused when run, before any
    Spark job, naming the transform."""
    out = str(tmp_path / 'out')
    p = _pipeline(spark, f'--checkpoint_location={tmp_path / "ck"}')
    _ = (
        p
        | beam.Create([sink.Total('a', 1)]).with_output_types(sink.Total)
        | 'Write totals' >> WriteToSpark(path=out, mode='overwrite', spark=spark)
    )
    with pytest.raises(
        UnsupportedPipelineError, match=r"'Write totals'.*mode 'overwrite' is a batch mode"
    ):
        p.run()
    assert not os.path.exists(out)


def test_sql_in_a_stream_refused_where_it_means_nothing(spark):
    from apache_beam.transforms import window

    p = _pipeline(spark)
    stream = _stream(p)
    with pytest.raises(
        SparkInteropError,
        match=r"view 'PCOLLECTION' is in the global window with "
        r'the default trigger, whose only pane fires',
    ):
        stream | 'Global' >> SparkSql('SELECT * FROM PCOLLECTION', spark=spark)
    windowed = stream | beam.WindowInto(window.FixedWindows(10))
    with pytest.raises(
        SparkInteropError,
        match=r'the result must have the window columns '
        r"'window_start' and 'window_end'",
    ):
        windowed | 'No window' >> SparkSql(
            'SELECT key, SUM(total) AS t FROM PCOLLECTION GROUP BY key', spark=spark
        )
    with pytest.raises(SparkInteropError, match=r'one view only \(got a, b\)'):
        {'a': windowed, 'b': stream} | 'Two' >> SparkSql('SELECT * FROM a', spark=spark)


def test_window_columns_in_batch_equal_fnapi_runners_panes(spark, tmp_path):
    """The same columns in a batch pipeline (``transforms.runtime``), against
    the windows and panes FnApiRunner gives the same elements."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.transforms import window

    def totals(p):
        return (
            p
            | beam.Create([(f'k{i % 3}', i) for i in range(30)])
            | 'Stamp' >> beam.Map(lambda kv: window.TimestampedValue(kv, kv[1] % 25))
            | 'Window' >> beam.WindowInto(window.FixedWindows(10))
            | beam.CombinePerKey(sum)
            | 'Total' >> beam.Map(lambda kv: sink.Total(*kv)).with_output_types(sink.Total)
        )

    out = str(tmp_path / 'out')
    with beam.Pipeline(runner=InProcessSparkRunner(debug=True, spark=spark)) as p:
        _ = totals(p) | WriteToSpark(path=out, spark=spark, **sink.COLUMNS)
    folder = tmp_path / 'records'
    folder.mkdir()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = totals(p) | beam.ParDo(sink._Rows()) | beam.ParDo(oracle.Record(str(folder)))
    records = [pickle.loads(f.read_bytes()) for f in folder.iterdir()]
    assert len(records) == 9  # 3 keys x windows [0, 10), [10, 20), [20, 30)
    assert sink.table(out) == sorted(r[0] for r in records)
