"""A stream writing windowed totals with WriteToSpark, for ``test_spark_sinks``;
runnable as a script (a driver to kill).

``python -m tests.streaming.spark_sink_pipeline OUT CHECKPOINT [--kill-mid
MARKER] [--table LOCATION] [--spark]``: TestStream events -> FixedWindows(10)
with allowed lateness -> sum per key -> ``WriteToSpark(path=OUT)`` with the
window and pane in columns; ``--table``: also ``WriteToSpark(table=TABLE)``,
the external Parquet table partitioned by key at LOCATION (``create_table``).
``--kill-mid``: the driver SIGKILLs itself (once: MARKER absent) while
publishing micro-batch ``KILL_MID`` or later, after its files were renamed
into OUT (into LOCATION with ``--table``) and before its published record was
written.
(``KILL_AFTER``: the test's later fault, after a publish and before the
micro-batch's commit record.)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import typing

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window

STEPS, PER_STEP, KEYS = 6, 6, 3
KILL_MID, KILL_AFTER = 3, 5
COLUMNS = dict(
    window_start='window_start',
    window_end='window_end',
    pane_timing='pane_timing',
    pane_index='pane_index',
)


# Built by call: this module's annotations are strings (``__future__``).
Total = typing.NamedTuple('Total', [('key', str), ('total', int)])


beam.coders.registry.register_coder(Total, beam.coders.RowCoder)


def events() -> TestStream:
    """Elements every 5 s, the watermark following them; then two late
    elements (within the allowed lateness) for windows already fired."""
    stream = TestStream()
    for step in range(STEPS):
        stream = stream.add_elements(
            [
                window.TimestampedValue((f'k{i % KEYS}', step * PER_STEP + i), step * 5 + i % 5)
                for i in range(PER_STEP)
            ]
        )
        stream = stream.advance_watermark_to(step * 5 + 5)
    stream = stream.add_elements(
        [window.TimestampedValue(('k0', 1000), 3), window.TimestampedValue(('k1', 2000), 12)]
    )
    return stream.advance_watermark_to_infinity()


def totals(p: beam.Pipeline):
    return (
        p
        | events()
        | 'Window' >> beam.WindowInto(window.FixedWindows(10), allowed_lateness=60)
        | beam.CombinePerKey(sum)
        | 'Total' >> beam.Map(lambda kv: Total(*kv)).with_output_types(Total)
    )


TABLE = 'sink_totals'


def create_table(spark, location: str, name: str = TABLE) -> str:
    """The external Parquet table the stream writes, partitioned by key (a
    session's catalog registers it over what LOCATION holds)."""
    spark.sql(
        f'CREATE TABLE IF NOT EXISTS {name} (total BIGINT, window_start '
        'TIMESTAMP, window_end TIMESTAMP, pane_timing STRING, pane_index '
        f'BIGINT, key STRING) USING parquet PARTITIONED BY (key) LOCATION '
        f"'{location}'"
    )
    return name


def build(p: beam.Pipeline, out: str, spark, table: str = '') -> None:
    from beam_spark_inproc.transforms import WriteToSpark

    rows = totals(p)
    _ = rows | WriteToSpark(path=out, mode='append', spark=spark, **COLUMNS)
    if table:
        _ = rows | 'To table' >> WriteToSpark(
            create_table(spark, table), mode='append', spark=spark, **COLUMNS
        )


class _Rows(beam.DoFn):
    """What the write's columns hold, from Beam's own window and pane."""

    def process(self, total, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        from apache_beam.utils.windowed_value import PaneInfoTiming

        yield (
            total.key,
            total.total,
            w.start.micros,
            w.end.micros,
            PaneInfoTiming.to_string(pane.timing),
            pane.index,
        )


def expected() -> list[tuple]:
    """The rows, from Beam's BundleBasedDirectRunner on the same stream."""
    from tests.streaming import oracle

    return sorted(record[0] for record in oracle.direct(lambda p: totals(p) | beam.ParDo(_Rows())))


QUERY = (
    'SELECT window_start, window_end, COUNT(*) AS n, SUM(total) AS s '
    'FROM PCOLLECTION GROUP BY window_start, window_end'
)


def query(spark):
    """SparkSql per fired pane: count and sum of the totals per window."""
    from beam_spark_inproc.transforms import SparkSql

    return SparkSql(QUERY, spark=spark) | 'Pair' >> beam.Map(lambda r: (r.n, r.s))


def expected_panes() -> list[tuple]:
    """``query``'s result by hand from Beam's panes: per window and pane
    firing (all keys' on-time panes of a window fire in one micro-batch,
    each late one in its own), the count and sum of the totals."""
    from tests.streaming import oracle

    found: dict = {}
    for (_, total, *_), window_, _, timing, index, *_ in oracle.direct(
        lambda p: totals(p) | beam.ParDo(_Rows())
    ):
        n, s = found.get((window_, timing, index), (0, 0))
        found[(window_, timing, index)] = (n + 1, s + total)
    return sorted((w, n, s) for (w, _, _), (n, s) in found.items())


def windows(records: list) -> list:
    """(window, n, s) of the query's records (which keep their window)."""
    return sorted((window_, n, s) for (n, s), window_, *_ in records)


def table_rows(spark, name: str = TABLE) -> list[tuple]:
    """The rows of the catalog table as ``expected`` gives them."""
    return sorted(
        tuple(r)
        for r in spark.table(name)
        .selectExpr(
            'key',
            'total',
            'unix_micros(window_start)',
            'unix_micros(window_end)',
            'pane_timing',
            'pane_index',
        )
        .collect()
    )


def table(out: str) -> list[tuple]:
    """The rows at OUT as ``expected`` gives them (pyarrow's reader skips
    the ``_``-folders, as Spark's does)."""
    return arrow_rows(pq.read_table(out))


def arrow_rows(data: pa.Table) -> list[tuple]:
    """The rows of an Arrow table of totals as ``expected`` gives them."""
    micros = {
        name: data.column(name).cast(pa.timestamp('us', tz='UTC')).cast(pa.int64()).to_pylist()
        for name in ('window_start', 'window_end')
    }
    return sorted(
        zip(
            data.column('key').to_pylist(),
            data.column('total').to_pylist(),
            micros['window_start'],
            micros['window_end'],
            data.column('pane_timing').to_pylist(),
            data.column('pane_index').to_pylist(),
        )
    )


def run(runner, out: str, checkpoint: str, spark, table: str = '') -> str:
    options = PipelineOptions([f'--checkpoint_location={checkpoint}'])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=runner, options=options)
    build(p, out, spark, table)
    result = p.run()
    return result.wait_until_finish()


def _kill(marker: str) -> None:
    open(marker, 'w').close()
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(kill_mid: str, folder: str) -> None:
    """Test hooks: SIGKILL this driver at a point of the protocol of the sink
    writing into ``folder``."""
    from beam_spark_inproc.transforms import stream_runtime as spark_sinks

    if kill_mid and not os.path.exists(kill_mid):
        record = spark_sinks._write_atomically

        def killing_record(path, data):
            published = json.loads(data)
            if (
                path.endswith('published.json')
                and path.startswith(os.path.join(folder, ''))
                and published['micro_batch'] >= KILL_MID
                and published['files']
            ):
                _kill(kill_mid)  # files renamed, record not written
            record(path, data)

        spark_sinks._write_atomically = killing_record


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('out')
    parser.add_argument('checkpoint')
    parser.add_argument('--kill-mid', default='')
    parser.add_argument('--table', default='')
    parser.add_argument('--spark', action='store_true')
    args = parser.parse_args(argv)
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.spark import session

    spark, _ = session.get_or_create('local[2]', None, {})
    _arm(args.kill_mid, os.path.abspath(args.table or args.out))
    print(
        run(
            InProcessSparkRunner(debug=not args.spark, spark=spark),
            args.out,
            args.checkpoint,
            spark,
            args.table,
        )
    )


if __name__ == '__main__':
    main(sys.argv[1:])
