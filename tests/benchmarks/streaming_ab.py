"""A/B of the streaming worker's per-element paths, in one process, alternating.

Variants (planner switches, read when a pipeline is planned, so they reach
Spark's workers with the stage):

* ``off``: WindowInto as Beam's DoFn, every GroupByKey's panes from Beam's
  trigger driver (``planner.INTEGER_WINDOWS = planner.DEFAULT_TRIGGER_PANES =
  False``);
* ``windows``: integer window assignment only (``worker.assign_windows``);
* ``on``: both, the default (``worker.default_trigger`` too), and the
  driver's changes of session 13 (below);
* ``session12``: the planner's ``on`` with the driver of session 12:
  TestStream elements in the pipeline proto
  (``BEAM_SPARK_INPROC_TEST_STREAM_ASIDE=0``), the next micro-batch encoded
  from the start of this one and its DataFrame made by the loop
  (``loop.PREFETCH_AT_JOB = False``);
* ``aside``: ``session12`` with the TestStream's elements beside the proto.

The benchmark pipelines of ``streaming.py`` run on each engine asked for, each
variant in turn per round (after a warm-up of each), and print per run the
wall seconds, the elements per second and the CPU seconds of this process tree
(driver, JVM, Spark's Python workers: ``run.Sampler``), which a shared machine
disturbs less than wall time; then the medians per variant. The stateful
pipeline has neither a WindowInto nor a GroupByKey: its A/B shows the noise.

    PYSPARK_PYTHON=$(which python) python -m tests.benchmarks.streaming_ab \\
        [--events 20] [--per-event 20000] [--keys 1000] [--rounds 3] \\
        [--engines spark,debug] [--variants off,on] [--pipelines ...]
"""
from __future__ import annotations

import argparse
import os
import statistics

from beam_spark_inproc.execution.streaming import loop
from beam_spark_inproc.execution.streaming import test_stream
from beam_spark_inproc.planning import planner
from tests.benchmarks import streaming
from tests.benchmarks.run import Sampler

# (integer windows, default-trigger panes, TestStream elements aside,
# prefetch at the job)
VARIANTS = {'off': (False, False, True, True), 'windows': (True, False, True, True),
            'on': (True, True, True, True), 'session12': (True, True, False, False),
            'aside': (True, True, True, False)}


def _switch(variant: str) -> None:
    (planner.INTEGER_WINDOWS, planner.DEFAULT_TRIGGER_PANES, aside,
     loop.PREFETCH_AT_JOB) = VARIANTS[variant]
    os.environ[test_stream.ASIDE_ENV] = '1' if aside else '0'


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--events', type=int, default=20)
    parser.add_argument('--per-event', type=int, default=20_000)
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--engines', default='spark,debug')
    parser.add_argument('--variants', default='off,on')
    parser.add_argument('--pipelines', default=','.join(streaming.PIPELINES))
    args = parser.parse_args()
    streaming._instrument()
    engines = [e for e in args.engines.split(',') if e]
    variants = [v for v in args.variants.split(',') if v]
    warm = argparse.Namespace(events=2, per_event=2_000, keys=2)
    print(f'load average {os.getloadavg()}; {args.events} events x '
          f'{args.per_event} elements, {args.keys} keys', flush=True)
    results: dict = {}
    for name in [n for n in args.pipelines.split(',') if n]:
        for engine in engines:
            for variant in variants:
                _switch(variant)
                streaming.run_one(name, engine, warm)
            for _ in range(args.rounds):
                for variant in variants:
                    _switch(variant)
                    if engine == 'spark':  # Python workers idle for a minute end
                        streaming.run_one(name, engine, warm)
                    with Sampler(interval=0.5) as sampler:
                        f = streaming.run_one(name, engine, args)
                    cpu = sampler.cpu_seconds()
                    results.setdefault((name, engine, variant), []).append(
                        (f['seconds'], f['throughput'], sum(cpu.values())))
                    print(f'{name:15s} {engine:5s} {variant:7s}: '
                          f'{f["seconds"]:6.2f} s wall, '
                          f'{f["throughput"]:>8,.0f}/s (steady '
                          f'{f.get("steady throughput", 0):,.0f}/s), CPU '
                          f'{sum(cpu.values()):6.2f} s (driver '
                          f'{cpu.get("driver", 0):.2f}, JVM {cpu.get("jvm", 0):.2f}, '
                          f'Python workers {cpu.get("python", 0):.2f})  '
                          f'[load {os.getloadavg()[0]:.1f}]', flush=True)
    _switch('on')
    print('medians: wall s, elements/s, CPU s')
    for (name, engine, variant), rows in results.items():
        print(f'{name:15s} {engine:5s} {variant:7s}: ' + ', '.join(
            f'{statistics.median(column):,.2f}' for column in zip(*rows)))


if __name__ == '__main__':
    main()
