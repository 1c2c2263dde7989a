"""What a Spark user writes instead: the streaming benchmark's pipelines as
PySpark Structured Streaming queries, and the per-trigger floor of a query.

The input is ``streaming.py``'s: ``--events`` element events of ``--per-event``
elements over ``--keys`` keys, event i's elements at event time i, one event a
micro-batch. Here it comes from a Python streaming data source
(``_EventsSource``: offset = events delivered; each micro-batch takes one more)
so that Spark, not the driver, makes the rows, as a Kafka or file source would.

Queries, each run to the end of the input with ``processAllAvailable``:

* **floor, no-op**: ``foreachBatch`` doing nothing, ``--floor-rows`` rows a
  micro-batch: what one trigger of a query costs (offsets, the offset and
  commit logs, planning) with no job (it reads nothing, so its elements show
  as 0);
* **floor, mapInArrow count**: a ``mapInArrow`` pass (Arrow batches through a
  Python worker, as this runner's stages run) and a windowed count, the same
  tiny micro-batches, to the ``noop`` sink: a trigger with a Python stage, a
  stateful aggregation and its state store;
* **windowed count**: ``withWatermark('ts', '0 seconds')``,
  ``groupBy(window(ts, '1 second'), key).count()``, append mode, ``noop`` sink
  (Beam's default trigger: one pane when the watermark passes the window);
* **stateful**: ``groupBy(key).applyInPandasWithState``: a running count per
  key (state: one integer), emitted with every element, as the benchmark's
  stateful DoFn does.

Each query also runs over Spark's own ``rate-micro-batch`` source (names
ending "(rate source)"): the same rows a micro-batch (micro-batch i's at
event time i seconds, row j's key ``k{j % keys}``), endless, stopped after
``--events`` micro-batches; no Python process a trigger (the Python data
source's planner starts one that must connect back within Spark's timeout,
which a heavily loaded machine may miss).

Printed per query: micro-batches, elements, throughput over the run and from
the end of the first micro-batch (steady), the median and p99 micro-batch time
(``triggerExecution``), latency p50/p99 (an element goes in at the start of its
micro-batch and its output comes out at the end of the first micro-batch from
then on that wrote output rows: for the windowed count, the micro-batch after
it, whose watermark passes its window), the state store's memory at the end,
and the CPU a micro-batch of the whole process tree (``run.Sampler``: driver,
JVM, Python workers and the source's process, over the query's start, run and
stop), which a loaded machine disturbs less than wall time. Compare with
``python -m tests.benchmarks.streaming`` (the same input on this runner and on
BundleBasedDirectRunner).

``--fixed-cost-rounds N`` instead runs N rounds of this runner's stateful
count over the floor's micro-batches (the runner makes the session) and then
the floor queries in the same session: the fixed cost a micro-batch of each,
alternating in one JVM. ``--queries`` (names as printed, separated by ";")
runs only those.

    python -m tests.benchmarks.structured_streaming [--events 20]
        [--per-event 20000] [--keys 1000] [--floor-events 30] [--floor-rows 20]
        [--queries "stateful (rate source);..."] [--fixed-cost-rounds N]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import time

import cloudpickle

NAME = 'beam_spark_inproc_benchmark_events'


def _source_class():
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.datasource import DataSourceStreamReader
    from pyspark.sql.datasource import InputPartition

    class _Reader(DataSourceStreamReader):
        def __init__(self, options):
            self.events = int(options['events'])
            self.per_event = int(options['per_event'])
            self.keys = int(options['keys'])
            self.partitions_ = int(options['partitions'])

        def initialOffset(self):
            return {'event': 0}

        def latestOffset(self, start=None, limit=None):
            at = (start or {'event': 0})['event']
            return {'event': min(self.events, at + 1)}

        def partitions(self, start, end):
            return [
                InputPartition((e, p))
                for e in range(start['event'], end['event'])
                for p in range(self.partitions_)
            ]

        def read(self, partition):
            event, part = partition.value
            ts = datetime.datetime.fromtimestamp(event, datetime.timezone.utc)
            for j in range(part, self.per_event, self.partitions_):
                yield f'k{j % self.keys}', ts

        def commit(self, end):
            pass

    class _EventsSource(DataSource):
        @classmethod
        def name(cls):
            return NAME

        def schema(self):
            return 'key string, ts timestamp'

        def streamReader(self, schema):
            return _Reader(self.options)

    return _EventsSource


def _session():
    from pyspark.sql import SparkSession

    # Spark's Python workers run this interpreter (with pyspark and pyarrow).
    os.environ.setdefault('PYSPARK_PYTHON', sys.executable)
    return (
        SparkSession.builder.master('local[2]')
        .config('spark.sql.shuffle.partitions', '2')
        .config('spark.sql.streaming.numRecentProgressUpdates', '10000')
        .config('spark.ui.enabled', 'false')
        .getOrCreate()
    )


def _events(spark, events: int, per_event: int, keys: int):
    return (
        spark.readStream.format(NAME)
        .option('events', events)
        .option('per_event', per_event)
        .option('keys', keys)
        .option('partitions', 2)
        .load()
    )


def _count_in_arrow(batches):
    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_pydict({'key': batch.column(0), 'ts': batch.column(1)})


def _running_count(key, frames, state):
    import pandas as pd

    n = state.get[0] if state.exists else 0
    for frame in frames:
        counts = range(n + 1, n + 1 + len(frame))
        n += len(frame)
        yield pd.DataFrame({'key': [key[0]] * len(frame), 'count': counts})
    state.update((n,))


def _rate(spark, per_event: int, keys: int = 2):
    """Spark's own source (no Python process a trigger): ``per_event`` rows
    a micro-batch as (key, ts), the input of ``_events`` (micro-batch i's
    rows at event time i seconds, row j's key ``k{j % keys}``) but endless."""
    from pyspark.sql import functions as F

    return (
        spark.readStream.format('rate-micro-batch')
        .option('rowsPerBatch', per_event)
        .option('numPartitions', 2)
        .option('startTimestamp', 0)
        .option('advanceMillisPerBatch', 1000)
        .load()
        .select(
            F.concat(F.lit('k'), (F.col('value') % keys).cast('string')).alias('key'),
            F.col('timestamp').alias('ts'),
        )
    )


def _query(name: str, df):
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    name = name.replace(' (rate source)', '')
    if name == 'floor, no-op':
        return df.writeStream.foreachBatch(lambda batch, batch_id: None)
    if name == 'floor, mapInArrow count':
        df = df.mapInArrow(_count_in_arrow, df.schema)
    if name in ('floor, mapInArrow count', 'windowed count'):
        return (
            df.withWatermark('ts', '0 seconds')
            .groupBy(F.window('ts', '1 second'), 'key')
            .count()
            .writeStream.outputMode('append')
            .format('noop')
        )
    if name == 'stateful':
        return (
            df.groupBy('key')
            .applyInPandasWithState(
                _running_count,
                'key string, count long',
                'n long',
                'append',
                GroupStateTimeout.NoTimeout,
            )
            .writeStream.outputMode('append')
            .format('noop')
        )
    raise ValueError(name)


def run_query(spark, name: str, events: int, per_event: int, keys: int) -> dict:
    from tests.benchmarks.run import Sampler

    folder = tempfile.mkdtemp(prefix='bench-structured-')
    rate = name.endswith('(rate source)')
    try:
        source = _rate(spark, per_event, keys) if rate else _events(spark, events, per_event, keys)
        with Sampler(interval=0.5) as sampler:
            query = _query(name, source).option('checkpointLocation', folder).start()
            if rate:  # endless: stopped after ``events`` micro-batches
                while len(query.recentProgress) < events:
                    if query.exception() is not None:
                        raise query.exception()
                    time.sleep(0.05)
            else:
                query.processAllAvailable()
            query.stop()
            progress = list(query.recentProgress)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    cpu = sampler.cpu_seconds()
    triggers = len(progress)  # those the CPU covers
    if rate:
        progress = progress[:events]
    batches = []
    for p in progress:
        started = datetime.datetime.fromisoformat(p.timestamp.replace('Z', '+00:00')).timestamp()
        took = p.durationMs.get('triggerExecution', 0) / 1000
        out = p.sink.numOutputRows if p.sink.numOutputRows >= 0 else 0
        state = sum(s.memoryUsedBytes for s in p.stateOperators)
        batches.append((started, started + took, p.numInputRows, out, state))
    if not batches:
        raise RuntimeError(f'{name}: the query ran no micro-batch')
    start, end = batches[0][0], batches[-1][1]
    elements = sum(b[2] for b in batches)
    latencies = []
    for i, (began, _, rows, _, _) in enumerate(batches):
        if rows:
            out_at = next((b[1] for b in batches[i:] if b[3]), batches[-1][1])
            latencies.extend([out_at - began] * rows)
    latencies.sort()
    times = sorted(b[1] - b[0] for b in batches)
    first_end = batches[0][1]
    steady = sum(b[2] for b in batches[1:])
    return {
        'micro-batches': len(batches),
        'elements': elements,
        'seconds': end - start,
        'throughput': elements / (end - start) if end > start else 0.0,
        'steady throughput': steady / (end - first_end) if end > first_end else 0.0,
        'batch p50': statistics.median(times),
        'batch p99': times[min(len(times) - 1, int(len(times) * 0.99))],
        'p50': latencies[len(latencies) // 2] if latencies else 0.0,
        'p99': (
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else 0.0
        ),
        'state bytes': batches[-1][4],
        # the whole process tree's (driver, JVM, Python workers and the
        # source's process), over the query's start, run and stop
        'cpu per batch': sum(cpu.values()) / triggers,
        'jvm cpu per batch': cpu.get('jvm', 0.0) / triggers,
    }


def _line(name: str, f: dict) -> str:
    return (
        f'{name:36s} {f["micro-batches"]:3d} micro-batches, '
        f'{f["elements"]:>9,} elements in {f["seconds"]:6.2f} s: '
        f'{f["throughput"]:>9,.0f}/s, steady '
        f'{f["steady throughput"]:>9,.0f}/s; micro-batch p50 '
        f'{f["batch p50"] * 1000:.0f} ms, p99 {f["batch p99"] * 1000:.0f} '
        f'ms; latency p50 {f["p50"]:.2f} s, p99 {f["p99"]:.2f} s; state '
        f'{f["state bytes"]:,} B; CPU a micro-batch '
        f'{f["cpu per batch"] * 1000:.0f} ms (JVM '
        f'{f["jvm cpu per batch"] * 1000:.0f})  '
        f'[load {os.getloadavg()[0]:.1f}]'
    )


def _runner(name: str, events: int, per_event: int, keys: int) -> dict:
    """This runner's ``streaming.py`` pipeline ``name`` in the same session,
    with the same figures as ``run_query`` (CPU as there)."""
    from tests.benchmarks import streaming
    from tests.benchmarks.run import Sampler

    args = argparse.Namespace(events=events, per_event=per_event, keys=keys)
    with Sampler(interval=0.5) as sampler:
        f = streaming.run_one(name, 'spark', args)
    cpu = sampler.cpu_seconds()
    batches = f.get('micro-batches') or 1
    return {
        'micro-batches': batches,
        'elements': f['elements'],
        'seconds': f['seconds'],
        'throughput': f['throughput'],
        'steady throughput': f.get('steady throughput', 0.0),
        'batch p50': f['seconds'] / batches,
        'batch p99': f['seconds'] / batches,
        'p50': f['p50'],
        'p99': f['p99'],
        'state bytes': 0,
        'cpu per batch': sum(cpu.values()) / batches,
        'jvm cpu per batch': cpu.get('jvm', 0.0) / batches,
    }


FLOORS = (
    'floor, no-op',
    'floor, mapInArrow count',
    'floor, no-op (rate source)',
    'floor, mapInArrow count (rate source)',
)
# The benchmark's queries over Spark's own source as well (the Python data
# source's planner starts a Python process that must connect back within
# Spark's timeout: on a heavily loaded machine it may not).
PIPELINES = ('windowed count', 'stateful', 'windowed count (rate source)', 'stateful (rate source)')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--events', type=int, default=20)
    parser.add_argument('--per-event', type=int, default=20_000)
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument('--floor-events', type=int, default=30)
    parser.add_argument('--floor-rows', type=int, default=20)
    parser.add_argument(
        '--fixed-cost-rounds',
        type=int,
        default=0,
        help="instead: N rounds, each this runner's stateful "
        'count over --floor-events x --floor-rows (the '
        "runner's session) and then each floor query in it",
    )
    parser.add_argument(
        '--queries', default='', help='only these queries, separated by ";" (names as printed)'
    )
    args = parser.parse_args()
    # The source's classes travel to Spark's Python workers by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    if args.fixed_cost_rounds:
        from pyspark.sql import SparkSession

        from tests.benchmarks import streaming

        streaming._instrument()
        # The runner makes the session (its settings), the queries share it.
        _runner('stateful', 2, 10, 2)
        spark = SparkSession.getActiveSession()
        spark.conf.set('spark.sql.shuffle.partitions', '2')
        spark.conf.set('spark.sql.streaming.numRecentProgressUpdates', '10000')
    else:
        spark = _session()
    spark.dataSource.register(_source_class())
    print(
        f'load average {os.getloadavg()}; PySpark {spark.version}, '
        f'local[2]; {args.events} events x {args.per_event} elements, '
        f'{args.keys} keys; floor: {args.floor_events} x {args.floor_rows}',
        flush=True,
    )
    floor = (args.floor_events, args.floor_rows, 2)
    runs = [(name, *floor) for name in FLOORS] + [
        (name, args.events, args.per_event, args.keys) for name in PIPELINES
    ]
    if args.queries:
        runs = [r for r in runs if r[0] in args.queries.split(';')]
    # Warm up: the session's first queries start the Python workers and JITs.
    for name, *_ in runs:
        run_query(spark, name, 3, 10, 2)
    if args.fixed_cost_rounds:
        for _ in range(args.fixed_cost_rounds):
            print(_line('this runner, stateful', _runner('stateful', *floor)), flush=True)
            for name, *_ in runs:
                if name in FLOORS:
                    print(_line(name, run_query(spark, name, *floor)), flush=True)
        return
    for name, events, per_event, keys in runs:
        print(_line(name, run_query(spark, name, events, per_event, keys)), flush=True)
    spark.stop()


if __name__ == '__main__':
    main()
