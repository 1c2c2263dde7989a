"""What each read of a stream has left, and whether it has caught up.

A stream reads through its sources (``source.StreamSource``: TestStreams,
ReadFromSpark over a streaming DataFrame) and its splittable DoFns
(PeriodicImpulse, ``fileio.MatchContinuously``, any unbounded reader built on
a splittable DoFn). At each commit the progress (``progress``) takes, for each
of them, one entry (``reads``)::

    {'source': 'Watch inbox', 'stage': 3, 'kind': 'splittable DoFn',
     'elements': 6,                  # emitted so far (committed)
     'backlog': {'due_restrictions': 0, 'waiting_restrictions': 1,
                 'next_due_in_seconds': 0.4},
     'caught_up': True}

and the stream is **caught up** when every read is (``caught_up``): it has
read everything that was there to read when it last looked.

* a **splittable DoFn** is caught up when none of its restrictions is due: the
  ones left wait for their resume delay (a poll interval, PeriodicImpulse's
  next tick); one that is due at the commit (the stream falls behind its
  polls, or a runner split left work) is backlog. What landed since its last
  poll it sees at the next one, ``next_due_in_seconds`` from the commit;
* a **TestStream** is caught up once every event is replayed (``events``: how
  many are left);
* a **Spark stream** (``transforms.spark_stream``) is caught up when every
  batch Spark's query staged is read and the query found no new data at its
  last look (Spark's ``StreamingQuery.status``: ``isDataAvailable`` false, no
  trigger running); ``staged_batches``/``staged_rows`` are what is staged and
  not read yet.

A source says it by ``backlog()`` (a dict, and whether it is caught up); one
without that method is counted as caught up when it is ``exhausted``.
"""

from __future__ import annotations

import math
from typing import Any

from apache_beam.metrics import monitoring_infos
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2

from beam_spark_inproc.execution.streaming.store import stage_key
from beam_spark_inproc.planning import plan as p

_PROCESS_SIZED = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn
KINDS = {p.TEST_STREAM_STAGE: 'TestStream', p.NATIVE_STAGE: 'Spark stream'}


def read_label(stage: p.StagePlan) -> str:
    """The user's label of the read a stage runs: a splittable DoFn's
    outermost transform (``Watch inbox`` for
    ``Watch inbox/Watch/ParDo(_WatchGrowthDoFn)``), a source's own label."""
    if stage.split_input and stage.descriptor:
        descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
        for transform in descriptor.transforms.values():
            if transform.spec.urn == _PROCESS_SIZED:
                return transform.unique_name.split('/')[0]
    return stage.labels[0] if stage.labels else stage.name


def _read_outputs(stage: p.StagePlan) -> set[str]:
    """The PCollections a splittable DoFn's stage emits from its DoFn."""
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    return {
        pcoll
        for transform in descriptor.transforms.values()
        if transform.spec.urn == _PROCESS_SIZED
        for pcoll in transform.outputs.values()
    }


class Reads:
    """A plan's reads (module doc), described at each commit (``take``)."""

    def __init__(self, plan: p.SparkPlan):
        self._plan = plan
        self._labels = {
            i: read_label(s)
            for i, s in enumerate(plan.stages)
            if s.split_input or s.kind == p.TEST_STREAM_STAGE
        }
        self._outputs = {
            i: _read_outputs(s) for i, s in enumerate(plan.stages) if s.split_input and s.descriptor
        }

    def _emitted(self, committed: Any) -> dict[int, int]:
        """Elements each splittable DoFn emitted so far (committed metrics)."""
        keys = {stage_key(self._plan.stages[i].name): i for i in self._outputs}
        counts = dict.fromkeys(self._outputs, 0)
        for name, infos in committed.by_stage().items():
            i = keys.get(stage_key(name))
            if i is None:
                continue
            for info in infos:
                if info.urn == monitoring_infos.ELEMENT_COUNT_URN and (
                    info.labels.get(monitoring_infos.PCOLLECTION_LABEL) in self._outputs[i]
                ):
                    counts[i] += monitoring_infos.extract_counter_value(info)
        return counts

    def take(self, executor: Any, source_elements: list, clock: float) -> list[dict]:
        """One entry per read (module doc), in stage order. ``source_elements``:
        per stage, what its readers read of a source's outputs (``progress``)."""
        found = []
        for i, source in sorted(executor.sources.items()):
            stage = self._plan.stages[i]
            backlog, caught_up = _source_backlog(source)
            entry = {
                'source': self._labels.get(i) or read_label(stage),
                'stage': i + 1,
                'kind': KINDS.get(stage.kind, stage.kind),
                'elements': source_elements[i],
                'backlog': backlog,
                'caught_up': caught_up,
            }
            describe = getattr(source, 'describe_position', None)
            if describe is not None:
                entry['position'] = describe()
            found.append(entry)
        emitted = self._emitted(executor.committed_metrics) if self._outputs else {}
        for i in sorted(self._outputs):
            pending, due = executor.residuals.waiting(i, clock)
            nxt = executor.residuals.next_due_of(i)
            found.append(
                {
                    'source': self._labels[i],
                    'stage': i + 1,
                    'kind': 'splittable DoFn',
                    'elements': emitted.get(i, 0),
                    'backlog': {
                        'due_restrictions': due,
                        'waiting_restrictions': pending - due,
                        'next_due_in_seconds': (
                            None if math.isinf(nxt) else round(max(nxt - clock, 0.0), 3)
                        ),
                    },
                    'caught_up': due == 0,
                }
            )
        return sorted(found, key=lambda r: r['stage'])


def _source_backlog(source: Any) -> tuple[dict, bool]:
    backlog = getattr(source, 'backlog', None)
    if backlog is None:
        return {}, bool(source.exhausted)
    try:
        return backlog()
    except Exception as e:  # a source that cannot tell (a stopped session)
        return {'unknown': str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}, False


def caught_up(reads: list[dict]) -> bool | None:
    """Whether every read is caught up (None: the stream has none)."""
    return all(r['caught_up'] for r in reads) if reads else None
