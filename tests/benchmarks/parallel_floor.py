"""What two processes give Beam's own work on this machine: the lowest ratio to
FnApiRunner that any runner running Beam's transforms in two processes (Spark's
two Python workers on ``local[2]``) can reach here.

Run by hand, never by pytest::

    python tests/benchmarks/parallel_floor.py
    python tests/benchmarks/parallel_floor.py --pipelines P1 --size 4000000 --rounds 5
    python tests/benchmarks/parallel_floor.py --pipelines WC --lines 200000

Per round, for each kind of work:

- ``solo``: one process does the work over N elements;
- ``pair``: two processes start together and each does it over N/2: the solo
  run's work split perfectly in two, with no cost for the split and nothing
  to bring together.

The kinds: the pipelines of ``run.py`` (``--pipelines``, default P1 P2) with
Beam's in-memory FnApiRunner (what ``run.py``'s ``direct`` column times);
``WC``, ``cold_start.py``'s word count (``examples/wordcount.py`` over
``--lines`` generated lines, each half of the pair reading a file of half the
lines) with Beam's DirectRunner, the reference of that script's warm target;
and always ``spin``, a pure-Python loop (no Beam, no I/O, no fixed cost): the
machine's own parallel capacity.

Before the clock each process imports Beam and runs its pipeline once over
``WARM_UP`` elements (the timed runs are warm, as ``run.py``'s runs and
``cold_start.py``'s warm run are), then reports ``ready``; the parent starts
every process of the run at once and times until the last one ends. Every
result is checked against a pure-Python reference.

Prints per kind the median wall seconds, the CPU seconds a process and the
**floor**: the pair's wall over the solo's. A floor of 0.5 is two cores that
each run as fast as one alone; above 0.5 the cores slow each other down
(shared caches and memory bandwidth, a host's other guests) or each half
keeps a fixed cost (a pipeline's construction and start; the spin has none).
A runner doing Beam's work in two processes gets below the floor only by
doing less of it (a cheaper reader, say).
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, _ROOT)

SPIN = 30_000_000  # iterations of the pure-Python loop in a solo run


def _lines_file(workdir: str, lines: int) -> str:
    return os.path.join(workdir, f'lines-{lines}.txt')


def _write_result(path: str):
    from tests.benchmarks import run as bench_run

    return bench_run.make_write_result(path)


WARM_UP = 2000  # elements (WC: lines) of each process's untimed first run


def _work(kind: str, n: int, workdir: str, chunks: int) -> bool:
    """Runs ``kind`` over ``n`` elements in this process; whether the result
    is the reference's."""
    if kind == 'spin':
        x = 0
        for i in range(n):
            x += i
        return x == n * (n - 1) // 2
    import apache_beam as beam

    path = os.path.join(workdir, f'{kind}-{n}-{os.getpid()}.result')
    if kind == 'WC':
        from apache_beam.options.pipeline_options import PipelineOptions

        sys.path.insert(0, os.path.join(_ROOT, 'examples'))
        from wordcount import count_words

        source = _lines_file(workdir, n)
        with beam.Pipeline(options=PipelineOptions(['--runner=DirectRunner'])) as p:
            _ = (
                count_words(p | beam.io.ReadFromText(source))
                | beam.combiners.ToList()
                | beam.Map(sorted)
                | beam.ParDo(_write_result(path))
            )
        with open(source) as f:
            expected = tuple(
                sorted(
                    collections.Counter(
                        word for line in f for word in re.findall(r"[\w']+", line.lower())
                    ).items()
                )
            )
    else:
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        from tests.benchmarks import run as bench_run

        bench = bench_run.BENCHMARKS[kind]
        ctx = types.SimpleNamespace(chunks=chunks, workdir=workdir)
        with beam.Pipeline(runner=FnApiRunner()) as p:
            _ = bench.beam(p, n, ctx) | beam.ParDo(_write_result(path))
        expected = bench.reference(n)
    with open(path) as f:
        got = ast.literal_eval(f.read())
    os.remove(path)
    return got == expected


def _child(kind: str, n: int, workdir: str, chunks: int) -> None:
    """One process of a run: imports and an untimed run over ``WARM_UP``
    elements (as the warm run of ``cold_start.py`` and ``run.py``'s warm-up
    run), says ready, waits for go, runs, reports."""
    if kind != 'spin' and not _work(kind, WARM_UP, workdir, chunks):
        raise AssertionError(f'{kind}: the warm-up run differs from the reference')
    print('ready', flush=True)
    sys.stdin.readline()
    wall, cpu = time.monotonic(), time.process_time()
    ok = _work(kind, n, workdir, chunks)
    print(
        json.dumps({'wall': time.monotonic() - wall, 'cpu': time.process_time() - cpu, 'ok': ok}),
        flush=True,
    )


def _run(kind: str, sizes: list, workdir: str, chunks: int) -> dict:
    """Starts one process per size, all at once once all are ready; the
    wall seconds from go to the last one's end, and each one's report."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                '--child',
                kind,
                str(n),
                '--workdir',
                workdir,
                '--chunks',
                str(chunks),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in sizes
    ]
    for proc in procs:
        line = proc.stdout.readline().strip()
        if line != 'ready':
            raise RuntimeError(f'{kind}: a process did not start ({line!r})')
    start = time.monotonic()
    for proc in procs:
        proc.stdin.write('go\n')
        proc.stdin.flush()
    reports = []
    for proc in procs:
        reports.append(json.loads(proc.stdout.readline()))
        proc.wait()
    wall = time.monotonic() - start
    if not all(r['ok'] for r in reports):
        raise AssertionError(f'{kind}: a result differs from the reference')
    return {'wall': wall, 'cpu': [r['cpu'] for r in reports]}


def _load() -> str:
    return '%.1f' % os.getloadavg()[0]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument(
        '--pipelines',
        nargs='*',
        default=['P1', 'P2'],
        help="run.py's pipelines, or WC: cold_start.py's word count (default P1 P2)",
    )
    parser.add_argument('--size', type=int, default=4_000_000)
    parser.add_argument('--lines', type=int, default=200_000, help="the word count's lines (WC)")
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--chunks', type=int, default=32)
    parser.add_argument('--child', nargs=2, metavar=('KIND', 'N'), help=argparse.SUPPRESS)
    parser.add_argument('--workdir', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.workdir, args.chunks)
        return

    with tempfile.TemporaryDirectory(prefix='parallel-floor-') as workdir:
        _measure(args, workdir)


def _measure(args, workdir: str) -> None:
    kinds = [('spin', SPIN)] + [
        (name, args.lines if name == 'WC' else args.size) for name in args.pipelines
    ]
    if 'WC' in args.pipelines:
        from tests.benchmarks import cold_start

        for n in {args.lines, args.lines // 2, args.lines - args.lines // 2, WARM_UP}:
            cold_start.make_input(_lines_file(workdir, n), n)
    if 'P2' in args.pipelines:  # its input files, before any clock
        from tests.benchmarks import run as bench_run

        for n in {args.size, args.size // 2, args.size - args.size // 2, WARM_UP}:
            bench_run.text_file(workdir, n)
    runs: dict = {(kind, shape): [] for kind, _ in kinds for shape in ('solo', 'pair')}
    print(
        f'{time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}, '
        f'{os.cpu_count()} cores, load {_load()}',
        flush=True,
    )
    for round_ in range(1, args.rounds + 1):
        for kind, n in kinds:
            for shape, sizes in (('solo', [n]), ('pair', [n // 2, n - n // 2])):
                result = _run(kind, sizes, workdir, args.chunks)
                runs[kind, shape].append(result)
                print(
                    f'  round {round_} {kind:>4} {shape}: wall '
                    f'{result["wall"]:6.2f} s, cpu '
                    + ' + '.join(f'{c:.2f}' for c in result['cpu'])
                    + f' s, load {_load()}',
                    flush=True,
                )

    print(
        f'\n{time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}, '
        f'load {_load()}; medians of {args.rounds} round(s)'
    )
    print(
        '| work | solo: one process, N | pair: two processes, N/2 each '
        '| CPU s a process, solo / pair | floor (pair / solo) |'
    )
    print('|---|---:|---:|---:|---:|')
    for kind, n in kinds:
        solo, pair = runs[kind, 'solo'], runs[kind, 'pair']
        solo_wall = statistics.median(r['wall'] for r in solo)
        pair_wall = statistics.median(r['wall'] for r in pair)
        solo_cpu = statistics.median(r['cpu'][0] for r in solo)
        pair_cpu = statistics.median(c for r in pair for c in r['cpu'])
        title = (
            f'pure-Python loop, {n:,} iterations'
            if kind == 'spin'
            else f'word count with DirectRunner, {n:,} lines'
            if kind == 'WC'
            else f'{kind} with FnApiRunner, N = {n:,}'
        )
        print(
            f'| {title} | {solo_wall:.2f} s | {pair_wall:.2f} s '
            f'| {solo_cpu:.2f} / {pair_cpu:.2f} '
            f'| **{pair_wall / solo_wall:.2f}x** |'
        )


if __name__ == '__main__':
    main()
