"""A windowed count over PeriodicImpulse, running as a stream until cancelled.

    python examples/periodic_count.py                         # 10 s, on Spark local
    python examples/periodic_count.py --seconds 5 --interval 0.1 --inproc_debug

Beam's ``PeriodicImpulse`` (an unbounded splittable DoFn) emits a timestamp
every ``--interval`` seconds of wall-clock time; the pipeline counts them per
one-second fixed window (``--window``). The runner sees an unbounded
PCollection and runs the pipeline as a stream: ``run()`` returns at once, each
window's count comes out when PeriodicImpulse's watermark passes the window's
end. After ``--seconds`` the script cancels the pipeline and prints each
window's count (written by the DoFn as one small file per window, so this
works wherever the DoFn runs: in Spark's Python workers or in this process).

Ticks start half an interval after a whole second, so with ``--interval 0.1
--window 1`` every window printed counts 10: a window comes out only once
the watermark passed its end, so a window cut by the cancellation never does.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms import window
from apache_beam.transforms.periodicsequence import PeriodicImpulse


class WriteCount(beam.DoFn):
    """Writes ``start end count`` of each window's count into ``folder``."""

    def __init__(self, folder: str):
        self._folder = folder

    def process(self, count, win=beam.DoFn.WindowParam):
        name = f'{win.start.micros}-{win.end.micros}'
        with open(os.path.join(self._folder, name + '.tmp'), 'w') as f:
            f.write(f'{win.start.micros} {win.end.micros} {count}\n')
        os.replace(os.path.join(self._folder, name + '.tmp'), os.path.join(self._folder, name))


def read_counts(folder: str) -> list[tuple[float, float, int]]:
    counts = []
    for name in os.listdir(folder):
        if name.endswith('.tmp'):
            continue
        with open(os.path.join(folder, name)) as f:
            start, end, count = f.read().split()
        counts.append((int(start) / 1e6, int(end) / 1e6, int(count)))
    return sorted(counts)


def build(p: beam.Pipeline, folder: str, interval: float, window_seconds: float):
    _ = (
        p
        # Ticks start at the next whole second plus half an interval, so
        # none falls on a window boundary.
        | 'Ticks'
        >> PeriodicImpulse(
            start_timestamp=math.ceil(time.time()) + interval / 2, fire_interval=interval
        )
        | 'Window' >> beam.WindowInto(window.FixedWindows(window_seconds))
        | 'Count' >> beam.combiners.Count.Globally().without_defaults()
        | 'Write' >> beam.ParDo(WriteCount(folder))
    )


def run(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=10.0)
    parser.add_argument('--interval', type=float, default=0.1)
    parser.add_argument('--window', type=float, default=1.0)
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if not options.view_as(StandardOptions).runner:
        options.view_as(StandardOptions).runner = 'beam_spark_inproc.InProcessSparkRunner'
    with tempfile.TemporaryDirectory() as folder:
        p = beam.Pipeline(options=options)
        build(p, folder, args.interval, args.window)
        result = p.run()  # a stream: returns at once
        state = result.wait_until_finish(int(args.seconds * 1000))
        print(f'after {args.seconds:g} s: {state}')
        result.cancel()
        print(f'cancelled: {result.wait_until_finish()}')
        counts = read_counts(folder)
    for start, end, count in counts:
        print(f'window [{start:.1f}, {end:.1f}): {count}')
    print(f'{len(counts)} windows, {sum(c for _, _, c in counts)} ticks')
    return counts


if __name__ == '__main__':
    run(sys.argv[1:])
