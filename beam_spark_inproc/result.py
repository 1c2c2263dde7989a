"""The PipelineResult a run returns, with the metrics its bundles reported."""
from __future__ import annotations

import collections

from apache_beam.metrics import monitoring_infos
from apache_beam.metrics.metric import MetricResults
from apache_beam.portability.api import metrics_pb2
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiMetrics
from apache_beam.runners.runner import PipelineResult
from apache_beam.runners.runner import PipelineState


def monitoring_infos_by_stage(reports: list[dict]) -> dict[str, list]:
    """Consolidates the bundles' monitoring infos per stage (as FnApiRunner does)."""
    by_stage: dict[str, list] = collections.defaultdict(list)
    for report in reports:
        by_stage[report['stage']].extend(
            metrics_pb2.MonitoringInfo.FromString(data)
            for data in report.get('monitoring_infos', ()))
    return {stage: list(monitoring_infos.consolidate(infos))
            for stage, infos in by_stage.items()}


class SparkPipelineResult(PipelineResult):
    """Runs are synchronous: the result is final when ``run()`` returns.

    Metrics come only from bundles whose Spark task attempt succeeded, so
    committed values are exact; attempted values are reported equal to them.
    """

    def __init__(self, state: str, reports: list[dict] | None = None,
                 error: BaseException | None = None):
        super().__init__(state)
        self._error = error
        self._by_stage = monitoring_infos_by_stage(reports or [])

    def wait_until_finish(self, duration=None) -> str:
        if self._error is not None and self._state == PipelineState.FAILED:
            raise self._error
        return self._state

    def cancel(self) -> str:
        return self._state

    def metrics(self) -> MetricResults:
        """User metrics (counters, distributions, gauges, string sets, bounded tries)."""
        return FnApiMetrics(self._by_stage, user_metrics_only=True)

    def monitoring_metrics(self) -> MetricResults:
        """All metrics, including the SDK's own (element counts, timings)."""
        return FnApiMetrics(self._by_stage, user_metrics_only=False)

    def monitoring_infos(self):
        for infos in self._by_stage.values():
            yield from infos
