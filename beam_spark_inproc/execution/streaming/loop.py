"""The micro-batch loop: a stream as a sequence of ordinary batch jobs.

Each micro-batch takes the next source event (a TestStream event; the impulse
of bounded sources in the first one) and walks the plan's stages in order
(Beam's ``sort_stages`` order, producers first). For each stage:

* its **input watermark** after the micro-batch is the minimum of the output
  watermarks of the stages (and TestStream outputs) it reads, as they stand
  after this micro-batch's upstream work: a watermark step cascades through
  every stage in one micro-batch;
* a stage reading a GroupByKey, or running a stateful DoFn, runs when it has new input or when one of its
  state buckets has a due timer (the summaries say which): its task gets the
  new rows plus the state rows of those buckets, judges lateness against the
  stage's own input watermark before the micro-batch, then fires the timers up
  to the new one (``worker.streaming``, ``worker.streaming_keyed``); the new state of the touched buckets
  is written (``store``), the summaries replace the old ones;
* its **output watermark** is min(input watermark, holds): for a GroupByKey
  stage, the earliest watermark hold of its buckets (buffered panes; pending
  timers' output timestamps in a stateful stage), else the
  input watermark (it holds nothing between micro-batches);
* other stages run when they have new input.

A commit record is written after every micro-batch. The stream is done when the
sources are exhausted and every watermark is +inf (or nothing moves any more).
The engine does the work (``map_stage``, ``shuffle``, ``union``...) plus a few
streaming primitives (``LocalStreamOps``/``SparkStreamOps``).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.execution.streaming.residuals import ResidualSchedule
from beam_spark_inproc.execution.streaming.restart import CommittedMetrics
from beam_spark_inproc.execution.streaming.side_inputs import SideInputGate
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.execution.streaming.test_stream import TestStreamSource
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.execution.executor import reshuffle
from beam_spark_inproc.execution.executor import wire
from beam_spark_inproc.worker import report
from beam_spark_inproc.worker.rows import CONTROL_TAG
from beam_spark_inproc.worker.rows import SCHEDULED_TAG
from beam_spark_inproc.worker.rows import SUMMARY_TAG
from beam_spark_inproc.worker.stage_task import StageTask
from beam_spark_inproc.worker.streaming import StreamingStep
from beam_spark_inproc.worker.streaming import Summary
from beam_spark_inproc.worker.streaming import bucket_of

_LOGGER = logging.getLogger(__name__)


class StreamingExecutor:
    def __init__(self, plan: p.SparkPlan, engine: Any, ops: Any, job_id: str,
                 store: CheckpointStore, cancelled: threading.Event,
                 on_reports: Callable[[list[dict]], None],
                 after_micro_batch: Callable[[int], None] | None = None):
        self.plan = plan
        self.engine = engine
        self.ops = ops
        self.job_id = job_id
        self.store = store
        self.cancelled = cancelled
        self.on_reports = on_reports
        self.after_micro_batch = after_micro_batch
        components = beam_runner_api_pb2.Components.FromString(plan.components)
        context = pipeline_context.PipelineContext(components)
        self._context = context
        self._reads, _ = wire(plan)
        # Stages reading side inputs: their main input waits until ready.
        self.gates = {i: SideInputGate(stage, components, context,
                                       self._key_coders(i, stage))
                      for i, stage in enumerate(plan.stages) if stage.side_inputs}
        self.sources = {i: TestStreamSource(stage, context)
                        for i, stage in enumerate(plan.stages)
                        if stage.kind == p.TEST_STREAM_STAGE}
        n = len(plan.stages)
        self.input_wm = [MIN_TIMESTAMP] * n
        self.output_wm = [MIN_TIMESTAMP] * n
        self.summaries: list[dict[int, Summary]] = [{} for _ in range(n)]
        self.versions: list[dict[int, str]] = [{} for _ in range(n)]
        self.residuals = ResidualSchedule()  # splittable DoFns' (``residuals``)
        self.micro_batch = 0
        self._impulse_done = False
        self._wall_start = time.time()
        self.committed_metrics = CommittedMetrics()  # restart.py

    def _key_coders(self, index: int, stage: p.StagePlan) -> dict[int, str]:
        """Input port -> its producers' key coder, for keyed input ports."""
        found = {}
        for port_index, port in enumerate(stage.inputs):
            for writer, tag in self._reads.get((index, port.buffer_id), ()):
                out = self.plan.stages[writer].outputs[tag]
                if port.keyed and out.key_coder_id:
                    found[port_index] = out.key_coder_id
        return found

    # -- time -------------------------------------------------------------
    def now(self) -> float:
        """Processing time: TestStream's virtual clock (the latest of them if
        there are several), else the wall clock."""
        if self.sources:
            return max(s.clock for s in self.sources.values())
        return time.time()

    def _writer_wm(self, stage: int, tag: int) -> Timestamp:
        if stage in self.sources:
            return self.sources[stage].watermark(tag)
        return self.output_wm[stage]

    def _next_input_wm(self, index: int, stage: p.StagePlan) -> Timestamp:
        wm = MAX_TIMESTAMP
        for port in stage.inputs:
            if port.buffer_id == translations.IMPULSE_BUFFER:
                continue  # the impulse is fed in the first micro-batch
            for writer, tag in self._reads[(index, port.buffer_id)]:
                wm = min(wm, self._writer_wm(writer, tag))
        for side_input in stage.side_inputs:
            for writer, tag in self._reads[(index, side_input.buffer_id)]:
                wm = min(wm, self._writer_wm(writer, tag))
        return wm

    # -- the loop ---------------------------------------------------------
    def run(self) -> None:
        while not self.cancelled.is_set():
            source_rows = {i: s.step() for i, s in self.sources.items()
                           if not s.exhausted}
            moved = self._run_micro_batch(source_rows)
            exhausted = all(s.exhausted for s in self.sources.values())
            if exhausted and not moved and self.residuals.pending:
                self._wait_for_residuals()
                continue
            done = exhausted and not self.residuals.pending
            if done and all(wm >= MAX_TIMESTAMP for wm in self.output_wm):
                return
            if done and not moved:
                _LOGGER.warning(
                    'Stream %s: sources exhausted, stages %s hold their output '
                    'watermarks below +inf; stopping.', self.job_id[:8],
                    [s.name for s, wm in zip(self.plan.stages, self.output_wm)
                     if wm < MAX_TIMESTAMP])
                return

    def _wait_for_residuals(self) -> None:
        """Nothing moves but splittable DoFns' residuals wait for their resume
        delay: let the clock reach the earliest (TestStream's clock jumps)."""
        due = self.residuals.next_due()
        if self.sources:
            for source in self.sources.values():
                source.clock = max(source.clock, due)
            return
        while not self.cancelled.is_set() and time.time() < due:
            self.cancelled.wait(min(due - time.time(), 0.1))

    def _run_micro_batch(self, source_rows: dict[int, list]) -> bool:
        """Runs one micro-batch; returns whether anything ran or moved."""
        now = self.now()
        produced: dict[int, Any] = {}
        # (stage, output tag) -> state buckets of the rows it produced in this
        # micro-batch (-1: rows without a key); absent: no rows.
        touched: dict[tuple[int, int], set[int]] = {}
        persisted: list = []
        moved = any(source_rows.values())
        reports: list[bytes] = []
        for index, stage in enumerate(self.plan.stages):
            if stage.kind == p.TEST_STREAM_STAGE:
                rows = source_rows.get(index)
                if rows:
                    produced[index] = self.ops.rows(rows)
                    for tag, key, _ in rows:
                        touched.setdefault((index, tag), set()).add(
                            -1 if key is None else bucket_of(key))
                source = self.sources[index]
                self.output_wm[index] = min(
                    (source.watermark(t) for t in range(len(stage.outputs))),
                    default=MAX_TIMESTAMP)
                continue
            parts, buckets = self._inputs(index, stage, produced, touched)
            next_wm = self._next_input_wm(index, stage)
            result = None
            if index in self.gates:
                parts, buckets = self._gate(index, stage, parts, produced,
                                            touched)
            due = self.residuals.due(index, now) if stage.split_input else []
            if due:
                parts.append(self.ops.rows(due))
            if stage.grouped or stage.stateful:
                result = self._keyed(index, stage, parts, buckets, next_wm,
                                       touched, reports)
            elif parts:
                data = parts[0] if len(parts) == 1 else self.engine.union(parts)
                if stage.kind == p.RESHUFFLE_STAGE:
                    # As the batch executor (re-encoding, pane reset included).
                    result = reshuffle(self.engine, stage, self._context, data)
                else:
                    step = StreamingStep(
                        input_watermark=self.input_wm[index],
                        next_input_watermark=next_wm,
                        output_watermark=self.output_wm[index],
                        processing_time=now) if stage.split_input else None
                    result = self.engine.map_stage(data, self._task(
                        stage, step, self.gates.get(index)))
                result = self.ops.persist(result)
                rows, outputs = self.ops.collect(result)
                reports.extend(d for t, _, d in rows if t == CONTROL_TAG)
                self.residuals.add(index, [d for t, _, d in rows
                                           if t == SCHEDULED_TAG],
                                   now, self.output_wm[index])
                touched.update(((index, t), b) for t, b in outputs.items())
            if result is not None:
                produced[index] = result
                persisted.append(result)
                moved = True
            holds = min((s.hold for s in self.summaries[index].values()),
                        default=MAX_TIMESTAMP)
            if index in self.gates:
                holds = min(holds, self.gates[index].hold)
            holds = min(holds, self.residuals.hold(index))
            new_out = min(next_wm, holds)
            if (next_wm, new_out) != (self.input_wm[index], self.output_wm[index]):
                moved = True
            self.input_wm[index] = next_wm
            self.output_wm[index] = max(self.output_wm[index], new_out)
        self._impulse_done = True
        self.ops.unpersist(persisted)
        decoded = [report.decode(r) for r in reports if r]
        self.committed_metrics.add(decoded)
        self.on_reports(decoded)
        self._commit()
        if self.after_micro_batch is not None:
            self.after_micro_batch(self.micro_batch)
        self.micro_batch += 1
        return moved

    def _task(self, stage: p.StagePlan, step: StreamingStep | None = None,
              gate: SideInputGate | None = None):
        if gate is None:
            return StageTask(self.job_id, stage, (), streaming=step)
        return StageTask(
            self.job_id, stage,
            tuple(self.engine.side_input(s) for s in gate.state()),
            streaming=step, side_input_version=gate.version)

    def _gate(self, index: int, stage: p.StagePlan, parts: list,
              produced: dict, touched: dict) -> tuple[list, set[int]]:
        """The main-input rows of a stage with side inputs that are ready now
        (``side_inputs``): the new ones join those pushed back before."""
        gate = self.gates[index]
        for i, side_input in enumerate(stage.side_inputs):
            for writer, tag in self._reads[(index, side_input.buffer_id)]:
                if (writer, tag) in touched:
                    gate.add_side(i, self.engine.collect(self.engine.select(
                        produced[writer], tag, 0, False))[0])
        for part in parts:
            for port in range(len(stage.inputs)):
                gate.add_main(port, self.engine.collect(
                    self.engine.select(part, port, port, False))[0])
        watermarks = [min((self._writer_wm(w, t) for w, t in
                           self._reads[(index, si.buffer_id)]),
                          default=MAX_TIMESTAMP) for si in stage.side_inputs]
        rows = gate.release(watermarks)
        buckets = {bucket_of(key) for _, key, _ in rows if key is not None}
        return ([self.ops.rows(rows)] if rows else []), buckets

    def _inputs(self, index: int, stage: p.StagePlan, produced: dict,
                touched: dict) -> tuple[list, set[int]]:
        """This micro-batch's input parts, and the state buckets they touch."""
        parts, buckets = [], set()
        for tag, port in enumerate(stage.inputs):
            if port.buffer_id == translations.IMPULSE_BUFFER:
                if not self._impulse_done:
                    parts.append(self.engine.select(
                        self.engine.impulse(), 0, tag, False))
                continue
            new_tag = 0 if stage.kind == p.RESHUFFLE_STAGE else tag
            for writer, writer_tag in self._reads[(index, port.buffer_id)]:
                if (writer, writer_tag) in touched:
                    parts.append(self.engine.select(
                        produced[writer], writer_tag, new_tag, False))
                    buckets |= touched[(writer, writer_tag)]
        return parts, buckets - {-1}

    def _keyed(self, index: int, stage: p.StagePlan, parts: list,
                 touched_buckets: set[int], next_wm: Timestamp, touched: dict,
                 reports: list) -> Any:
        summaries = self.summaries[index]
        now = self.now()
        data = (parts[0] if len(parts) == 1 else self.engine.union(parts)) \
            if parts else None
        due = {b for b, s in summaries.items()
               if s.event_timer <= next_wm or s.processing_timer <= now}
        load = touched_buckets | due
        if not load and data is None:
            return None
        paths: dict[str, set[int]] = {}  # each bucket from its current version
        for b in load:
            if b in self.versions[index]:
                paths.setdefault(self.versions[index][b], set()).add(b)
        if paths:
            state = self.ops.read_state(paths)
            data = state if data is None else self.engine.union([data, state])
        step = StreamingStep(
            input_watermark=self.input_wm[index], next_input_watermark=next_wm,
            output_watermark=self.output_wm[index], processing_time=now)
        result = self.ops.persist(self.engine.map_stage(
            self.engine.shuffle(data, e.KEYED),
            self._task(stage, step, self.gates.get(index))))
        new: dict[int, Summary] = {}
        rows, outputs = self.ops.collect(result)
        touched.update(((index, t), b) for t, b in outputs.items())
        for tag, key, payload in rows:
            if tag == CONTROL_TAG:
                reports.append(payload)
            else:
                new.setdefault(int(key), Summary()).add(Summary.decode(payload))
        path = self.store.state_path(index, self.micro_batch)
        if new:
            self.ops.write_state(result, path)
        for bucket in load:
            if bucket in new:
                summaries[bucket] = new[bucket]
                self.versions[index][bucket] = path
            else:
                summaries.pop(bucket, None)
                self.versions[index].pop(bucket, None)
        return result

    def _commit(self) -> None:
        self.store.commit(self.micro_batch, {
            'micro_batch': self.micro_batch,
            'stages': [{
                'name': stage.name,
                'input_watermark': self.input_wm[i].micros,
                'output_watermark': self.output_wm[i].micros,
                'buckets': {str(b): {'path': self.versions[i][b],
                                     'keys': s.keys, 'hold': s.hold.micros,
                                     'event_timer': s.event_timer.micros,
                                     'processing_timer': s.processing_timer}
                            for b, s in sorted(self.summaries[i].items())},
            } for i, stage in enumerate(self.plan.stages)],
            'residuals': self.residuals.counts(),
            'sources': {str(i): s.checkpoint() for i, s in self.sources.items()},
            'metrics': self.committed_metrics.record(),
        })
