"""Streaming pipelines over Spark Connect: the micro-batch
loop runs in the Connect client, each micro-batch Spark jobs on the server
through DataFrame APIs only; keyed state is written and read by the server's
Python workers under the client's checkpoint location (one machine here).

Run by ``spark_connect_pipelines.main`` in the Connect client process, after
the batch pipelines; each case's records must equal Beam's
BundleBasedDirectRunner's on the same TestStream (``tests.streaming.oracle``).
"""

from __future__ import annotations

import os
import sys
import time
import traceback

# The client runs as a script from tests/integration: make ``tests`` importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.streaming import oracle  # noqa: E402
from tests.streaming import test_spread  # noqa: E402
from tests.streaming import test_triggers  # noqa: E402

# A GroupByKey cascade (a pane of the first reaches the second in the
# micro-batch of the watermark that fired it), a stateful DoFn with timers,
# and a large TestStream event spread over two partitions of a Connect
# DataFrame (``--spark_stream_spread_kb``): each case's builder, its flags and,
# where it checks the spread, the bundles that saw elements (the big event as
# one bundle per part, then three small events).
CASES = {
    'two_groupings': (test_triggers.two_groupings, (), None),
    'stateful_timers': (test_triggers.stateful_timers, (), None),
    'spread_windowed_sum': (
        test_spread.windowed_sum,
        ('--spark_parallelism', '2', '--spark_stream_spread_kb', '16'),
        2 + 3,
    ),
}


def spark_file_stream(session) -> int:
    """ReadFromSpark over a streaming DataFrame: Spark's file
    source read by the staging query on the server (its ``foreachBatch``
    function in the server's Python workers), the loop in this client; the
    windowed sums must equal the same sums over the rows read as a batch on
    FnApiRunner (``spark_source_pipelines``)."""
    import tempfile

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_spark_inproc import InProcessSparkRunner
    from tests.streaming import spark_source_pipelines as cases

    base = tempfile.mkdtemp(prefix='beam-connect-spark-source-')
    landing, out = os.path.join(base, 'landing'), os.path.join(base, 'out')
    os.makedirs(out)
    cases.land(landing)
    expected = cases.bounded(session, landing)
    p = beam.Pipeline(
        runner=InProcessSparkRunner(spark=session),
        options=PipelineOptions(['--checkpoint_location', os.path.join(base, 'ck')]),
    )
    _ = cases.windowed_sums(p | cases.read(landing, session)) | beam.ParDo(cases.Collect(out))
    assert p.run().wait_until_finish() == 'DONE'
    got = cases.collected(out)
    if got != expected or not got:
        raise AssertionError(f'over Connect: {got!r}\nbounded: {expected!r}')
    return len(got)


def spark_stream_writes(session) -> int:
    """WriteToSpark in a stream to a path and to an external
    Parquet catalog table partitioned by key, and SparkSql per fired pane,
    the micro-batches' Spark work on the server: the rows written equal
    those from Beam's BundleBasedDirectRunner's panes, the query's result
    the count and sum per window and pane computed from them
    (``tests.streaming.spark_sink_pipeline``)."""
    import tempfile

    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.transforms import WriteToSpark
    from tests.streaming import spark_sink_pipeline as sink

    base = tempfile.mkdtemp(prefix='beam-connect-spark-sink-')
    out = os.path.join(base, 'out')
    table = sink.create_table(session, os.path.join(base, 'table'), 'connect_sink_totals')
    try:

        def build(p):
            totals = sink.totals(p)
            _ = totals | WriteToSpark(path=out, mode='append', spark=session, **sink.COLUMNS)
            _ = totals | 'To table' >> WriteToSpark(
                table, mode='append', spark=session, **sink.COLUMNS
            )
            return totals | sink.query(session)

        records = oracle.run(
            build, InProcessSparkRunner(spark=session), f'--checkpoint_location={base}/ck'
        )
        expected = sink.expected()
        problems = [
            what
            for what, got, want in (
                ('path', sink.table(out), expected),
                ('table', sink.table_rows(session, table), expected),
                ('SparkSql', sink.windows(records), sink.expected_panes()),
            )
            if got != want
        ]
        if problems or not expected:
            raise AssertionError(f"over Connect, {problems} differ from the rows of Beam's panes")
        return len(records)
    finally:
        session.sql(f'DROP TABLE IF EXISTS {table}')


# Cases that check themselves: name -> function(session) returning records.
SOURCE_CASES = {'spark_file_stream': spark_file_stream, 'spark_stream_writes': spark_stream_writes}


def run_all(session) -> dict:
    from beam_spark_inproc import InProcessSparkRunner

    status = {}
    for name, (build, flags, bundles) in sorted(CASES.items()):
        began = time.monotonic()
        entry = status[name] = {'ok': False}
        try:
            expected = oracle.direct(build)
            results = []
            got = oracle.run(build, InProcessSparkRunner(spark=session), *flags, results=results)
            entry['records'] = len(got)
            if got != expected:
                raise AssertionError(
                    f'over Connect: {got!r}\nBundleBasedDirectRunner: {expected!r}'
                )
            if bundles is not None and test_spread.bundles(results[0]) != bundles:
                raise AssertionError(
                    f'{test_spread.bundles(results[0])} bundles saw elements '
                    f'over Connect, expected {bundles}'
                )
            entry['ok'] = bool(expected)
        except Exception as e:
            entry['error'] = f'{type(e).__name__}: {e}'[-6000:]
            entry['traceback'] = traceback.format_exc()[-6000:]
        entry['seconds'] = round(time.monotonic() - began, 2)
    for name, case in sorted(SOURCE_CASES.items()):
        began = time.monotonic()
        entry = status[name] = {'ok': False}
        try:
            entry['records'] = case(session)
            entry['ok'] = True
        except Exception as e:
            entry['error'] = f'{type(e).__name__}: {e}'[-6000:]
            entry['traceback'] = traceback.format_exc()[-6000:]
        entry['seconds'] = round(time.monotonic() - began, 2)
    return status
