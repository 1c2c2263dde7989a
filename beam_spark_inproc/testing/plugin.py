"""pytest plugin (``pytest11`` entry point): fixtures for Beam pipelines on Spark.

Importing this module imports neither pyspark nor Beam; they load when a fixture
is first used, and Spark's JVM starts only when a test's pipeline needs Spark
(or the test uses ``spark_session`` itself): tiny stages run in the driver
(``execution.small``), as they do for users, so a suite of tiny pipeline tests
never starts one.

* ``spark_master``: the master of the test's session: ``--spark-master``, else
  the ini option ``spark_master``, else ``local[2]``. A conftest, module or
  class may override the fixture, a test may parametrize it.
* ``spark_session``: the test process's SparkSession on that master, made on
  demand (``spark.session.OnDemandSession``: any attribute starts it; ``get()``
  gives the ``SparkSession`` itself) and shared by every test of the process;
  stopped at the end of the run if the plugin made it. An active session is
  used as it is. A master Spark cannot have (a malformed URL, an unreachable
  standalone master, a second master in a process already running one) fails
  the test asking for it, at its setup; the next tests go on
  (``testing.sessions``).
* ``inproc_runner``: an ``InProcessSparkRunner`` on that session. A pipeline a
  test leaves running (a stream, a run with ``--no_wait_until_finish``) is
  cancelled when the test ends, and the test fails naming it
  (``testing.runners.TrackingRunner``).
* ``beam_pipeline``: a Beam ``TestPipeline`` on that runner.
* ``spark_pipeline``: the same with every stage on Spark
  (``--spark_small_data_kb=0``), for tests that must cover Spark's execution;
  the marker ``on_spark`` does the same for a test's ``beam_pipeline`` and
  for the ``TestPipeline()`` it builds itself.

``--test-pipeline-options="--runner=beam_spark_inproc.InProcessSparkRunner ..."``
gives Beam-style tests (``TestPipeline()``, marker ``it_validatesrunner``) their
pipeline options, as Beam's own test setup does.
"""

from __future__ import annotations

import os

import pytest

DEFAULT_MASTER = 'local[2]'
# Every stage on Spark (``--spark_small_data_kb=0``).
ON_SPARK_ARGS = ['--spark_small_data_kb=0']


def pytest_addoption(parser) -> None:
    group = parser.getgroup('beam-spark-inproc')
    group.addoption(
        '--spark-master',
        default=None,
        help=f'Spark master for the spark_session fixture (default {DEFAULT_MASTER}).',
    )
    parser.addini('spark_master', 'Spark master for the spark_session fixture.', default=None)
    try:
        group.addoption(
            '--test-pipeline-options',
            default=None,
            help='Pipeline options for Beam TestPipeline-based tests, e.g. '
            '"--runner=beam_spark_inproc.InProcessSparkRunner".',
        )
    except ValueError:  # another plugin (Beam's own conftest) defines it
        pass


def pytest_configure(config) -> None:
    config.addinivalue_line('markers', 'it_validatesrunner: Beam runner validation test')
    config.addinivalue_line(
        'markers',
        "on_spark: run every stage of the test's pipelines on Spark "
        '(--spark_small_data_kb=0), not small data in the driver',
    )
    options = config.getoption('--test-pipeline-options', default=None)
    if options:
        from apache_beam.testing.test_pipeline import TestPipeline

        TestPipeline.pytest_test_pipeline_options = options


@pytest.fixture
def spark_master(request) -> str:
    return (
        request.config.getoption('--spark-master')
        or request.config.getini('spark_master')
        or DEFAULT_MASTER
    )


@pytest.fixture(scope='session')
def _beam_spark_sessions():
    from beam_spark_inproc.testing.sessions import Sessions

    sessions = Sessions()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark_session(_beam_spark_sessions, spark_master):
    from beam_spark_inproc.errors import SparkMasterError

    try:
        return _beam_spark_sessions.for_master(spark_master)
    except SparkMasterError as error:
        problem = str(error)
    pytest.fail(f'spark_session: {problem}', pytrace=False)


@pytest.fixture(autouse=True)
def _beam_spark_on_spark(request):
    """The ``on_spark`` marker: small data in the driver off for the test
    (its default, ``options.SMALL_DATA_ENV``, read when options are parsed)."""
    if request.node.get_closest_marker('on_spark') is None:
        yield
        return
    from beam_spark_inproc.options import SMALL_DATA_ENV

    before = os.environ.get(SMALL_DATA_ENV)
    os.environ[SMALL_DATA_ENV] = '0'
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SMALL_DATA_ENV, None)
        else:
            os.environ[SMALL_DATA_ENV] = before


@pytest.fixture
def inproc_runner(request, spark_session):
    from beam_spark_inproc.testing.runners import TrackingRunner

    runner = TrackingRunner(spark=spark_session)
    yield runner
    left = runner.stop_left_running()
    if left:
        pytest.fail(
            f'{request.node.nodeid} left {len(left)} pipeline(s) running: '
            + '; '.join(left)
            + '. They were cancelled when the test ended; end them in the test '
            '(result.cancel(), result.drain() or result.wait_until_finish()).',
            pytrace=False,
        )


@pytest.fixture
def beam_pipeline(request, inproc_runner):
    from apache_beam.testing.test_pipeline import TestPipeline

    on_spark = request.node.get_closest_marker('on_spark') is not None
    return TestPipeline(
        runner=inproc_runner,
        blocking=True,
        additional_pipeline_args=ON_SPARK_ARGS if on_spark else None,
    )


@pytest.fixture
def spark_pipeline(inproc_runner):
    from apache_beam.testing.test_pipeline import TestPipeline

    return TestPipeline(runner=inproc_runner, blocking=True, additional_pipeline_args=ON_SPARK_ARGS)
