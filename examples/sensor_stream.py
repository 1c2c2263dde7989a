"""A Python streaming data source into a Beam stream into a catalog table.

    # Reads what the source has (--readings of them), then ends:
    python examples/sensor_stream.py --readings 600 --out /tmp/sensors \\
        --checkpoint_location /tmp/ck-sensors

    # Runs on (Ctrl-C to stop; restartable: run it again with the same
    # --checkpoint_location and --out, it goes on from the last micro-batch):
    python examples/sensor_stream.py --forever --out /data/sensors \\
        --checkpoint_location /data/ck/sensors

``SensorReadings`` is a streaming data source written with PySpark's Python
data source API (``pyspark.sql.datasource``): reading ``n`` is sensor
``s{n % SENSORS}``, value ``reading_value(n)``, at ``START + n / 2`` seconds;
its offsets are the next reading's number (``{'n': ...}``), at most
``--per_batch`` a Spark batch, so Spark's checkpoint says where a restarted
query goes on. The pipeline

1. reads it with ``ReadFromSpark.stream(format='sensor_readings',
   event_time='ts', max_out_of_orderness=5)``: a Structured Streaming query
   stages each Spark batch; the loop's commit record holds the Spark batch it
   consumed, so a restart reads each reading once;
2. keys each reading by sensor and runs ``Summarize``, a **stateful DoFn**: per
   sensor and 10-second window it keeps the count, sum and maximum of the
   values (state) and an event-time timer at the window's end; when the
   watermark passes it, the timer emits the window's summary and clears the
   state. State and timers are in the stream's checkpoint: a restarted stream
   goes on with them;
3. appends the summaries to the external Parquet table ``sensor_summaries``
   (``CREATE TABLE ... USING parquet LOCATION '<out>'``) with
   ``WriteToSpark('sensor_summaries', mode='append')``: each micro-batch's
   rows exactly once, across restarts; the catalog is refreshed after each.

Without ``--forever`` the query reads what is available and ends (watermark
+inf: every window fires), and the script prints the table's rows
(``<sensor> <window start second> <count> <sum> <max>``). Runs on
InProcessSparkRunner only (the read and the write are Spark work).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import FixedWindows
from apache_beam.typehints.row_type import RowTypeConstraint

SENSORS = 4
START = datetime.datetime(2026, 11, 23, 9, 0, tzinfo=datetime.timezone.utc)
TABLE = 'sensor_summaries'


def reading_value(n: int) -> int:
    return (n * 37 + n // 7) % 101


def reading(n: int) -> tuple:
    """Reading ``n`` as the source gives it: (sensor, value, ts)."""
    return (f's{n % SENSORS}', reading_value(n), START + datetime.timedelta(seconds=n / 2))


def sensor_source():
    """The data source class (made here: pyspark is imported when used)."""
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.datasource import DataSourceStreamReader
    from pyspark.sql.datasource import InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.streaming.datasource import ReadMaxRows

    class Reader(DataSourceStreamReader):
        def __init__(self, options):
            # 'readings': how many exist (none: without end).
            self.total = int(options.get('readings', 0)) or None
            self.per_batch = int(options.get('per_batch', 100))

        def initialOffset(self):
            return {'n': 0}

        def getDefaultReadLimit(self):
            return ReadMaxRows(self.per_batch)

        def latestOffset(self, start, limit):
            if isinstance(limit, ReadAllAvailable):  # trigger availableNow
                return {'n': self.total or start['n'] + self.per_batch}
            end = start['n'] + limit.maxRows
            return {'n': end if self.total is None else min(end, self.total)}

        def partitions(self, start, end):
            return [InputPartition((start['n'], end['n']))]

        def read(self, partition):
            first, end = partition.value
            for n in range(first, end):
                yield reading(n)

        def commit(self, end):
            pass

    class SensorReadings(DataSource):
        @classmethod
        def name(cls):
            return 'sensor_readings'

        def schema(self):
            return 'sensor string, value long, ts timestamp'

        def streamReader(self, schema):
            return Reader(self.options)

    return SensorReadings


SUMMARY = RowTypeConstraint.from_fields(
    [('sensor', str), ('window_second', int), ('readings', int), ('total', int), ('peak', int)]
)


def _peak(values) -> int:
    """The largest value (Beam also merges empty accumulators: 0 then)."""
    return max(values, default=0)


class Summarize(beam.DoFn):
    """Per sensor and window: count, sum and maximum in state, emitted by an
    event-time timer at the window's end."""

    COUNT = userstate.CombiningValueStateSpec('count', combine_fn=sum)
    TOTAL = userstate.CombiningValueStateSpec('total', combine_fn=sum)
    PEAK = userstate.CombiningValueStateSpec('peak', combine_fn=_peak)
    END = userstate.TimerSpec('end', TimeDomain.WATERMARK)

    def process(
        self,
        element,
        w=beam.DoFn.WindowParam,
        count=beam.DoFn.StateParam(COUNT),
        total=beam.DoFn.StateParam(TOTAL),
        peak=beam.DoFn.StateParam(PEAK),
        end=beam.DoFn.TimerParam(END),
    ):
        _, value = element
        count.add(1)
        total.add(value)
        peak.add(value)
        end.set(w.max_timestamp())

    @userstate.on_timer(END)
    def emit(
        self,
        key=beam.DoFn.KeyParam,
        w=beam.DoFn.WindowParam,
        count=beam.DoFn.StateParam(COUNT),
        total=beam.DoFn.StateParam(TOTAL),
        peak=beam.DoFn.StateParam(PEAK),
    ):
        yield beam.Row(
            sensor=key,
            window_second=int(w.start) - int(START.timestamp()),
            readings=count.read(),
            total=total.read(),
            peak=peak.read(),
        )
        for state in (count, total, peak):
            state.clear()


def summaries(readings: beam.PCollection) -> beam.PCollection:
    return (
        readings
        | 'Windows' >> beam.WindowInto(FixedWindows(10))
        | 'BySensor' >> beam.Map(lambda r: (r.sensor, r.value))
        | 'Summarize' >> beam.ParDo(Summarize()).with_output_types(SUMMARY)
    )


def run(argv: list[str] | None = None) -> list[str]:
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.transforms import ReadFromSpark
    from beam_spark_inproc.transforms import WriteToSpark

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--readings', type=int, default=600)
    parser.add_argument('--per_batch', type=int, default=100)
    parser.add_argument(
        '--forever', action='store_true', help='a source without end, read until Ctrl-C'
    )
    parser.add_argument('--out', required=True, help="the table's folder")
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    runner = InProcessSparkRunner()
    spark = runner.session(options)
    spark.dataSource.register(sensor_source())
    location = os.path.abspath(args.out)
    spark.sql(
        f'CREATE TABLE IF NOT EXISTS {TABLE} (sensor STRING, window_second '
        'BIGINT, readings BIGINT, total BIGINT, peak BIGINT) USING parquet '
        f"LOCATION '{location}'"
    )
    p = beam.Pipeline(runner=runner, options=options)
    readings = p | 'Read' >> ReadFromSpark.stream(
        format='sensor_readings',
        options={'readings': 0 if args.forever else args.readings, 'per_batch': args.per_batch},
        event_time='ts',
        max_out_of_orderness=5,
        trigger=None if args.forever else 'available_now',
        spark=spark,
    )
    _ = summaries(readings) | 'Write' >> WriteToSpark(TABLE, mode='append', spark=spark)
    p.run().wait_until_finish()
    rows = spark.table(TABLE).orderBy('sensor', 'window_second').collect()
    lines = [f'{r.sensor} {r.window_second} {r.readings} {r.total} {r.peak}' for r in rows]
    for line in lines:
        print(line)
    return lines


if __name__ == '__main__':
    run(sys.argv[1:])
