"""Benchmarks: InProcessSparkRunner against Beam's DirectRunner (FnApiRunner),
Beam's DaskRunner and the same jobs hand-written in PySpark.

Run by hand, never by pytest (no ``test_`` file names here)::

    python tests/benchmarks/run.py                      # 1M, 4M, 16M; 3 repeats
    python tests/benchmarks/run.py --quick              # smoke run: 100k, 1 repeat
    python tests/benchmarks/run.py --pipelines P1 P6 --sizes 1000000 --repeats 5
    python tests/benchmarks/run.py --profile-only --profile P1 --profile-size 4000000
    python tests/benchmarks/run.py --pipelines P1 --engines inproc direct rdd --load-burner

One warm local SparkSession (``local[2]``) serves this runner and the
hand-written PySpark jobs. Pipelines over N elements (generated inside the
pipeline from ``--chunks`` seeds, so no big list leaves the driver; P2 reads a
generated text file of N words):

- P1  Map(x -> (x % 1000, x)) -> Map((k, 2v)) -> CombinePerKey(sum).
- P2  wordcount: ReadFromText (10 words a line, 10k distinct words) -> split ->
      count per word.
- P3g GroupByKey of (x % 10000, x) in the global window -> sum per key.
- P3w the same with event times over ten minutes in FixedWindows(60): 100k groups.
- P4  Map with a dict lookup in an AsDict side input of 100k entries.
- P5  stateful running count per key (1000 keys): ValueState, and a watermark timer
      per key emitting the final count.
- P6  10 elements -> CombineGlobally: the fixed cost of a pipeline.

Every run ends in one small result, a checksum ``(count, sum, weighted sum)`` over
the pipeline's output computed in the pipeline, checked against a pure-Python
reference: all engines do the same work. Engines (one column each):

- ``inproc``: ``InProcessSparkRunner(spark=session)``.
- ``direct``: Beam's DirectRunner engine, ``FnApiRunner()``, in-memory (one process).
- ``direct_mp``: ``FnApiRunner`` with ``direct_num_workers=2`` multi-processing.
- ``dask``: Beam's ``DaskRunner`` on a ``dask.distributed.LocalCluster`` of 2 worker
  processes with 1 thread each (n/a where it does not support the pipeline).
- ``rdd``: hand-written PySpark on RDDs (``parallelize``/``textFile``, ``reduceByKey``,
  ``groupByKey``, a broadcast dict), the same per-element Python functions.
- ``arrow``: hand-written PySpark DataFrames: ``spark.range``/``spark.read.text``, the
  same per-element functions in one ``mapInArrow``, Spark's own ``groupBy().agg`` and
  window functions.

``--load-burner`` runs every engine also with one CPU-bound process beside it
(``load.py``), interleaved with its quiet runs, and adds the quiet and loaded
ratios; ``--user-session`` runs on a session made as a user would.

Per pipeline and engine one warm-up run at the smallest size, then per size
``--repeats`` runs with the engines interleaved; the median is reported. An engine
whose run takes longer than ``--budget`` seconds runs that size once and skips the
larger sizes of that pipeline (reported as such). While each run goes, a thread
samples ``/proc`` for this process tree: the largest resident set of a Python
worker (for ``direct``, this process) is reported as peak memory.

``--profile`` (default P1, P3w, P4) then measures where this runner's time goes:
the CPU seconds of the driver, the JVM and the Python workers from ``/proc`` in an
unprofiled run, the Python workers' bundle CPU split by category from a run with
``--spark_profile_dir`` (``beam_spark_inproc.worker.profiling``), and the CPU
seconds the FnApiRunner spends on the same pipeline (Beam's own bundle work with
its in-process runner around it).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import logging
import operator
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from dataclasses import field
from typing import Callable
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.benchmarks import load as cpu_load  # noqa: E402

DEFAULT_SIZES = (1_000_000, 4_000_000, 16_000_000)
QUICK_SIZES = (100_000,)
KEYS = 1000  # P1, P5
GBK_KEYS = 10_000  # P3g, P3w
WINDOW_SECONDS = 60  # P3w
SPAN_SECONDS = 600  # P3w: timestamps spread over ten minutes -> 10 windows
VOCABULARY = 10_000  # P2
WORDS_PER_LINE = 10  # P2
SIDE_ENTRIES = 100_000  # P4
SIDE_CHUNKS = 10


# ---------------------------------------------------------------------------
# Per-element user functions, shared by the Beam pipelines, the hand-written
# PySpark jobs and the pure-Python references.


def to_kv(x):
    return x % KEYS, x


def double(kv):
    return kv[0], kv[1] * 2


def to_gbk_kv(x):
    return x % GBK_KEYS, x


def event_time(x):
    """Seconds since the epoch: each key's elements step 61 s through SPAN_SECONDS."""
    return (x // GBK_KEYS * 61) % SPAN_SECONDS


def word_index(i):
    return i * 7919 % VOCABULARY


def split_words(line):
    return line.split()


def side_value(k):
    return (k * 7) % 1009


def lookup(x, table):
    return x, table[x % SIDE_ENTRIES]


def chunk_range(i, chunk, n):
    return range(i * chunk, min((i + 1) * chunk, n))


# Checksums: (count, sum, weighted sum) over each pipeline's output elements.


def fp_p6(x):
    return 1, x, x * x


def fp_kv(kv):
    """P1, P3g, P5: (key, value) -> weights by key."""
    k, s = kv
    return 1, s, (k + 1) * s


def fp_word(wc):
    w, c = wc
    return 1, c, (int(w[1:]) + 1) * c


def fp_window(kws):
    k, window_start, s = kws
    return 1, s, (k + 1) * (window_start // WINDOW_SECONDS + 1) * s


def fp_lookup(xv):
    x, v = xv
    return 1, v, x * v


def add_tuples(a, b):
    return tuple(x + y for x, y in zip(a, b))


# ---------------------------------------------------------------------------
# Pure-Python references (the expected checksums).


def _total(fps) -> tuple:
    total = (0, 0, 0)
    for t in fps:
        total = add_tuples(total, t)
    return total


def _key_sums(n, keys, factor):
    """{k: sum of factor * x for x < n with x % keys == k} in closed form."""
    sums = {}
    for k in range(min(n, keys)):
        m = (n - k + keys - 1) // keys
        sums[k] = factor * (k * m + keys * m * (m - 1) // 2)
    return sums


def reference_p1(n):
    return _total(fp_kv(kv) for kv in _key_sums(n, KEYS, 2).items())


def reference_p2(n):
    counts = [n // VOCABULARY] * VOCABULARY
    for i in range(n % VOCABULARY):  # word_index has period VOCABULARY
        counts[word_index(i)] += 1
    return _total(fp_word((f'w{w}', c)) for w, c in enumerate(counts) if c)


def reference_p3g(n):
    return _total(fp_kv(kv) for kv in _key_sums(n, GBK_KEYS, 1).items())


def reference_p3w(n):
    sums: dict = {}
    for x in range(n):
        k = x % GBK_KEYS
        w = event_time(x) // WINDOW_SECONDS * WINDOW_SECONDS
        sums[(k, w)] = sums.get((k, w), 0) + x
    return _total(fp_window((k, w, s)) for (k, w), s in sums.items())


def reference_p4(n):
    table = [side_value(k) for k in range(SIDE_ENTRIES)]
    count = total = weighted = 0
    for x in range(n):
        v = table[x % SIDE_ENTRIES]
        count += 1
        total += v
        weighted += x * v
    return count, total, weighted


def reference_p5(n):
    total = (0, 0, 0)
    for k in range(min(n, KEYS)):
        m = (n - k + KEYS - 1) // KEYS
        running = m * (m + 1) // 2  # counts 1..m, one per element
        total = add_tuples(total, (m, running, (k + 1) * running))
        total = add_tuples(total, fp_kv((k + KEYS, m)))  # the timer's final count
    return total


def reference_p6(n):
    return _total(fp_p6(x) for x in range(10))


# ---------------------------------------------------------------------------
# Input files (P2), one per N, written once per benchmark run.


def text_file(workdir: str, n: int) -> str:
    path = os.path.join(workdir, f'words-{n}.txt')
    if not os.path.exists(path):
        tmp = path + '.tmp'
        with open(tmp, 'w') as f:
            for start in range(0, n, WORDS_PER_LINE):
                f.write(
                    ' '.join(
                        f'w{word_index(i)}' for i in range(start, min(start + WORDS_PER_LINE, n))
                    )
                )
                f.write('\n')
        os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------
# Beam pipelines. Each builds its graph on ``p`` and returns the PCollection of
# checksum tuples (one element after CombineGlobally).


def make_checksum_fn():
    import apache_beam as beam

    class Checksum(beam.CombineFn):
        def create_accumulator(self):
            return (0, 0, 0)

        def add_input(self, acc, value):
            return add_tuples(acc, value)

        def merge_accumulators(self, accs):
            return _total(accs)

        def extract_output(self, acc):
            return acc

    return Checksum()


def make_write_result(path: str):
    import apache_beam as beam

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
    import apache_beam as beam

    chunk = -(-n // chunks)
    return (
        p
        | f'{label}Seeds' >> beam.Create(range(chunks))
        | f'{label}' >> beam.FlatMap(chunk_range, chunk, n)
    )


def checksum(pcoll, fp):
    import apache_beam as beam

    return (
        pcoll
        | 'Fingerprint' >> beam.Map(fp)
        | 'Checksum' >> beam.CombineGlobally(make_checksum_fn())
    )


def beam_p1(p, n, ctx):
    import apache_beam as beam

    return checksum(
        generate(p, n, ctx.chunks)
        | 'ToKV' >> beam.Map(to_kv)
        | 'Double' >> beam.Map(double)
        | beam.CombinePerKey(sum),
        fp_kv,
    )


def beam_p2(p, n, ctx):
    import apache_beam as beam
    from apache_beam.io import ReadFromText

    return checksum(
        p
        | ReadFromText(text_file(ctx.workdir, n))
        | 'Split' >> beam.FlatMap(split_words)
        | 'Pair' >> beam.Map(lambda w: (w, 1))
        | beam.CombinePerKey(sum),
        fp_word,
    )


def _sum_values(kv):
    k, values = kv
    return k, sum(values)


def beam_p3g(p, n, ctx):
    import apache_beam as beam

    return checksum(
        generate(p, n, ctx.chunks)
        | 'ToKV' >> beam.Map(to_gbk_kv)
        | beam.GroupByKey()
        | 'Sum' >> beam.Map(_sum_values),
        fp_kv,
    )


def _stamp(x):
    from apache_beam.transforms.window import TimestampedValue

    return TimestampedValue(to_gbk_kv(x), event_time(x))


def beam_p3w(p, n, ctx):
    import apache_beam as beam
    from apache_beam.transforms import window

    def sum_group(kv, w=beam.DoFn.WindowParam):
        k, values = kv
        return k, int(w.start), sum(values)

    return checksum(
        generate(p, n, ctx.chunks)
        | 'Stamp' >> beam.Map(_stamp)
        | 'Fixed60' >> beam.WindowInto(window.FixedWindows(WINDOW_SECONDS))
        | beam.GroupByKey()
        | 'SumGroup' >> beam.Map(sum_group)
        | 'Global' >> beam.WindowInto(window.GlobalWindows()),
        fp_window,
    )


def beam_p4(p, n, ctx):
    import apache_beam as beam

    side_chunk = SIDE_ENTRIES // SIDE_CHUNKS
    side = (
        p
        | 'SideSeeds' >> beam.Create(range(SIDE_CHUNKS))
        | 'SideEntries'
        >> beam.FlatMap(
            lambda i: ((k, side_value(k)) for k in range(i * side_chunk, (i + 1) * side_chunk))
        )
    )
    return checksum(
        generate(p, n, ctx.chunks) | 'Lookup' >> beam.Map(lookup, beam.pvalue.AsDict(side)),
        fp_lookup,
    )


def make_running_count():
    import apache_beam as beam
    from apache_beam.coders import VarIntCoder
    from apache_beam.transforms.timeutil import TimeDomain
    from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
    from apache_beam.transforms.userstate import TimerSpec
    from apache_beam.transforms.userstate import on_timer
    from apache_beam.transforms.window import GlobalWindow

    class RunningCount(beam.DoFn):
        COUNT = ReadModifyWriteStateSpec('count', VarIntCoder())
        FINAL = TimerSpec('final', TimeDomain.WATERMARK)

        def process(self, kv, count=beam.DoFn.StateParam(COUNT), final=beam.DoFn.TimerParam(FINAL)):
            k, _ = kv
            c = (count.read() or 0) + 1
            count.write(c)
            if c == 1:
                final.set(GlobalWindow().max_timestamp())
            yield k, c

        @on_timer(FINAL)
        def emit_final(self, key=beam.DoFn.KeyParam, count=beam.DoFn.StateParam(COUNT)):
            yield key + KEYS, count.read()

    return RunningCount()


def beam_p5(p, n, ctx):
    import apache_beam as beam

    return checksum(
        generate(p, n, ctx.chunks)
        | 'ToKV' >> beam.Map(to_kv)
        | 'RunningCount' >> beam.ParDo(make_running_count()),
        fp_kv,
    )


def beam_p6(p, n, ctx):
    import apache_beam as beam

    return checksum(p | beam.Create(range(10)), fp_p6)


# ---------------------------------------------------------------------------
# Hand-written PySpark on RDDs.


def _rdd_range(sc, n, chunks):
    chunk = -(-n // chunks)
    return sc.parallelize(range(chunks), chunks).flatMap(lambda i: chunk_range(i, chunk, n))


def _rdd_checksum(rdd, fp):
    return tuple(rdd.map(fp).fold((0, 0, 0), add_tuples))


def rdd_p1(spark, n, ctx):
    rdd = _rdd_range(spark.sparkContext, n, ctx.chunks).map(to_kv).map(double)
    return _rdd_checksum(rdd.reduceByKey(operator.add, ctx.parallelism), fp_kv)


def rdd_p2(spark, n, ctx):
    lines = spark.sparkContext.textFile(text_file(ctx.workdir, n), ctx.parallelism)
    counts = (
        lines.flatMap(split_words).map(lambda w: (w, 1)).reduceByKey(operator.add, ctx.parallelism)
    )
    return _rdd_checksum(counts, fp_word)


def rdd_p3g(spark, n, ctx):
    rdd = _rdd_range(spark.sparkContext, n, ctx.chunks).map(to_gbk_kv)
    return _rdd_checksum(rdd.groupByKey(ctx.parallelism).map(_sum_values), fp_kv)


def rdd_p3w(spark, n, ctx):
    def keyed(x):
        t = event_time(x)
        return (x % GBK_KEYS, t // WINDOW_SECONDS * WINDOW_SECONDS), x

    rdd = _rdd_range(spark.sparkContext, n, ctx.chunks).map(keyed)
    sums = rdd.groupByKey(ctx.parallelism).map(lambda kv: (kv[0][0], kv[0][1], sum(kv[1])))
    return _rdd_checksum(sums, fp_window)


def rdd_p4(spark, n, ctx):
    sc = spark.sparkContext
    # The side table is built by a Spark job, as in the Beam pipeline.
    side_chunk = SIDE_ENTRIES // SIDE_CHUNKS
    table = dict(
        sc.parallelize(range(SIDE_CHUNKS), SIDE_CHUNKS)
        .flatMap(
            lambda i: ((k, side_value(k)) for k in range(i * side_chunk, (i + 1) * side_chunk))
        )
        .collect()
    )
    shared = sc.broadcast(table)
    try:
        rdd = _rdd_range(sc, n, ctx.chunks).map(lambda x: lookup(x, shared.value))
        return _rdd_checksum(rdd, fp_lookup)
    finally:
        shared.unpersist()


def rdd_p5(spark, n, ctx):
    def running(kv):
        k, values = kv
        m = 0
        for _ in values:
            m += 1
            yield k, m
        yield k + KEYS, m

    rdd = _rdd_range(spark.sparkContext, n, ctx.chunks).map(to_kv)
    return _rdd_checksum(rdd.groupByKey(ctx.parallelism).flatMap(running), fp_kv)


def rdd_p6(spark, n, ctx):
    return _rdd_checksum(spark.sparkContext.parallelize(range(10), 1), fp_p6)


# ---------------------------------------------------------------------------
# Hand-written PySpark on DataFrames with mapInArrow (Connect-compatible APIs).


def _checksum_row(df, count_expr, sum_expr, weighted_expr):
    from pyspark.sql import functions as F

    row = df.agg(F.count(count_expr), F.sum(sum_expr), F.sum(weighted_expr)).collect()[0]
    return tuple(int(v or 0) for v in row)


def _arrow_map(fn, names):
    """mapInArrow function applying ``fn`` (x -> tuple) to the first column."""
    import pyarrow as pa

    def run(batches):
        for batch in batches:
            columns = [[] for _ in names]
            for x in batch.column(0).to_pylist():
                for column, value in zip(columns, fn(x)):
                    column.append(value)
            yield pa.RecordBatch.from_arrays([pa.array(c) for c in columns], names=list(names))

    return run


def arrow_p1(spark, n, ctx):
    from pyspark.sql import functions as F

    sums = (
        spark.range(n)
        .mapInArrow(_arrow_map(lambda x: double(to_kv(x)), ('k', 'v')), 'k long, v long')
        .groupBy('k')
        .agg(F.sum('v').alias('s'))
    )
    return _checksum_row(sums, F.lit(1), F.col('s'), (F.col('k') + 1) * F.col('s'))


def arrow_p2(spark, n, ctx):
    import pyarrow as pa
    from pyspark.sql import functions as F

    def words(batches):
        for batch in batches:
            out = [w for line in batch.column(0).to_pylist() for w in split_words(line)]
            yield pa.RecordBatch.from_arrays([pa.array(out, pa.string())], names=['w'])

    counts = (
        spark.read.text(text_file(ctx.workdir, n))
        .mapInArrow(words, 'w string')
        .groupBy('w')
        .count()
    )
    return _checksum_row(
        counts,
        F.lit(1),
        F.col('count'),
        (F.substring('w', 2, 10).cast('long') + 1) * F.col('count'),
    )


def arrow_p3g(spark, n, ctx):
    from pyspark.sql import functions as F

    sums = (
        spark.range(n)
        .mapInArrow(_arrow_map(to_gbk_kv, ('k', 'v')), 'k long, v long')
        .groupBy('k')
        .agg(F.sum('v').alias('s'))
    )
    return _checksum_row(sums, F.lit(1), F.col('s'), (F.col('k') + 1) * F.col('s'))


def arrow_p3w(spark, n, ctx):
    from pyspark.sql import functions as F

    sums = (
        spark.range(n)
        .mapInArrow(
            _arrow_map(lambda x: (*to_gbk_kv(x), event_time(x)), ('k', 'v', 't')),
            'k long, v long, t long',
        )
        .groupBy('k', F.window(F.timestamp_seconds('t'), f'{WINDOW_SECONDS} seconds'))
        .agg(F.sum('v').alias('s'))
        .select('k', F.unix_timestamp(F.col('window.start')).alias('w'), 's')
    )
    return _checksum_row(
        sums,
        F.lit(1),
        F.col('s'),
        (F.col('k') + 1) * (F.floor(F.col('w') / WINDOW_SECONDS) + 1) * F.col('s'),
    )


def arrow_p4(spark, n, ctx):
    from pyspark.sql import functions as F

    side = (
        spark.range(SIDE_ENTRIES)
        .select(F.col('id').alias('k'), ((F.col('id') * 7) % 1009).alias('v'))
        .toArrow()
    )
    table = dict(zip(side.column('k').to_pylist(), side.column('v').to_pylist()))
    out = spark.range(n).mapInArrow(
        _arrow_map(lambda x: lookup(x, table), ('x', 'v')), 'x long, v long'
    )
    return _checksum_row(out, F.lit(1), F.col('v'), F.col('x') * F.col('v'))


def arrow_p5(spark, n, ctx):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    kv = spark.range(n).mapInArrow(_arrow_map(to_kv, ('k', 'x')), 'k long, x long')
    running = kv.select('k', F.row_number().over(Window.partitionBy('k').orderBy('x')).alias('c'))
    final = (
        kv.groupBy('k').count().select((F.col('k') + KEYS).alias('k'), F.col('count').alias('c'))
    )
    out = running.unionByName(final)
    return _checksum_row(out, F.lit(1), F.col('c'), (F.col('k') + 1) * F.col('c'))


def arrow_p6(spark, n, ctx):
    from pyspark.sql import functions as F

    return _checksum_row(spark.range(10), F.lit(1), F.col('id'), F.col('id') * F.col('id'))


# ---------------------------------------------------------------------------


@dataclass
class Benchmark:
    name: str
    title: str
    reference: Callable
    fixed_size: Optional[int] = None  # P6 ignores --sizes
    dask: bool = True  # False: DaskRunner lacks what it needs

    def beam(self, p, n, ctx):
        return globals()['beam_' + self.name.lower()](p, n, ctx)

    def rdd(self, spark, n, ctx):
        return globals()['rdd_' + self.name.lower()](spark, n, ctx)

    def arrow(self, spark, n, ctx):
        return globals()['arrow_' + self.name.lower()](spark, n, ctx)


BENCHMARKS = {
    b.name: b
    for b in (
        Benchmark('P1', 'Map, Map, CombinePerKey(sum), 1000 keys', reference_p1),
        Benchmark('P2', 'wordcount, ReadFromText, 10k words', reference_p2),
        Benchmark('P3g', 'GroupByKey, 10k keys, global window', reference_p3g),
        Benchmark('P3w', 'GroupByKey, 10k keys, FixedWindows(60)', reference_p3w),
        Benchmark('P4', 'Map with AsDict side input of 100k', reference_p4),
        Benchmark('P5', 'stateful running count + timer, 1000 keys', reference_p5, dask=False),
        Benchmark('P6', '10 elements, CombineGlobally (fixed cost)', reference_p6, fixed_size=10),
    )
}

ENGINES = (
    'inproc',
    'inproc_small',
    'inproc_nosmall',
    'inproc_timeonly',
    'inproc_handover1',
    'inproc_split1',
    'inproc_sidespark',
    'inproc_split5',
    'direct',
    'direct_mp',
    'dask',
    'rdd',
    'arrow',
)
DEFAULT_ENGINES = ('inproc', 'direct', 'direct_mp', 'dask', 'rdd', 'arrow')
# This runner with small data in the driver on/off (A/B of its default).
SMALL_DATA_ARGS = {
    'inproc_small': ['--spark_small_data_kb=64'],
    'inproc_nosmall': ['--spark_small_data_kb=0'],
    # A/B of runner-initiated splitting's first split (a read
    # of one restriction runs alone on one core until then).
    'inproc_split1': ['--spark_split_after_seconds=1'],
    'inproc_split5': ['--spark_split_after_seconds=5'],
}
ENGINE_TITLES = {
    'inproc': 'this runner',
    'inproc_small': 'this runner, small data on',
    'inproc_nosmall': 'this runner, small data off',
    'inproc_timeonly': 'this runner, small data handed over on time only',
    'inproc_handover1': 'this runner, all Spark after the first hand-over',
    'inproc_split1': 'this runner, runner splitting after 1 s',
    'inproc_split5': 'this runner, runner splitting after 5 s',
    'inproc_sidespark': 'this runner, side-input stages with the usual limits',
    'direct': 'DirectRunner (FnApiRunner)',
    'direct_mp': 'FnApiRunner, 2 processes',
    'dask': 'DaskRunner, 2 workers',
    'rdd': 'PySpark RDD',
    'arrow': 'PySpark mapInArrow',
}
ENGINE_TITLES.update(
    {cpu_load.loaded(e): f'{title} + load' for e, title in list(ENGINE_TITLES.items())}
)


# ---------------------------------------------------------------------------
# /proc sampling: peak Python worker memory and CPU seconds per process kind.


def _proc_table() -> dict:
    """pid -> (ppid, comm, utime+stime seconds, rss bytes) for every process."""
    tick = os.sysconf('SC_CLK_TCK')
    page = os.sysconf('SC_PAGE_SIZE')
    table = {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open(f'/proc/{name}/stat') as f:
                raw = f.read()
        except OSError:
            continue
        comm = raw[raw.index('(') + 1 : raw.rindex(')')]
        fields = raw[raw.rindex(')') + 2 :].split()
        # fields[0] is state (stat field 3): ppid is 4, utime 14, stime 15, rss 24.
        table[int(name)] = (
            int(fields[1]),
            comm,
            (int(fields[11]) + int(fields[12])) / tick,
            int(fields[21]) * page,
        )
    return table


def _descendants(table: dict, root: int) -> set:
    children: dict = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class Sampler:
    """Samples this process tree every ``interval`` seconds while running."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.me = os.getpid()
        self.peak_spark_worker_rss = 0  # Python processes below the JVM
        self.peak_other_worker_rss = 0  # other Python children (Dask, FnApiRunner)
        self.peak_self_rss = 0
        self._first_cpu: dict = {}
        self._last_cpu: dict = {}
        self._kind: dict = {}
        # Python processes below the JVM that started during the run: fresh
        # Spark Python workers (and daemons), each paying Beam's imports.
        self.fresh_spark_workers: set = set()
        self._initial_pids: set = set()
        self._own_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self):
        start = time.thread_time()
        while not self._stop.wait(self.interval):
            self._sample()
        # Reading /proc for every process of a shared machine costs ~4 ms of
        # CPU a sample: the sampler's own, not the driver's (it had doubled the
        # driver's CPU of P1 at 4M on a loaded machine).
        self._own_cpu = time.thread_time() - start

    def _sample(self):
        table = _proc_table()
        self._initial = not self._last_cpu
        mine = _descendants(table, self.me)
        below_jvm = set()
        for pid in mine:
            if table[pid][1] == 'java':
                below_jvm |= _descendants(table, pid)
        for pid in mine | {self.me}:
            if pid not in table or pid in cpu_load.CpuBurner.pids:
                continue
            _, comm, cpu, rss = table[pid]
            kind = (
                'driver'
                if pid == self.me
                else 'jvm'
                if comm == 'java'
                else 'python'
                if comm.startswith('python')
                else 'other'
            )
            self._kind[pid] = kind
            # A process first seen during the run started during it (cpu from 0)
            # unless it was there at the first sample.
            self._first_cpu.setdefault(pid, cpu if self._initial else 0.0)
            self._last_cpu[pid] = cpu
            if self._initial:
                self._initial_pids.add(pid)
            elif kind == 'python' and pid in below_jvm and pid not in self._initial_pids:
                self.fresh_spark_workers.add(pid)
            if kind == 'python' and pid in below_jvm:
                self.peak_spark_worker_rss = max(self.peak_spark_worker_rss, rss)
            elif kind == 'python':
                self.peak_other_worker_rss = max(self.peak_other_worker_rss, rss)
            elif kind == 'driver':
                self.peak_self_rss = max(self.peak_self_rss, rss)

    def cpu_seconds(self) -> dict:
        """CPU seconds used during the run per process kind."""
        totals: dict = {}
        for pid, last in self._last_cpu.items():
            kind = self._kind[pid]
            totals[kind] = totals.get(kind, 0.0) + last - self._first_cpu[pid]
        if 'driver' in totals:
            totals['driver'] = max(0.0, totals['driver'] - self._own_cpu)
        return totals


# ---------------------------------------------------------------------------


@dataclass
class Cell:
    times: list = field(default_factory=list)
    cpu: list = field(default_factory=list)  # per run: {process kind: CPU s}
    fresh: list = field(default_factory=list)  # per run: Python workers started
    peak_rss: int = 0
    error: Optional[str] = None
    skipped: Optional[str] = None

    @property
    def median(self) -> Optional[float]:
        return statistics.median(self.times) if self.times and not self.error else None


class Harness:
    def __init__(self, spark, chunks: int, workdir: str, parallelism: int):
        self.spark = spark
        self.chunks = chunks
        self.workdir = workdir
        self.parallelism = parallelism
        self._dask_cluster = None
        self.burner = cpu_load.CpuBurner()

    def dask_address(self) -> str:
        if self._dask_cluster is None:
            from dask.distributed import LocalCluster

            self._dask_cluster = LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
        return self._dask_cluster.scheduler_address

    def close(self):
        self.burner.close()
        if self._dask_cluster is not None:
            self._dask_cluster.close()

    def beam_runner(self, engine: str, extra_args=()):
        from apache_beam.options.pipeline_options import PipelineOptions
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        from beam_spark_inproc import InProcessSparkRunner

        if (
            engine in ('inproc', 'inproc_timeonly', 'inproc_handover1', 'inproc_sidespark')
            or engine in SMALL_DATA_ARGS
        ):
            return InProcessSparkRunner(spark=self.spark), PipelineOptions(
                SMALL_DATA_ARGS.get(engine, []) + list(extra_args)
            )
        if engine == 'direct':
            return FnApiRunner(), PipelineOptions([])
        if engine == 'direct_mp':
            return FnApiRunner(), PipelineOptions(
                direct_num_workers=2, direct_running_mode='multi_processing'
            )
        if engine == 'dask':
            from apache_beam.runners.dask.dask_runner import DaskRunner

            return DaskRunner(), PipelineOptions([f'--dask_client_address={self.dask_address()}'])
        raise ValueError(engine)

    def run_beam(self, bench: Benchmark, n: int, engine: str, extra_args=()) -> tuple:
        import apache_beam as beam

        from beam_spark_inproc.execution import small

        runner, options = self.beam_runner(engine, extra_args)
        path = os.path.join(self.workdir, f'{bench.name}-{engine}-{uuid.uuid4().hex}.txt')
        # A/B of the small-data watchdog's element limit: before it, a stage
        # in the driver was handed over to Spark on its time limit only.
        max_elements = small.MAX_ELEMENTS
        if engine == 'inproc_timeonly':
            small.MAX_ELEMENTS = 1 << 62
        # A/B of later driver stages after a hand-over (execution.small.MAX_HANDOVERS).
        handovers = small.MAX_HANDOVERS
        if engine == 'inproc_handover1':
            small.MAX_HANDOVERS = 1
        # A/B of side-input stages in the driver by time only
        # (execution.small.COLLECTED_SECONDS): the limits of any other stage.
        collected_seconds = small.COLLECTED_SECONDS
        if engine == 'inproc_sidespark':
            small.COLLECTED_SECONDS = 0
        try:
            with beam.Pipeline(runner=runner, options=options) as p:
                _ = bench.beam(p, n, self) | 'WriteResult' >> beam.ParDo(make_write_result(path))
        finally:
            small.MAX_ELEMENTS = max_elements
            small.MAX_HANDOVERS = handovers
            small.COLLECTED_SECONDS = collected_seconds
        try:
            with open(path) as f:
                return ast.literal_eval(f.read())
        except FileNotFoundError:
            raise AssertionError(f'{engine}: the pipeline wrote no result') from None
        finally:
            if os.path.exists(path):
                os.remove(path)

    def run(
        self, bench: Benchmark, n: int, engine: str, extra_args=()
    ) -> tuple[float, tuple, Sampler]:
        if bench.name == 'P2':
            text_file(self.workdir, n)  # written before the clock starts
        if cpu_load.is_loaded(engine):
            self.burner.on()
        engine = cpu_load.base(engine)
        try:
            with Sampler() as sampler:
                start = time.perf_counter()
                if engine == 'rdd':
                    result = bench.rdd(self.spark, n, self)
                elif engine == 'arrow':
                    result = bench.arrow(self.spark, n, self)
                else:
                    result = self.run_beam(bench, n, engine, extra_args)
                seconds = time.perf_counter() - start
        finally:
            self.burner.off()
        return seconds, tuple(result), sampler


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _short_error(e: BaseException) -> str:
    text = f'{type(e).__name__}: {e}'.strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def measure(
    harness: Harness, bench: Benchmark, sizes, engines, repeats: int, budget: float, expected: dict
) -> list:
    """One warm-up run per engine at the smallest size, then per size ``repeats``
    runs, engines interleaved. Runs over ``budget`` end that engine's sizes."""
    broken: dict = {}  # engine -> error
    over: dict = {}  # engine -> why larger sizes are skipped

    def attempt(engine: str, n: int, label: str, cell: Optional[Cell]):
        try:
            seconds, result, sampler = harness.run(bench, n, engine)
        except Exception as e:
            broken[engine] = _short_error(e)
            _log(f'  {bench.name} n={n:,} {engine} {label}: FAILED {broken[engine]}')
            _log(''.join(traceback.format_exception(e))[-2000:])
            return None
        if result != expected[n]:
            broken[engine] = f'wrong result at N={n:,}: {result}, expected {expected[n]}'
            _log(f'  {bench.name} n={n:,} {engine} {label}: WRONG RESULT')
            return None
        rss = (
            sampler.peak_self_rss
            if cpu_load.base(engine) == 'direct'
            else sampler.peak_other_worker_rss
            if cpu_load.base(engine) in ('direct_mp', 'dask')
            else sampler.peak_spark_worker_rss
        )
        # CPU seconds by process kind: on a loaded machine steadier than wall.
        cpu = sampler.cpu_seconds()
        _log(
            f'  {bench.name} n={n:,} {engine:14s} {label}: {seconds:7.2f} s  '
            f'peak worker {rss / 2**20:6.0f} MB  ok  CPU s '
            + ' '.join(f'{k} {v:.2f}' for k, v in sorted(cpu.items()))
            + f'  fresh workers {len(sampler.fresh_spark_workers)}'
            + f'  load {os.getloadavg()[0]:.1f}'
        )
        if cell is not None:
            cell.times.append(seconds)
            cell.cpu.append(cpu)
            cell.fresh.append(len(sampler.fresh_spark_workers))
            cell.peak_rss = max(cell.peak_rss, rss)
        if seconds > budget and cell is not None:  # a warm-up run does not count
            over[engine] = f'{n:,} took {seconds:.0f} s (budget {budget:.0f} s)'
        return seconds

    engines = [e for e in engines if cpu_load.base(e) != 'dask' or bench.dask]
    for engine in engines:
        if not cpu_load.is_loaded(engine):
            attempt(engine, min(sizes), 'warm-up', None)
    rows = []
    for n in sizes:
        cells = {engine: Cell() for engine in engines}
        skipped_here = dict(over)
        for r in range(repeats):
            # Interleaved (background load hits all alike) and rotated: the
            # first Beam run after a hand-written RDD job pays for Python
            # workers that have not imported Beam yet.
            shift = r % len(engines)
            for engine in engines[shift:] + engines[:shift]:
                if engine in broken or engine in skipped_here:
                    continue
                if engine in over and r > 0:
                    continue  # over budget at this size: one run only
                attempt(engine, n, f'run {r + 1}/{repeats}', cells[engine])
        for engine in engines:
            if engine in broken:
                cells[engine].error = broken[engine]
            elif engine in skipped_here:
                cells[engine].skipped = skipped_here[engine]
        rows.append((bench, n, cells, os.getloadavg()[0]))
    return rows


# ---------------------------------------------------------------------------
# Where this runner's time goes.


class _JobLog(logging.Handler):
    """Collects the runner's progress lines (one per Spark job it starts)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        message = record.getMessage()
        if ': done in ' in message or ' stages in ' in message:
            self.lines.append(message)


def fixed_cost(harness: Harness) -> str:
    """P6 once with the runner's progress log: the Spark jobs and their times."""
    bench = BENCHMARKS['P6']
    for _ in range(3):
        harness.run(bench, 10, 'inproc')  # warm
    log = _JobLog()
    loggers = [
        logging.getLogger('beam_spark_inproc.progress'),
        logging.getLogger('beam_spark_inproc.runner'),
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(log)
        lg.setLevel(logging.INFO)
    try:
        seconds, result, _ = harness.run(bench, 10, 'inproc')
    finally:
        for lg, level in zip(loggers, levels):
            lg.removeHandler(log)
            lg.setLevel(level)
    assert result == reference_p6(10)
    lines = [f"### Fixed cost: P6 takes {seconds:.2f} s; the runner's log of that run", '']
    lines += [f'    {line}' for line in log.lines]
    return '\n'.join(lines)


def profile(harness: Harness, name: str, n: int) -> str:
    from beam_spark_inproc.worker import profiling

    bench = BENCHMARKS[name]
    expected = tuple(bench.reference(n))
    lines = [f'### Where the time goes: {name} ({bench.title}) at N={n:,}', '']
    runs = {}
    for engine in ('inproc', 'direct'):
        harness.run(bench, min(n, 100_000), engine)  # warm
        seconds, result, sampler = harness.run(bench, n, engine)
        assert result == expected, (engine, result, expected)
        runs[engine] = (seconds, sampler.cpu_seconds())
        _log(f'  profile {name} {engine}: {seconds:.2f} s, cpu {runs[engine][1]}')
    with tempfile.TemporaryDirectory(prefix='beam-spark-profile-') as folder:
        harness.run(bench, n, 'inproc', [f'--spark_profile_dir={folder}'])
        summary = profiling.summarize(folder)

    seconds, cpu = runs['inproc']
    direct_seconds, direct_cpu = runs['direct']
    # The in-memory FnApiRunner runs everything in this process; other Python
    # processes (idle Spark or Dask workers) are not its work.
    beam_cpu = direct_cpu.get('driver', 0.0)
    total = sum(cpu.values())
    lines.append('| | wall s | CPU s: driver | JVM | Python workers | total |')
    lines.append('|---|---:|---:|---:|---:|---:|')
    lines.append(
        f'| this runner, local[2] | {seconds:.2f} | {cpu.get("driver", 0):.2f} | '
        f'{cpu.get("jvm", 0):.2f} | {cpu.get("python", 0):.2f} | {total:.2f} |'
    )
    lines.append(
        f'| FnApiRunner, in-memory | {direct_seconds:.2f} | '
        f'{beam_cpu:.2f} | - | - | {beam_cpu:.2f} |'
    )
    lines.append('')
    lines.append(
        f"CPU beyond the FnApiRunner's (Beam's bundle work plus its in-process "
        f'runner): {(total - beam_cpu) / beam_cpu * 100:+.0f}%. Cores busy: '
        f'{total / seconds:.2f} of {os.cpu_count()}.'
    )
    lines.append('')
    by = summary['seconds_by_category']
    profiled = sum(by.values()) or 1.0
    lines.append(
        f'Python workers, profiled run ({summary["bundles"]} bundles; bundle threads '
        f'{summary["thread_cpu_seconds"]:.1f} CPU s under cProfile): own time by '
        "category, and that share of the unprofiled run's Python worker CPU. "
        "cProfile sees calls made from Python code: Beam's coders called from "
        'its compiled (Cython) operations count as Beam bundle work; builtins count '
        'with user code:'
    )
    lines.append('')
    lines.append('| category | share | ≈ CPU s unprofiled |')
    lines.append('|---|---:|---:|')
    for category, value in sorted(by.items(), key=lambda kv: -kv[1]):
        share = value / profiled
        lines.append(f'| {category} | {share * 100:.0f}% | {share * cpu.get("python", 0):.2f} |')
    return '\n'.join(lines)


# ---------------------------------------------------------------------------


def _fmt_seconds(cell: Optional[Cell]) -> str:
    if cell is None:
        return '-'
    if cell.error:
        return 'n/a'
    if cell.skipped:
        return 'skipped'
    if cell.median is None:
        return '-'
    if len(cell.times) > 1:
        return f'{cell.median:.2f} ({min(cell.times):.2f}–{max(cell.times):.2f})'
    return f'{cell.median:.2f} (1 run)'


def _fmt_ratio(a: Optional[Cell], b: Optional[Cell]) -> str:
    if a is None or b is None or a.median is None or b.median is None or b.median == 0:
        return 'n/a'
    return f'{a.median / b.median:.2f}×'


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:
        return '?'


def _java() -> str:
    try:
        out = subprocess.run(['java', '-version'], capture_output=True, text=True)
        return (out.stderr or out.stdout).splitlines()[0]
    except Exception:
        return '?'


def report(results: list, engines, args, started, elapsed, load_before, load_after) -> str:
    lines = ['## beam-spark-inproc benchmarks', '']
    lines.append(
        f'- date: {started.isoformat(timespec="seconds")}; total run {elapsed / 60:.1f} min'
    )
    lines.append(
        f'- {os.cpu_count()} cores; Spark master {args.master} (one session for all '
        f'runs); 1-min load average at start/end: {load_before[0]:.2f} / '
        f'{load_after[0]:.2f}'
        + (f'; extra Spark conf: {", ".join(args.conf)}' if args.conf else '')
        + ("; a user's session (Spark's defaults)" if args.user_session else '')
        + ('; "+ load": with one CPU-bound process beside the run' if args.load_burner else '')
    )
    lines.append(
        f'- python {platform.python_version()}, pyspark {_version("pyspark")}, '
        f'apache-beam {_version("apache_beam")}, pyarrow {_version("pyarrow")}, '
        f'dask {_version("dask")}, {_java()}'
    )
    lines.append(
        f'- wall seconds: median of {args.repeats} run(s) (min–max) after a warm-up '
        f"run; engines interleaved; runs over {args.budget:.0f} s end that engine's "
        'larger sizes; every result checked against a pure-Python reference'
    )
    lines.append('')
    header = (
        ['pipeline', 'N']
        + [ENGINE_TITLES[e] for e in engines]
        + ['÷ DirectRunner', '÷ PySpark RDD', '÷ mapInArrow', 'load']
    )
    lines.append('| ' + ' | '.join(header) + ' |')
    lines.append('|' + '|'.join(['---'] * 2 + ['---:'] * (len(header) - 2)) + '|')
    notes = []
    for bench, n, cells, load in results:
        row = [f'{bench.name} {bench.title}', f'{n:,}']
        row += [_fmt_seconds(cells.get(e)) for e in engines]
        me = cells.get('inproc')
        row += [
            _fmt_ratio(me, cells.get('direct')),
            _fmt_ratio(me, cells.get('rdd')),
            _fmt_ratio(me, cells.get('arrow')),
            f'{load:.1f}',
        ]
        lines.append('| ' + ' | '.join(row) + ' |')
        for e, cell in cells.items():
            if cell.error:
                notes.append(f'- {bench.name} N={n:,} {ENGINE_TITLES[e]}: n/a, {cell.error}')
            elif cell.skipped:
                notes.append(f'- {bench.name} N={n:,} {ENGINE_TITLES[e]}: skipped, {cell.skipped}')
    lines.append('')
    lines.append(
        'Peak Python worker memory (MB, largest resident set of one Python '
        'worker process over the runs; DirectRunner: this process):'
    )
    lines.append('')
    lines.append('| pipeline | N | ' + ' | '.join(ENGINE_TITLES[e] for e in engines) + ' |')
    lines.append('|---|---|' + '---:|' * len(engines))
    for bench, n, cells, _ in results:
        row = [bench.name, f'{n:,}'] + [
            f'{cells[e].peak_rss / 2**20:.0f}' if e in cells and cells[e].times else '-'
            for e in engines
        ]
        lines.append('| ' + ' | '.join(row) + ' |')
    lines.append('')
    if notes:
        lines.extend(notes)
        lines.append('')
    lines += cpu_load.report_load(results, engines)
    lines.append(
        'CPU seconds per run, median per process kind (driver: this '
        "process; jvm; python: Spark's Python workers, or FnApiRunner's "
        "and Dask's worker processes), and the Python workers Spark "
        "started during the runs (it ends a pool's idle workers after a "
        'minute without tasks: a run after such a pause pays the imports '
        'of new workers):'
    )
    lines.append('')
    lines.append(
        '| pipeline | N | engine | driver | jvm | python | total | '
        'total / wall | new workers per run |'
    )
    lines.append('|---|---|---|---:|---:|---:|---:|---:|---|')
    for bench, n, cells, _ in results:
        for e, cell in cells.items():
            if not cell.cpu or cell.median is None:
                continue
            kinds = {
                k: statistics.median(c.get(k, 0.0) for c in cell.cpu)
                for k in ('driver', 'jvm', 'python')
            }
            total = statistics.median(sum(c.values()) for c in cell.cpu)
            lines.append(
                f'| {bench.name} | {n:,} | {ENGINE_TITLES[e]} | '
                f'{kinds["driver"]:.2f} | {kinds["jvm"]:.2f} | '
                f'{kinds["python"]:.2f} | {total:.2f} | '
                f'{total / cell.median:.2f} | '
                f'{" ".join(map(str, cell.fresh))} |'
            )
    lines.append('')
    return '\n'.join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='InProcessSparkRunner vs DirectRunner, DaskRunner and PySpark.'
    )
    parser.add_argument(
        '--sizes',
        type=int,
        nargs='+',
        default=None,
        help=f'element counts (default {" ".join(map(str, DEFAULT_SIZES))})',
    )
    parser.add_argument(
        '--repeats', type=int, default=None, help='timed runs per size and engine (default 3)'
    )
    parser.add_argument(
        '--quick', action='store_true', help='smoke run: 100k elements, 1 repeat, profile at 100k'
    )
    parser.add_argument(
        '--budget',
        type=float,
        default=120.0,
        help='seconds: an engine running longer at one size runs it '
        'once and skips the larger sizes (default 120)',
    )
    parser.add_argument(
        '--pipelines',
        nargs='+',
        default=list(BENCHMARKS),
        choices=list(BENCHMARKS),
        help='which pipelines (default all)',
    )
    parser.add_argument(
        '--engines',
        nargs='+',
        default=list(DEFAULT_ENGINES),
        choices=ENGINES,
        help='which engines (default: all but '
        'inproc_small/inproc_nosmall, this runner with small data in '
        'the driver forced on/off)',
    )
    parser.add_argument(
        '--chunks',
        type=int,
        default=32,
        help='Create seeds the data is generated from (default 32)',
    )
    parser.add_argument('--master', default='local[2]', help='Spark master (default local[2])')
    parser.add_argument(
        '--profile',
        nargs='*',
        default=['P1', 'P3w', 'P4'],
        choices=[b for b in BENCHMARKS if b != 'P6'],
        help='pipelines to profile after the table (default P1 P3w '
        "P4; none: --profile with no names); P6's Spark jobs are "
        'always listed',
    )
    parser.add_argument('--profile-only', action='store_true', help='only the profiles, no table')
    parser.add_argument(
        '--profile-size', type=int, default=2_000_000, help='N of the profiles (default 2M)'
    )
    parser.add_argument(
        '--conf',
        action='append',
        default=[],
        metavar='KEY=VALUE',
        help='Spark conf for the benchmark session (repeatable)',
    )
    parser.add_argument(
        '--user-session',
        action='store_true',
        help="a session created as a user would, with Spark's "
        'default settings (SparkSession.builder.master(...)'
        ".getOrCreate(); only the Python workers' interpreter "
        "set), instead of the runner's own",
    )
    parser.add_argument(
        '--load-burner',
        action='store_true',
        help='run every engine also with a CPU-bound process '
        'beside it (tests/benchmarks/load.py), interleaved with its quiet '
        'runs, and print quiet and loaded ratios',
    )
    parser.add_argument(
        '--output', default=None, help='also write the markdown report to this file'
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = args.sizes or list(QUICK_SIZES)
        args.repeats = args.repeats or 1
        args.profile_size = min(args.profile_size, 100_000)
    args.sizes = sorted(args.sizes or DEFAULT_SIZES)
    args.repeats = args.repeats or 3
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    for noisy in ('apache_beam', 'py4j', 'root', 'distributed'):
        logging.getLogger(noisy).setLevel(logging.ERROR)

    from beam_spark_inproc.spark import session as spark_session

    started = datetime.datetime.now()
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    conf = dict(item.split('=', 1) for item in args.conf)
    if args.user_session:  # the runner then uses the active session as it is
        from pyspark.sql import SparkSession

        os.environ.setdefault('PYSPARK_PYTHON', sys.executable)
        builder = SparkSession.builder.master(args.master)
        for key, value in conf.items():
            builder = builder.config(key, value)
        builder.getOrCreate()
    spark, created = spark_session.get_or_create(args.master, None, conf)
    parallelism = spark_session.parallelism(spark, None)
    _log(
        f'SparkSession ready ({"created" if created else "reused"}) in '
        f'{time.perf_counter() - t0:.1f} s'
    )
    engines = list(args.engines)
    if args.load_burner:
        engines = [name for e in engines for name in (e, cpu_load.loaded(e))]
    if 'dask' in engines:
        try:
            import dask.distributed  # noqa: F401
        except ImportError:
            _log(
                'dask.distributed is not installed: no DaskRunner column '
                '(pip install "apache-beam[dask]")'
            )
            engines = [e for e in engines if cpu_load.base(e) != 'dask']

    results, text = [], ''
    with tempfile.TemporaryDirectory(prefix='beam-spark-bench-') as workdir:
        harness = Harness(spark, args.chunks, workdir, parallelism)
        try:
            if not args.profile_only:
                for name in args.pipelines:
                    bench = BENCHMARKS[name]
                    sizes = [bench.fixed_size] if bench.fixed_size else args.sizes
                    expected = {}
                    for n in sizes:
                        r0 = time.perf_counter()
                        expected[n] = tuple(bench.reference(n))
                        _log(
                            f'{name} n={n:,}: reference {expected[n]} '
                            f'({time.perf_counter() - r0:.1f} s)'
                        )
                    results += measure(
                        harness, bench, sizes, engines, args.repeats, args.budget, expected
                    )
                text = report(
                    results,
                    engines,
                    args,
                    started,
                    time.perf_counter() - t0,
                    load_before,
                    os.getloadavg(),
                )
                print(text, flush=True)
            sections = [fixed_cost(harness)] + [
                profile(harness, name, args.profile_size) for name in args.profile
            ]
            for section in sections:
                print(section + '\n', flush=True)
                text += '\n' + section + '\n'
        finally:
            harness.close()
    if args.output:
        with open(args.output, 'w') as f:
            f.write(text + '\n')
    if created:
        spark.stop()
    # Other engines' wrong results are reported (DaskRunner ignores windows in
    # GroupByKey); the exit status is about this runner's.
    wrong = any(
        cells.get('inproc') and (cells['inproc'].error or '').startswith('wrong result')
        for _, _, cells, _ in results
    )
    return 1 if wrong else 0


if __name__ == '__main__':
    sys.exit(main())
