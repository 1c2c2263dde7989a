"""Runner behaviour on local Spark: options, sessions, errors, execution policy."""

from __future__ import annotations

import collections
import pathlib
import re
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc import PipelineExecutionError
from beam_spark_inproc import SparkRunnerOptions
from beam_spark_inproc.options import parse_conf

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _lines(pattern: str) -> list[str]:
    lines = []
    for path in sorted(pathlib.Path(pattern).parent.glob(pathlib.Path(pattern).name + '*')):
        lines.extend(path.read_text().splitlines())
    return lines


class _Tally(beam.DoFn):
    """Appends one line per processed element to a file: counts real executions."""

    def __init__(self, path: str):
        self._path = path

    def process(self, x):
        with open(self._path, 'a') as f:
            f.write('%s\n' % x)
        if x % 2:
            yield beam.pvalue.TaggedOutput('odd', x)
        else:
            yield x


def test_stage_with_several_consumers_runs_its_bundles_once(spark, tmp_path):
    tally = str(tmp_path / 'tally')
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        outs = (
            p | beam.Create(range(100)) | beam.ParDo(_Tally(tally)).with_outputs('odd', main='even')
        )
        evens, odds = outs.even, outs.odd
        total = evens | 'SumEvens' >> beam.CombineGlobally(sum)
        assert_that(
            odds | 'Shift' >> beam.Map(lambda x, t: x + t, t=beam.pvalue.AsSingleton(total)),
            equal_to([x + 2450 for x in range(1, 100, 2)]),
            label='odds',
        )
        assert_that(
            evens | 'Count' >> beam.combiners.Count.Globally(), equal_to([50]), label='evens'
        )
        assert_that(evens, equal_to(list(range(0, 100, 2))), label='all_evens')
    assert sorted(int(x) for x in _lines(tally)) == list(range(100))


def _fails_then_cleans_up(x):
    try:
        if x == 3:
            raise ValueError('bad element %d' % x)
    finally:
        x = x * 1  # cleanup after the raise: PySpark's traceback points here
    return x


def test_worker_traceback_points_at_the_raising_line(spark):
    """PySpark's simplified traceback shows a frame's current line, which for a
    frame that ran a ``finally`` after raising is the wrong one."""
    with pytest.raises(PipelineExecutionError) as info:
        with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
            p | beam.Create([1, 2, 3]) | 'Explode' >> beam.Map(_fails_then_cleans_up)
    text = info.value.worker_traceback
    assert "raise ValueError('bad element %d' % x)" in text
    assert 'x = x * 1' not in text
    assert text.startswith('Traceback (most recent call last)')
    assert any(line.startswith('ValueError: bad element 3') for line in text.splitlines())
    assert str(info.value).startswith("Beam transform 'Explode' failed")


def test_user_error_names_transform_and_session_stays_usable(spark):
    def fail(x):
        if x == 3:
            raise ValueError('bad element %d' % x)
        return x

    with pytest.raises(PipelineExecutionError) as info:
        with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
            p | beam.Create([1, 2, 3]) | 'Explode' >> beam.Map(fail)
    message = str(info.value)
    assert message.startswith("Beam transform 'Explode' failed")
    assert 'ValueError: bad element 3' in message
    assert 'test_runner.py' in info.value.worker_traceback  # the user's own frame
    assert "raise ValueError('bad element %d' % x)" in info.value.worker_traceback
    assert 'Py4J' not in message

    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 10), equal_to([10, 20]))


def test_active_session_is_used_and_not_stopped(spark):
    runner = InProcessSparkRunner()
    with beam.Pipeline(runner=runner) as p:
        assert_that(p | beam.Create(['a']), equal_to(['a']))
    assert runner.session() is spark
    assert spark.range(3).count() == 3  # still alive


def test_options_parse_and_help():
    opts = PipelineOptions(
        [
            '--spark_master=local[1]',
            '--spark_conf',
            'spark.a=1',
            '--spark_conf',
            'spark.b = x=y',
            '--spark_parallelism=3',
            '--spark_remote=sc://host:15002',
        ]
    ).view_as(SparkRunnerOptions)
    assert opts.spark_master == 'local[1]'
    assert parse_conf(opts.spark_conf) == {'spark.a': '1', 'spark.b': 'x=y'}
    assert opts.spark_parallelism == 3
    assert opts.spark_remote == 'sc://host:15002'
    parser = __import__('argparse').ArgumentParser()
    SparkRunnerOptions._add_argparse_args(parser)
    assert all(action.help for action in parser._actions if action.dest != 'help')


def test_bad_spark_conf_names_the_option():
    with pytest.raises(ValueError, match=r'--spark_conf expects KEY=VALUE.*nonsense'):
        parse_conf(['nonsense'])


def test_runner_flag_on_command_line_runs_wordcount(tmp_path):
    """`--runner=beam_spark_inproc.InProcessSparkRunner`, no code change, in a fresh process."""
    out = tmp_path / 'counts'
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / 'examples' / 'wordcount.py'),
            '--runner=beam_spark_inproc.InProcessSparkRunner',
            '--spark_master=local[2]',
            '--output',
            str(out),
            '--top',
            '3',
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    counts = {w: int(n) for w, n in (line.rsplit(': ', 1) for line in _lines(str(out)))}
    text = (ROOT / 'examples' / 'data' / 'sonnets.txt').read_text().lower()
    expected = collections.Counter(re.findall(r"[\w']+", text))
    assert counts == dict(expected)
    top = sorted(expected.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:3]
    assert result.stdout.splitlines()[-3:] == ['%s: %d' % kv for kv in top]


def test_pcollection_read_as_main_and_side_input_of_one_stage_runs_once(spark, tmp_path):
    tally = str(tmp_path / 'tally')
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        evens = (
            p
            | beam.Create(range(0, 20, 2))
            | beam.ParDo(_Tally(tally)).with_outputs('odd', main='even')
        ).even
        both = evens | 'Both' >> beam.Map(
            lambda x, all_: x + len(all_), all_=beam.pvalue.AsList(evens)
        )
        assert_that(both, equal_to([x + 10 for x in range(0, 20, 2)]))
    assert sorted(int(x) for x in _lines(tally)) == list(range(0, 20, 2))


class _TerseError(Exception):
    """A user exception whose text is its own: Beam's annotation stays in args."""

    def __str__(self) -> str:
        return 'terse failure'


def test_error_names_the_one_transform_beam_annotated(spark):
    """Beam names the failing transform in the exception's message (its first
    argument), which the exception's ``str`` need not show: the error names that
    transform alone, not every transform of the fused stage."""

    def fail(x):
        raise _TerseError('bad element %d' % x)

    with pytest.raises(PipelineExecutionError) as info:
        with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
            (
                p
                | beam.Create([1])
                | 'Before' >> beam.Map(lambda x: x + 1)
                | 'Explode' >> beam.Map(fail)
                | 'After' >> beam.Map(lambda x: x)
            )
    message = str(info.value)
    assert message.startswith("Beam transform 'Explode' failed (stage "), message
    assert 'Before' not in message.split('\n')[0]
    assert {'Before', 'Explode', 'After'} <= set(info.value.labels)  # the stage's
    assert info.value.transform == 'Explode'
    assert info.value.exception_type.endswith('_TerseError')
    assert 'terse failure' in message.split('\n')[0]
