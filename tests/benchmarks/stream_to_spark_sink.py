"""A stream into a Parquet path with WriteToSpark, against the same stream
with a no-op leaf: what the exactly-once write costs per micro-batch.

Run by hand, never by pytest::

    python tests/benchmarks/stream_to_spark_sink.py                # write,noop,write,noop
    python tests/benchmarks/stream_to_spark_sink.py --windows 10 --per-window 20000

TestStream (``--windows`` steps of ``--per-window`` elements over 1,000 keys,
the watermark one window on per step) -> FixedWindows(10) -> sum per key ->
``WriteToSpark(path, mode='append')`` with the window bounds as columns
(``write``) or ``beam.Map(lambda t: None)`` (``noop``), on
``InProcessSparkRunner`` over a ``local[2]`` session. Each micro-batch fires
the previous window (1,000 rows). Prints wall seconds, elements per second
and seconds per micro-batch; the first run of a process includes the JVM's
warm-up, so modes alternate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from beam_spark_inproc import InProcessSparkRunner  # noqa: E402
from beam_spark_inproc.spark import session  # noqa: E402
from beam_spark_inproc.transforms import WriteToSpark  # noqa: E402
from tests.streaming.spark_sink_pipeline import Total  # noqa: E402

KEYS = 1000


def events(windows: int, per: int) -> TestStream:
    stream = TestStream()
    for step in range(windows):
        stream = stream.add_elements(
            [window.TimestampedValue((f'k{i % KEYS}', i), step * 10 + i % 10) for i in range(per)]
        )
        stream = stream.advance_watermark_to(step * 10 + 10)
    return stream.advance_watermark_to_infinity()


def run(spark, mode: str, windows: int, per: int, out: str) -> float:
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options)
    totals = (
        p
        | events(windows, per)
        | beam.WindowInto(window.FixedWindows(10))
        | beam.CombinePerKey(sum)
        | beam.Map(lambda kv: Total(*kv)).with_output_types(Total)
    )
    if mode == 'write':
        _ = totals | WriteToSpark(
            path=out, mode='append', window_start='ws', window_end='we', spark=spark
        )
    else:
        _ = totals | beam.Map(lambda t: None)
    start = time.time()
    assert p.run().wait_until_finish() == 'DONE'
    return time.time() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--modes', default='write,noop,write,noop')
    parser.add_argument('--windows', type=int, default=10)
    parser.add_argument('--per-window', type=int, default=20000)
    args = parser.parse_args()
    spark, _ = session.get_or_create('local[2]', None, {})
    folder = tempfile.mkdtemp(prefix='spark-sink-bench-')
    try:
        for i, mode in enumerate(args.modes.split(',')):
            out = os.path.join(folder, f'{mode}-{i}')
            seconds = run(spark, mode, args.windows, args.per_window, out)
            n = args.windows * args.per_window
            rows = spark.read.parquet(out).count() if mode == 'write' else None
            print(
                f'{mode}: {n} elements, {args.windows} micro-batches, '
                f'{rows if rows is not None else "-"} rows written, '
                f'{seconds:.1f} s: {n / seconds:.0f} elements/s, '
                f'{seconds / args.windows:.2f} s per micro-batch'
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == '__main__':
    main()
