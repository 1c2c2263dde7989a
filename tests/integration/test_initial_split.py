"""Initial splitting of a splittable DoFn's restrictions (``execution.initial_split``):
what is read is what Beam's FnApiRunner reads (every line once), on files whose
cut points fall mid-line, an empty file, a compressed file that cannot split and
several files; and the cut is made where it can be (a spy on ``spread``).
On Spark the driver holds the stage's input only with small data in the
driver on (the default), so these runs say so themselves."""

from __future__ import annotations

import gzip
import random

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.core import RestrictionProvider

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution import initial_split
from tests.integration.test_semantics import run_on as _run_on

# Small data in the driver on (``execution.small``), whatever the default.
SMALL = {'spark_small_data_kb': 64}


def run_on(runner, build_fn, out_dir):
    return _run_on(runner, build_fn, out_dir, None if isinstance(runner, FnApiRunner) else SMALL)


@pytest.fixture(params=['debug', 'spark'])
def runner(request):
    if request.param == 'debug':
        return lambda: InProcessSparkRunner(debug=True)
    spark = request.getfixturevalue('spark')
    return lambda: InProcessSparkRunner(spark=spark)


@pytest.fixture(autouse=True)
def no_clock(monkeypatch):
    """Stages leave the driver by their data only, never by their pace: a
    tiny stage before the read handed over would make the read's input
    Spark's (no initial split)."""
    from tests.integration.test_small_data import pin_spark_cost

    pin_spark_cost(monkeypatch, 3600.0)


@pytest.fixture
def spreads(monkeypatch):
    """What each ``initial_split.spread`` call returned: None, or the number of
    restrictions per part and whether every cut was made."""
    calls = []
    spread = initial_split.spread

    def spy(stage, rows, ways):
        result = spread(stage, rows, ways)
        calls.append(
            None
            if result is None
            else ([sum(1 for row in part if row[0] == 0) for part in result[0]], result[1])
        )
        return result

    monkeypatch.setattr(initial_split, 'spread', spy)
    return calls


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('initial_split')
    rnd = random.Random(15)
    # Lines of 2-400 characters: the cut at half the file's bytes falls
    # inside a line.
    lines = [f'{i}:' + 'x' * rnd.randrange(0, 400) for i in range(3000)]
    (folder / 'a.txt').write_text('\n'.join(lines) + '\n')
    (folder / 'b.txt').write_text('\n'.join(lines[:700]))  # no final newline
    (folder / 'empty.txt').write_text('')
    with gzip.open(folder / 'c.txt.gz', 'wt') as f:
        f.write('\n'.join(lines[:500]) + '\n')
    return folder


def _read(pattern):
    return lambda p: (
        p
        | beam.io.ReadFromText(str(pattern))
        | beam.combiners.Count.PerElement()
        | beam.MapTuple(lambda line, n: f'{line} {n}')
    )


def _expected(pattern, tmp_path):
    return sorted(run_on(FnApiRunner(), _read(pattern), tmp_path / 'fnapi'))


def test_a_file_is_cut_in_two_and_read_once(runner, files, spreads, tmp_path):
    got = run_on(runner(), _read(files / 'a.txt'), tmp_path / 'runner')
    assert sorted(got) == _expected(files / 'a.txt', tmp_path)
    assert len(got) == 3000
    # One restriction (a file under Beam's 64 MB chunk), cut into two parts.
    assert spreads == [([1, 1], True)]


def test_several_files_are_read_once(runner, files, spreads, tmp_path):
    pattern = files / '*'
    got = run_on(runner(), _read(pattern), tmp_path / 'runner')
    assert sorted(got) == _expected(pattern, tmp_path)
    ((counts, _),) = spreads
    assert len(counts) == 2 and all(counts)


def test_a_compressed_file_is_not_cut(runner, files, spreads, tmp_path):
    pattern = files / 'c.txt.gz'
    got = run_on(runner(), _read(pattern), tmp_path / 'runner')
    assert sorted(got) == _expected(pattern, tmp_path)
    assert len(got) == 500
    assert spreads == [None]  # one restriction whose tracker will not split


def test_an_empty_file(runner, files, spreads, tmp_path):
    pattern = files / 'empty.txt'
    assert run_on(runner(), _read(pattern), tmp_path / 'runner') == []
    assert spreads == [None]


def test_tiny_input_is_not_cut(runner, spreads, tmp_path):
    """Under ``MIN_SHARE`` per core the input stays as it is: a cut of a
    30-byte file would give a piece shorter than a line, which reads nothing
    (Beam's pandas reader then makes a frame of ``object`` columns)."""
    (tmp_path / 'tiny.txt').write_text('0,11a,0\n1,37a,1\n2,389a,2\n')
    got = run_on(runner(), _read(tmp_path / 'tiny.txt'), tmp_path / 'runner')
    assert sorted(got) == _expected(tmp_path / 'tiny.txt', tmp_path)
    assert spreads == [None]


class _Ranges(RestrictionProvider):
    def initial_restriction(self, n):
        return OffsetRange(0, n)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, n, restriction):
        return restriction.size()


class _Count(beam.DoFn):
    """A user's splittable DoFn on an offset range: ``n`` -> (n, 0..n-1)."""

    def process(self, n, tracker=beam.DoFn.RestrictionParam(_Ranges())):
        from pyspark import TaskContext

        context = TaskContext.get()  # None in the driver (debug engine)
        where = Metrics.counter(
            'where', 'driver' if context is None else f'partition-{context.partitionId()}'
        )
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            where.inc()
            yield f'{n} {position}'
            position += 1


def _counts(p):
    return p | beam.Create([7, 3000, 3]) | beam.ParDo(_Count())


def test_a_users_offset_range_dofn(runner, spreads, tmp_path):
    got = run_on(runner(), _counts, tmp_path / 'runner')
    assert sorted(got) == sorted(run_on(FnApiRunner(), _counts, tmp_path / 'fnapi'))
    assert len(got) == 3010
    ((counts, balanced),) = spreads
    # 3010 positions in two parts of 1505: the 3000-element range is cut.
    assert balanced and len(counts) == 2 and sum(counts) == 4


def test_each_part_is_a_spark_partition(spark, tmp_path):
    """Spark slices driver rows by count: the parts (2 and 2 restrictions, and
    a control row) still run one per partition, 1505 positions each."""
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=PipelineOptions(**SMALL))
    _ = _counts(p)
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace('where'))['counters']
    where = {c.key.metric.name: c.committed for c in counters if c.committed}
    assert sorted(where) == ['partition-0', 'partition-1'], where
    assert abs(where['partition-0'] - where['partition-1']) <= 2, where
