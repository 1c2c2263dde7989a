"""Kafka into a Beam stream into a Parquet table: clicks per page and minute.

    # Kafka (the cluster needs Spark's Kafka connector, fetched here by
    # spark.jars.packages; runs until Ctrl-C, restartable from the checkpoint):
    python examples/kafka_stream.py --bootstrap_servers broker:9092 --topic clicks \\
        --checkpoint_location /data/ck/clicks --out /data/clicks-per-minute

    # The same pipeline over JSON files landing in a folder, each line a record
    # shaped like Kafka's (value, timestamp); reads what is there, then ends:
    python examples/kafka_stream.py --landing /data/landing --out /tmp/counts

Each Kafka record's ``value`` is a JSON click ``{"user": ..., "page": ...}``; its
event time is the record's ``timestamp`` column. The pipeline

1. reads the topic with ``ReadFromSpark.stream(format='kafka', options=...,
   event_time='timestamp', max_out_of_orderness=10)``: Spark's Kafka source in a
   Structured Streaming query that stages each batch; the stream's watermark is
   the latest record time minus 10 s; Kafka's offsets live in Spark's checkpoint
   and the loop's commit record holds the Spark batch it has consumed, so a
   restart reads each record once;
2. counts clicks per page in one-minute windows with Beam (a window fires once
   the watermark passes its end);
3. appends ``(window_start, page, clicks)`` rows to the Parquet folder ``--out``
   with ``WriteToSpark(path=..., mode='append', window_start='window_start')``:
   each micro-batch's fired windows once, across restarts (read it as a table:
   ``CREATE TABLE ... USING parquet LOCATION '<out>'``).

With ``--landing`` the source is Spark's file source over the folder
(``maxFilesPerTrigger=1``, ``trigger='available_now'``): the rest of the
pipeline is the same, and the script prints the table's rows
(``<minute> <page> <clicks>``) once the stream has read what was there.
Runs on InProcessSparkRunner only (the read is Spark work).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import FixedWindows
from apache_beam.typehints.row_type import RowTypeConstraint

PAGES = ('home', 'search', 'cart', 'checkout')
START = datetime.datetime(2026, 11, 23, 9, 0, tzinfo=datetime.timezone.utc)
# Spark's Kafka connector for PySpark 4 (Scala 2.13): the version of the
# cluster's Spark.
KAFKA_PACKAGE = 'org.apache.spark:spark-sql-kafka-0-10_2.13:{version}'
RECORD_SCHEMA = 'value string, timestamp timestamp'


def generate_clicks(files: int, per_file: int, seed: int) -> list[list[dict]]:
    """Kafka-shaped records (value, timestamp), a list per landing file; time
    goes forward file after file (30 s each), out of order by up to 5 s."""
    rnd = random.Random(seed)
    out = []
    for f in range(files):
        records = []
        for _ in range(per_file):
            at = START + datetime.timedelta(seconds=30 * f + rnd.uniform(0, 30) - rnd.uniform(0, 5))
            click = {'user': f'u{rnd.randrange(50)}', 'page': rnd.choice(PAGES)}
            records.append({'value': json.dumps(click), 'timestamp': at.isoformat()})
        out.append(records)
    return out


def land(folder: str, files: list[list[dict]]) -> None:
    os.makedirs(folder, exist_ok=True)
    for f, records in enumerate(files):
        path = os.path.join(folder, f'clicks-{f:04d}.json')
        with open(path, 'w') as out:
            out.writelines(json.dumps(r) + '\n' for r in records)
        stamp = START.timestamp() + f  # the file source reads oldest first
        os.utime(path, (stamp, stamp))


PER_PAGE = RowTypeConstraint.from_fields([('page', str), ('clicks', int)])


def clicks_per_minute(records: beam.PCollection) -> beam.PCollection:
    return (
        records
        | 'Page' >> beam.Map(lambda r: json.loads(r.value)['page'])
        | 'Minutes' >> beam.WindowInto(FixedWindows(60))
        | 'PerPage' >> beam.combiners.Count.PerElement()
        | 'AsRow'
        >> beam.Map(lambda kv: beam.Row(page=kv[0], clicks=kv[1])).with_output_types(PER_PAGE)
    )


def source(args, spark):
    from beam_spark_inproc.transforms import ReadFromSpark

    if args.landing:
        return ReadFromSpark.stream(
            format='json',
            path=args.landing,
            schema=RECORD_SCHEMA,
            options={'maxFilesPerTrigger': 1},
            event_time='timestamp',
            max_out_of_orderness=10,
            trigger='available_now',
            spark=spark,
        )
    return ReadFromSpark.stream(
        format='kafka',
        options={
            'kafka.bootstrap.servers': args.bootstrap_servers,
            'subscribe': args.topic,
            'startingOffsets': 'earliest',
            'maxOffsetsPerTrigger': 100_000,
        },
        event_time='timestamp',
        max_out_of_orderness=10,
        spark=spark,
    )


def run(argv: list[str] | None = None) -> list[str]:
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.transforms import WriteToSpark

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--bootstrap_servers')
    parser.add_argument('--topic', default='clicks')
    parser.add_argument('--landing', help='a folder of JSON records instead of Kafka')
    parser.add_argument('--out', required=True)
    args, beam_args = parser.parse_known_args(argv)
    if not args.landing and not args.bootstrap_servers:
        parser.error('give --bootstrap_servers (Kafka) or --landing (files)')
    if args.bootstrap_servers:
        import pyspark

        beam_args += [
            '--spark_conf',
            'spark.jars.packages=' + KAFKA_PACKAGE.format(version=pyspark.__version__),
        ]
    options = PipelineOptions(beam_args)
    runner = InProcessSparkRunner()
    spark = runner.session(options)
    p = beam.Pipeline(runner=runner, options=options)
    _ = clicks_per_minute(p | 'Read' >> source(args, spark)) | 'Write' >> WriteToSpark(
        path=os.path.abspath(args.out), mode='append', window_start='window_start', spark=spark
    )
    p.run().wait_until_finish()
    spark.conf.set('spark.sql.session.timeZone', 'UTC')  # minutes in UTC
    rows = (
        spark.read.parquet(os.path.abspath(args.out))
        .selectExpr("date_format(window_start, 'HH:mm') AS minute", 'page', 'clicks')
        .orderBy('minute', 'page')
        .collect()
    )
    lines = [f'{r.minute} {r.page} {r.clicks}' for r in rows]
    for line in lines:
        print(line)
    return lines


if __name__ == '__main__':
    run(sys.argv[1:])
