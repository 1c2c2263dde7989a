"""The fixed cost of a small pipeline: this runner against Beam's FnApiRunner.

Run by hand, never by pytest::

    python tests/benchmarks/small.py                 # 15 runs each, medians
    python tests/benchmarks/small.py --repeats 30 --profile

The small pipeline: ``Create`` of 10 elements, ``Map``, ``GroupByKey``,
``Map``, ``Count.Globally``, checked with ``assert_that`` (as a test would). Engines,
interleaved, after one warm-up run each:

- ``inproc``: ``InProcessSparkRunner`` on its own session (``local[2]``, warm);
- ``inproc-user``: the same on a session created as a user would (Spark's defaults);
- ``direct``: Beam's ``FnApiRunner`` in memory;
- ``debug``: ``InProcessSparkRunner(debug=True)`` (the same plan, no Spark).

Prints the median wall seconds of each, its ratio to ``direct``, the load average,
and, for ``inproc``, the Spark jobs, stages and tasks one run starts (classic
Spark's status tracker). ``--profile`` prints the driver's cProfile of one run.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to


def small(p) -> None:
    counted = (
        p
        | beam.Create(list(range(10)))
        | beam.Map(lambda x: (x % 3, x))
        | beam.GroupByKey()
        | beam.Map(lambda kv: (kv[0], sum(kv[1])))
        | beam.combiners.Count.Globally()
    )
    assert_that(counted, equal_to([3]))


def run_once(runner) -> float:
    start = time.perf_counter()
    with beam.Pipeline(runner=runner) as p:
        small(p)
    return time.perf_counter() - start


def spark_work(session, runner) -> str:
    """Jobs, stages and tasks of one run (classic Spark's status tracker)."""
    tracker = session.sparkContext.statusTracker()  # classic-only: a benchmark
    group = 'small-bench'
    session.sparkContext.setJobGroup(group, 'small pipeline')
    run_once(runner)
    session.sparkContext.setJobGroup(None, None)
    jobs = tracker.getJobIdsForGroup(group)
    stages = [s for j in jobs for s in tracker.getJobInfo(j).stageIds]
    tasks = 0
    for s in stages:
        info = tracker.getStageInfo(s)
        tasks += info.numTasks if info else 0
    return f'{len(jobs)} jobs, {len(stages)} stages, {tasks} tasks'


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=15)
    parser.add_argument(
        '--engines', nargs='+', default=['inproc', 'inproc-user', 'direct', 'debug']
    )
    parser.add_argument('--profile', action='store_true')
    args = parser.parse_args(argv)
    os.environ.setdefault('PYSPARK_PYTHON', sys.executable)
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.spark import session as spark_session

    runners = {'direct': lambda: FnApiRunner(), 'debug': lambda: InProcessSparkRunner(debug=True)}
    session = None
    if any(e.startswith('inproc') for e in args.engines):
        session, _ = spark_session.get_or_create('local[2]', None, {})
        runners['inproc'] = lambda: InProcessSparkRunner(spark=session)
        # A user's session: Spark's defaults for the settings the runner may
        # change at run time (the JVM's start-up options stay the runner's).
        runners['inproc-user'] = lambda: InProcessSparkRunner(spark=session)
    defaults = {
        'spark.sql.adaptive.enabled': 'true',
        'spark.sql.execution.arrow.maxRecordsPerBatch': '10000',
        'spark.sql.execution.arrow.maxBytesPerBatch': '67108864',
    }

    def run(engine: str) -> float:
        if engine != 'inproc-user':
            return run_once(runners[engine]())
        saved = {k: session.conf.get(k) for k in defaults}
        for k, v in defaults.items():
            session.conf.set(k, v)
        try:
            return run_once(runners[engine]())
        finally:
            for k, v in saved.items():
                session.conf.set(k, v)

    times: dict[str, list[float]] = {e: [] for e in args.engines}
    for engine in args.engines:
        run(engine)  # warm-up
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for engine in args.engines:
            times[engine].append(run(engine))
    load_after = os.getloadavg()
    base = statistics.median(times['direct']) if 'direct' in times else None
    print(
        f'small pipeline, medians of {args.repeats} (load average '
        f'{load_before[0]:.2f} -> {load_after[0]:.2f})'
    )
    for engine, ts in times.items():
        median = statistics.median(ts)
        ratio = f'  {median / base:.2f}x direct' if base else ''
        print(f'  {engine:12s} {median:6.3f} s  (min {min(ts):.3f}){ratio}')
    if session is not None and 'inproc' in args.engines:
        print('  inproc Spark work:', spark_work(session, runners['inproc']()))
    if args.profile and session is not None:
        profiler = cProfile.Profile()
        profiler.enable()
        run_once(runners['inproc']())
        profiler.disable()
        pstats.Stats(profiler).sort_stats('cumulative').print_stats(45)


if __name__ == '__main__':
    main()
