"""A/B of ``--spark_stream_spread_kb`` on Spark, measured so that a loaded
machine still shows it: CPU seconds and the critical path, not only wall time.

The benchmark pipelines of ``streaming.py`` (windowed count, stateful) run on
Spark with each spread value in turn (ABAB..., after a warm-up with every
value, so neither side pays for starting Python workers), and print per run:

* wall seconds;
* CPU seconds of this process tree from ``/proc`` (driver, JVM, Python
  workers: ``run.Sampler``);
* from Spark's task metrics (its REST API, the UI enabled for this run): per
  stage the longest task's run time, summed over the run's stages (the
  critical path: what the run would take with a core for every task), the
  tasks' run time summed (the work), and the number of tasks.

    PYSPARK_PYTHON=$(which python) python -m tests.benchmarks.streaming_spread \\
        [--events 20] [--per-event 20000] [--keys 1000] [--spread-kb 256,0] \\
        [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import urllib.request

from tests.benchmarks import streaming
from tests.benchmarks.run import Sampler


def _stages(url: str, app: str) -> dict:
    with urllib.request.urlopen(f'{url}/api/v1/applications/{app}/stages?status=complete') as f:
        return {(s['stageId'], s['attemptId']): s for s in json.load(f)}


def _tasks(url: str, app: str, stage: tuple) -> list:
    with urllib.request.urlopen(
        f'{url}/api/v1/applications/{app}/stages/{stage[0]}/{stage[1]}/taskList?length=10000'
    ) as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--events', type=int, default=20)
    parser.add_argument('--per-event', type=int, default=20_000)
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument('--spread-kb', default='256,0')
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--pipelines', default=','.join(streaming.PIPELINES))
    args = parser.parse_args()
    streaming._instrument()
    spreads = args.spread_kb.split(',')
    extra = ['--spark_conf', 'spark.ui.enabled=true']
    warm = argparse.Namespace(events=2, per_event=20_000, keys=2)
    for name in streaming.PIPELINES:
        for kb in spreads:
            streaming.run_one(name, 'spark', warm, kb, extra)
    from pyspark.sql import SparkSession

    context = SparkSession.getActiveSession().sparkContext
    url, app = context.uiWebUrl, context.applicationId
    print(
        f'load average {os.getloadavg()}; {args.events} events x '
        f'{args.per_event} elements, {args.keys} keys',
        flush=True,
    )
    results: dict = {}
    for name in [n for n in args.pipelines.split(',') if n]:
        for _ in range(args.rounds):
            for kb in spreads:
                before = set(_stages(url, app))
                with Sampler(interval=0.5) as sampler:
                    f = streaming.run_one(name, 'spark', args, kb, extra)
                cpu = sampler.cpu_seconds()
                stages_info = _stages(url, app)
                stages = [s for s in stages_info if s not in before]
                critical = work = tasks = 0.0
                # The longest task per stage, summed: shuffle map stages (a
                # micro-batch's first: the stage after the source) and result
                # stages apart.
                split = {'map': 0.0, 'result': 0.0}
                for stage in stages:
                    times = [
                        t['taskMetrics']['executorRunTime'] / 1000
                        for t in _tasks(url, app, stage)
                        if t.get('taskMetrics')
                    ]
                    if times:
                        critical += max(times)
                        work += sum(times)
                        tasks += len(times)
                        kind = 'map' if stages_info[stage].get('shuffleWriteBytes') else 'result'
                        split[kind] += max(times)
                results.setdefault((name, kb), []).append(
                    (f['seconds'], sum(cpu.values()), critical, work)
                )
                print(
                    f'{name:15s} spread {kb:>4s} KB: {f["seconds"]:6.2f} s wall, '
                    f'CPU {sum(cpu.values()):6.2f} s (driver '
                    f'{cpu.get("driver", 0):.2f}, JVM {cpu.get("jvm", 0):.2f}, '
                    f'Python workers {cpu.get("python", 0):.2f}); tasks: '
                    f'{len(stages)} stages, {tasks:.0f} tasks, critical path '
                    f'{critical:.2f} s (shuffle map stages {split["map"]:.2f}, '
                    f'result stages {split["result"]:.2f}), run time '
                    f'{work:.2f} s  '
                    f'[load {os.getloadavg()[0]:.1f}]',
                    flush=True,
                )
    print('medians: wall, CPU, critical path, task run time (s)')
    for (name, kb), rows in results.items():
        print(
            f'{name:15s} spread {kb:>4s} KB: '
            + ', '.join(f'{statistics.median(column):.2f}' for column in zip(*rows))
        )


if __name__ == '__main__':
    main()
