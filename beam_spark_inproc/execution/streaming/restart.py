"""The commit record: what a micro-batch commits, and restart from it.

A commit record (``store``) is written after every micro-batch (``commit``,
this module being the one that writes and reads its fields); a stream run
again with the same ``--checkpoint_location`` resumes after the newest one
(``restore``):

* **watermarks** of every stage (input and output), and for each stage the
  current version and summary of each state bucket. The buckets hold
  everything keyed that waits: buffered GroupByKey panes and trigger state,
  stateful DoFns' user state and pending timers. Nothing else lives between
  micro-batches, so restoring the bucket map restores state, timers and
  pending panes as committed.
* **source positions**: each source of the loop is a ``source.StreamSource``:
  it gives a JSON-able ``checkpoint()`` of where it stands (TestStream: the
  next event's index, the virtual clock, the watermarks of its outputs) and
  ``restore``\\ s it; replaying from there yields the same events. A source
  that cannot replay (reading a queue that forgets what it delivered) would
  lose or repeat the events of the micro-batch that was running when the
  driver died: it must not be a loop source without saying so (see
  docs/streaming.md).
* **committed metrics**: the consolidated metrics of every committed
  micro-batch, so ``metrics()`` of the resumed run counts each element once.
* **what the driver holds** for stages (``driver_state``): side-input values
  and fired windows with the main-input elements pushed back behind them
  (``side_inputs``), splittable DoFns' pending residuals with their due times
  and watermarks (``residuals``). Written as a file (``driver/N.pickle``, a
  pickle of bytes, windows and numbers, keyed by ``stage_key``) before the
  commit record, which names it. Due times are processing times: TestStream's
  clock, restored with its position, or the wall clock (a residual due while
  the driver was down runs at once).
* **the drain** (``drain``), once one has begun: who asked, where the
  sources stopped, whether it is done; a restart drains on.

Changed code on the same checkpoint (an update) finds an old stage's record by
the labels of the transforms holding its state (``update``).

The micro-batch that was running when the driver died is replayed whole, from
the committed state and source positions: its outputs and state writes are
produced again (state folders of uncommitted micro-batches are removed first).
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

from apache_beam.portability.api import metrics_pb2
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.execution.streaming.store import stage_key
from beam_spark_inproc.metrics.consolidate import consolidate
from beam_spark_inproc.protocol.state import Summary


class CommittedMetrics:
    """The consolidated metrics of the committed micro-batches, per stage."""

    def __init__(self):
        self._by_stage: dict[str, list] = {}

    def add(self, reports: list[dict]) -> None:
        for r in reports:
            infos = [
                metrics_pb2.MonitoringInfo.FromString(d) for d in r.get('monitoring_infos', ())
            ]
            if infos:
                self._by_stage[r['stage']] = consolidate(self._by_stage.get(r['stage'], []) + infos)

    def by_stage(self) -> dict[str, list]:
        """Stage name -> its consolidated MonitoringInfos so far."""
        return self._by_stage

    def record(self) -> dict:
        return {
            stage: [base64.b64encode(i.SerializeToString()).decode('ascii') for i in infos]
            for stage, infos in sorted(self._by_stage.items())
        }

    def restore(self, record: dict) -> list[dict]:
        """Restores a ``record()``; returns it as reports (``protocol.report``)."""
        reports = [
            {'stage': stage, 'monitoring_infos': [base64.b64decode(d) for d in infos]}
            for stage, infos in record.items()
        ]
        self._by_stage = {}
        self.add(reports)
        return reports


def driver_state(executor: Any) -> bytes | None:
    """What the driver holds for ``executor``'s stages (see the module doc),
    or None when it holds nothing for any stage (no side inputs, no
    splittable DoFn)."""
    stages = {}
    for index, stage in enumerate(executor.plan.stages):
        kept = {}
        if index in executor.gates:
            kept['gate'] = executor.gates[index].checkpoint()
        if stage.split_input:
            kept['residuals'] = executor.residuals.checkpoint(index)
        if kept:
            stages[stage_key(stage.name)] = kept
    return pickle.dumps(stages, protocol=4) if stages else None


def _restore_driver_state(executor: Any, index_of: dict, path: str) -> None:
    # The checkpoint location is the pipeline's own (``store``): trusted as
    # its code is.
    with open(path, 'rb') as f:
        stages = pickle.load(f)
    for key, kept in stages.items():
        i = index_of.get(key)
        if i is None:  # a stage whose state an update dropped
            continue
        if 'gate' in kept and i in executor.gates:
            executor.gates[i].restore(kept['gate'])
        if 'residuals' in kept and executor.plan.stages[i].split_input:
            executor.residuals.restore(i, kept['residuals'])


def describe(executor: Any, record: dict, committed_at: float | None, now: float) -> str:
    """One line, in the user's transform labels: where a restarted stream
    resumes (after ``restore``): the stream's id, the micro-batch it resumes
    after and when that was committed, its sources' positions, splittable
    DoFns' pending restrictions, and the lowest output watermark with its
    stage."""
    from beam_spark_inproc.execution.streaming.progress import display_name
    from beam_spark_inproc.execution.streaming.progress import instant
    from beam_spark_inproc.status import human_seconds

    plan = executor.plan
    when = ''
    if committed_at is not None:
        moment = Timestamp(seconds=int(committed_at)).to_rfc3339()
        when = f', committed {moment} ({human_seconds(max(now - committed_at, 0.0))} ago)'
    places = [
        f'{_label(plan.stages[i])!r} at {_position(source)}'
        for i, source in sorted(executor.sources.items())
    ]
    places += [
        f'{_label(stage)!r} {n} restriction{"s" if n != 1 else ""} pending'
        for i, stage in enumerate(plan.stages)
        if stage.split_input
        for n in [executor.residuals.waiting(i, float('inf'))[0]]
    ]
    if len(places) > _SHOWN:
        places = places[:_SHOWN] + [f'{len(places) - _SHOWN} more']
    lowest = min(range(len(plan.stages)), key=lambda i: executor.watermarks.output[i], default=None)
    watermark = (
        f'lowest output watermark {instant(executor.watermarks.output[lowest])} '
        f'({_short(display_name(plan.stages[lowest]))!r})'
        if lowest is not None
        else 'no stages'
    )
    return (
        f'Stream {executor.stream_id} resumes after micro-batch {record["micro_batch"]}'
        f'{when}: {"; ".join(places) or "no sources"}; {watermark}'
    )


_SHOWN = 3  # sources named in a restart's line (then "N more")


def _label(stage: Any) -> str:
    return _short(stage.labels[0] if stage.labels else stage.name)


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + '…'


def _position(source: Any) -> str:
    describe = getattr(source, 'describe_position', None)
    if describe is not None:
        return describe()
    return _short(str(source.checkpoint()), 80)


def commit(executor: Any) -> None:
    """Writes the commit record of ``executor``'s micro-batch just run (its
    driver state first, then the record naming it)."""
    store = executor.store
    held = driver_state(executor)  # before the record naming it
    watermarks, buckets = executor.watermarks, executor.buckets
    store.commit(
        executor.micro_batch,
        {
            'driver_state': (
                None
                if held is None
                else store.relative(store.write_driver_state(executor.micro_batch, held))
            ),
            'micro_batch': executor.micro_batch,
            'stages': [
                {
                    'name': stage.name,
                    'input_watermark': watermarks.input[i].micros,
                    'output_watermark': watermarks.output[i].micros,
                    'state_buckets': buckets.counts[i],
                    'aliases': buckets.aliases[i],
                    'buckets': {
                        str(b): {
                            'path': store.relative(buckets.versions[i][b]),
                            'keys': s.keys,
                            'hold': s.hold.micros,
                            'event_timer': s.event_timer.micros,
                            'processing_timer': s.processing_timer,
                        }
                        for b, s in sorted(buckets.summaries[i].items())
                    },
                }
                for i, stage in enumerate(executor.plan.stages)
            ],
            'residuals': executor.residuals.counts(),
            'sources': {str(i): s.checkpoint() for i, s in executor.sources.items()},
            'metrics': executor.committed_metrics.record(),
            'drain': executor.drain.record(executor),  # ``drain``
            'progress': executor.progress.record(executor),  # ``progress``
        },
    )


def restore(executor: Any, record: dict) -> None:
    """Puts a ``StreamingExecutor`` where commit ``record`` left it."""
    # By ``stage_key``: another process may name and order them differently.
    index_of = {stage_key(stage.name): i for i, stage in enumerate(executor.plan.stages)}
    stages = record['stages']
    update = executor.store.update  # another pipeline's state (``update``)
    if update is not None:  # the old stages whose state moved, by label
        update.index(index_of)
    elif sorted(stage_key(s['name']) for s in stages) != sorted(index_of):
        raise ValueError(
            f"commit record {record['micro_batch']} does not match the pipeline's stages"
        )
    for stage in stages:
        i = index_of.get(stage_key(stage['name']))
        if i is None:  # a stateless stage an update changed
            continue
        executor.watermarks.restore(
            i,
            Timestamp(micros=stage['input_watermark']),
            Timestamp(micros=stage['output_watermark']),
        )
        executor.buckets.restore(
            i,
            stage.get('state_buckets'),
            {
                int(b): Summary(
                    s['keys'],
                    Timestamp(micros=s['hold']),
                    Timestamp(micros=s['event_timer']),
                    float(s['processing_timer']),
                )
                for b, s in stage['buckets'].items()
            },
            {int(b): executor.store.absolute(s['path']) for b, s in stage['buckets'].items()},
            stage.get('aliases', ()),
        )
    for old, position in record['sources'].items():
        i = index_of.get(stage_key(stages[int(old)]['name']))
        if i is not None:
            executor.sources[i].restore(position)
    if record.get('driver_state'):
        _restore_driver_state(executor, index_of, executor.store.absolute(record['driver_state']))
    executor.drain.restore(record.get('drain'), executor.stream_id)
    if update is not None:
        update.after_restore(executor, record)
    executor.resume_after(record['micro_batch'])
