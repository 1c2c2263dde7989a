"""The PipelineResult a run returns."""
from __future__ import annotations

from apache_beam.metrics.metric import MetricResults
from apache_beam.runners.runner import PipelineResult
from apache_beam.runners.runner import PipelineState


class _NoMetrics(MetricResults):
    """Metrics are collected from task results in a later version (issue #3)."""

    def query(self, filter=None):
        return {self.COUNTERS: [], self.DISTRIBUTIONS: [], self.GAUGES: [],
                self.STRINGSETS: [], self.BOUNDED_TRIES: []}


class SparkPipelineResult(PipelineResult):
    """Runs are synchronous: the result is final when ``run()`` returns."""

    def __init__(self, state: str, error: BaseException | None = None):
        super().__init__(state)
        self._error = error

    def wait_until_finish(self, duration=None) -> str:
        if self._error is not None and self._state == PipelineState.FAILED:
            raise self._error
        return self._state

    def cancel(self) -> str:
        return self._state

    def metrics(self) -> MetricResults:
        return _NoMetrics()
