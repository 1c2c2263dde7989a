"""A/B of source trees (or environment switches) on ``run.py``, alternated.

Each variant is a source tree (a checkout or ``git archive`` of another commit;
its own ``tests/benchmarks/run.py`` runs with that tree first on
``PYTHONPATH``, and the runner ships the package it imported to the workers)
plus environment variables. Rounds alternate the variants, one ``run.py``
process each (its own Spark session and warm-up run), and the wall seconds and
the CPU seconds ``run.py`` reads from ``/proc`` are collected per timed run::

    python tests/benchmarks/ab_trees.py --rounds 3 \\
        --variant before=/tmp/perf-before --variant now=. \\
        --variant nosmall=.:BEAM_SPARK_INPROC_SMALL_DATA_KB=0 \\
        -- --pipelines P1 --sizes 4000000 --repeats 2 --engines inproc

Prints every run's figures and, per variant, the medians and the load.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

_RUN = re.compile(
    r'^\s*(\S+) n=([\d,]+) (\S+)\s+run \d+/\d+:\s+([\d.]+) s .*?CPU s '
    r'driver ([\d.]+) jvm ([\d.]+) (?:other [\d.]+ )?python ([\d.]+)\s+'
    r'(?:fresh workers (\d+)\s+)?load ([\d.]+)'
)


def _variant(text: str) -> tuple[str, str, dict]:
    name, _, rest = text.partition('=')
    tree, *pairs = rest.split(':')
    env = dict(pair.split('=', 1) for pair in pairs)
    return name, os.path.abspath(tree), env


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--variant', action='append', required=True, help='NAME=TREE[:VAR=VALUE...] (repeatable)'
    )
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument(
        'run_args', nargs=argparse.REMAINDER, help='after --: the arguments of run.py'
    )
    args = parser.parse_args(argv)
    run_args = [a for a in args.run_args if a != '--']
    variants = [_variant(v) for v in args.variant]
    results: dict = {name: [] for name, _, _ in variants}
    for round_ in range(args.rounds):
        for name, tree, extra in variants:
            env = dict(os.environ, **extra)
            env['PYTHONPATH'] = os.pathsep.join(
                [tree] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p]
            )
            done = subprocess.run(
                [sys.executable, os.path.join(tree, 'tests', 'benchmarks', 'run.py'), *run_args],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
            )
            runs = [m.groups() for m in map(_RUN.match, done.stderr.splitlines()) if m]
            if done.returncode or not runs:
                print(f'round {round_ + 1} {name}: FAILED\n{done.stderr[-3000:]}', flush=True)
                continue
            for bench, n, engine, wall, driver, jvm, python, fresh, load in runs:
                figures = tuple(map(float, (wall, driver, jvm, python, load)))
                fresh = '' if fresh is None else f'  fresh workers {fresh}'
                results[name].append(((bench, n, engine), figures))
                print(
                    f'round {round_ + 1} {name:>8} {bench} n={n} {engine}: '
                    f'wall {figures[0]:6.2f} s  CPU s driver {figures[1]:.2f} '
                    f'jvm {figures[2]:.2f} python {figures[3]:.2f}{fresh}  load {figures[4]}',
                    flush=True,
                )
    print(
        '\n| variant | pipeline | engine | runs | wall s median (min-max) | '
        'Python workers CPU s | JVM CPU s | driver CPU s | load |'
    )
    print('|---|---|---|---:|---|---|---|---|---|')
    for name, _, _ in variants:
        by_key: dict = {}
        for key, figures in results[name]:
            by_key.setdefault(key, []).append(figures)
        for (bench, n, engine), rows in by_key.items():
            cols = list(zip(*rows))

            def spread(values):
                return f'{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})'

            print(
                f'| {name} | {bench} {n} | {engine} | {len(rows)} | {spread(cols[0])} | '
                f'{spread(cols[3])} | {spread(cols[2])} | {spread(cols[1])} | '
                f'{min(cols[4])}-{max(cols[4])} |'
            )


if __name__ == '__main__':
    main()
