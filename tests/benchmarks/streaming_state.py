"""Micro-batch cost with N keys of GroupByKey state.

A TestStream adds N keys in its first event (their panes stay buffered: fixed
windows of 1000 s, the watermark stays at 0), then ``--touch`` events of one
element each for one key (every event followed by a processing-time step, so
each is its own micro-batch: 2, 4, ...), then the watermark goes to +inf. Per micro-batch it
prints the wall time (from the commit records' times) and the state bytes
written, so one can check that a micro-batch touching one key rewrites one
bucket (N/B keys: B = 64 buckets doubled while over 1,024 keys a bucket, so
at most ~1,000 keys), not the whole state.

    python tests/benchmarks/streaming_state.py --keys 10000 [--spark]
"""

from __future__ import annotations

import argparse
import glob
import os
import tempfile
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming.store import CheckpointStore


def measure(keys: int, touch: int, spark: bool) -> list[tuple[int, float, int]]:
    """Runs the pipeline; returns (micro-batch, wall seconds, state bytes
    written) per micro-batch (micro-batch 0 includes starting the run)."""
    location = tempfile.mkdtemp(prefix='bench-stream-')
    CheckpointStore.RETAIN = 10**9  # keep every commit record to read them
    stream = (
        TestStream()
        .add_elements([window.TimestampedValue((f'key{i}', i), 1) for i in range(keys)])
        .advance_processing_time(1)
    )
    for i in range(touch):
        # A processing-time step after each: one micro-batch per touch.
        stream = stream.add_elements(
            [window.TimestampedValue(('key7', i), 2)]
        ).advance_processing_time(1)
    stream = stream.advance_watermark_to_infinity()
    options = PipelineOptions([f'--checkpoint_location={location}'])
    options.view_as(StandardOptions).streaming = True
    runner = InProcessSparkRunner(debug=not spark)
    p = beam.Pipeline(runner=runner, options=options)
    _ = (
        p
        | stream
        | beam.WindowInto(window.FixedWindows(1000))
        | beam.GroupByKey()
        | beam.Map(lambda kv: len(kv[1]))
    )
    start = time.time()
    result = p.run()
    result.wait_until_finish()
    commits = sorted(
        glob.glob(os.path.join(location, 'commits', '*.json')),
        key=lambda n: int(os.path.basename(n)[:-5]),
    )
    previous, rows = start, []
    for name in commits:
        n = int(os.path.basename(name)[:-5])
        written = sum(
            os.path.getsize(f)
            for f in glob.glob(os.path.join(location, 'state', '*', f'mb-{n}', '*.parquet'))
        )
        at = os.path.getmtime(name)
        rows.append((n, at - previous, written))
        previous = at
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--keys', type=int, default=10_000)
    parser.add_argument('--touch', type=int, default=5)
    parser.add_argument('--spark', action='store_true')
    args = parser.parse_args()
    start = time.time()
    rows = measure(args.keys, args.touch, args.spark)
    print(
        f'engine={"spark" if args.spark else "debug"} keys={args.keys} '
        f'micro-batches={len(rows)} total={time.time() - start:.2f}s'
    )
    for n, seconds, written in rows:  # 2, 4, ... take a one-key event
        print(f'  micro-batch {n}: {seconds:6.2f} s, state written {written:>10,} bytes')


if __name__ == '__main__':
    main()
