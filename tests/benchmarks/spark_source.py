"""Throughput and latency of a stream read from Spark's ``rate`` source.

    python -m tests.benchmarks.spark_source --rows_per_second 20000 --seconds 60

A Spark query of ``rate`` (``rowsPerSecond``; each row's ``timestamp`` is
when Spark generated it) staged by ``ReadFromSpark``'s source, the loop on
classic Spark (``local[2]``): each row's latency (wall clock when a Beam DoFn
sees it minus its ``timestamp``) into a Beam distribution, then 10-second
windowed counts appended to a Parquet folder with ``WriteToSpark``. Runs ``--seconds``
after the first row arrives, then cancels; prints rows read, rows/s over that
time, latency min/mean/max and the micro-batches run.

``--table``: the counts go to an external Parquet catalog table
(``WriteToSpark('bench_rate_counts')``, ``transforms.stream_tables``) instead,
and the source-to-table latency of each window is printed too: when its row's
file was written into the table's folder (the file's modification time, just
before the rename that publishes it) minus the window's end, min/mean/max.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window
from apache_beam.typehints.row_type import RowTypeConstraint


class Latency(beam.DoFn):
    def __init__(self):
        self.rows = Metrics.counter('bench', 'rows')
        self.latency = Metrics.distribution('bench', 'latency_ms')

    def process(self, row):
        self.rows.inc()
        self.latency.update(int(time.time() * 1000 - row.timestamp.micros / 1000))
        yield row


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument('--rows_per_second', type=int, default=20000)
    parser.add_argument('--seconds', type=float, default=60)
    parser.add_argument('--debug', action='store_true')
    parser.add_argument(
        '--table', action='store_true', help='write to a catalog table (module doc)'
    )
    args = parser.parse_args(argv)
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.spark import session
    from beam_spark_inproc.transforms import ReadFromSpark

    spark, _ = session.get_or_create(
        'local[2]', None, {'spark.ui.enabled': 'false', 'spark.sql.shuffle.partitions': '2'}
    )
    base = tempfile.mkdtemp(prefix='bench-spark-source-')
    p = beam.Pipeline(
        runner=InProcessSparkRunner(spark=spark, debug=args.debug),
        options=PipelineOptions(['--checkpoint_location', os.path.join(base, 'ck')]),
    )
    _ = (
        p
        | ReadFromSpark.stream(
            format='rate',
            options={'rowsPerSecond': args.rows_per_second},
            event_time='timestamp',
            max_out_of_orderness=1,
            spark=spark,
        )
        | beam.ParDo(Latency())
        | beam.WindowInto(window.FixedWindows(10))
        | beam.Map(lambda r: ('rows', 1))
        | beam.CombinePerKey(sum)
        | beam.Map(lambda kv: beam.Row(rows=kv[1])).with_output_types(
            RowTypeConstraint.from_fields([('rows', int)])
        )
        | _sink(spark, base, args.table)
    )
    result = p.run()

    def counters():
        found = result.metrics().query(MetricsFilter().with_namespace('bench'))
        rows = sum(c.committed or 0 for c in found['counters'])
        dist = [d.committed for d in found['distributions'] if d.committed]
        return rows, (dist[0] if dist else None)

    while counters()[0] == 0:
        time.sleep(0.2)
    start_rows, start = counters()[0], time.monotonic()
    time.sleep(args.seconds)
    rows, dist = counters()
    elapsed = time.monotonic() - start
    result.cancel()
    figures = {
        'rows_per_second_asked': args.rows_per_second,
        'rows': rows,
        'rows_per_second': round((rows - start_rows) / elapsed),
        'latency_ms': {'min': dist.min, 'mean': round(dist.mean), 'max': dist.max}
        if dist
        else None,
        'micro_batches': result.executor.micro_batch,
    }
    if args.table:
        figures['table'] = _table_latency(spark, os.path.join(base, 'out'))
    print(json.dumps(figures))
    return figures


TABLE = 'bench_rate_counts'


def _sink(spark, base: str, table: bool):
    from beam_spark_inproc.transforms import WriteToSpark

    out = os.path.join(base, 'out')
    if not table:
        return WriteToSpark(path=out, mode='append', window_start='window_start', spark=spark)
    spark.sql(f'DROP TABLE IF EXISTS {TABLE}')
    spark.sql(
        f"CREATE TABLE {TABLE} (rows BIGINT, window_start TIMESTAMP) USING parquet LOCATION '{out}'"
    )
    return WriteToSpark(TABLE, mode='append', window_start='window_start', spark=spark)


def _table_latency(spark, folder: str) -> dict:
    """Per window row in the table: its file's write time minus the window's
    end (10 s after its start)."""
    import pyarrow.parquet as pq

    latencies = []
    for name in os.listdir(folder):
        if name.startswith(('_', '.')):
            continue
        path = os.path.join(folder, name)
        for start in pq.read_table(path).column('window_start').to_pylist():
            latencies.append(os.path.getmtime(path) - start.timestamp() - 10)
    return {
        'rows_in_table': spark.table(TABLE).count(),
        'windows': len(latencies),
        'latency_s': {
            'min': round(min(latencies), 2),
            'mean': round(sum(latencies) / len(latencies), 2),
            'max': round(max(latencies), 2),
        }
        if latencies
        else None,
    }


if __name__ == '__main__':
    main()
