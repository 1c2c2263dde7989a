"""LiveMetrics: a pipeline's metrics as they arrive, committed and attempted.

Two streams feed it, from different threads:

* ``add_committed(reports)``: the control rows of the Spark jobs that finished
  (``protocol.report``). Spark keeps the rows of successful task attempts only,
  so these are exactly the *committed* metrics.
* ``add_attempt(stage, infos)``: the monitoring infos of a task attempt that
  did not commit (it failed, or its Python worker was stopped), sent by the
  worker itself through the attempt channel (``metrics.attempts``).

*Attempted* = committed + the attempts that did not commit, so attempted >=
committed always, with the difference visible under a retried task. Each
stage's infos are consolidated as they arrive (``metrics.consolidate``), so the
store holds one MonitoringInfo per metric and stage, whatever the bundle count.
"""

from __future__ import annotations

import collections
import threading
from typing import Iterable

from apache_beam.metrics.execution import MetricResult
from apache_beam.metrics.metric import MetricResults
from apache_beam.portability.api import metrics_pb2
from apache_beam.runners.portability import portable_metrics

from beam_spark_inproc.metrics.consolidate import consolidate

# The kinds of MetricResults.query(), in Beam's words, in from_monitoring_infos' order.
KINDS = (
    MetricResults.COUNTERS,
    MetricResults.DISTRIBUTIONS,
    MetricResults.GAUGES,
    MetricResults.STRINGSETS,
    MetricResults.BOUNDED_TRIES,
)


class LiveMetrics:
    """Thread-safe; ``results()`` answers at any time with what arrived so far."""

    def __init__(self, reports: Iterable[dict] = ()):
        self._lock = threading.Lock()
        self._committed: dict[str, list] = {}
        self._uncommitted: dict[str, list] = {}
        self.failed_attempts = 0
        self.add_committed(reports)

    def add_committed(self, reports: Iterable[dict]) -> None:
        new: dict[str, list] = collections.defaultdict(list)
        for report in reports:
            new[report['stage']].extend(
                metrics_pb2.MonitoringInfo.FromString(data)
                for data in report.get('monitoring_infos', ())
            )
        with self._lock:
            for stage, infos in new.items():
                self._committed[stage] = consolidate(self._committed.get(stage, []) + infos)

    def add_attempt(self, stage: str, infos: list) -> None:
        """Metrics of one task attempt whose output Spark discarded."""
        with self._lock:
            self.failed_attempts += 1
            self._uncommitted[stage] = consolidate(self._uncommitted.get(stage, []) + list(infos))

    def committed_by_stage(self) -> dict[str, list]:
        with self._lock:
            return {stage: list(infos) for stage, infos in self._committed.items()}

    def attempted_by_stage(self) -> dict[str, list]:
        with self._lock:
            stages = set(self._committed) | set(self._uncommitted)
            return {
                stage: consolidate(
                    self._committed.get(stage, []) + self._uncommitted.get(stage, [])
                )
                for stage in stages
            }

    def results(self, user_metrics_only: bool = True) -> 'SparkMetricResults':
        return SparkMetricResults(
            self.committed_by_stage(), self.attempted_by_stage(), user_metrics_only
        )


def _by_kind(by_stage: dict[str, list], user_metrics_only: bool) -> list[dict]:
    """Per kind (``KINDS`` order): MetricKey -> value, over all stages."""
    kinds: list[dict] = [{} for _ in KINDS]
    for infos in by_stage.values():
        for merged, found in zip(
            kinds, portable_metrics.from_monitoring_infos(infos, user_metrics_only)
        ):
            merged.update(found)
    return kinds


class SparkMetricResults(MetricResults):
    """Beam MetricResults with committed and attempted told apart.

    A metric only failed attempts touched has committed 0 (counters) or None.
    """

    def __init__(
        self,
        committed_by_stage: dict[str, list],
        attempted_by_stage: dict[str, list],
        user_metrics_only: bool = True,
    ):
        self._committed = _by_kind(committed_by_stage, user_metrics_only)
        self._attempted = _by_kind(attempted_by_stage, user_metrics_only)
        self._infos = [info for infos in committed_by_stage.values() for info in infos]

    def query(self, filter=None) -> dict[str, list]:
        out = {}
        for kind, committed, attempted in zip(KINDS, self._committed, self._attempted):
            missing = 0 if kind == self.COUNTERS else None
            out[kind] = [
                MetricResult(key, committed.get(key, missing), attempted[key])
                for key in attempted
                if self.matches(filter, key)
            ]
        return out

    def monitoring_infos(self) -> list:
        """The committed MonitoringInfos (as Beam's FnApiMetrics gives them)."""
        return list(self._infos)
