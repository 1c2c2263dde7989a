"""A custom WindowFn on local Spark: failures count in the window they happen in and the next three.

    python examples/custom_windows.py                      # 40 generated events
    python examples/custom_windows.py --num_events 200 --seed 3
    python examples/custom_windows.py --spark_master 'local[2]'

Health-check events ``(status, timestamp)`` are generated over one hour. The
custom ``StatusWindows`` WindowFn (a ``NonMergingWindowFn``) puts a HEALTHY
event in its 10-minute fixed window, and a FAILURE event in that window *and
the next three*, so a failure keeps showing up for 40 minutes. Events are then
counted per window and status with ``CombinePerKey(sum)`` (the window is
implicit: Beam combines per key *and* window), and the counts are printed
sorted by window.

Without ``--runner`` the pipeline runs on InProcessSparkRunner; any Beam runner
can be passed instead, with no change to the code.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import tempfile

import apache_beam as beam
from apache_beam.coders import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms import window

HEALTHY = 'HEALTHY'
FAILURE = 'FAILURE'
WINDOW_SECONDS = 10 * 60
FAILURE_WINDOWS = 4  # the failure's own window and the next three
# 2024-01-01 09:00:00 UTC: the generated events fall in the hour after it.
START = int(datetime.datetime(2024, 1, 1, 9, tzinfo=datetime.timezone.utc).timestamp())


def generate_events(
    num_events: int = 40, seed: int = 7, failure_rate: float = 0.2
) -> list[tuple[str, int]]:
    """``num_events`` ``(status, unix seconds)`` events over the hour after START."""
    rng = random.Random(seed)
    return [
        (FAILURE if rng.random() < failure_rate else HEALTHY, START + rng.randrange(3600))
        for _ in range(num_events)
    ]


class StatusWindows(window.NonMergingWindowFn):
    """Fixed windows, except that a FAILURE also lands in the next windows.

    The element is ``(status, timestamp)``; its timestamp (``context.timestamp``)
    picks the first window.
    """

    def __init__(self, size: int = WINDOW_SECONDS, failure_windows: int = FAILURE_WINDOWS):
        self.size = size
        self.failure_windows = failure_windows

    def assign(self, context):
        status = context.element[0]
        first = context.timestamp - context.timestamp % self.size
        count = self.failure_windows if status == FAILURE else 1
        return [
            window.IntervalWindow(first + i * self.size, first + (i + 1) * self.size)
            for i in range(count)
        ]

    def get_window_coder(self):
        return coders.IntervalWindowCoder()

    def __eq__(self, other):
        return (
            type(self) is type(other)
            and self.size == other.size
            and self.failure_windows == other.failure_windows
        )

    def __hash__(self):
        return hash((type(self), self.size, self.failure_windows))


class WithWindow(beam.DoFn):
    """(status, count) in window [start, end) -> [start, end, status, count]."""

    def process(self, kv, win=beam.DoFn.WindowParam):
        status, count = kv
        yield [win.start.micros // 10**6, win.end.micros // 10**6, status, count]


def count_per_window(events: beam.PCollection) -> beam.PCollection:
    """(status, unix seconds) events -> [window start, window end, status, count]."""
    return (
        events
        | 'Timestamp' >> beam.Map(lambda e: window.TimestampedValue(e, e[1]))
        | 'Window' >> beam.WindowInto(StatusWindows())
        | 'One' >> beam.Map(lambda e: (e[0], 1))
        | 'Count' >> beam.CombinePerKey(sum)
        | 'WithWindow' >> beam.ParDo(WithWindow())
    )


def format_row(start: int, end: int, status: str, count: int) -> str:
    """``2024-01-01 09:00-09:10  FAILURE  3`` (UTC)."""

    def utc(t):
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc)

    return f'{utc(start):%Y-%m-%d %H:%M}-{utc(end):%H:%M}  {status}  {count}'


def run(argv: list[str] | None = None) -> list[tuple[int, int, str, int]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--num_events', type=int, default=40, help='How many events to generate.')
    parser.add_argument('--seed', type=int, default=7, help='Seed of the event generator.')
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if not options.view_as(StandardOptions).runner:
        options.view_as(StandardOptions).runner = 'beam_spark_inproc.InProcessSparkRunner'

    events = generate_events(args.num_events, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'counts')
        with beam.Pipeline(options=options) as p:
            counts = count_per_window(p | 'Events' >> beam.Create(events))
            (
                counts
                | 'Json' >> beam.Map(json.dumps)
                | 'Write' >> beam.io.WriteToText(out, shard_name_template='')
            )
        # The DoFns ran in Spark's Python workers: read their output here.
        with open(out) as f:
            rows = sorted(tuple(json.loads(line)) for line in f)
    print(
        f'{len(events)} events, '
        f'{sum(1 for s, _ in events if s == FAILURE)} failures; '
        f'count per {WINDOW_SECONDS // 60}-minute window (UTC) and status:'
    )
    for row in rows:
        print(format_row(*row))
    return rows


if __name__ == '__main__':
    run(sys.argv[1:])
