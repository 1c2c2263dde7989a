"""Beam-level progress of a run, through logging (logger ``beam_spark_inproc``).

Each Spark job the executor starts is logged with the Beam stages it runs
("stages 2-4 of 7") when it starts and, when it ends, with its time and the
elements each stage read, counted from the bundles' reports (Beam's
``ELEMENT_COUNT`` of the stage's input PCollections). Messages are at INFO:
silent unless the user turns logging on (Beam's examples do), so tests stay
quiet. The same text is the Spark job's description (see ``SparkEngine.job``),
so the Spark UI reads as the pipeline.
"""

from __future__ import annotations

import collections
import logging
import time

from apache_beam.metrics import monitoring_infos
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import metrics_pb2

from beam_spark_inproc.planning import plan as p

LOGGER = logging.getLogger('beam_spark_inproc.progress')
_MAX_LABELS = 6


def stage_ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5] -> '1-3, 6' (1-based, as the user reads them)."""
    ranges: list[list[int]] = []
    for i in sorted(indices):
        if ranges and i == ranges[-1][1] + 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return ', '.join(f'{a + 1}' if a == b else f'{a + 1}-{b + 1}' for a, b in ranges)


def _input_pcollections(stage: p.StagePlan) -> set[str]:
    if not stage.descriptor:
        return set()
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    ids = set()
    for port in stage.inputs:
        transform = descriptor.transforms.get(port.transform_id)
        if transform is not None:
            ids.update(transform.outputs.values())
    return ids


def elements_read(plan: p.SparkPlan, reports: list[dict]) -> dict[str, int]:
    """Stage name -> elements its bundles read, from the reports given."""
    inputs = {s.name: _input_pcollections(s) for s in plan.stages}
    counts: dict[str, int] = collections.Counter()
    for r in reports:
        wanted = inputs.get(r.get('stage', ''), set())
        for data in r.get('monitoring_infos', ()):
            info = metrics_pb2.MonitoringInfo.FromString(data)
            if (
                info.urn == monitoring_infos.ELEMENT_COUNT_URN
                and info.labels.get(monitoring_infos.PCOLLECTION_LABEL) in wanted
            ):
                counts[r['stage']] += monitoring_infos.extract_counter_value(info)
    return counts


class Progress:
    """Describes and logs the Spark jobs of one pipeline run."""

    def __init__(self, plan: p.SparkPlan, job_id: str):
        self.plan = plan
        self.pipeline = job_id[:8]
        self.jobs = 0
        self._started = 0.0

    def describe(self, indices: list[int], what: str) -> str:
        """The job's description: its Beam stages, by position and labels."""
        n = len(self.plan.stages)
        labels: list[str] = []
        for i in sorted(indices):
            labels.extend(self.plan.stages[i].labels or (self.plan.stages[i].kind,))
        shown = ', '.join(labels[:_MAX_LABELS])
        if len(labels) > _MAX_LABELS:
            shown += f', ... ({len(labels) - _MAX_LABELS} more)'
        stages = f'stages {stage_ranges(indices)} of {n}' if indices else 'no new stages'
        return f'Beam pipeline {self.pipeline}, job {self.jobs + 1} ({what}): {stages}: {shown}'

    def started(self, description: str) -> None:
        self.jobs += 1
        self._started = time.monotonic()
        LOGGER.info('%s: started', description)

    def done(self, description: str, reports: list[dict]) -> None:
        seconds = time.monotonic() - self._started
        counts = elements_read(self.plan, reports)
        index = {s.name: i for i, s in enumerate(self.plan.stages)}
        read = '; '.join(
            f'stage {index[name] + 1}: {count} elements'
            for name, count in sorted(counts.items(), key=lambda kv: index[kv[0]])
        )
        LOGGER.info('%s: done in %.2f s%s', description, seconds, f' (read {read})' if read else '')
