"""Runs Beam's own TestStream-based test classes on InProcessSparkRunner.

Beam's tests build ``TestPipeline(options=...)``, which picks the DirectRunner,
or a plain ``beam.Pipeline()``, which takes ``StandardOptions.DEFAULT_RUNNER``;
``on_runner`` points both at this runner (debug engine or Spark), the rest of
Beam's test unchanged.
"""

from __future__ import annotations

import contextlib
import unittest
from typing import Iterable
from unittest import mock

from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline

_original_init = TestPipeline.__init__


@contextlib.contextmanager
def on_runner(make_runner):
    def init(self, runner=None, *args, **kwargs):
        _original_init(self, runner or make_runner(), *args, **kwargs)

    with (
        mock.patch.object(TestPipeline, '__init__', init),
        mock.patch.object(StandardOptions, 'DEFAULT_RUNNER', make_runner.default_runner),
    ):
        yield


def debug_runner():
    from beam_spark_inproc import InProcessSparkRunner

    return InProcessSparkRunner(debug=True)


debug_runner.default_runner = 'beam_spark_inproc.testing.runners.InProcessDebugRunner'


def spark_runner():
    """On the test run's shared SparkSession."""
    from beam_spark_inproc import InProcessSparkRunner
    from tests.conftest import shared_session

    return InProcessSparkRunner(spark=shared_session())


# a plain beam.Pipeline() gets the active session: the run's shared one
spark_runner.default_runner = 'beam_spark_inproc.InProcessSparkRunner'


def suite_on(
    base: type, make_runner, name: str, skips: dict[str, str], only: Iterable[str] | None = None
) -> type:
    """``base`` (a unittest.TestCase of Beam's) whose pipelines run on
    ``make_runner()``; tests in ``skips`` are skipped with their reason.

    ``only``: run just these tests of ``base`` (its TestStream tests; the
    others run in the batch conformance tier, ``tests/conformance/beam``)."""

    def setUp(self):
        stack = contextlib.ExitStack()
        stack.enter_context(on_runner(make_runner))
        self.addCleanup(stack.close)
        base.setUp(self)

    cls = type(name, (base,), {'setUp': setUp, '__module__': base.__module__})
    if only is not None:
        only = set(only)
        for test in unittest.TestLoader().getTestCaseNames(base):
            if test not in only:
                setattr(cls, test, None)  # not collected: not callable
    for test, reason in skips.items():
        assert hasattr(cls, test), test
        setattr(cls, test, unittest.skip(reason)(getattr(base, test)))
    return cls
