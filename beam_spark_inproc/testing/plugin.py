"""pytest plugin (``pytest11`` entry point): fixtures for Beam pipelines on Spark.

Importing this module imports neither pyspark nor Beam; they load when a fixture
is first used.

* ``spark_session`` (session scope): the active SparkSession, else a local one
  with master ``--spark-master`` / ini ``spark_master`` (default ``local[2]``).
* ``inproc_runner``: an ``InProcessSparkRunner`` on that session.
* ``beam_pipeline``: a Beam ``TestPipeline`` on that runner.

``--test-pipeline-options="--runner=beam_spark_inproc.InProcessSparkRunner ..."``
gives Beam-style tests (``TestPipeline()``, marker ``it_validatesrunner``) their
pipeline options, as Beam's own test setup does.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser) -> None:
    group = parser.getgroup('beam-spark-inproc')
    group.addoption(
        '--spark-master',
        default=None,
        help='Spark master for the spark_session fixture (default local[2]).',
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
    options = config.getoption('--test-pipeline-options', default=None)
    if options:
        from apache_beam.testing.test_pipeline import TestPipeline

        TestPipeline.pytest_test_pipeline_options = options


@pytest.fixture(scope='session')
def spark_session(request):
    from beam_spark_inproc.spark import session

    master = (
        request.config.getoption('--spark-master')
        or request.config.getini('spark_master')
        or 'local[2]'
    )
    spark, created = session.get_or_create(master, None, {})
    yield spark
    if created:
        spark.stop()


@pytest.fixture
def inproc_runner(spark_session):
    from beam_spark_inproc import InProcessSparkRunner

    return InProcessSparkRunner(spark=spark_session)


@pytest.fixture
def beam_pipeline(inproc_runner):
    from apache_beam.testing.test_pipeline import TestPipeline

    return TestPipeline(runner=inproc_runner, blocking=True)
