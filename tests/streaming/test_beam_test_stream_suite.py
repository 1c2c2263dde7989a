"""Beam's ``testing/test_stream_test.py`` on this runner (debug engine).

Beam runs these on its BundleBasedDirectRunner (the oracle); here the same
tests, unchanged, run on the micro-batch loop.
"""

from __future__ import annotations

import os

from apache_beam.testing import test_stream_test

from tests.streaming.beam_suites import debug_runner
from tests.streaming.beam_suites import spark_runner
from tests.streaming.beam_suites import suite_on

SKIPS: dict[str, str] = {
    'test_basic_execution_with_service': (
        'a TestStream reading its events from a TestStream service is not '
        'run yet: rejected before it runs'
    ),
    'test_windowed_values_interpreted_correctly': "the TestStream's output PCollection is "
    'globally windowed, so its wire coder (GlobalWindowCoder) cannot carry the IntervalWindow a '
    'WindowedValueHolder asks for; only a runner that never encodes '
    'TestStream output (the DirectRunner) can pass it',
}

DebugTestStreamTest = suite_on(
    test_stream_test.TestStreamTest, debug_runner, 'DebugTestStreamTest', SKIPS
)
DebugTestStreamTest.__module__ = __name__

if os.environ.get('BEAM_SPARK_INPROC_FULL_CONFORMANCE'):
    # The same suite on Spark: slow (every micro-batch is Spark jobs), so only
    # when asked for.
    SparkTestStreamTest = suite_on(
        test_stream_test.TestStreamTest, spark_runner, 'SparkTestStreamTest', SKIPS
    )
    SparkTestStreamTest.__module__ = __name__
