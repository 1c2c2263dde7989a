"""Runner-initiated splitting on a skewed splittable DoFn: wall time on vs off.

    python tests/benchmarks/sdf_skew.py [--hot 8000] [--repeats 3]

One element carries 100x the work of each of the others (1 ms of CPU per
claimed offset). Without splitting, one task runs the hot restriction while the
other cores idle; with ``--spark_split_after_seconds`` the runner splits the
running restriction with the SDK's ``try_split`` into one part per core and runs
the residuals as a next round over all partitions. Prints medians side by side.
Run by hand; not part of the test suite.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.core import RestrictionProvider

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.spark.session import get_or_create


class Offsets(RestrictionProvider):
    def initial_restriction(self, element):
        return OffsetRange(0, element[1])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class Burn(beam.DoFn):
    """1 ms of CPU per claimed offset."""

    def process(self, element, tracker=beam.DoFn.RestrictionParam(Offsets())):
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            deadline = time.perf_counter() + 0.001
            while time.perf_counter() < deadline:
                pass
            yield 1
            position += 1


def run(spark, hot: int, cold: int, split_after: float, out: str) -> tuple[float, int]:
    options = PipelineOptions([f'--spark_split_after_seconds={split_after}'])
    start = time.time()
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options) as p:
        (
            p
            | beam.Create([('hot', hot)] + [(f'k{i}', hot // 100) for i in range(cold)])
            | beam.ParDo(Burn())
            | beam.combiners.Count.Globally()
            | beam.io.WriteToText(out, shard_name_template='')
        )
    wall = time.time() - start
    with open(out) as f:
        return wall, int(f.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--hot', type=int, default=8000, help='offsets of the hot element (1 ms each)'
    )
    parser.add_argument(
        '--cold', type=int, default=20, help='number of elements with 1/100 of the work'
    )
    parser.add_argument('--split-after', type=float, default=1.0)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--master', default='local[2]')
    parser.add_argument('--verbose', action='store_true', help="log the runner's split rounds")
    args = parser.parse_args()
    if args.verbose:
        logging.basicConfig(level=logging.WARNING)
        logging.getLogger('beam_spark_inproc').setLevel(logging.INFO)
    spark, _ = get_or_create(args.master, None, {})
    expected = args.hot + args.cold * (args.hot // 100)
    times = {0.0: [], args.split_after: []}
    with tempfile.TemporaryDirectory() as tmp:
        run(spark, 200, 2, 0.0, os.path.join(tmp, 'warmup'))
        for i in range(args.repeats):
            for split_after in times:
                wall, count = run(
                    spark,
                    args.hot,
                    args.cold,
                    split_after,
                    os.path.join(tmp, f'out-{i}-{split_after}'),
                )
                assert count == expected, (count, expected)
                times[split_after].append(wall)
    off, on = (statistics.median(times[k]) for k in times)
    print(
        f'hot element: {args.hot} ms of work; {args.cold} others: '
        f'{args.hot // 100} ms each; {os.cpu_count()} cores, {args.master}'
    )
    print('| splitting | median wall s | runs |')
    print('|---|---:|---|')
    print(f'| off | {off:.2f} | {", ".join(f"{t:.2f}" for t in times[0.0])} |')
    print(
        f'| on (after {args.split_after:g} s) | {on:.2f} | '
        f'{", ".join(f"{t:.2f}" for t in times[args.split_after])} |'
    )
    print(f'speed-up: {off / on:.2f}x')


if __name__ == '__main__':
    main()
