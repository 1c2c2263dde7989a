"""Peak Python worker memory on skewed data, on separate executors with 1 GB each.

    python tests/benchmarks/skew_memory.py [--scale 1.0] [--only NAME ...]

Each scenario runs in a fresh process on ``local-cluster[2,1,1024]``
(``spark.executor.memory`` 1 GB) with the Python workers' address space limited
by ``spark.executor.pyspark.memory`` (``--worker_memory``, default 3g: Beam and
pyarrow alone map ~1.6 GB of virtual memory). The DoFns report their worker's
peak RSS (``ru_maxrss``) as a Beam distribution; the script prints, per
scenario, the elements, wall time, and the largest worker peak RSS, next to a
worker's RSS right after importing Beam (the floor):

* ``hot_key``: GroupByKey where one key has 20M small values (plus 1000 cold
  keys); the consumer sums and counts the hot key's values, iterating twice.
  The values reach it as a lazily paged iterable (see
  ``worker.batch.grouped_values``), not one list.
* ``fan_out``: one element FlatMapped into 50M, counted downstream.
* ``side_input``: an AsDict side input of 1M entries serving 2M lookups over
  several tasks and bundles: built once per worker, not per bundle.

Run by hand; not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

MASTER = 'local-cluster[2,1,1024]'


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _report(name):
    from apache_beam.metrics import Metrics

    peak = Metrics.distribution('skew_memory', 'peak_rss_mb')
    peak.update(int(_rss_mb()))


def hot_key(p, scale):
    import apache_beam as beam

    hot, cold_keys = int(20_000_000 * scale), 1000
    blocks = 200

    def explode(b):
        for j in range(hot // blocks):
            yield 'hot', j % 7
        for k in range(cold_keys // blocks):
            yield f'cold{b}-{k}', 1

    def consume(kv):
        key, values = kv
        total = sum(values)
        count = sum(1 for _ in values)
        _report('hot_key')
        return key, total, count

    out = (
        p
        | beam.Create(list(range(blocks)))
        | beam.FlatMap(explode)
        | beam.GroupByKey()
        | beam.Map(consume)
    )
    expected_total = sum(j % 7 for j in range(hot // blocks)) * blocks
    check = out | beam.Filter(lambda t: t[0] == 'hot') | beam.Map(lambda t: (t[1], t[2]))
    from apache_beam.testing.util import assert_that
    from apache_beam.testing.util import equal_to

    assert_that(check, equal_to([(expected_total, hot // blocks * blocks)]))
    return hot + cold_keys


def fan_out(p, scale):
    import apache_beam as beam

    n = int(50_000_000 * scale)

    def explode(x):
        _report('fan_out')
        yield from range(x)

    class Count(beam.DoFn):
        def process(self, x):
            yield 1

        def finish_bundle(self):
            _report('fan_out')

    counted = (
        p
        | beam.Create([n])
        | beam.FlatMap(explode)
        | beam.ParDo(Count())
        | beam.combiners.Count.Globally()
    )
    from apache_beam.testing.util import assert_that
    from apache_beam.testing.util import equal_to

    assert_that(counted, equal_to([n]))
    return n


def side_input(p, scale):
    import apache_beam as beam

    entries, lookups = int(1_000_000 * scale), int(2_000_000 * scale)

    class Look(beam.DoFn):
        def process(self, x, table):
            yield table[x % entries]

        def finish_bundle(self):
            _report('side_input')

    table = (
        p
        | 'Blocks' >> beam.Create(list(range(100)))
        | 'Entries'
        >> beam.FlatMap(
            lambda b: ((i, i * 2) for i in range(b * entries // 100, (b + 1) * entries // 100))
        )
    )
    looked = (
        p
        | 'Keys' >> beam.Create(list(range(100)))
        | 'Lookups' >> beam.FlatMap(lambda b: range(b * lookups // 100, (b + 1) * lookups // 100))
        | beam.Reshuffle()
        | beam.ParDo(Look(), table=beam.pvalue.AsDict(table))
        | beam.CombineGlobally(sum)
    )
    from apache_beam.testing.util import assert_that
    from apache_beam.testing.util import equal_to

    assert_that(looked, equal_to([sum(2 * (x % entries) for x in range(lookups))]))
    return lookups


SCENARIOS = {'hot_key': hot_key, 'fan_out': fan_out, 'side_input': side_input}


def run_one(name: str, scale: float, worker_memory: str) -> dict:
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter

    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.spark.session import get_or_create

    spark, _ = get_or_create(
        MASTER,
        None,
        {
            'spark.executor.pyspark.memory': worker_memory,
            'spark.task.maxFailures': '1',
        },
    )
    # The floor: a worker's peak RSS after importing Beam.
    import pyarrow as pa

    def floor(batches):
        import resource

        import apache_beam  # noqa: F401

        for _ in batches:
            yield pa.RecordBatch.from_pydict(
                {'mb': [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]}
            )

    base = max(
        r.mb for r in spark.range(2, numPartitions=2).mapInArrow(floor, 'mb double').collect()
    )
    start = time.monotonic()
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark))
    elements = SCENARIOS[name](p, scale)
    result = p.run()
    result.wait_until_finish()
    seconds = time.monotonic() - start
    dists = result.metrics().query(MetricsFilter().with_name('peak_rss_mb'))['distributions']
    spark.stop()
    return {
        'name': name,
        'elements': elements,
        'seconds': round(seconds, 1),
        'peak_worker_rss_mb': max(d.committed.max for d in dists),
        'worker_floor_mb': round(base),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--scale', type=float, default=1.0)
    parser.add_argument('--only', nargs='*', choices=sorted(SCENARIOS))
    parser.add_argument('--worker_memory', default='3g')
    parser.add_argument('--child', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.scale, args.worker_memory)))
        return
    print(
        f'{"scenario":<12} {"elements":>12} {"seconds":>8} '
        f'{"peak worker RSS MB":>19} {"floor MB":>9}'
    )
    for name in args.only or list(SCENARIOS):
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                '--child',
                name,
                '--scale',
                str(args.scale),
                '--worker_memory',
                args.worker_memory,
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode:
            print(f'{name:<12} FAILED\n{proc.stderr[-3000:]}')
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f'{name:<12} {r["elements"]:>12,} {r["seconds"]:>8} '
            f'{r["peak_worker_rss_mb"]:>19} {r["worker_floor_mb"]:>9}'
        )


if __name__ == '__main__':
    main()
