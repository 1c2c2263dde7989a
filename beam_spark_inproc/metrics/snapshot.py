"""Snapshot: a pipeline's metrics at one moment, as plain data for the sinks.

Every user metric becomes a ``MetricRecord`` with its namespace, name, step
(the Beam transform's label), kind, and attempted and committed values in JSON
form: a counter is an int; a distribution ``{"count", "sum", "min", "max"}``;
a gauge ``{"value", "timestamp"}`` (seconds since the epoch); a string set
a sorted list; a bounded trie a sorted list of ``[segment..., truncated]``.
A value a metric does not have (committed, for a metric only failed attempts
touched) is null (counters: 0).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from apache_beam.metrics.metric import MetricResults

from beam_spark_inproc.metrics.live import KINDS
from beam_spark_inproc.metrics.live import LiveMetrics

# Beam's query() kinds -> the kind names pushed.
KIND_NAMES = {
    MetricResults.COUNTERS: 'counter',
    MetricResults.DISTRIBUTIONS: 'distribution',
    MetricResults.GAUGES: 'gauge',
    MetricResults.STRINGSETS: 'string_set',
    MetricResults.BOUNDED_TRIES: 'bounded_trie',
}


@dataclasses.dataclass(frozen=True)
class MetricRecord:
    namespace: str
    name: str
    step: str
    kind: str
    attempted: Any
    committed: Any


@dataclasses.dataclass(frozen=True)
class Snapshot:
    pipeline_id: str
    job_name: str
    state: str
    timestamp: float  # seconds since the epoch
    sequence: int  # 1 for a pipeline's first push
    metrics: tuple[MetricRecord, ...]

    def to_json(self) -> dict:
        return {
            'pipeline_id': self.pipeline_id,
            'job_name': self.job_name,
            'state': self.state,
            'timestamp': self.timestamp,
            'sequence': self.sequence,
            'metrics': [dataclasses.asdict(m) for m in self.metrics],
        }


def plain(kind: str, value: Any) -> Any:
    """A MetricResult's committed or attempted value as JSON data."""
    if value is None:
        return None
    if kind == 'counter':
        return int(value)
    if kind == 'distribution':
        data = value.data
        return {'count': data.count, 'sum': data.sum, 'min': data.min, 'max': data.max}
    if kind == 'gauge':
        return {'value': value.value, 'timestamp': value.timestamp}
    if kind == 'string_set':
        return sorted(value)
    if kind == 'bounded_trie':
        return sorted([list(path) for path in value.get_result()])
    raise ValueError(f'Unknown metric kind {kind!r}')


def take(
    metrics: LiveMetrics,
    pipeline_id: str,
    job_name: str,
    state: str,
    sequence: int,
    gauges: tuple[MetricRecord, ...] = (),
) -> Snapshot:
    """The user metrics of ``metrics`` now, and the runner's ``gauges``
    (a stream's progress, ``execution.streaming.progress.gauges``)."""
    results = metrics.results(user_metrics_only=True).query()
    records = []
    for query_kind in KINDS:
        kind = KIND_NAMES[query_kind]
        for result in results[query_kind]:
            records.append(
                MetricRecord(
                    namespace=result.key.metric.namespace,
                    name=result.key.metric.name,
                    step=result.key.step,
                    kind=kind,
                    attempted=plain(kind, result.attempted),
                    committed=plain(kind, result.committed),
                )
            )
    records.extend(gauges)
    records.sort(key=lambda r: (r.step, r.namespace, r.name, r.kind))
    return Snapshot(pipeline_id, job_name, state, time.time(), sequence, tuple(records))
