"""Spark tables in a Beam pipeline: read a table, window and aggregate with Beam, write a table.

    python examples/spark_tables.py                        # 500 clicks
    python examples/spark_tables.py --num_clicks 5000 --seed 3
    python examples/spark_tables.py --spark_master 'local[2]'

Spark writes a generated ``clicks`` table (``user string, page string, ts
timestamp``) to the session's warehouse (``./spark-warehouse`` by default).
The pipeline then

1. reads it with ``ReadFromSpark('clicks')``: Spark's own reader, one task per
   file split, rows reaching the first Beam stage as Arrow batches;
2. puts each click at its event time into one-minute ``FixedWindows`` and
   counts clicks per page and window with Beam;
3. writes ``(window_start timestamp, page string, clicks bigint)`` rows with
   ``WriteToSpark(table='clicks_per_minute', mode='overwrite')``: one Spark job
   and Spark's commit protocol.

The script prints the written table, read back with Spark, one line per row.
Runs on InProcessSparkRunner only (ReadFromSpark/WriteToSpark are Spark work).
"""

from __future__ import annotations

import argparse
import datetime
import random
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import FixedWindows
from apache_beam.transforms.window import TimestampedValue
from apache_beam.typehints.row_type import RowTypeConstraint
from apache_beam.utils.timestamp import Timestamp

PAGES = ('home', 'search', 'cart', 'checkout')
START = datetime.datetime(2026, 11, 23, 9, 0, tzinfo=datetime.timezone.utc)
WINDOW_SECONDS = 60
PER_MINUTE = RowTypeConstraint.from_fields(
    [('window_start', Timestamp), ('page', str), ('clicks', int)]
)


def generate_clicks(n: int, seed: int) -> list[tuple]:
    """(user, page, ts) over ten minutes from START."""
    rnd = random.Random(seed)
    return [
        (
            f'u{rnd.randrange(50)}',
            rnd.choice(PAGES),
            START + datetime.timedelta(microseconds=rnd.randrange(600_000_000)),
        )
        for _ in range(n)
    ]


class PerMinute(beam.DoFn):
    def process(self, page_count, window=beam.DoFn.WindowParam):
        page, clicks = page_count
        yield beam.Row(window_start=window.start, page=page, clicks=clicks)


def clicks_per_minute(clicks: beam.PCollection) -> beam.PCollection:
    return (
        clicks
        | 'AtEventTime' >> beam.Map(lambda r: TimestampedValue(r.page, r.ts))
        | 'Minutes' >> beam.WindowInto(FixedWindows(WINDOW_SECONDS))
        | 'PerPage' >> beam.combiners.Count.PerElement()
        | 'AsRow' >> beam.ParDo(PerMinute()).with_output_types(PER_MINUTE)
    )


def run(argv: list[str] | None = None):
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.transforms import ReadFromSpark
    from beam_spark_inproc.transforms import WriteToSpark

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--num_clicks', type=int, default=500)
    parser.add_argument('--seed', type=int, default=7)
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    runner = InProcessSparkRunner()
    spark = runner.session(options)
    spark.conf.set('spark.sql.session.timeZone', 'UTC')  # for printing minutes

    spark.createDataFrame(
        generate_clicks(args.num_clicks, args.seed), 'user string, page string, ts timestamp'
    ).write.mode('overwrite').saveAsTable('clicks')
    with beam.Pipeline(runner=runner, options=options) as p:
        clicks = p | 'ReadClicks' >> ReadFromSpark('clicks', spark=spark)
        clicks_per_minute(clicks) | 'WriteCounts' >> WriteToSpark(
            table='clicks_per_minute', mode='overwrite', spark=spark
        )
    rows = (
        spark.table('clicks_per_minute')
        .selectExpr("date_format(window_start, 'HH:mm') AS minute", 'page', 'clicks')
        .orderBy('minute', 'page')
        .collect()
    )
    for row in rows:
        print(f'{row.minute} {row.page} {row.clicks}')
    print(f'{args.num_clicks} clicks -> {len(rows)} rows in clicks_per_minute')
    return rows


if __name__ == '__main__':
    run(sys.argv[1:])
