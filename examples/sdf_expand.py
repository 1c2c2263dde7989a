"""A splittable DoFn on local Spark: expand (x, N) into (x, 0), (x, 1), ..., (x, N-1).

    python examples/sdf_expand.py                          # a=5 b=20000 c=0 d=1234 e=1
    python examples/sdf_expand.py --inputs a=10,b=100000
    python examples/sdf_expand.py --spark_master 'local[2]'

``Expand`` is a splittable DoFn: its restriction is the ``OffsetRange`` [0, N)
of an element ``(x, N)`` (``beam.DoFn.RestrictionParam`` with the
``ExpandRestrictions`` RestrictionProvider), which it claims offset by offset
with an ``OffsetRestrictionTracker``, emitting ``(x, i)`` for each claimed ``i``.
The provider splits each range into chunks of ``CHUNK`` (2000) offsets up front, and
the runner spreads those restrictions over Spark partitions; a straggler still
running after ``--spark_split_after_seconds`` is split again by the runner.

The driver reads the output back, prints how many pairs each ``x`` got and
checks that every ``(x, i)`` with ``0 <= i < N`` appears exactly once (exit
status 1 if not).

Without ``--runner`` the pipeline runs on InProcessSparkRunner; any Beam runner
can be passed instead, with no change to the code.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import sys
import tempfile

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms.core import RestrictionProvider

DEFAULT_INPUTS = 'a=5,b=20000,c=0,d=1234,e=1'
CHUNK = 2000  # offsets per initial split of a restriction


def parse_inputs(spec: str = DEFAULT_INPUTS) -> list[tuple[str, int]]:
    """``'a=5,b=20'`` -> ``[('a', 5), ('b', 20)]``."""
    pairs = []
    for item in spec.split(','):
        x, sep, n = item.partition('=')
        if not sep or not x or int(n) < 0:
            raise ValueError(f'--inputs expects X=N,... with N >= 0, got {item!r}')
        pairs.append((x, int(n)))
    return pairs


class ExpandRestrictions(RestrictionProvider):
    """Restriction of (x, N): OffsetRange(0, N), split into chunks up front."""

    def initial_restriction(self, element):
        return OffsetRange(0, element[1])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def split(self, element, restriction):
        # An empty range [0, 0) yields no restriction: (x, 0) emits nothing.
        yield from restriction.split(CHUNK)

    def restriction_size(self, element, restriction):
        return restriction.size()


class Expand(beam.DoFn):
    """(x, N) -> (x, i) for each offset i the tracker lets it claim."""

    def process(self, element, tracker=beam.DoFn.RestrictionParam(ExpandRestrictions())):
        x, _ = element
        i = tracker.current_restriction().start
        while tracker.try_claim(i):
            yield x, i
            i += 1


def check(inputs: list[tuple[str, int]], lines: list[str]) -> tuple[dict[str, int], list[str]]:
    """Per-x counts of output lines ``x<TAB>i``, and what is wrong with them."""
    seen = collections.Counter(tuple(line.split('\t')) for line in lines)
    counts = collections.Counter(x for x, _ in seen.elements())
    problems = []
    expected = {(x, str(i)) for x, n in inputs for i in range(n)}
    missing = expected - set(seen)
    extra = set(seen) - expected
    twice = {pair: k for pair, k in seen.items() if k > 1}
    if missing:
        problems.append(f'{len(missing)} pairs missing, e.g. {sorted(missing)[:3]}')
    if extra:
        problems.append(f'{len(extra)} unexpected pairs, e.g. {sorted(extra)[:3]}')
    if twice:
        problems.append(f'{len(twice)} pairs more than once, e.g. {sorted(twice.items())[:3]}')
    return {x: counts[x] for x, _ in inputs}, problems


def run(argv: list[str] | None = None) -> dict[str, int]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--inputs', default=DEFAULT_INPUTS, help='Elements to expand, as X=N,X=N,...'
    )
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if not options.view_as(StandardOptions).runner:
        options.view_as(StandardOptions).runner = 'beam_spark_inproc.InProcessSparkRunner'

    inputs = parse_inputs(args.inputs)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'pairs')
        with beam.Pipeline(options=options) as p:
            (
                p
                | 'Inputs' >> beam.Create(inputs)
                | 'Expand' >> beam.ParDo(Expand())
                | 'Format' >> beam.MapTuple(lambda x, i: f'{x}\t{i}')
                | 'Write' >> beam.io.WriteToText(out)
            )
        # The DoFns ran in Spark's Python workers: read their output here.
        lines = []
        for path in sorted(glob.glob(out + '*')):
            with open(path) as f:
                lines.extend(f.read().splitlines())
    counts, problems = check(inputs, lines)
    for x, n in inputs:
        print(f'{x}: {counts[x]} of {n}')
    if problems:
        print('FAILED: ' + '; '.join(problems))
        sys.exit(1)
    print(f'OK: all {sum(n for _, n in inputs)} (x, i) pairs appear exactly once')
    return counts


if __name__ == '__main__':
    run(sys.argv[1:])
