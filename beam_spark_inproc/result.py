"""The PipelineResult a run returns, with the metrics its bundles reported."""
from __future__ import annotations

import collections

from apache_beam.coders import IterableCoder
from apache_beam.coders import StrUtf8Coder
from apache_beam.metrics import monitoring_infos
from apache_beam.metrics.metric import MetricResults
from apache_beam.portability.api import metrics_pb2
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiMetrics
from apache_beam.runners.runner import PipelineResult


def monitoring_infos_by_stage(reports: list[dict]) -> dict[str, list]:
    """Consolidates the bundles' monitoring infos per stage."""
    by_stage: dict[str, list] = collections.defaultdict(list)
    for report in reports:
        by_stage[report['stage']].extend(
            metrics_pb2.MonitoringInfo.FromString(data)
            for data in report.get('monitoring_infos', ()))
    return {stage: consolidate(infos) for stage, infos in by_stage.items()}


def _merge_latest(a, b):
    ts_a, _ = monitoring_infos.extract_gauge_value(a)
    ts_b, _ = monitoring_infos.extract_gauge_value(b)
    return b if ts_b >= ts_a else a


def _merge_string_sets(a, b):
    union = (monitoring_infos.extract_string_set_value(a)
             | monitoring_infos.extract_string_set_value(b))
    merged = metrics_pb2.MonitoringInfo()
    merged.CopyFrom(a)
    merged.payload = IterableCoder(StrUtf8Coder()).encode(sorted(union))
    return merged


def _merge_bounded_tries(a, b):
    trie = monitoring_infos.extract_bounded_trie_value(a).combine(
        monitoring_infos.extract_bounded_trie_value(b))
    merged = metrics_pb2.MonitoringInfo()
    merged.CopyFrom(a)
    merged.payload = trie.to_proto().SerializeToString()
    return merged


# Beam's ``monitoring_infos.consolidate`` sums counters and merges
# distributions; the other kinds would come out once per bundle, and the last
# bundle's value would win. These merge them as their metric cells do.
_MERGERS = {
    monitoring_infos.LATEST_INT64_TYPE: _merge_latest,
    monitoring_infos.STRING_SET_TYPE: _merge_string_sets,
    monitoring_infos.BOUNDED_TRIE_TYPE: _merge_bounded_tries,
}


def consolidate(infos: list) -> list:
    """One MonitoringInfo per metric and label set, whatever the bundle count."""
    merged: dict = {}
    rest = []
    for info in infos:
        merge = _MERGERS.get(info.type)
        if merge is None:
            rest.append(info)
            continue
        key = monitoring_infos.to_key(info)
        merged[key] = merge(merged[key], info) if key in merged else info
    return list(monitoring_infos.consolidate(rest)) + list(merged.values())


class SparkPipelineResult(PipelineResult):
    """Runs are synchronous: the result is final when ``run()`` returns (a
    failed run raises from ``run()`` itself, so a result is always DONE).

    Metrics come only from bundles whose Spark task attempt succeeded, so
    committed values are exact; attempted values are reported equal to them.
    """

    def __init__(self, state: str, reports: list[dict] | None = None):
        super().__init__(state)
        self._by_stage = monitoring_infos_by_stage(reports or [])

    def wait_until_finish(self, duration=None) -> str:
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
