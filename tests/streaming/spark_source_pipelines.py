"""Streams read through ReadFromSpark over Spark's streaming sources
(``transforms.spark_stream``), shared by the tests on the debug engine, on
Spark, over Spark Connect and by the restart driver.

The events: ``ROWS`` rows ``(id, key, ts)`` over ``FILES`` JSON files (one
file a Spark batch with ``maxFilesPerTrigger=1``), event times increasing
file after file and out of order within a file by less than
``OUT_OF_ORDERNESS`` seconds: no row is late. The pipeline sums ids per key
and 10-second fixed window. The reference is the same windowed sum over the
same rows read as a batch (``bounded``), on Beam's FnApiRunner.

``CounterSource``: a Python streaming data source (``pyspark.sql.datasource``)
with offsets: ``total`` rows, at most ``per_batch`` a Spark batch
(``ReadMaxRows``), event time = id seconds.
"""

from __future__ import annotations

import datetime
import json
import os

import apache_beam as beam
from apache_beam.transforms import window

FILES, PER_FILE, KEYS = 6, 20, 4
OUT_OF_ORDERNESS = 5
SCHEMA = 'id long, key string, ts timestamp'
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def rows() -> list[dict]:
    """Event time: file f covers [5f, 5f + 5) seconds, shuffled inside."""
    out = []
    for f in range(FILES):
        for i in range(PER_FILE):
            n = f * PER_FILE + i
            second = 5 * f + (i * 7) % 5
            out.append(
                {
                    'id': n,
                    'key': f'k{n % KEYS}',
                    'ts': (EPOCH + datetime.timedelta(seconds=second)).isoformat(),
                }
            )
    return out


def land(folder: str, files: int = FILES) -> None:
    """Writes the first ``files`` JSON files into ``folder`` (as landing)."""
    os.makedirs(folder, exist_ok=True)
    data = rows()
    for f in range(files):
        path = os.path.join(folder, f'part-{f:03d}.json')
        with open(path + '.tmp', 'w') as out:
            for row in data[f * PER_FILE : (f + 1) * PER_FILE]:
                out.write(json.dumps(row) + '\n')
        os.replace(path + '.tmp', path)
        # Spark's file source takes files oldest first (by modification
        # time, in milliseconds): one second apart, in order.
        stamp = EPOCH.timestamp() + f
        os.utime(path, (stamp, stamp))


def read(folder: str, spark, trigger='available_now'):
    from beam_spark_inproc.transforms import ReadFromSpark

    return ReadFromSpark.stream(
        format='json',
        path=folder,
        schema=SCHEMA,
        options={'maxFilesPerTrigger': 1},
        event_time='ts',
        max_out_of_orderness=OUT_OF_ORDERNESS,
        trigger=trigger,
        spark=spark,
    )


def windowed_sums(rows_pcoll):
    """(key, sum of ids, window start) per key and 10 s window."""

    def show(kv, w=beam.DoFn.WindowParam):
        return kv[0], kv[1], int(w.start)

    return (
        rows_pcoll
        | 'Window' >> beam.WindowInto(window.FixedWindows(10))
        | 'Key' >> beam.Map(lambda r: (r.key, r.id))
        | 'Sum' >> beam.CombinePerKey(sum)
        | 'Show' >> beam.Map(show)
    )


def bounded(spark, folder: str) -> list:
    """The reference: the same rows read as a batch, timestamped, the same
    windowed sums on Beam's FnApiRunner."""
    import tempfile

    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.utils.timestamp import Timestamp

    batch = spark.read.schema(SCHEMA).json(folder).collect()
    out = tempfile.mkdtemp(prefix='beam-spark-bounded-')

    class Row(beam.DoFn):
        def process(self, r):
            yield window.TimestampedValue(
                beam.Row(id=r['id'], key=r['key']),
                Timestamp.from_utc_datetime(r['ts'].astimezone(datetime.timezone.utc)),
            )

    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = windowed_sums(p | beam.Create(batch) | beam.ParDo(Row())) | beam.ParDo(Collect(out))
    return collected(out)


class Collect(beam.DoFn):
    """Each element a file in ``folder`` (works wherever the DoFn runs)."""

    def __init__(self, folder: str):
        self._folder = folder

    def process(self, element):
        import uuid

        with open(os.path.join(self._folder, uuid.uuid4().hex), 'w') as f:
            json.dump(element, f)


def collected(folder: str) -> list:
    found = []
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            value = json.load(f)
            found.append(tuple(value) if isinstance(value, list) else value)
    return sorted(found)


def counter_source():
    """The Python streaming data source with offsets (module doc)."""
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.datasource import DataSourceStreamReader
    from pyspark.sql.datasource import InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.streaming.datasource import ReadMaxRows

    class CounterReader(DataSourceStreamReader):
        def __init__(self, options):
            self.total = int(options.get('total', 40))
            self.per_batch = int(options.get('per_batch', 10))

        def initialOffset(self):
            return {'n': 0}

        def getDefaultReadLimit(self):
            return ReadMaxRows(self.per_batch)

        def latestOffset(self, start, limit):
            n = start['n']
            if isinstance(limit, ReadAllAvailable):
                return {'n': self.total}
            return {'n': min(self.total, n + limit.maxRows)}

        def partitions(self, start, end):
            return [InputPartition((start['n'], end['n']))]

        def read(self, partition):
            first, end = partition.value
            for n in range(first, end):
                yield (n, f'k{n % 3}', EPOCH + datetime.timedelta(seconds=n))

        def commit(self, end):
            pass

    class CounterSource(DataSource):
        @classmethod
        def name(cls):
            return 'beam_test_counter'

        def schema(self):
            return 'id long, key string, ts timestamp'

        def streamReader(self, schema):
            return CounterReader(self.options)

    return CounterSource
