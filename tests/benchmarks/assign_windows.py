"""Micro-benchmark of window assignment (``worker.assign_windows``).

1. The assign step alone, per element: Beam's ``FixedWindows.assign`` /
   ``SlidingWindows.assign`` as Beam's WindowInto DoFn calls it (an
   ``AssignContext`` per element) against the integer assigners, over the
   timestamps of the streaming benchmark's windowed count (``--per-window``
   consecutive elements per window).
2. The WindowInto in a bundle: a batch pipeline (Create, timestamps,
   WindowInto, a count per window) on the debug engine; CPU seconds of the
   process.

    python -m tests.benchmarks.assign_windows [--elements 400000]
        [--per-window 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import time

import apache_beam as beam
from apache_beam.transforms import window
from apache_beam.transforms.window import FixedWindows
from apache_beam.transforms.window import SlidingWindows
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.worker.assign_windows import assigner


def _per_element(fn, items) -> float:
    start = time.process_time()
    for item in items:
        fn(item)
    return (time.process_time() - start) / len(items) * 1e6


def assign_step(args) -> None:
    micros = [i // args.per_window * 1_000_000 + i % 1000 for i in range(args.elements)]
    timestamps = [Timestamp(micros=m) for m in micros]
    for windowfn in (FixedWindows(1), SlidingWindows(2, 1)):
        beam_assign = windowfn.assign
        context = window.WindowFn.AssignContext
        fast = assigner(windowfn)
        beam_us = _per_element(
            lambda t, assign=beam_assign, context=context: assign(context(t)), timestamps
        )
        fast_us = _per_element(fast, micros)
        print(
            f'assign {windowfn.__class__.__name__:14s}: Beam {beam_us:.2f} us, '
            f'integer {fast_us:.2f} us per element ({beam_us / fast_us:.1f}x)',
            flush=True,
        )


def _windowed_count(n: int, windowfn):
    def build(p):
        _ = (
            p
            | beam.Create(range(n), reshuffle=False)
            | beam.Map(lambda i: window.TimestampedValue(i, i // 20_000))
            | beam.WindowInto(windowfn)
            | beam.combiners.Count.Globally().without_defaults()
        )

    return build


def in_bundle(args) -> None:
    cpus = []
    for _ in range(args.rounds):
        p = beam.Pipeline(runner=InProcessSparkRunner(debug=True))
        _windowed_count(args.elements, FixedWindows(1))(p)
        start, cpu = time.time(), time.process_time()
        p.run().wait_until_finish()
        wall, cpu = time.time() - start, time.process_time() - cpu
        cpus.append(cpu)
        print(
            f'debug engine, {args.elements:,} elements, WindowInto: '
            f'{wall:.2f} s wall, {cpu:.2f} s CPU  '
            f'[load {os.getloadavg()[0]:.1f}]',
            flush=True,
        )
    print(f'best CPU: {min(cpus):.2f} s, {min(cpus) / args.elements * 1e6:.2f} us per element')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--elements', type=int, default=400_000)
    parser.add_argument('--per-window', type=int, default=20_000)
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args()
    print(f'load average {os.getloadavg()}')
    assign_step(args)
    in_bundle(args)


if __name__ == '__main__':
    main()
