"""Where a streaming run's CPU goes: this process tree by process kind, and the
Python workers' bundles by category and function.

Runs a pipeline of ``streaming.py`` on Spark twice in one process: once with
``--spark_profile_dir`` (every bundle under cProfile,
``worker.profiling``), once without (CPU by process kind: driver, JVM,
Python workers, ``run.Sampler``). Prints the bundles' thread CPU seconds
against the Python workers' and the whole tree's, the profiled seconds per
category (``profiling.summarize``) and the functions with the most own time:
whether Beam's per-element Python work or the fixed cost of a micro-batch
sets the run's time. cProfile slows Python code down, so the shares are
indicative; the unprofiled run's CPU split is not slowed.

    PYSPARK_PYTHON=$(which python) python -m tests.benchmarks.streaming_profile \\
        [--pipeline stateful] [--events 20] [--per-event 20000] [--keys 1000] \\
        [--top 25]
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import tempfile

from beam_spark_inproc.worker import profiling
from tests.benchmarks import streaming
from tests.benchmarks.run import Sampler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--pipeline', default='stateful')
    parser.add_argument('--events', type=int, default=20)
    parser.add_argument('--per-event', type=int, default=20_000)
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument('--top', type=int, default=25)
    args = parser.parse_args()
    streaming._instrument()
    print(
        f'load average {os.getloadavg()}; {args.pipeline}, {args.events} '
        f'events x {args.per_event} elements, {args.keys} keys',
        flush=True,
    )
    warm = argparse.Namespace(events=2, per_event=2_000, keys=2)
    streaming.run_one(args.pipeline, 'spark', warm)
    with Sampler(interval=0.5) as sampler:
        f = streaming.run_one(args.pipeline, 'spark', args)
    cpu = sampler.cpu_seconds()
    batches = f.get('micro-batches') or 1
    print(
        f'unprofiled: {f["seconds"]:.2f} s wall, {f["throughput"]:,.0f}/s, '
        f'{batches} micro-batches; CPU {sum(cpu.values()):.2f} s: driver '
        f'{cpu.get("driver", 0):.2f}, JVM {cpu.get("jvm", 0):.2f}, Python '
        f'workers {cpu.get("python", 0):.2f}; per element (all) '
        f'{sum(cpu.values()) / f["elements"] * 1e6:.1f} CPU-us  '
        f'[load {os.getloadavg()[0]:.1f}]',
        flush=True,
    )
    folder = tempfile.mkdtemp(prefix='bench-profile-')
    try:
        streaming.run_one(args.pipeline, 'spark', warm)
        with Sampler(interval=0.5) as sampler:
            f = streaming.run_one(
                args.pipeline, 'spark', args, flags=['--spark_profile_dir', folder]
            )
        cpu = sampler.cpu_seconds()
        summary = profiling.summarize(folder)
        print(
            f'profiled: {f["seconds"]:.2f} s wall; Python workers '
            f'{cpu.get("python", 0):.2f} CPU-s, of them bundle threads '
            f'{summary["thread_cpu_seconds"]:.2f} CPU-s over '
            f'{summary["bundles"]} bundles ('
            f'{summary["thread_cpu_seconds"] / f["elements"] * 1e6:.1f} '
            f'CPU-us an element)  [load {os.getloadavg()[0]:.1f}]'
        )
        total = sum(summary['seconds_by_category'].values()) or 1.0
        for name, seconds in sorted(summary['seconds_by_category'].items(), key=lambda kv: -kv[1]):
            print(f'  {name:50s} {seconds:7.2f} s {seconds / total:6.1%}')
        stats = None
        for name in os.listdir(folder):
            if name.endswith('.prof'):
                path = os.path.join(folder, name)
                stats = pstats.Stats(path) if stats is None else (stats.add(path) or stats)
        if stats is not None:
            rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])
            print(f'functions by own time (of {total:.2f} s profiled):')
            for (filename, line, function), row in rows[: args.top]:
                where = filename.split('site-packages/')[-1].split('wt-streamcost/')[-1]
                print(f'  {row[2]:7.2f} s {row[1]:>9,} calls  {where}:{line} {function}')
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == '__main__':
    main()
