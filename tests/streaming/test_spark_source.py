"""ReadFromSpark over a streaming DataFrame (issue #34 items 1 and 4;
``transforms.spark_stream``): the windowed sums of a stream read from
Spark's file source and from a Python streaming data source with offsets
equal the same pipeline's over the same rows read as a batch on Beam's
FnApiRunner; bad input fails while the pipeline is built; a checkpoint of
another source is refused. The restart (SIGKILL) test is in
``test_spark_source_restart``.
"""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.compat import pyspark as pyspark_compat
from beam_spark_inproc.transforms import ReadFromSpark
from beam_spark_inproc.transforms import SparkInteropError
from tests.streaming import spark_source_pipelines as cases


def _run(runner, build, *flags: str) -> list:
    import tempfile

    out = tempfile.mkdtemp(prefix='beam-spark-source-')
    p = beam.Pipeline(runner=runner, options=PipelineOptions(list(flags)))
    build(p) | beam.ParDo(cases.Collect(out))
    result = p.run()
    assert result.wait_until_finish() == 'DONE'
    return cases.collected(out)


def test_file_stream_equals_bounded_read(spark, tmp_path):
    """Six Spark batches (a JSON file each) through the loop on the debug
    engine: the windowed sums of the bounded read, each window once."""
    landing = str(tmp_path / 'landing')
    cases.land(landing)
    expected = cases.bounded(spark, landing)
    got = _run(
        InProcessSparkRunner(spark=spark, debug=True),
        lambda p: cases.windowed_sums(p | cases.read(landing, spark)),
        '--checkpoint_location',
        str(tmp_path / 'ck'),
    )
    assert got == expected
    assert len(got) == 3 * cases.KEYS  # windows [0,10) [10,20) [20,30)
    staged = os.listdir(tmp_path / 'ck' / 'sources')
    assert len(staged) == 1
    # The read's own progress (``status``): every row it staged was read,
    # Spark's query ended (available_now), so the stream has caught up.
    from beam_spark_inproc import status

    record, _ = status.read(str(tmp_path / 'ck'))
    latest, _ = status.progress_of(record)
    [read] = latest['sources']
    assert read['kind'] == 'Spark stream' and read['source'].startswith('ReadFromSpark')
    assert read['elements'] == cases.FILES * cases.PER_FILE
    assert read['backlog']['staged_batches'] == 0 and read['caught_up'] is True
    assert latest['caught_up'] is True


@pytest.mark.skipif(
    not pyspark_compat.PYTHON_STREAM_READ_LIMITS,
    reason='the source limits its batches (ReadMaxRows): Python streaming readers do from '
    f'PySpark 4.2, this is {pyspark_compat.VERSION_STRING}',
)
def test_python_data_source_with_offsets(spark, tmp_path):
    """A Python streaming data source (``DataSourceStreamReader``, 10 rows a
    Spark batch): its rows once each, at their event times."""
    spark.dataSource.register(cases.counter_source())
    frame = (
        spark.readStream.format('beam_test_counter')
        .option('total', 45)
        .option('per_batch', 10)
        .load()
    )

    def build(p):
        def show(row, t=beam.DoFn.TimestampParam):
            return row.id, row.key, int(t)

        return (
            p
            | ReadFromSpark(dataframe=frame, event_time='ts', trigger='available_now')
            | beam.Map(show)
        )

    got = _run(
        InProcessSparkRunner(spark=spark, debug=True),
        build,
        '--checkpoint_location',
        str(tmp_path / 'ck'),
    )
    epoch = int(cases.EPOCH.timestamp())
    assert got == sorted((n, f'k{n % 3}', epoch + n) for n in range(45))


@pytest.mark.skipif(
    pyspark_compat.PYTHON_DATA_SOURCES,
    reason=f'PySpark {pyspark_compat.VERSION_STRING} has Python data sources',
)
def test_python_data_source_refused_while_building(spark):
    """On a PySpark without Python data sources a format Spark does not find
    is refused when the transform is applied (its checks run in ``expand``),
    naming its label, the format and the release needed, and no Spark job has
    run."""
    tracker = spark.sparkContext.statusTracker()
    jobs = len(tracker.getJobIdsForGroup(None))
    read = ReadFromSpark.stream(format='beam_test_counter', event_time='ts', spark=spark)
    with pytest.raises(SparkInteropError) as raised:
        beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) | 'Counter' >> read
    message = str(raised.value)
    assert message.startswith("'Counter' (ReadFromSpark.stream format='beam_test_counter'): ")
    assert 'Python data source' in message and 'PySpark 4.0 or later' in message
    assert pyspark_compat.VERSION_STRING in message and '\n' not in message
    assert len(tracker.getJobIdsForGroup(None)) == jobs


def test_bad_input_fails_while_building(spark, tmp_path):
    landing = str(tmp_path / 'landing')
    cases.land(landing, 1)
    stream = spark.readStream.schema(cases.SCHEMA).json(landing)

    def apply(label, read):
        return beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) | label >> read

    with pytest.raises(
        SparkInteropError, match=r"^'Events' \(ReadFromSpark dataframe\): .*needs event_time="
    ):
        apply('Events', ReadFromSpark(dataframe=stream))
    with pytest.raises(SparkInteropError, match="'when' is not a column"):
        apply('Events', ReadFromSpark(dataframe=stream, event_time='when'))
    with pytest.raises(SparkInteropError, match="'id' is bigint, not a timestamp"):
        apply('Events', ReadFromSpark(dataframe=stream, event_time='id'))
    batch = spark.read.schema(cases.SCHEMA).json(landing)
    with pytest.raises(SparkInteropError, match='was given a batch DataFrame where a stream'):
        apply('Events', ReadFromSpark.stream(dataframe=batch, event_time='ts'))
    with pytest.raises(SparkInteropError, match='this one is a batch DataFrame'):
        apply('Events', ReadFromSpark(dataframe=batch, event_time='ts'))
    with pytest.raises(
        SparkInteropError,
        match=r"^'Kafka' \(ReadFromSpark.stream format='no_such_source_x'\): ",
    ):
        apply(
            'Kafka',
            ReadFromSpark.stream(format='no_such_source_x', event_time='ts', spark=spark),
        )
    with pytest.raises(SparkInteropError, match='runs on beam_spark_inproc'):
        with beam.Pipeline() as p:
            _ = p | ReadFromSpark(dataframe=stream, event_time='ts')


def _id(row):
    return row.id


def test_checkpoint_of_another_source_refused(spark, tmp_path):
    landing = str(tmp_path / 'landing')
    cases.land(landing, 2)
    checkpoint = str(tmp_path / 'ck')
    _run(
        InProcessSparkRunner(spark=spark, debug=True),
        lambda p: p | cases.read(landing, spark) | 'Id' >> beam.Map(_id),
        '--checkpoint_location',
        checkpoint,
    )
    other = ReadFromSpark.stream(
        format='json',
        path=str(tmp_path),
        schema=cases.SCHEMA,
        event_time='ts',
        trigger='available_now',
        spark=spark,
    )
    with pytest.raises(Exception, match='another source'):
        _run(
            InProcessSparkRunner(spark=spark, debug=True),
            lambda p: p | other | 'Id' >> beam.Map(_id),
            '--checkpoint_location',
            checkpoint,
        )


def test_rate_stream_fires_windows_while_running(spark, tmp_path):
    """Spark's rate source (``rate-micro-batch``: 10 rows a batch, event time
    one second further each batch) read by a query that never ends by
    itself: 5-second windows fire as the watermark passes them, each with
    its 50 rows, while the stream runs; a drain stops the source at its
    position (and Spark's query), fires the last window and ends DONE."""
    import time

    read = ReadFromSpark.stream(
        format='rate-micro-batch',
        options={'rowsPerBatch': 10, 'startTimestamp': 0, 'advanceMillisPerBatch': 1000},
        event_time='timestamp',
        spark=spark,
    )
    out = str(tmp_path / 'out')
    os.makedirs(out)

    def show(kv, w=beam.DoFn.WindowParam):
        return int(w.start), kv[1]

    p = beam.Pipeline(
        runner=InProcessSparkRunner(spark=spark, debug=True),
        options=PipelineOptions(['--checkpoint_location', str(tmp_path / 'ck')]),
    )
    _ = (
        p
        | read
        | beam.WindowInto(beam.window.FixedWindows(5))
        | beam.Map(lambda r: ('n', r.value))
        | beam.combiners.Count.PerKey()
        | beam.Map(show)
        | beam.ParDo(cases.Collect(out))
    )
    result = p.run()
    deadline = time.monotonic() + 300
    while len(os.listdir(out)) < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert result.drain() == 'DONE'
    got = cases.collected(out)
    assert len(got) >= 3, got
    # Every window fired once, the last (drained) one with what was read
    # of it: whole Spark batches of 10 rows.
    assert [start for start, _ in got] == list(range(0, 5 * len(got), 5))
    assert all(n == 50 for _, n in got[:-1]), got
    assert 0 < got[-1][1] <= 50 and got[-1][1] % 10 == 0, got
    assert not spark.streams.active
