"""Benchmarks: InProcessSparkRunner vs Beam's FnApiRunner vs hand-written PySpark.

Run by hand, never by pytest (no ``test_`` file names here)::

    python tests/benchmarks/run.py                  # 1M and 4M (P2: 100k, 400k), 3 repeats
    python tests/benchmarks/run.py --quick          # smoke run: 100k, 1 repeat
    python tests/benchmarks/run.py --sizes 1000000 --repeats 5 --pipelines P1

One warm local SparkSession (``local[2]``, created once through
``beam_spark_inproc.spark.session.get_or_create``) serves both the runner and the
hand-written PySpark jobs. Pipelines (N elements, generated inside the pipeline:
``Create(range(chunks)) | FlatMap(range of one chunk)``, so no big list leaves the driver):

- P0  fixed cost: 10 elements -> checksum (size-independent; measured once).
- P1  N ints -> Map(x -> (x % 1000, x)) -> Map((k, v * 2)) -> CombinePerKey(sum).
- P2  N ints -> TimestampedValue((x % 1000, x), t(x)) over ten minutes -> FixedWindows(60)
      -> GroupByKey -> Map(sum of values per key and window): 10,000 groups. Default N
      is 100k and 400k: Beam's GroupByKey into non-global windows goes through
      ``GeneralTriggerDriver`` (FnApiRunner and this runner alike), tens of µs per
      element, and at 1M+ it alone would blow the ~15-minute budget (``--p2-sizes``).
- P3  N ints -> Map(dict lookup in an AsDict side input of 10k (k, v) entries).

Engines, one column each:

- ``InProcessSpark``: ``beam.Pipeline(runner=InProcessSparkRunner(spark=session))``.
- ``FnApi``: Beam's ``FnApiRunner()`` in its default in-memory mode (one process).
- ``FnApi mp2``: ``FnApiRunner`` with ``direct_num_workers=2,
  direct_running_mode='multi_processing'`` (n/a if it fails).
- ``PySpark``: the same job hand-written with DataFrames: ``spark.range(N)``, the same
  per-element Python functions in one ``mapInArrow`` step, Spark's own ``groupBy().agg``
  for the aggregation (P2: ``F.window`` + ``sum``; P3: the 10k side table collected with
  ``toArrow`` into a dict in the closure). No RDD or sparkContext (Connect-compatible APIs).

Every run ends in one small result: a checksum tuple ``(count, sum, weighted sum)`` over
the pipeline's output, computed in the pipeline (Beam: ``CombineGlobally`` then a DoFn
that writes ``repr(result)`` to a temporary file read back by the driver; Spark: a
one-row ``agg`` collected). Every run is checked against a pure-Python reference, so
all engines agree. Wall time is measured from pipeline construction to the result
being on disk/driver. Per pipeline and engine one warm-up run at N=100k (it pays Python
worker start, imports and JIT, which do not depend on N), then per size ``--repeats``
timed runs with the engines interleaved, so background load hits all alike; the median
is reported. The machine may be shared: figures are indicative.
"""
from __future__ import annotations

import argparse
import ast
import datetime
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass
from dataclasses import field
from typing import Callable
from typing import Optional

DEFAULT_SIZES = (1_000_000, 4_000_000)
QUICK_SIZES = (100_000,)
DEFAULT_P2_SIZES = (100_000, 400_000)
WARMUP_SIZE = 100_000
KEYS = 1000                 # P1, P2
WINDOW_SECONDS = 60         # P2
SPAN_SECONDS = 600          # P2: timestamps spread over ten minutes -> 10 windows
SIDE_ENTRIES = 10_000       # P3
SIDE_CHUNKS = 10


# ---------------------------------------------------------------------------
# Per-element user functions, shared by the Beam pipelines, the hand-written
# PySpark jobs and the pure-Python reference.

def to_kv(x):
    return x % KEYS, x


def double(kv):
    return kv[0], kv[1] * 2


def event_time(x):
    """Seconds since the epoch: each key's elements step 61 s through SPAN_SECONDS."""
    return (x // KEYS * 61) % SPAN_SECONDS


def side_value(k):
    return (k * 7) % 1009


def lookup(x, table):
    return x, table[x % SIDE_ENTRIES]


def chunk_range(i, chunk, n):
    return range(i * chunk, min((i + 1) * chunk, n))


# Checksums: (count, sum, weighted sum) over each pipeline's output elements.

def fp_p0(x):
    return 1, x, x * x


def fp_p1(kv):
    k, s = kv
    return 1, s, (k + 1) * s


def fp_p2(kws):
    k, window_start, s = kws
    return 1, s, (k + 1) * (window_start // WINDOW_SECONDS + 1) * s


def fp_p3(xv):
    x, v = xv
    return 1, v, x * v


def add_tuples(a, b):
    return tuple(x + y for x, y in zip(a, b))


# ---------------------------------------------------------------------------
# Pure-Python references (the expected checksums).

def reference_p0(n):
    total = (0, 0, 0)
    for x in range(10):
        total = add_tuples(total, fp_p0(x))
    return total


def reference_p1(n):
    sums = [0] * KEYS
    for x in range(n):
        k, v = double(to_kv(x))
        sums[k] += v
    total = (0, 0, 0)
    for k, s in enumerate(sums):
        if n > k:
            total = add_tuples(total, fp_p1((k, s)))
    return total


def reference_p2(n):
    sums: dict = {}
    for x in range(n):
        k, v = to_kv(x)
        w = event_time(x) // WINDOW_SECONDS * WINDOW_SECONDS
        sums[(k, w)] = sums.get((k, w), 0) + v
    total = (0, 0, 0)
    for (k, w), s in sums.items():
        total = add_tuples(total, fp_p2((k, w, s)))
    return total


def reference_p3(n):
    table = {k: side_value(k) for k in range(SIDE_ENTRIES)}
    count = total = weighted = 0
    for x in range(n):
        _, v = lookup(x, table)
        count += 1
        total += v
        weighted += x * v
    return count, total, weighted


# ---------------------------------------------------------------------------
# Beam pipelines. Each builds its graph on ``p`` and returns the PCollection of
# checksum tuples (one element after CombineGlobally).

def _beam():
    import apache_beam as beam
    return beam


def make_checksum_fn():
    beam = _beam()

    class Checksum(beam.CombineFn):
        def create_accumulator(self):
            return (0, 0, 0)

        def add_input(self, acc, value):
            return add_tuples(acc, value)

        def merge_accumulators(self, accs):
            total = (0, 0, 0)
            for acc in accs:
                total = add_tuples(total, acc)
            return total

        def extract_output(self, acc):
            return acc

    return Checksum()


def make_write_result(path: str):
    beam = _beam()

    class WriteResult(beam.DoFn):
        """Writes the one result element to ``path`` (atomically; a retry rewrites it)."""

        def __init__(self, target):
            self.target = target

        def process(self, value):
            tmp = f'{self.target}.{uuid.uuid4().hex}.tmp'
            with open(tmp, 'w') as f:
                f.write(repr(tuple(value)))
            os.replace(tmp, self.target)

    return WriteResult(path)


def generate(p, n: int, chunks: int, label: str = 'Generate'):
    beam = _beam()
    chunk = -(-n // chunks)
    return (p
            | f'{label}Seeds' >> beam.Create(range(chunks))
            | f'{label}' >> beam.FlatMap(chunk_range, chunk, n))


def beam_p0(p, n, chunks):
    beam = _beam()
    return (p
            | beam.Create(range(10))
            | beam.Map(fp_p0)
            | beam.CombineGlobally(make_checksum_fn()))


def beam_p1(p, n, chunks):
    beam = _beam()
    return (generate(p, n, chunks)
            | 'ToKV' >> beam.Map(to_kv)
            | 'Double' >> beam.Map(double)
            | beam.CombinePerKey(sum)
            | 'Fingerprint' >> beam.Map(fp_p1)
            | beam.CombineGlobally(make_checksum_fn()))


def _stamp(x):
    from apache_beam.transforms.window import TimestampedValue
    return TimestampedValue(to_kv(x), event_time(x))


def _sum_group(kv, window=None):
    k, values = kv
    return k, int(window.start), sum(values)


def beam_p2(p, n, chunks):
    beam = _beam()
    from apache_beam.transforms import window

    def sum_group(kv, w=beam.DoFn.WindowParam):
        return _sum_group(kv, w)

    return (generate(p, n, chunks)
            | 'Stamp' >> beam.Map(_stamp)
            | 'Fixed60' >> beam.WindowInto(window.FixedWindows(WINDOW_SECONDS))
            | beam.GroupByKey()
            | 'SumGroup' >> beam.Map(sum_group)
            | 'Global' >> beam.WindowInto(window.GlobalWindows())
            | 'Fingerprint' >> beam.Map(fp_p2)
            | beam.CombineGlobally(make_checksum_fn()))


def beam_p3(p, n, chunks):
    beam = _beam()
    side_chunk = SIDE_ENTRIES // SIDE_CHUNKS
    side = (p
            | 'SideSeeds' >> beam.Create(range(SIDE_CHUNKS))
            | 'SideEntries' >> beam.FlatMap(
                lambda i: ((k, side_value(k))
                           for k in range(i * side_chunk, (i + 1) * side_chunk))))
    return (generate(p, n, chunks)
            | 'Lookup' >> beam.Map(lookup, beam.pvalue.AsDict(side))
            | 'Fingerprint' >> beam.Map(fp_p3)
            | beam.CombineGlobally(make_checksum_fn()))


# ---------------------------------------------------------------------------
# Hand-written PySpark (DataFrame + mapInArrow; Connect-compatible APIs only).

def _checksum_row(df, count_expr, sum_expr, weighted_expr):
    from pyspark.sql import functions as F
    row = df.agg(F.count(count_expr), F.sum(sum_expr), F.sum(weighted_expr)).collect()[0]
    return tuple(int(v or 0) for v in row)


def pyspark_p0(spark, n):
    from pyspark.sql import functions as F
    df = spark.range(10)
    return _checksum_row(df, F.lit(1), F.col('id'), F.col('id') * F.col('id'))


def pyspark_p1(spark, n):
    import pyarrow as pa
    from pyspark.sql import functions as F

    def maps(batches):
        for batch in batches:
            ks, vs = [], []
            for x in batch.column(0).to_pylist():
                k, v = double(to_kv(x))
                ks.append(k)
                vs.append(v)
            yield pa.RecordBatch.from_arrays(
                [pa.array(ks, pa.int64()), pa.array(vs, pa.int64())], names=['k', 'v'])

    sums = (spark.range(n)
            .mapInArrow(maps, 'k long, v long')
            .groupBy('k').agg(F.sum('v').alias('s')))
    return _checksum_row(sums, F.lit(1), F.col('s'), (F.col('k') + 1) * F.col('s'))


def pyspark_p2(spark, n):
    import pyarrow as pa
    from pyspark.sql import functions as F

    def stamp(batches):
        for batch in batches:
            ks, vs, ts = [], [], []
            for x in batch.column(0).to_pylist():
                k, v = to_kv(x)
                ks.append(k)
                vs.append(v)
                ts.append(event_time(x))
            yield pa.RecordBatch.from_arrays(
                [pa.array(ks, pa.int64()), pa.array(vs, pa.int64()),
                 pa.array(ts, pa.int64())], names=['k', 'v', 't'])

    sums = (spark.range(n)
            .mapInArrow(stamp, 'k long, v long, t long')
            .groupBy('k', F.window(F.timestamp_seconds('t'), f'{WINDOW_SECONDS} seconds'))
            .agg(F.sum('v').alias('s'))
            .select('k', F.unix_timestamp(F.col('window.start')).alias('w'), 's'))
    return _checksum_row(
        sums, F.lit(1), F.col('s'),
        (F.col('k') + 1) * (F.floor(F.col('w') / WINDOW_SECONDS) + 1) * F.col('s'))


def pyspark_p3(spark, n):
    import pyarrow as pa
    from pyspark.sql import functions as F

    side = spark.range(SIDE_ENTRIES).select(
        F.col('id').alias('k'), ((F.col('id') * 7) % 1009).alias('v')).toArrow()
    table = dict(zip(side.column('k').to_pylist(), side.column('v').to_pylist()))

    def lookups(batches):
        for batch in batches:
            xs, vs = [], []
            for x in batch.column(0).to_pylist():
                x, v = lookup(x, table)
                xs.append(x)
                vs.append(v)
            yield pa.RecordBatch.from_arrays(
                [pa.array(xs, pa.int64()), pa.array(vs, pa.int64())], names=['x', 'v'])

    out = spark.range(n).mapInArrow(lookups, 'x long, v long')
    return _checksum_row(out, F.lit(1), F.col('v'), F.col('x') * F.col('v'))


# ---------------------------------------------------------------------------

@dataclass
class Benchmark:
    name: str
    title: str
    beam: Callable
    pyspark: Callable
    reference: Callable
    fixed_size: Optional[int] = None   # P0 ignores --sizes


BENCHMARKS = {
    'P0': Benchmark('P0', 'fixed cost: 10 elements -> CombineGlobally', beam_p0,
                    pyspark_p0, reference_p0, fixed_size=10),
    'P1': Benchmark('P1', 'Map -> Map -> CombinePerKey(sum), 1000 keys', beam_p1,
                    pyspark_p1, reference_p1),
    'P2': Benchmark('P2', 'FixedWindows(60) -> GroupByKey -> Map(sum), 1000 keys',
                    beam_p2, pyspark_p2, reference_p2),
    'P3': Benchmark('P3', 'Map with AsDict side input (10k entries)', beam_p3,
                    pyspark_p3, reference_p3),
}

ENGINES = ('spark_runner', 'fnapi', 'fnapi_mp', 'pyspark')
ENGINE_TITLES = {
    'spark_runner': 'InProcessSpark',
    'fnapi': 'FnApi',
    'fnapi_mp': 'FnApi mp2',
    'pyspark': 'PySpark',
}


@dataclass
class Cell:
    times: list = field(default_factory=list)
    error: Optional[str] = None

    @property
    def median(self) -> Optional[float]:
        return statistics.median(self.times) if self.times and not self.error else None


class Harness:
    def __init__(self, spark, chunks: int, workdir: str):
        self.spark = spark
        self.chunks = chunks
        self.workdir = workdir

    def run_beam(self, bench: Benchmark, n: int, engine: str) -> tuple:
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        from beam_spark_inproc import InProcessSparkRunner

        if engine == 'spark_runner':
            runner, options = InProcessSparkRunner(spark=self.spark), PipelineOptions([])
        elif engine == 'fnapi':
            runner, options = FnApiRunner(), PipelineOptions([])
        elif engine == 'fnapi_mp':
            runner = FnApiRunner()
            options = PipelineOptions(direct_num_workers=2,
                                      direct_running_mode='multi_processing')
        else:
            raise ValueError(engine)
        path = os.path.join(self.workdir, f'{bench.name}-{engine}-{uuid.uuid4().hex}.txt')
        with beam.Pipeline(runner=runner, options=options) as p:
            _ = (bench.beam(p, n, self.chunks)
                 | 'WriteResult' >> beam.ParDo(make_write_result(path)))
        try:
            with open(path) as f:
                return ast.literal_eval(f.read())
        except FileNotFoundError:
            raise AssertionError(f'{engine}: the pipeline wrote no result') from None
        finally:
            if os.path.exists(path):
                os.remove(path)

    def run(self, bench: Benchmark, n: int, engine: str) -> tuple[float, tuple]:
        start = time.perf_counter()
        if engine == 'pyspark':
            result = bench.pyspark(self.spark, n)
        else:
            result = self.run_beam(bench, n, engine)
        return time.perf_counter() - start, tuple(result)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _short_error(e: BaseException) -> str:
    text = f'{type(e).__name__}: {e}'.strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def measure(harness: Harness, bench: Benchmark, sizes, engines, repeats: int,
            warmup_size: int, expected: dict) -> list:
    """One warm-up run per engine, then per size ``repeats`` runs, engines interleaved."""
    broken: dict = {}   # engine -> error; a failing engine is reported, the others go on

    def attempt(engine: str, n: int, label: str) -> Optional[float]:
        try:
            seconds, result = harness.run(bench, n, engine)
        except Exception as e:
            broken[engine] = _short_error(e)
            _log(f'  {bench.name} n={n:,} {engine} {label}: FAILED {broken[engine]}')
            _log(''.join(traceback.format_exception(e))[-3000:])
            return None
        if result != expected[n]:
            broken[engine] = (f'wrong result at N={n:,}: {result}, '
                              f'expected {expected[n]}')
            _log(f'  {bench.name} n={n:,} {engine} {label}: WRONG RESULT '
                 f'{result} != {expected[n]}')
            return None
        _log(f'  {bench.name} n={n:,} {engine:12s} {label}: {seconds:7.2f} s  ok')
        return seconds

    for engine in engines:
        attempt(engine, warmup_size, 'warm-up')
    rows = []
    for n in sizes:
        cells = {engine: Cell() for engine in engines}
        for r in range(repeats):
            for engine in engines:   # interleaved: background load hits all alike
                if engine not in broken:
                    seconds = attempt(engine, n, f'run {r + 1}/{repeats}')
                    if seconds is not None:
                        cells[engine].times.append(seconds)
        for engine, error in broken.items():
            cells[engine].error = error
        rows.append((bench, n, cells, os.getloadavg()[0]))
    return rows


def _fmt_seconds(cell: Cell) -> str:
    if cell is None:
        return '-'
    if cell.median is None:
        return 'n/a'
    if len(cell.times) > 1:
        return f'{cell.median:.2f} ({min(cell.times):.2f}–{max(cell.times):.2f})'
    return f'{cell.median:.2f}'


def _fmt_ratio(a: Optional[Cell], b: Optional[Cell]) -> str:
    if a is None or b is None or a.median is None or b.median is None or b.median == 0:
        return 'n/a'
    return f'{a.median / b.median:.2f}×'


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:
        return '?'


def _nproc() -> str:
    try:
        return subprocess.run(['nproc'], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        return str(len(os.sched_getaffinity(0)))


def _java() -> str:
    try:
        out = subprocess.run(['java', '-version'], capture_output=True, text=True)
        return (out.stderr or out.stdout).splitlines()[0]
    except Exception:
        return '?'


def report(results: list, args, started: datetime.datetime, elapsed: float,
           load_before, load_after) -> str:
    lines = ['## beam-spark-inproc benchmarks', '']
    lines.append(
        f'- date: {started.isoformat(timespec="seconds")}; total run {elapsed / 60:.1f} min')
    lines.append(
        f'- nproc: {_nproc()}; Spark master {args.master} (one session for all runs); '
        f'1-min load average at start/end: {load_before[0]:.2f} / {load_after[0]:.2f}')
    lines.append(
        f'- python {platform.python_version()}, pyspark {_version("pyspark")}, '
        f'apache-beam {_version("apache_beam")}, pyarrow {_version("pyarrow")}, '
        f'{_java()}')
    lines.append(
        f'- wall seconds: median of {args.repeats} run(s) (min–max), after one warm-up run '
        f'per pipeline and engine at N={args.warmup_size:,}; engines interleaved per '
        f'repeat; data generated in-pipeline from {args.chunks} chunks; every run\'s '
        'checksum checked against a pure-Python reference')
    lines.append(
        '- figures are indicative only: other processes may share the CPU '
        '("load" = 1-min load average after the row\'s runs)')
    lines.append('')
    header = (['pipeline', 'N'] + [f'{ENGINE_TITLES[e]} (s)' for e in ENGINES]
              + ['InProcessSpark ÷ FnApi', 'InProcessSpark ÷ FnApi mp2',
                 'InProcessSpark ÷ PySpark', 'load'])
    lines.append('| ' + ' | '.join(header) + ' |')
    lines.append('|' + '|'.join(['---'] * 2 + ['---:'] * (len(header) - 2)) + '|')
    errors = []
    for bench, n, cells, load in results:
        row = [f'{bench.name} {bench.title}', f'{n:,}']
        row += [_fmt_seconds(cells.get(e)) for e in ENGINES]
        sr = cells.get('spark_runner')
        row += [_fmt_ratio(sr, cells.get('fnapi')), _fmt_ratio(sr, cells.get('fnapi_mp')),
                _fmt_ratio(sr, cells.get('pyspark')), f'{load:.1f}']
        lines.append('| ' + ' | '.join(row) + ' |')
        for e, cell in cells.items():
            if cell.error:
                errors.append(f'- {bench.name} N={n:,} {ENGINE_TITLES[e]}: {cell.error}')
    lines.append('')
    if errors:
        lines.append('n/a:')
        lines.extend(errors)
        lines.append('')
    lines.append(
        'Engines: InProcessSpark = `InProcessSparkRunner(spark=session)`; FnApi = Beam '
        "`FnApiRunner()` in-memory; FnApi mp2 = `FnApiRunner` with `direct_num_workers=2, "
        "direct_running_mode='multi_processing'`; PySpark = hand-written `spark.range` + "
        '`mapInArrow` (the same per-element Python functions) + `groupBy().agg`, same '
        'session. P0 is the fixed cost of a trivial pipeline. P2 runs at smaller N by '
        'default: Beam\'s windowed GroupByKey (GeneralTriggerDriver, used by FnApiRunner '
        'and this runner alike) costs tens of µs per element.')
    return '\n'.join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='InProcessSparkRunner vs FnApiRunner vs hand-written PySpark.')
    parser.add_argument(
        '--sizes', type=int, nargs='+', default=None,
        help=f'element counts for P1 and P3, and for P2 unless --p2-sizes is given '
        f'(default {" ".join(map(str, DEFAULT_SIZES))})')
    parser.add_argument(
        '--p2-sizes', type=int, nargs='+', default=None,
        help=f'element counts for P2, the windowed GroupByKey (default '
        f'{" ".join(map(str, DEFAULT_P2_SIZES))}; --sizes if only that is given)')
    parser.add_argument('--repeats', type=int, default=None,
                        help='timed runs per size and engine (default 3)')
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: 100k elements, 1 repeat')
    parser.add_argument('--warmup-size', type=int, default=None,
                        help='N of the one warm-up run per pipeline and engine '
                        '(default 100000, or the smallest size if smaller)')
    parser.add_argument('--pipelines', nargs='+', default=list(BENCHMARKS),
                        choices=list(BENCHMARKS), help='which pipelines (default all)')
    parser.add_argument('--engines', nargs='+', default=list(ENGINES), choices=ENGINES,
                        help='which engines (default all)')
    parser.add_argument('--chunks', type=int, default=32,
                        help='Create seeds the data is generated from (default 32)')
    parser.add_argument('--master', default='local[2]', help='Spark master (default local[2])')
    parser.add_argument('--output', default=None,
                        help='also write the markdown report to this file')
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = args.sizes or list(QUICK_SIZES)
        args.p2_sizes = args.p2_sizes or list(args.sizes)
        args.repeats = args.repeats or 1
    if args.p2_sizes is None:
        args.p2_sizes = list(args.sizes) if args.sizes else list(DEFAULT_P2_SIZES)
    args.sizes = args.sizes or list(DEFAULT_SIZES)
    args.repeats = args.repeats or 3
    if args.warmup_size is None:
        args.warmup_size = min([WARMUP_SIZE] + args.sizes + args.p2_sizes)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    for noisy in ('apache_beam', 'py4j', 'root'):
        logging.getLogger(noisy).setLevel(logging.ERROR)

    from beam_spark_inproc.spark import session as spark_session
    started = datetime.datetime.now()
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    spark, created = spark_session.get_or_create(args.master, None, {})
    _log(f'SparkSession ready ({"created" if created else "reused"}) in '
         f'{time.perf_counter() - t0:.1f} s')

    results = []
    with tempfile.TemporaryDirectory(prefix='beam-spark-bench-') as workdir:
        harness = Harness(spark, args.chunks, workdir)
        for name in args.pipelines:
            bench = BENCHMARKS[name]
            if bench.fixed_size:
                sizes, warmup = [bench.fixed_size], bench.fixed_size
            else:
                sizes = args.p2_sizes if name == 'P2' else args.sizes
                warmup = args.warmup_size
            expected = {}
            for n in sorted({warmup, *sizes}):
                r0 = time.perf_counter()
                expected[n] = tuple(bench.reference(n))
                _log(f'{name} n={n:,}: reference {expected[n]} '
                     f'({time.perf_counter() - r0:.1f} s)')
            results += measure(harness, bench, sizes, args.engines, args.repeats,
                               warmup, expected)
    elapsed = time.perf_counter() - t0
    text = report(results, args, started, elapsed, load_before, os.getloadavg())
    print(text, flush=True)
    if args.output:
        with open(args.output, 'w') as f:
            f.write(text + '\n')
    if created:
        spark.stop()
    wrong = any(c.error and c.error.startswith('wrong result')
                for _, _, cells, _ in results for c in cells.values())
    return 1 if wrong else 0


if __name__ == '__main__':
    sys.exit(main())
