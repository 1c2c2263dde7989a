"""Runner selection and skip tables for Beam's own test modules.

Each wrapper module names its ``ENGINE``; for every test of it this conftest
points both ways a Beam test picks its runner at this runner, and puts them back
afterwards (the rest of the test run keeps Beam's defaults):

* ``TestPipeline()`` reads ``--test-pipeline-options`` (Beam's own test setup;
  here ``TestPipeline.pytest_test_pipeline_options``);
* a plain ``beam.Pipeline()`` takes ``StandardOptions.DEFAULT_RUNNER``.

Tests that name a runner themselves (``TestPipeline(runner='DirectRunner')``)
run on that runner, as they do in Beam. Skips come from ``skips``.
"""

from __future__ import annotations

import os
import pathlib
import re

import pytest

from tests.conformance.beam import reference
from tests.conformance.beam import skips

RUNNERS = {
    # The runner with the options a user gets (small stages in the driver,
    # the rest handed over to Spark: ``execution.small``).
    'spark': (
        '--runner=beam_spark_inproc.InProcessSparkRunner',
        'beam_spark_inproc.InProcessSparkRunner',
    ),
    # Beam's FnApiRunner over two SDK worker processes (``reference``): set
    # BEAM_CONFORMANCE_REFERENCE=fnapi-multi to run every test there instead.
    'fnapi-multi': (reference.OPTIONS, 'tests.conformance.beam.reference.MultiProcessFnApiRunner'),
}
REFERENCE = os.environ.get('BEAM_CONFORMANCE_REFERENCE', '')
if REFERENCE and REFERENCE not in RUNNERS:
    raise ValueError(
        f'BEAM_CONFORMANCE_REFERENCE={REFERENCE!r}: expected one of {sorted(RUNNERS)}.'
    )


# Beam's integration tests (GCP, expansion services, containers): Beam's unit
# test runs skip them, they run in its post-commit suites against services.
INTEGRATION_MARKERS = {
    'it_postcommit',
    'it_validatescontainer',
    'uses_gcp_java_expansion_service',
    'uses_java_expansion_service',
    'uses_python_expansion_service',
    'uses_io_java_expansion_service',
    'xlang_sql_expansion_service',
    'xlang_wrapper_generation',
    'uses_testcontainer',
    'uses_mock_api',
    'uses_feast',
}


def pytest_configure(config):
    """Registers the markers Beam's test modules use (pytest runs --strict-markers)."""
    import apache_beam

    root = pathlib.Path(apache_beam.__file__).parent
    names = set()
    for area in ('examples', 'transforms', 'dataframe', 'io', 'ml'):
        for path in (root / area).rglob('*_test.py'):
            names.update(re.findall(r'pytest\.mark\.(\w+)', path.read_text()))
    for name in sorted(names):
        config.addinivalue_line('markers', f"{name}: marker of Beam's own tests")


@pytest.fixture(scope='session')
def _temp_location(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp('beam-temp'))


@pytest.fixture(autouse=True)
def _beam_runner(request, monkeypatch):
    engine = getattr(request.module, 'ENGINE', None)
    if engine is None:
        yield
        return
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.testing.test_pipeline import TestPipeline

    if engine == 'spark' and not REFERENCE:
        request.getfixturevalue('spark')  # the run's shared session
    test_options, default_runner = RUNNERS[REFERENCE or engine]
    # Beam's example tests written as integration tests read temp_location from
    # the test options; a local folder lets them run here.
    test_options += ' --temp_location=' + request.getfixturevalue('_temp_location')
    monkeypatch.setattr(TestPipeline, 'pytest_test_pipeline_options', test_options)
    monkeypatch.setattr(StandardOptions, 'DEFAULT_RUNNER', default_runner)
    yield


def pytest_collection_modifyitems(config, items):
    for item in items:
        engine = getattr(item.module, 'ENGINE', None)
        if engine is None:
            continue
        reason = skips.reason(item.nodeid.split('::', 1)[-1])
        if not reason and skips.uses_test_stream(getattr(item, 'function', None)):
            reason = skips.STREAMING
        marked = INTEGRATION_MARKERS.intersection(m.name for m in item.iter_markers())
        if marked and not reason:
            reason = (
                f'Beam integration test ({", ".join(sorted(marked))}): needs '
                'GCP or an expansion service; Beam skips it in unit runs'
            )
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
