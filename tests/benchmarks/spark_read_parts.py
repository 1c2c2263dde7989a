"""Where spark_read.py's time goes: CPU per row of each part.

Run by hand, never by pytest::

    python tests/benchmarks/spark_read_parts.py --rows 2000000

The pipeline of ``spark_read.py`` (read -> Map(row -> (key, 1)) ->
CombinePerKey(sum)) taken apart, for ReadFromSpark (its pyarrow path over
local Parquet files) and Beam's ReadFromParquet, on the same files:

- the read and the Arrow -> Beam element construction, timed directly: the
  read's own code (``files.ParquetFiles.read``; Beam's ``_ParquetSource``
  row groups) and then its element making (``convert.ArrowRows`` NamedTuples;
  Beam's ``_ArrowTableToRowDictionaries`` dicts), in this process;
- Beam's per-element work, from whole pipelines on the debug engine (the same
  plan and worker code as on Spark, in this process, so ``process CPU`` is
  all of it; Spark's JVM does nothing for these reads): variants that stop
  after the read (a batched DoFn that takes each Arrow batch and does nothing;
  for ReadFromParquet the read with its output unused), after the Map (its
  output unused) and after the lifted combine, and the columnar variants (a
  pyarrow batched DoFn counting per key; Beam's DataFrame API's
  ``groupby('key').size()``). Each variant runs at ``--rows`` and at a tenth of
  it; per-row CPU is the slope, so fixed costs (pipeline construction, Spark
  jobs, BundleProcessor set-up) drop out.

CPU is the process's user+system time (``resource.getrusage``), which the
machine's load inflates less than wall time; the load average is printed next
to every figure.
"""
# (No `from __future__ import annotations`: Beam reads the batched DoFns' types.)

import argparse
import collections
import glob
import os
import resource
import shutil
import sys
import tempfile
import time
import typing

import apache_beam as beam
import pyarrow as pa


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    return '%.1f' % os.getloadavg()[0]


class _Nothing(beam.DoFn):
    """Takes each batch, does nothing (the read alone)."""

    @beam.DoFn.yields_elements
    def process_batch(self, batch: pa.Table) -> typing.Iterator[int]:
        return iter(())


class _CountPerKey(beam.DoFn):
    """The columnar count: pyarrow's group_by per batch."""

    @beam.DoFn.yields_elements
    def process_batch(self, batch: pa.Table) -> typing.Iterator[typing.Tuple[str, int]]:
        counts = batch.group_by('key').aggregate([('key', 'count')])
        yield from zip(counts['key'].to_pylist(), counts['key_count'].to_pylist())


def pipelines(spark, path: str) -> dict:
    from apache_beam.dataframe.convert import to_dataframe
    from apache_beam.dataframe.convert import to_pcollection

    from beam_spark_inproc.transforms import ReadFromSpark

    def spark_read(p):
        return p | ReadFromSpark(dataframe=spark.read.parquet(path).select('key'))

    def parquet_read(p):
        return p | beam.io.ReadFromParquet(os.path.join(path, '*.parquet'), columns=['key'])

    def key_of_row(r):
        return r.key

    def key_of_dict(r):
        return r['key']

    def variant(read, key_of, upto):
        def build(p):
            rows = read(p)
            if upto == 'read':
                if read is spark_read:
                    rows | beam.ParDo(_Nothing())
                return
            pairs = rows | 'Key' >> beam.Map(lambda r: (key_of(r), 1))
            if upto == 'combine':
                pairs | 'Count' >> beam.CombinePerKey(sum)

        return build

    def arrow_count(p):
        spark_read(p) | beam.ParDo(_CountPerKey()) | beam.CombinePerKey(sum)

    def frame_size(p):
        to_pcollection(to_dataframe(spark_read(p)).groupby('key').size(), include_indexes=True)

    return {
        'spark: read (batched no-op)': variant(spark_read, key_of_row, 'read'),
        'spark: read + Map': variant(spark_read, key_of_row, 'map'),
        'spark: read + Map + combine': variant(spark_read, key_of_row, 'combine'),
        'spark: batched DoFn count': arrow_count,
        'spark: to_dataframe groupby size': frame_size,
        'parquet: read': variant(parquet_read, key_of_dict, 'read'),
        'parquet: read + Map': variant(parquet_read, key_of_dict, 'map'),
        'parquet: read + Map + combine': variant(parquet_read, key_of_dict, 'combine'),
    }


def run_pipeline(spark, build) -> tuple[float, float]:
    from beam_spark_inproc import InProcessSparkRunner

    began, wall = cpu(), time.monotonic()
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark, debug=True)) as p:
        build(p)
    return cpu() - began, time.monotonic() - wall


def direct_parts(spark, path: str) -> dict:
    """CPU seconds of the read and of the element making, done directly."""
    from apache_beam.io.parquetio import _ArrowTableToRowDictionaries
    from apache_beam.io.parquetio import _ParquetSource

    from beam_spark_inproc.transforms import files
    from beam_spark_inproc.transforms import types
    from beam_spark_inproc.transforms.convert import ArrowRows

    dataframe = spark.read.parquet(path).select('key')
    schema = types.spark_to_arrow(dataframe.schema)
    units = files.file_units(dataframe, schema, 2)
    tasks = pa.record_batch([pa.array(range(len(units.units)))], names=['task'])
    rows = ArrowRows(types.row_type(schema), tuple(schema.names), units)
    sink = collections.deque(maxlen=0)
    out = {}
    began = cpu()
    batches = list(units.read(tasks))
    out['spark: pyarrow read'] = cpu() - began
    began = cpu()
    for batch in batches:
        sink.extend(rows.data_rows(batch))
    out['spark: Arrow -> NamedTuple rows'] = cpu() - began
    source = _ParquetSource(os.path.join(path, '*.parquet'), columns=['key'])
    began = cpu()
    tables = [
        t
        for f in sorted(glob.glob(os.path.join(path, '*.parquet')))
        for t in source.read_records(f, _tracker(f))
    ]
    out['parquet: row-group read'] = cpu() - began
    to_dicts = _ArrowTableToRowDictionaries()
    began = cpu()
    for table in tables:
        sink.extend(to_dicts.process(table))
    out['parquet: Arrow -> dicts'] = cpu() - began
    return out


def _tracker(path: str):
    from apache_beam.io.range_trackers import OffsetRangeTracker

    return OffsetRangeTracker(0, os.path.getsize(path))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rows', type=int, default=2_000_000)
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument('--files', type=int, default=8)
    parser.add_argument('--only', nargs='*', default=None, help='variant names (default: all)')
    args = parser.parse_args(argv)
    from beam_spark_inproc.spark import session as spark_session

    spark, _ = spark_session.get_or_create('local[2]', None, {})
    workdir = tempfile.mkdtemp(prefix='spark_read_parts_')
    paths = {}
    for n in (args.rows, args.rows // 10):
        paths[n] = os.path.join(workdir, str(n))
        (
            spark.range(n)
            .selectExpr(
                'id',
                f"concat('k', cast(id % {args.keys} as string)) AS key",
                'cast(id as double) / 7 AS value',
            )
            .repartition(args.files)
            .write.parquet(paths[n])
        )
    print(
        f'# {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}; load {load()}; '
        f'{args.rows:,} rows, {args.keys} keys, {args.files} files; command: '
        f'{" ".join([os.path.basename(sys.argv[0])] + (argv or sys.argv[1:]))}'
    )
    big, small = args.rows, args.rows // 10
    direct = {n: direct_parts(spark, paths[n]) for n in (small, big)}
    print('part (direct)                      us/row   (load)')
    for name in direct[big]:
        per_row = (direct[big][name] - direct[small][name]) / (big - small) * 1e6
        print(f'{name:34} {per_row:7.3f}   ({load()})')
    variants = pipelines(spark, paths[big])
    small_variants = pipelines(spark, paths[small])
    names = [n for n in variants if args.only is None or n in args.only]
    for name in names:  # warm-up: imports, JIT, worker caches
        run_pipeline(spark, small_variants[name])
    print('pipeline on the debug engine        us/row   cpu s (big/small)  wall s   (load)')
    for name in names:
        cpu_small, _ = run_pipeline(spark, small_variants[name])
        cpu_big, wall = run_pipeline(spark, variants[name])
        per_row = (cpu_big - cpu_small) / (big - small) * 1e6
        print(
            f'{name:35} {per_row:7.3f}   {cpu_big:6.2f} / {cpu_small:5.2f}     '
            f'{wall:6.2f}   ({load()})',
            flush=True,
        )
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
