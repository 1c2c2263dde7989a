"""The pytest plugin, as a user runs it: on examples/test_my_pipeline.py and on
test files of its own, each in a pytest process of its own."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

from tests.jvm_probe import JVM_PROBE

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_user_test_file_runs_with_fixtures_and_test_pipeline_options(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'pytest',
            '-q',
            '-p',
            'no:cacheprovider',
            '-o',
            'addopts=',
            '--rootdir',
            str(tmp_path),
            str(ROOT / 'examples' / 'test_my_pipeline.py'),
            '--spark-master',
            'local[1]',
            '--test-pipeline-options=--runner=beam_spark_inproc.InProcessSparkRunner '
            '--spark_master=local[1]',
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '3 passed' in proc.stdout


def test_explain_prints_the_plan_without_running(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'beam_spark_inproc',
            'explain',
            str(ROOT / 'examples' / 'wordcount.py'),
            '--output',
            str(tmp_path / 'out'),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert 'Reshuffle' in out and 'GroupAlsoByWindow' in out
    assert 'transforms: Split, Count/Count:PairWithVoid' in out.replace(
        'Read/Read/SDFBoundedSourceReader/ParDo(SDFBoundedSourceDoFn)/Process, ', ''
    )
    assert 'collected once on the driver' in out
    assert not list(tmp_path.glob('out*')), 'explain must not run the pipeline'


# A conftest for the generated test files: at the end of the run, whether this
# process started Spark's JVM (a py4j gateway, or a java process among its
# descendants), written to the file $JVM_REPORT names.


def _run_user_tests(tmp_path, source: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Runs ``source`` as a user's test file under pytest, in a process of its
    own, with the defaults users get: (the process, its JVM report)."""
    import json
    import os

    from beam_spark_inproc.options import SMALL_DATA_ENV

    (tmp_path / 'conftest.py').write_text(JVM_PROBE)
    (tmp_path / 'test_users.py').write_text(source)
    report = tmp_path / 'jvm.json'
    env = {k: v for k, v in os.environ.items() if k != SMALL_DATA_ENV}
    env['JVM_REPORT'] = str(report)
    proc = subprocess.run(
        [sys.executable, '-m', 'pytest', '-rA', '-p', 'no:cacheprovider', '-o', 'addopts=']
        + ['--rootdir', str(tmp_path), str(tmp_path / 'test_users.py'), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(tmp_path),
        env=env,
    )
    return proc, json.loads(report.read_text())


_TINY_TESTS = """
import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_spark_inproc import InProcessSparkRunner


def test_create_and_group(beam_pipeline):
    with beam_pipeline as p:
        got = (p | beam.Create([('a', 1), ('b', 2), ('a', 3)]) | beam.GroupByKey()
               | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
        assert_that(got, equal_to([('a', [1, 3]), ('b', [2])]))


def test_read_a_file(beam_pipeline, tmp_path):
    path = tmp_path / 'in.txt'
    path.write_text('x,1\\ny,2\\nx,3\\n')
    with beam_pipeline as p:
        got = (p | beam.io.ReadFromText(str(path)) | beam.Map(lambda l: l.split(','))
               | beam.MapTuple(lambda k, v: (k, int(v))) | beam.CombinePerKey(sum))
        assert_that(got, equal_to([('x', 4), ('y', 2)]))


def test_own_runner_on_the_session(spark_session):
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark_session)) as p:
        assert_that(p | beam.Create([1, 2, 3]) | beam.CombineGlobally(sum), equal_to([6]))


@pytest.mark.it_validatesrunner
def test_beam_style():
    with TestPipeline() as p:
        assert_that(p | beam.Create(['x']) | beam.Map(str.upper), equal_to(['X']))


def test_nothing_started(spark_session):
    assert not spark_session.created
"""


def test_a_suite_of_tiny_tests_starts_no_jvm(tmp_path):
    """Tiny pipelines on the fixtures (a read among them), on a runner given
    ``spark_session`` and on ``TestPipeline()`` with the runner's options:
    all pass and the process never started Spark's JVM."""
    proc, jvm = _run_user_tests(
        tmp_path,
        _TINY_TESTS,
        '--test-pipeline-options=--runner=beam_spark_inproc.InProcessSparkRunner',
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '5 passed' in proc.stdout, proc.stdout[-3000:]
    assert jvm == {'gateway': False, 'java': []}


_ON_SPARK_TESTS = """
import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline


class Where(beam.DoFn):
    def process(self, x):
        from pyspark import TaskContext

        where = 'driver' if TaskContext.get() is None else 'spark'
        Metrics.counter('where', where).inc()
        yield x


def _where(p):
    _ = p | beam.Create([1, 2, 3]) | beam.ParDo(Where())
    result = p.run()
    counters = result.metrics().query(MetricsFilter().with_namespace('where'))['counters']
    return {c.key.metric.name: c.committed for c in counters}


def test_in_the_driver(beam_pipeline, spark_session):
    assert _where(beam_pipeline) == {'driver': 3}
    assert not spark_session.created


def test_spark_pipeline(spark_pipeline, spark_session):
    assert _where(spark_pipeline) == {'spark': 3}
    assert spark_session.created


@pytest.mark.on_spark
def test_marker(beam_pipeline):
    assert _where(beam_pipeline) == {'spark': 3}


@pytest.mark.on_spark
def test_marker_on_a_test_pipeline():
    assert _where(TestPipeline()) == {'spark': 3}


def test_in_the_driver_again(beam_pipeline):
    assert _where(beam_pipeline) == {'driver': 3}
"""


def test_spark_pipeline_and_the_on_spark_marker_run_stages_on_spark(tmp_path):
    """``spark_pipeline`` and the marker ``on_spark`` (on ``beam_pipeline``
    and on a ``TestPipeline()``) run the stages in Spark's workers; the
    fixture's other tests run theirs in the driver, before and after."""
    proc, jvm = _run_user_tests(
        tmp_path,
        _ON_SPARK_TESTS,
        '--test-pipeline-options=--runner=beam_spark_inproc.InProcessSparkRunner',
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '5 passed' in proc.stdout, proc.stdout[-3000:]
    assert jvm['gateway']


_BAD_INPUT_TESTS = """
import os
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.periodicsequence import PeriodicImpulse


@pytest.mark.parametrize('spark_master', ['spark://127.0.0.1:9'])
def test_a_master_that_cannot_start(beam_pipeline):
    pass


def test_after_the_bad_master(beam_pipeline):
    with beam_pipeline as p:
        assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 2), equal_to([2, 4]))


class Tick(beam.DoFn):
    def __init__(self, folder):
        self._folder = folder

    def process(self, tick):
        open(os.path.join(self._folder, f'{float(tick):.3f}'), 'w').close()
        yield tick


def test_leaves_a_stream_running(inproc_runner, tmp_path):
    p = beam.Pipeline(runner=inproc_runner, options=PipelineOptions(['--streaming']))
    _ = (p | 'Ticks' >> PeriodicImpulse(start_timestamp=time.time(), fire_interval=0.2)
         | 'Mark' >> beam.ParDo(Tick(str(tmp_path))))
    p.run()
    deadline = time.monotonic() + 300
    while not os.listdir(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert os.listdir(tmp_path), 'the stream ran'


def test_the_session_after_the_stream(spark_pipeline, spark_session):
    with spark_pipeline as p:
        got = p | beam.Create([('a', 1), ('a', 2)]) | beam.CombinePerKey(sum)
        assert_that(got, equal_to([('a', 3)]))
    assert spark_session.range(5).count() == 5
"""


def test_a_bad_master_and_a_stream_left_running_fail_only_their_own_test(tmp_path):
    """A test whose fixture asks for a standalone master nobody listens at
    errors at its setup with the reason; a test that leaves a stream running
    errors at its teardown naming the stream's transforms, the stream
    cancelled; the tests after each pass, Spark's ones on the same session."""
    proc, _ = _run_user_tests(tmp_path, _BAD_INPUT_TESTS)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]
    assert '3 passed, 2 errors' in out, out[-3000:]
    errors = out[out.index('= ERRORS =') : out.index('short test summary info')]
    # Each error's heading, then its message first.
    assert re.search(
        r'ERROR at setup of test_a_master_that_cannot_start\[spark://127.0.0.1:9\] _+\n'
        r"spark_session: Cannot reach the Spark master 'spark://127.0.0.1:9' "
        r'\(127.0.0.1:9: Connection refused\)\.',
        errors,
    ), errors
    assert re.search(
        r'ERROR at teardown of test_leaves_a_stream_running _+\n'
        r'test_users.py::test_leaves_a_stream_running left 1 pipeline\(s\) running: '
        r'a stream of Ticks, Mark\. They were cancelled when the test ended',
        errors,
    ), errors
    assert 'During handling' not in errors, errors
    for name in ('test_after_the_bad_master', 'test_the_session_after_the_stream'):
        assert f'PASSED test_users.py::{name}' in out, out[-3000:]
