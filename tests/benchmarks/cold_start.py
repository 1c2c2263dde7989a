"""What a user waits for: a word count of 200,000 lines as a new process (cold)
and again in the same process (warm), on this runner and on Beam's own runners.

Run by hand, never by pytest::

    python tests/benchmarks/cold_start.py                  # 3 rounds, medians
    python tests/benchmarks/cold_start.py --rounds 5 --lines 200000

Each round starts, per runner, a fresh ``python`` that imports Beam, builds
``examples/wordcount.py``'s pipeline (ReadFromText, FlatMap, Count.PerElement,
Top.Of) over one generated file, runs it twice and prints the wall seconds of
both runs; the cold figure is the first run plus the process's imports (what
``time python my_pipeline.py`` shows, less the interpreter's own start). Runners:

- ``inproc``: ``InProcessSparkRunner`` with its defaults (it creates a local session);
- ``direct``: Beam's ``DirectRunner`` (what ``beam.Pipeline()`` runs by default);
- ``fnapi``: Beam's ``FnApiRunner`` in memory.

A third process per round runs the pipeline once: its wall seconds from start
to exit are the ``process`` figure (the interpreter's start, and anything a
runner leaves to finish at exit, included). Prints each runner's median cold,
warm and process seconds, their ratios to ``direct``, and the load average
(targets: cold <= 1.5x DirectRunner, warm <= 0.5x).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

RUNNERS = {
    'inproc': 'beam_spark_inproc.InProcessSparkRunner',
    'direct': 'DirectRunner',
    'fnapi': 'apache_beam.runners.portability.fn_api_runner.FnApiRunner',
}

_CHILD = r"""
import json, sys, time
start = time.monotonic()
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
sys.path.insert(0, sys.argv[3])
from wordcount import count_words

def once():
    t = time.monotonic()
    with beam.Pipeline(options=PipelineOptions(['--runner=' + sys.argv[1]])) as p:
        counts = count_words(p | beam.io.ReadFromText(sys.argv[2]))
        (counts | beam.combiners.Top.Of(10, key=lambda kv: (kv[1], kv[0]))
         | beam.Map(lambda top: top))
    return time.monotonic() - t

imports = time.monotonic() - start
first = once()
second = once() if sys.argv[4] == '2' else None
print(json.dumps({'imports': imports, 'first': first, 'second': second}),
      flush=True)
"""

WORDS = (
    'the quick brown fox jumps over a lazy dog while seven wizards quietly '
    'judge boxing matches from afar and sonnets of summer days'
).split()


def make_input(path: str, lines: int) -> None:
    rng = random.Random(7)
    with open(path, 'w') as f:
        for _ in range(lines):
            f.write(' '.join(rng.choice(WORDS) for _ in range(8)) + '\n')


def one_run(runner: str, path: str, runs: int = 2) -> dict:
    """The child's figures, and ``process``: its wall seconds from start to
    exit (a process that ran once: what ``time python my_pipeline.py`` shows,
    whatever the runner leaves to do after its run, such as a JVM it started
    finishing its start)."""
    examples = os.path.join(os.path.dirname(__file__), '..', '..', 'examples')
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, '-c', _CHILD, RUNNERS[runner], path, os.path.abspath(examples), str(runs)],
        check=True,
        capture_output=True,
        text=True,
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    figures['process'] = time.monotonic() - start
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--lines', type=int, default=200_000)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--runners', default=','.join(RUNNERS))
    args = parser.parse_args()
    runners = args.runners.split(',')
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'lines.txt')
        make_input(path, args.lines)
        runs: dict[str, list[dict]] = {r: [] for r in runners}
        for _ in range(args.rounds):  # interleaved: load drifts alike
            for runner in runners:
                run = one_run(runner, path)
                run['process'] = one_run(runner, path, runs=1)['process']
                runs[runner].append(run)
    print(
        f'word count, {args.lines} lines, {args.rounds} rounds, '
        f'load average {os.getloadavg()[0]:.2f}'
    )
    medians = {}
    for runner, got in runs.items():
        cold = statistics.median(r['imports'] + r['first'] for r in got)
        warm = statistics.median(r['second'] for r in got)
        process = statistics.median(r['process'] for r in got)
        medians[runner] = (cold, warm, process)
    base = medians.get('direct')
    for runner, (cold, warm, process) in medians.items():
        ratio = (
            f'  cold {cold / base[0]:.2f}x, warm {warm / base[1]:.2f}x, '
            f'process {process / base[2]:.2f}x direct'
            if base
            else ''
        )
        print(
            f'{runner:7s} cold {cold:6.2f} s  warm {warm:6.2f} s  process {process:6.2f} s{ratio}'
        )


if __name__ == '__main__':
    main()
