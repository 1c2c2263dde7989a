"""A/B of the streaming runner's remaining tunables, in one process, alternating.

Variants (extra pipeline options, ``VARIANTS``):

* ``default``: the runner's defaults;
* ``stateful_whole``: ``--spark_stream_stateful_whole`` (a stateful
  pipeline's driver rows in one partition rather than spread over the cores;
  only the stateful pipeline differs).

Per run also the Py4J calls per micro-batch: all of the process's, and those
of the thread running the micro-batches (``--py4j``); and the loop thread's
timeline (``--timeline``): per micro-batch after the first, the medians of
the time before the first job's collect (building), in collects (the jobs),
after the last one (the commit), and the loop thread's own CPU.

The benchmark pipelines of ``streaming.py`` run on each engine asked for, each
variant in turn per round (after a warm-up of each), and print per run the
wall seconds, the elements per second and the CPU seconds of this process tree
(driver, JVM, Spark's Python workers: ``run.Sampler``), which a shared machine
disturbs less than wall time; then the medians per variant. The stateful
pipeline has neither a WindowInto nor a GroupByKey: its A/B shows the noise.

    PYSPARK_PYTHON=$(which python) python -m tests.benchmarks.streaming_ab \\
        [--events 20] [--per-event 20000] [--keys 1000] [--rounds 3] \\
        [--engines spark,debug] [--variants default,stateful_whole]
        [--pipelines ...]
        [--py4j] [--event-log DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

from beam_spark_inproc.execution.streaming import loop
from beam_spark_inproc.spark import engine as spark_engine
from tests.benchmarks import streaming
from tests.benchmarks.run import Sampler

# Variant -> its extra pipeline options.
VARIANTS = {'default': [], 'stateful_whole': ['--spark_stream_stateful_whole']}


def variant_flags(variant: str) -> list[str]:
    """The pipeline options of ``variant`` (one of ``VARIANTS``)."""
    try:
        return list(VARIANTS[variant])
    except KeyError:
        raise SystemExit(f'unknown variant {variant!r}; one of {", ".join(VARIANTS)}') from None


class _Py4jCalls:
    """Counts py4j's ``send_command`` calls: all, and those of the thread
    that ran the last micro-batch (the loop's)."""

    def __init__(self) -> None:
        from py4j import clientserver

        self.all = self.loop = 0
        self.loop_thread = None
        send = clientserver.JavaClient.send_command
        counter = self

        def counted(client, *args, **kwargs):
            counter.all += 1
            if threading.get_ident() == counter.loop_thread:
                counter.loop += 1
            return send(client, *args, **kwargs)

        clientserver.JavaClient.send_command = counted
        run = loop.StreamingExecutor._run_micro_batch

        def marked(executor, source_rows):
            counter.loop_thread = threading.get_ident()
            return run(executor, source_rows)

        loop.StreamingExecutor._run_micro_batch = marked

    def reset(self) -> None:
        self.all = self.loop = 0


class _Timeline:
    """Marks of the loop thread per micro-batch: start, first collect,
    time in collects, end of the last collect, end; its thread CPU."""

    def __init__(self) -> None:
        self.marks: list[dict] = []
        run = loop.StreamingExecutor._run_micro_batch
        collect = spark_engine.SparkEngine.collect
        current: dict = {}
        marks = self.marks

        def timed(executor, source_rows):
            current.clear()
            current.update(start=time.perf_counter(), cpu=time.thread_time(), collect=0.0)
            try:
                return run(executor, source_rows)
            finally:
                current['end'] = time.perf_counter()
                current['cpu'] = time.thread_time() - current['cpu']
                marks.append(dict(current))

        loop.StreamingExecutor._run_micro_batch = timed

        def collected(engine, data, elements=True, started=None):
            at = time.perf_counter()
            current.setdefault('first', at)
            try:
                return collect(engine, data, elements, started)
            finally:
                current['last'] = time.perf_counter()
                current['collect'] += current['last'] - at

        spark_engine.SparkEngine.collect = collected

    def summary(self) -> str:
        marks = [m for m in self.marks if 'first' in m][1:]
        self.marks.clear()
        if not marks:
            return ''

        def ms(values) -> float:
            return statistics.median(values) * 1000

        return (
            f'; per micro-batch (medians) {ms([m["end"] - m["start"] for m in marks]):.0f} ms: '
            f'before the job {ms([m["first"] - m["start"] for m in marks]):.0f}, '
            f'jobs {ms([m["collect"] for m in marks]):.0f}, '
            f'after {ms([m["end"] - m["last"] for m in marks]):.0f}, '
            f'loop thread CPU {ms([m["cpu"] for m in marks]):.0f}'
        )


def _tasks(folder: str, since_ms: int) -> str:
    """From the newest Spark event log in ``folder`` (uncompressed), the
    tasks launched since ``since_ms``: per stage of several tasks, the
    shuffle records its tasks read (the last such stage's) and their run
    times; the sums of each such stage's longest and shortest task and of
    the one-task stages' (the critical path when every task has a core)."""
    import glob
    import json

    logs = sorted(glob.glob(os.path.join(folder, '*', 'events_*')), key=os.path.getmtime)
    stages: dict[int, list] = {}
    with open(logs[-1]) as f:
        for line in f:
            event = json.loads(line)
            if (
                event['Event'] != 'SparkListenerTaskEnd'
                or event['Task Info']['Launch Time'] < since_ms
            ):
                continue
            metrics = event['Task Metrics']
            stages.setdefault(event['Stage ID'], []).append(
                (
                    event['Task Info']['Index'],
                    metrics.get('Shuffle Read Metrics', {}).get('Total Records Read', 0),
                    metrics['Executor Run Time'],
                )
            )
    many = [sorted(t) for t in stages.values() if len(t) > 1]
    records = next(
        (tuple(r for _, r, _ in t) for t in reversed(many) if sum(r for _, r, _ in t) > 100), ()
    )
    longest = sum(max(ms for _, _, ms in t) for t in many) / 1000
    shortest = sum(min(ms for _, _, ms in t) for t in many) / 1000
    single = sum(t[0][2] for t in stages.values() if len(t) == 1) / 1000
    return (
        f'; tasks of several-task stages: records {records}, longest '
        f'summed {longest:.2f} s, shortest {shortest:.2f} s; one-task '
        f'stages {single:.2f} s'
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--events', type=int, default=20)
    parser.add_argument('--per-event', type=int, default=20_000)
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--engines', default='spark,debug')
    parser.add_argument('--variants', default='default')
    parser.add_argument('--pipelines', default=','.join(streaming.PIPELINES))
    parser.add_argument('--py4j', action='store_true', help='count Py4J calls per micro-batch')
    parser.add_argument(
        '--timeline',
        action='store_true',
        help="per run, the loop thread's time a micro-batch before, in and after its jobs",
    )
    parser.add_argument(
        '--event-log',
        default='',
        help='a folder for Spark event logs: print per run the '
        "keyed tasks' records and the stages' task times",
    )
    args = parser.parse_args()
    flags: list[str] = []
    if args.event_log:
        os.makedirs(args.event_log, exist_ok=True)
        flags = [
            '--spark_conf',
            'spark.eventLog.enabled=true',
            '--spark_conf',
            f'spark.eventLog.dir={args.event_log}',
            '--spark_conf',
            'spark.eventLog.compress=false',
        ]
    streaming._instrument()
    calls = _Py4jCalls() if args.py4j else None
    timeline = _Timeline() if args.timeline else None
    engines = [e for e in args.engines.split(',') if e]
    variants = [v for v in args.variants.split(',') if v]
    warm = argparse.Namespace(events=2, per_event=2_000, keys=2)
    print(
        f'load average {os.getloadavg()}; {args.events} events x '
        f'{args.per_event} elements, {args.keys} keys',
        flush=True,
    )
    results: dict = {}
    for name in [n for n in args.pipelines.split(',') if n]:
        for engine in engines:
            for variant in variants:
                streaming.run_one(name, engine, warm, flags=flags + variant_flags(variant))
            for _ in range(args.rounds):
                for variant in variants:
                    extra = flags + variant_flags(variant)
                    if engine == 'spark':  # Python workers idle for a minute end
                        streaming.run_one(name, engine, warm, flags=extra)
                    if calls is not None:
                        calls.reset()
                    if timeline is not None:
                        timeline.marks.clear()
                    since = int(time.time() * 1000)
                    with Sampler(interval=0.5) as sampler:
                        f = streaming.run_one(name, engine, args, flags=extra)
                    cpu = sampler.cpu_seconds()
                    batches = f.get('micro-batches') or 1
                    py4j = (
                        ''
                        if calls is None or engine != 'spark'
                        else f'; Py4J calls per micro-batch {calls.all / batches:.1f} '
                        f'(loop thread {calls.loop / batches:.1f}), driver CPU '
                        f'per micro-batch {cpu.get("driver", 0) / batches * 1000:.0f} ms'
                    )
                    if args.event_log and engine == 'spark':
                        py4j += _tasks(args.event_log, since)
                    if timeline is not None and engine == 'spark':
                        py4j += timeline.summary()
                    results.setdefault((name, engine, variant), []).append(
                        (f['seconds'], f['throughput'], sum(cpu.values()))
                    )
                    print(
                        f'{name:15s} {engine:5s} {variant:7s}: '
                        f'{f["seconds"]:6.2f} s wall, '
                        f'{f["throughput"]:>8,.0f}/s (steady '
                        f'{f.get("steady throughput", 0):,.0f}/s), CPU '
                        f'{sum(cpu.values()):6.2f} s (driver '
                        f'{cpu.get("driver", 0):.2f}, JVM {cpu.get("jvm", 0):.2f}, '
                        f'Python workers {cpu.get("python", 0):.2f}){py4j}  '
                        f'[load {os.getloadavg()[0]:.1f}]',
                        flush=True,
                    )
    print('medians: wall s, elements/s, CPU s')
    for (name, engine, variant), rows in results.items():
        print(
            f'{name:15s} {engine:5s} {variant:7s}: '
            + ', '.join(f'{statistics.median(column):,.2f}' for column in zip(*rows))
        )


if __name__ == '__main__':
    main()
