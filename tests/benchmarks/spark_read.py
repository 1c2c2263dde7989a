"""Benchmark: read N rows of Parquet into a pipeline and count per key.

Run by hand, never by pytest::

    python tests/benchmarks/spark_read.py                    # 10M rows, 3 repeats
    python tests/benchmarks/spark_read.py --rows 1000000 --repeats 1
    python tests/benchmarks/spark_read.py --rows 2000000 10000000 --repeats 1 --cpu
    python tests/benchmarks/spark_read.py --conf spark.driver.extraJavaOptions=  # JVM's default JIT

Spark writes the input once (``--files`` Parquet files, columns ``id long,
key string, value double``, ``--keys`` distinct keys) into a temporary folder.
Each engine then runs ``read -> Map(row -> (key, 1)) -> CombinePerKey(sum)``
and checks the counts against Spark's own ``groupBy().count()``:

- ``read_from_spark``: ``ReadFromSpark(dataframe=spark.read.parquet(dir).select('key'))`` on
  ``InProcessSparkRunner`` (Spark's Parquet reader, Arrow batches into the stage);
- ``read_from_parquet_inproc``: Beam's ``beam.io.ReadFromParquet`` on
  ``InProcessSparkRunner``;
- ``read_from_parquet_fnapi``: Beam's ``beam.io.ReadFromParquet`` on Beam's
  ``FnApiRunner`` (in-memory, one process).

Columnar variants (``--engines ... ``; all in the default list), each checked
against the same counts:

- ``spark_batched_inproc``: ReadFromSpark into a batched DoFn counting per key
  (pyarrow ``group_by`` on each Arrow batch) -> CombinePerKey(sum): the
  batches reach the DoFn whole, with no row objects (docs/spark-interop.md);
- ``parquet_batched_inproc`` / ``_fnapi``: Beam's ``ReadFromParquetBatched``
  (pyarrow Tables as elements) into the same counting DoFn, on this runner and
  on FnApiRunner;
- ``spark_frame_inproc``: Beam's DataFrame API over ReadFromSpark,
  ``to_dataframe(rows).groupby('key').size()``;
- ``dfio_frame_inproc`` / ``_fnapi``: the same over Beam's own batched Parquet
  read for DataFrames, ``apache_beam.dataframe.io.read_parquet``.

Spark's own reader (not a bare scan of local Parquet files, which pyarrow reads
in the tasks): the first stage is ``mapInArrow`` over the query's DataFrame,
Spark's Arrow batches of 10,000 rows (joined for batched consumers):

- ``query_rows_inproc`` / ``query_batched_inproc``: ReadFromSpark of a query
  making the same keys (``spark.range(N).selectExpr(concat('k', id % keys))``)
  into the row pipeline / the batched DoFn;
- ``sql_rows_inproc`` / ``sql_batched_inproc``: ``SparkSql`` over
  ReadFromSpark's output (``SELECT key FROM PCOLLECTION WHERE key <> ''``):
  the read's own DataFrame is the view (no Beam transform between, same Spark
  types), the query's output reaches the row pipeline / the batched DoFn as a
  read's does (over a PCollection made in Beam its rows would cross into Spark
  per row: docs/performance.md).

For each ``--rows``, Spark writes the input, then one warm-up run of each engine
on a 50,000-row file, then ``--repeats`` runs with the engines interleaved
(several sizes run one after the other in one run); medians are printed, and the ratio of
ReadFromParquet on
this runner to ReadFromSpark (target: at least 3x), and of each other engine
to the columnar ReadFromSpark variants. ``--cpu`` adds each run's CPU seconds
per process kind (driver, JVM, Python workers).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import typing

import apache_beam as beam
import pyarrow as pa
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to


def _count_per_key(rows, key_of):
    return rows | 'Key' >> beam.Map(lambda r: (key_of(r), 1)) | 'Count' >> beam.CombinePerKey(sum)


def run_read_from_spark(spark, path, expected):
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.transforms import ReadFromSpark

    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        counts = _count_per_key(
            p | ReadFromSpark(dataframe=spark.read.parquet(path).select('key')), lambda r: r.key
        )
        assert_that(counts, equal_to(expected))


def _count_table(table):
    """Counts per key of a pyarrow Table (a batch or a ReadFromParquetBatched
    element)."""
    counts = table.group_by('key').aggregate([('key', 'count')])
    return list(zip(counts['key'].to_pylist(), counts['key_count'].to_pylist()))


class CountBatch(beam.DoFn):
    """A batched DoFn: counts per key of each Arrow batch."""

    @beam.DoFn.yields_elements
    def process_batch(self, batch):
        yield from _count_table(batch)


# Beam reads the batch type from the annotations (this module's are strings).
CountBatch.process_batch.__annotations__ = {
    'batch': pa.Table,
    'return': typing.Iterator[typing.Tuple[str, int]],
}


def run_spark_batched(spark, path, expected):
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.transforms import ReadFromSpark

    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        counts = (
            p
            | ReadFromSpark(dataframe=spark.read.parquet(path).select('key'))
            | beam.ParDo(CountBatch())
            | beam.CombinePerKey(sum)
        )
        assert_that(counts, equal_to(expected))


def _query(spark, expected):
    """Spark's own reader, not a file scan: the same keys and counts made by a
    query (``spark.range`` on the session's default parallelism)."""
    rows, keys = sum(n for _, n in expected), len(expected)
    return spark.range(rows).selectExpr(f"concat('k', cast(id % {keys} as string)) AS key")


def run_query_rows(spark, path, expected):
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.transforms import ReadFromSpark

    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        counts = _count_per_key(
            p | ReadFromSpark(dataframe=_query(spark, expected)), lambda r: r.key
        )
        assert_that(counts, equal_to(expected))


def run_query_batched(spark, path, expected):
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.transforms import ReadFromSpark

    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        counts = (
            p
            | ReadFromSpark(dataframe=_query(spark, expected))
            | beam.ParDo(CountBatch())
            | beam.CombinePerKey(sum)
        )
        assert_that(counts, equal_to(expected))


def _sql(p, spark, path):
    """SparkSql over ReadFromSpark's output: the read's DataFrame is the view,
    the query's output comes back as a read's does."""
    from beam_spark_inproc.transforms import ReadFromSpark
    from beam_spark_inproc.transforms import SparkSql

    return (
        p
        | ReadFromSpark(dataframe=spark.read.parquet(path).select('key'))
        | SparkSql("SELECT key FROM PCOLLECTION WHERE key <> ''")
    )


def run_sql_rows(spark, path, expected):
    from beam_spark_inproc import InProcessSparkRunner

    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        counts = _count_per_key(_sql(p, spark, path), lambda r: r.key)
        assert_that(counts, equal_to(expected))


def run_sql_batched(spark, path, expected):
    from beam_spark_inproc import InProcessSparkRunner

    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        counts = _sql(p, spark, path) | beam.ParDo(CountBatch()) | beam.CombinePerKey(sum)
        assert_that(counts, equal_to(expected))


def run_parquet_batched(runner, path, expected):
    with beam.Pipeline(runner=runner) as p:
        counts = (
            p
            | beam.io.ReadFromParquetBatched(os.path.join(path, '*.parquet'), columns=['key'])
            | beam.FlatMap(_count_table)
            | beam.CombinePerKey(sum)
        )
        assert_that(counts, equal_to(expected))


def _frame_counts(frame, expected):
    from apache_beam.dataframe.convert import to_pcollection

    sizes = to_pcollection(frame.groupby('key').size().to_frame('n'), include_indexes=True)
    assert_that(sizes | beam.Map(lambda r: (r.key, int(r.n))), equal_to(expected))


def run_spark_frame(spark, path, expected):
    from apache_beam.dataframe.convert import to_dataframe

    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.transforms import ReadFromSpark

    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        _frame_counts(
            to_dataframe(p | ReadFromSpark(dataframe=spark.read.parquet(path).select('key'))),
            expected,
        )


def run_dfio_frame(runner, path, expected):
    from apache_beam.dataframe.io import read_parquet

    with beam.Pipeline(runner=runner) as p:
        _frame_counts(p | read_parquet(os.path.join(path, '*.parquet'), columns=['key']), expected)


def run_read_from_parquet(runner, path, expected):
    with beam.Pipeline(runner=runner) as p:
        counts = _count_per_key(
            p | beam.io.ReadFromParquet(os.path.join(path, '*.parquet'), columns=['key']),
            lambda r: r['key'],
        )
        assert_that(counts, equal_to(expected))


def _sampler():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from run import Sampler  # tests/benchmarks/run.py

    return Sampler()


ENGINES = (
    'read_from_spark',
    'read_from_parquet_inproc',
    'read_from_parquet_fnapi',
    'spark_batched_inproc',
    'parquet_batched_inproc',
    'parquet_batched_fnapi',
    'spark_frame_inproc',
    'dfio_frame_inproc',
    'dfio_frame_fnapi',
    'query_rows_inproc',
    'query_batched_inproc',
    'sql_rows_inproc',
    'sql_batched_inproc',
)


def _write(spark, path: str, rows: int, keys: int, files: int) -> list:
    """Writes the input; returns Spark's own counts per key."""
    (
        spark.range(rows)
        .selectExpr(
            'id',
            f"concat('k', cast(id % {keys} as string)) AS key",
            'cast(id as double) / 7 AS value',
        )
        .repartition(files)
        .write.parquet(path)
    )
    return sorted(
        (r.key, r['count']) for r in spark.read.parquet(path).groupBy('key').count().collect()
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--rows',
        type=int,
        nargs='+',
        default=[10_000_000],
        help='one or more sizes, measured one after the other in this run',
    )
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument('--files', type=int, default=8)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument(
        '--conf',
        action='append',
        default=[],
        metavar='KEY=VALUE',
        help='Spark configuration for the session (repeatable), e.g. '
        "spark.driver.extraJavaOptions='' for the JVM's default JIT",
    )
    parser.add_argument('--engines', nargs='*', default=list(ENGINES))
    parser.add_argument(
        '--cpu',
        action='store_true',
        help='CPU seconds of the driver, the JVM and the Python '
        "processes (Spark's workers; FnApiRunner runs in the "
        "driver) per run, from /proc (run.py's sampler)",
    )
    args = parser.parse_args(argv)

    import pyspark
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.spark import session as spark_session

    conf = dict(c.split('=', 1) for c in args.conf)
    spark, _ = spark_session.get_or_create('local[2]', None, conf)
    workdir = tempfile.mkdtemp(prefix='spark_read_bench_')

    engines = {
        'read_from_spark': lambda path, exp: run_read_from_spark(spark, path, exp),
        'read_from_parquet_inproc': lambda path, exp: run_read_from_parquet(
            InProcessSparkRunner(spark=spark), path, exp
        ),
        'read_from_parquet_fnapi': lambda path, exp: run_read_from_parquet(
            FnApiRunner(), path, exp
        ),
        'spark_batched_inproc': lambda path, exp: run_spark_batched(spark, path, exp),
        'parquet_batched_inproc': lambda path, exp: run_parquet_batched(
            InProcessSparkRunner(spark=spark), path, exp
        ),
        'parquet_batched_fnapi': lambda path, exp: run_parquet_batched(FnApiRunner(), path, exp),
        'spark_frame_inproc': lambda path, exp: run_spark_frame(spark, path, exp),
        'dfio_frame_inproc': lambda path, exp: run_dfio_frame(
            InProcessSparkRunner(spark=spark), path, exp
        ),
        'dfio_frame_fnapi': lambda path, exp: run_dfio_frame(FnApiRunner(), path, exp),
        'query_rows_inproc': lambda path, exp: run_query_rows(spark, path, exp),
        'query_batched_inproc': lambda path, exp: run_query_batched(spark, path, exp),
        'sql_rows_inproc': lambda path, exp: run_sql_rows(spark, path, exp),
        'sql_batched_inproc': lambda path, exp: run_sql_batched(spark, path, exp),
    }
    assert list(engines) == list(ENGINES)
    print(
        f'# {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, '
        f'{platform.node()}, {os.cpu_count()} cores, Python '
        f'{platform.python_version()}, PySpark {pyspark.__version__}, '
        f'Beam {beam.__version__}; load average {os.getloadavg()} '
        '(a shared machine)'
    )
    print(
        f'# {args.keys} keys, {args.files} Parquet files; command: '
        f'{" ".join([os.path.basename(sys.argv[0])] + (argv or sys.argv[1:]))}'
    )
    warm = os.path.join(workdir, 'warm')
    warm_expected = _write(spark, warm, 50_000, args.keys, 1)
    for rows in args.rows:
        data = os.path.join(workdir, f'data{rows}')
        expected = _write(spark, data, rows, args.keys, args.files)
        # Warm-up (imports, JIT, Python workers) right before measuring, after
        # Spark's write: each engine once on a small input.
        for name in args.engines:
            engines[name](warm, warm_expected)
        print(
            f'## {rows:,} rows ({time.strftime("%H:%M UTC", time.gmtime())}, '
            f'load {os.getloadavg()[0]:.1f})',
            flush=True,
        )
        _measure(args, engines, data, expected)
        shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _measure(args, engines, data, expected) -> None:
    times: dict[str, list[float]] = {name: [] for name in args.engines}
    cpus: dict[str, list[float]] = {name: [] for name in args.engines}
    for repeat in range(args.repeats):
        for name in args.engines:
            sampler = _sampler() if args.cpu else contextlib.nullcontext()
            start = time.monotonic()
            with sampler:
                engines[name](data, expected)
            times[name].append(time.monotonic() - start)
            cpu = ''
            if args.cpu:
                seconds = {kind: s for kind, s in sampler.cpu_seconds().items() if kind != 'other'}
                cpus[name].append(sum(seconds.values()))
                cpu = ', CPU s ' + ' '.join(
                    f'{kind} {s:.2f}' for kind, s in sorted(seconds.items())
                )
            print(
                f'  run {repeat + 1} {name}: {times[name][-1]:.2f} s '
                f'(load {os.getloadavg()[0]:.1f}{cpu})',
                flush=True,
            )
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    cpu_medians = {name: statistics.median(cs) for name, cs in cpus.items() if cs}
    print('engine                     median s   runs')
    for name, median in medians.items():
        print(f'{name:26} {median:8.2f}   {", ".join(f"{t:.2f}" for t in times[name])}')
    print(
        'ratios (wall; with --cpu also CPU of driver + JVM + Python workers, steadier under load):'
    )

    def ratio(slower: str, faster: str, label: str = '') -> None:
        if slower in medians and faster in medians:
            cpu = ''
            if slower in cpu_medians and faster in cpu_medians:
                cpu = f', CPU {cpu_medians[slower] / cpu_medians[faster]:.2f}x'
            print(
                f'{label or f"{slower} / {faster}"}: {medians[slower] / medians[faster]:.2f}x{cpu}'
            )

    ratio(
        'read_from_parquet_inproc',
        'read_from_spark',
        'ReadFromParquet (this runner) / ReadFromSpark',
    )
    ratio(
        'read_from_parquet_fnapi',
        'read_from_spark',
        'ReadFromParquet (FnApiRunner) / ReadFromSpark',
    )
    for ours, other in (
        ('query_rows_inproc', 'read_from_spark'),
        ('query_batched_inproc', 'spark_batched_inproc'),
        ('sql_rows_inproc', 'read_from_spark'),
        ('sql_batched_inproc', 'spark_batched_inproc'),
    ):
        ratio(ours, other)
    for columnar in ('spark_batched_inproc', 'spark_frame_inproc'):
        for other in (
            'read_from_parquet_inproc',
            'read_from_parquet_fnapi',
            'parquet_batched_inproc',
            'parquet_batched_fnapi',
            'dfio_frame_inproc',
            'dfio_frame_fnapi',
        ):
            ratio(other, columnar)


if __name__ == '__main__':
    sys.exit(main())
