"""Restart from a commit record: what a micro-batch commits besides its state.

A commit record (``store``) is written after every micro-batch; a stream run
again with the same ``--checkpoint_location`` resumes after the newest one:

* **watermarks** of every stage (input and output), and for each stage the
  current version and summary of each state bucket. The buckets hold
  everything keyed that waits: buffered GroupByKey panes and trigger state,
  stateful DoFns' user state and pending timers. Nothing else lives between
  micro-batches, so restoring the bucket map restores state, timers and
  pending panes as committed.
* **source positions**: each source of the loop is a ``ReplayableSource``: it
  gives a JSON-able ``checkpoint()`` of where it stands (TestStream: the next
  event's index, the virtual clock, the watermarks of its outputs) and
  ``restore``\\ s it; replaying from there yields the same events. A source
  that cannot replay (reading a queue that forgets what it delivered) would
  lose or repeat the events of the micro-batch that was running when the
  driver died: it must not be a loop source without saying so (see
  docs/streaming.md).
* **committed metrics**: the consolidated metrics of every committed
  micro-batch, so ``metrics()`` of the resumed run counts each element once.

The micro-batch that was running when the driver died is replayed whole, from
the committed state and source positions: its outputs and state writes are
produced again (state folders of uncommitted micro-batches are removed first).
"""
from __future__ import annotations

import base64
from typing import Any, Protocol

from apache_beam.portability.api import metrics_pb2
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.execution.streaming.store import stage_key
from beam_spark_inproc.worker.streaming import Summary


class ReplayableSource(Protocol):
    """A source the micro-batch loop reads: one step per micro-batch."""

    @property
    def exhausted(self) -> bool: ...

    def watermark(self, port: int) -> Timestamp: ...

    def step(self) -> list: ...

    def checkpoint(self) -> dict:
        """Where the source stands after the last step (JSON-able)."""

    def restore(self, record: dict) -> None:
        """Back to a ``checkpoint()``: the next ``step`` yields what the step
        after that checkpoint yielded."""


class CommittedMetrics:
    """The consolidated metrics of the committed micro-batches, per stage."""

    def __init__(self):
        self._by_stage: dict[str, list] = {}

    def add(self, reports: list[dict]) -> None:
        from beam_spark_inproc.result import consolidate
        for r in reports:
            infos = [metrics_pb2.MonitoringInfo.FromString(d)
                     for d in r.get('monitoring_infos', ())]
            if infos:
                self._by_stage[r['stage']] = consolidate(
                    self._by_stage.get(r['stage'], []) + infos)

    def record(self) -> dict:
        return {stage: [base64.b64encode(i.SerializeToString()).decode('ascii')
                        for i in infos]
                for stage, infos in sorted(self._by_stage.items())}

    def restore(self, record: dict) -> list[dict]:
        """Restores a ``record()``; returns it as reports (``worker.report``)."""
        reports = [{'stage': stage,
                    'monitoring_infos': [base64.b64decode(d) for d in infos]}
                   for stage, infos in record.items()]
        self._by_stage = {}
        self.add(reports)
        return reports


class NotRestorableError(ValueError):
    """A checkpoint this pipeline's stream cannot resume from (yet)."""


def check_restorable(plan: Any, root: str) -> None:
    """Side-input values, pushed-back elements and splittable DoFns' pending
    residuals live in the driver, not in the commit record: resuming such a
    stream would lose them. Refused before anything runs, nothing changed."""
    found = [f'{", ".join(stage.labels) or stage.name} ({what})'
             for stage in plan.stages
             for what in (['side inputs'] if stage.side_inputs else [])
             + (['a splittable DoFn'] if stage.split_input else [])]
    if found:
        raise NotRestorableError(
            f'--checkpoint_location {root!r} holds committed micro-batches of '
            'this pipeline, but resuming a stream with side inputs or '
            'splittable DoFns is not supported yet (their driver-held state '
            'is not in the commit record; issue #14): '
            + '; '.join(found) + '. Its committed state was left as it is; remove '
            'the folder or '
            'give another location to start the stream afresh.')


def restore(executor: Any, record: dict) -> None:
    """Puts a ``StreamingExecutor`` where commit ``record`` left it."""
    # By ``stage_key``: another process may name and order them differently.
    index_of = {stage_key(stage.name): i
                for i, stage in enumerate(executor.plan.stages)}
    stages = record['stages']
    if sorted(stage_key(s['name']) for s in stages) != sorted(index_of):
        raise ValueError(f'commit record {record["micro_batch"]} does not '
                         'match the pipeline\'s stages')
    for stage in stages:
        i = index_of[stage_key(stage['name'])]
        executor.input_wm[i] = Timestamp(micros=stage['input_watermark'])
        executor.output_wm[i] = Timestamp(micros=stage['output_watermark'])
        executor.summaries[i] = {
            int(b): Summary(s['keys'], Timestamp(micros=s['hold']),
                            Timestamp(micros=s['event_timer']),
                            float(s['processing_timer']))
            for b, s in stage['buckets'].items()}
        executor.versions[i] = {int(b): s['path']
                                for b, s in stage['buckets'].items()}
    for old, position in record['sources'].items():
        executor.sources[index_of[stage_key(stages[int(old)]['name'])]].restore(
            position)
    executor.micro_batch = record['micro_batch'] + 1
    executor._impulse_done = True
