"""Many pipelines back to back with the options users get, under CPU load.

With the defaults, tiny stages run in the driver (``execution.small``) and stages
whose data grows past its limits are handed over to Spark. This test runs a
mix of both in one process, one after another, while another process keeps a
core busy: text-file reads (a read is a splittable DoFn stage), a user's
splittable DoFn, side inputs (``AsList``, ``AsDict``, a large one built from a
few seeds), GroupByKey and CombinePerKey, tiny pipelines and seeds a FlatMap
expands into 200,000-300,000 elements. Every result is checked against values
computed by hand, every pipeline that grows past the limits must have run
Spark jobs, and afterwards the interpreter must still be sound: the same
``pyspark`` ``Column`` classes as before (one class, not a second copy that
fails ``isinstance``), a fresh import, ``ast.parse`` of a large module, and a
DataFrame query on the shared session. Stopping work in the driver by
injecting exceptions into threads broke exactly these under load.
"""

from __future__ import annotations

import ast
import collections
import importlib
import inspect
import subprocess
import sys
import time
import uuid

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner

ROUNDS = 4
SMALL_LINES = 300
LARGE_LINES = 60_000
SEEDS = 10


def _tiny(p, i, files):
    n = 5 + i % 11
    out = (
        p
        | beam.Create(list(range(n)))
        | beam.Map(lambda x: (x % 3, x))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: (k, sorted(vs)))
    )
    assert_that(out, equal_to([(k, [x for x in range(n) if x % 3 == k]) for k in range(3)]))


def _side_inputs(p, i, files):
    listed = p | 'List' >> beam.Create(list(range(i % 5 + 1)))
    squares = p | 'Dict' >> beam.Create([(k, k * k) for k in range(10)])
    out = (
        p
        | 'Main' >> beam.Create(list(range(40)))
        | beam.Map(
            lambda x, lst, d: x + sum(lst) + d[x % 10],
            lst=beam.pvalue.AsList(listed),
            d=beam.pvalue.AsDict(squares),
        )
        | beam.Map(lambda v: (v % 4, v))
        | beam.CombinePerKey(sum)
    )
    plus = sum(range(i % 5 + 1))
    totals = collections.Counter()
    for x in range(40):
        v = x + plus + (x % 10) ** 2
        totals[v % 4] += v
    assert_that(out, equal_to(list(totals.items())))


def _text_small(p, i, files):
    out = (
        p
        | beam.io.ReadFromText(files['small'])
        | beam.Map(lambda line: (int(line.split()[0]) % 5, 1))
        | beam.CombinePerKey(sum)
    )
    assert_that(out, equal_to([(k, SMALL_LINES // 5) for k in range(5)]))


def _text_large(p, i, files):
    lines = p | beam.io.ReadFromText(files['large'])
    numbers = lines | beam.Map(lambda line: int(line.split()[0]))
    assert_that(
        numbers | beam.CombineGlobally(sum), equal_to([sum(range(LARGE_LINES))]), label='sum'
    )
    assert_that(lines | beam.combiners.Count.Globally(), equal_to([LARGE_LINES]), label='count')


class _Offsets(beam.transforms.core.RestrictionProvider):
    def initial_restriction(self, n):
        return OffsetRange(0, n)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, n, restriction):
        return restriction.size()

    def split(self, n, restriction):
        return restriction.split(250)


class _CountUpTo(beam.DoFn):
    """A user's splittable DoFn: n becomes (n, 0) ... (n, n - 1)."""

    def process(self, n, tracker=beam.DoFn.RestrictionParam(_Offsets())):
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            yield n, position
            position += 1


def _splittable(p, i, files):
    seeds = [7, 100 * (i % 3 + 1), 2000]
    out = p | beam.Create(seeds) | beam.ParDo(_CountUpTo()) | beam.CombinePerKey(sum)
    assert_that(out, equal_to([(n, sum(range(n))) for n in seeds]))


def _grows_combined(p, i, files):
    """10 seeds become 300,000 elements, combined within their stage."""
    out = (
        p
        | beam.Create(list(range(SEEDS)))
        | beam.FlatMap(lambda s: range(s * 30_000, (s + 1) * 30_000))
        | beam.Map(lambda x: (x % 7, x))
        | beam.CombinePerKey(sum)
    )
    assert_that(out, equal_to([(k, sum(range(k, 300_000, 7))) for k in range(7)]))


def _grows_grouped(p, i, files):
    """10 seeds become 200,000 elements that a GroupByKey moves."""
    out = (
        p
        | beam.Create(list(range(SEEDS)))
        | beam.FlatMap(lambda s: ((x % 50, x) for x in range(s * 20_000, (s + 1) * 20_000)))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, xs: (k, len(xs), sum(xs)))
    )
    assert_that(out, equal_to([(k, 4000, sum(range(k, 200_000, 50))) for k in range(50)]))


def _large_side_input(p, i, files):
    """A side input of 50,000 entries made from 10 seeds, read by a tiny main input."""
    table = (
        p
        | 'Seeds' >> beam.Create(list(range(SEEDS)))
        | beam.FlatMap(lambda s: ((x, x % 13) for x in range(s * 5000, (s + 1) * 5000)))
    )
    out = (
        p
        | 'Keys' >> beam.Create(list(range(0, 50_000, 997)))
        | beam.Map(lambda x, d: (x, d[x]), d=beam.pvalue.AsDict(table))
    )
    assert_that(out, equal_to([(x, x % 13) for x in range(0, 50_000, 997)]))


# In an order that puts tiny pipelines right after hand-overs.
KINDS = [
    _tiny,
    _grows_combined,
    _side_inputs,
    _text_small,
    _grows_grouped,
    _tiny,
    _splittable,
    _text_large,
    _large_side_input,
    _side_inputs,
]
# Their stages grow past the small-data limits: they must run Spark jobs.
GROWS = {_grows_combined, _grows_grouped}


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('stress')
    small, large = folder / 'small.txt', folder / 'large.txt'
    small.write_text(''.join(f'{i:05d} small line\n' for i in range(SMALL_LINES)))
    large.write_text(
        ''.join(f'{i} a larger file line {i * 7919 % 100_003:06d}\n' for i in range(LARGE_LINES))
    )
    return {'small': str(small), 'large': str(large)}


@pytest.fixture
def cpu_load():
    """A process burning a core for as long as the test runs."""
    burner = subprocess.Popen([sys.executable, '-c', 'while True: pass'])
    try:
        yield burner
    finally:
        burner.kill()
        burner.wait()


def _column_classes():
    import pyspark.sql
    import pyspark.sql.classic.column
    import pyspark.sql.column

    return (pyspark.sql.Column, pyspark.sql.column.Column, pyspark.sql.classic.column.Column)


def _run_counting_jobs(spark, build, i, files) -> int:
    """Runs one pipeline with the default options; the Spark jobs it ran."""
    context = spark.sparkContext  # classic-only: counting the run's jobs
    group = 'stress-' + uuid.uuid4().hex
    context.setJobGroup(group, 'small-data stress test')
    try:
        p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark))
        build(p, i, files)
        p.run().wait_until_finish()
    finally:
        context.setJobGroup(None, None)
    return len(context.statusTracker().getJobIdsForGroup(group))


def test_many_pipelines_under_load_with_defaults(spark, files, cpu_load, tmp_path):
    from beam_spark_inproc import options

    assert options.small_data_kb_default() > 0, "runs with the users' default"
    columns = _column_classes()

    started = time.perf_counter()
    jobs_by_kind = collections.defaultdict(list)
    seconds_by_kind = collections.defaultdict(float)
    for i in range(ROUNDS * len(KINDS)):
        build = KINDS[i % len(KINDS)]
        begun = time.perf_counter()
        jobs_by_kind[build.__name__].append(_run_counting_jobs(spark, build, i, files))
        seconds_by_kind[build.__name__] += time.perf_counter() - begun
        assert cpu_load.poll() is None, 'the CPU load ran throughout'
    seconds = time.perf_counter() - started
    print(
        f'\n{ROUNDS * len(KINDS)} pipelines in {seconds:.1f} s; by kind: '
        + ', '.join(
            f'{name} {seconds_by_kind[name]:.1f} s, Spark jobs {jobs}'
            for name, jobs in jobs_by_kind.items()
        )
    )
    for build in GROWS:
        assert all(n >= 1 for n in jobs_by_kind[build.__name__]), jobs_by_kind

    # The interpreter is still sound.
    assert _column_classes() == columns
    assert all(a is b for a, b in zip(_column_classes(), columns))
    (tmp_path / 'stress_fresh_module.py').write_text(
        'import collections\nVALUE = collections.Counter("abca")["a"]\n'
    )
    sys.path.insert(0, str(tmp_path))
    try:
        assert importlib.import_module('stress_fresh_module').VALUE == 2
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop('stress_fresh_module', None)
    source = inspect.getsource(beam.pvalue)
    tree = ast.parse(source)
    assert any(isinstance(node, ast.ClassDef) and node.name == 'PCollection' for node in tree.body)
    compile(tree, 'pvalue.py', 'exec')
    from pyspark.sql import functions as F

    assert isinstance(F.col('id'), columns[0])
    df = spark.range(100)
    assert df.filter(F.col('id') >= 90).count() == 10
    assert df.select(F.sum(df.id)).collect()[0][0] == 4950
