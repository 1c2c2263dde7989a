"""The micro-batch loop: a stream as a sequence of ordinary batch jobs.

Each micro-batch takes the next source event (a TestStream event; the impulse
of bounded sources in the first one) and walks the plan's stages in order
(Beam's ``sort_stages`` order, producers first). For each stage:

* its **input watermark** after the micro-batch is the minimum of the output
  watermarks of the stages (and TestStream outputs) it reads, as they stand
  after this micro-batch's upstream work: a watermark step cascades through
  every stage in one micro-batch;
* a stage reading a GroupByKey, or running a stateful DoFn, runs when it has
  new input or when one of its state buckets has a due timer (the summaries
  say which; a marker row per due bucket makes it run): its input is shuffled
  ``BUCKETED`` and its task reads the current state of the buckets it meets
  and writes their new versions itself (``worker.streaming_state``), judges
  lateness against the stage's own input watermark before the micro-batch,
  then fires the timers up to the new one (``worker.streaming``,
  ``worker.streaming_keyed``); the buckets' new summaries and files come back
  as control rows and replace the old ones;
* its **output watermark** is min(input watermark, holds): for a keyed stage,
  the earliest watermark hold of its buckets (buffered panes; pending timers'
  output timestamps in a stateful stage), else the input watermark (it holds
  nothing between micro-batches);
* other stages run when they have new input.

**Jobs.** Stages are engine data built lazily; a micro-batch runs as few jobs
as the watermarks allow: a keyed stage's task needs its input watermark, so a
keyed stage downstream of another one waits for a job running the first
(``_harvest``); everything else runs in the micro-batch's last job with the
leaves (one job per micro-batch for one GroupByKey). Results read more than
once, or after the job that ran them, are cached for the micro-batch only. A
micro-batch where nothing has rows or due timers runs no job at all.

A commit record is written after every micro-batch. The stream is done when the
sources are exhausted and every watermark is +inf (or nothing moves any more).
The engine does the work through its contract only (``execution.engine``:
``rows``, ``map_stage``, ``shuffle``, ``union``, ``collect``...).
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

from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.execution.streaming.test_stream import TestStreamSource
from beam_spark_inproc.execution.streaming.test_stream import bundles_invisible
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.execution.executor import wire
from beam_spark_inproc.worker import report
from beam_spark_inproc.worker.stage_task import StageTask
from beam_spark_inproc.worker.streaming import StreamingStep
from beam_spark_inproc.worker.streaming import Summary
from beam_spark_inproc.worker.streaming_state import STATE_REPORT
from beam_spark_inproc.worker.streaming_state import StateFiles
from beam_spark_inproc.worker.streaming_state import decode_report
from beam_spark_inproc.worker.streaming_state import marker_rows

_LOGGER = logging.getLogger(__name__)


class StreamingExecutor:
    def __init__(self, plan: p.SparkPlan, engine: Any, job_id: str,
                 store: CheckpointStore, cancelled: threading.Event,
                 on_reports: Callable[[list[dict]], None],
                 after_micro_batch: Callable[[int], None] | None = None,
                 attempt_channel: tuple = ()):
        self.plan = plan
        self.engine = engine
        self.job_id = job_id
        self.store = store
        self.cancelled = cancelled
        self.on_reports = on_reports
        self.after_micro_batch = after_micro_batch
        self.attempt_channel = attempt_channel
        context = pipeline_context.PipelineContext(
            beam_runner_api_pb2.Components.FromString(plan.components))
        self._reads, self._uses = wire(plan)
        self._next_wm: dict[int, Timestamp] = {}
        self.sources = {i: TestStreamSource(stage, context)
                        for i, stage in enumerate(plan.stages)
                        if stage.kind == p.TEST_STREAM_STAGE}
        self._coalesce = bundles_invisible(plan, context)
        n = len(plan.stages)
        self.input_wm = [MIN_TIMESTAMP] * n
        self.output_wm = [MIN_TIMESTAMP] * n
        self.summaries: list[dict[int, Summary]] = [{} for _ in range(n)]
        self.versions: list[dict[int, str]] = [{} for _ in range(n)]
        self.micro_batch = 0
        self._impulse_done = False
        self._wall_start = time.time()

    # -- time -------------------------------------------------------------
    def now(self) -> float:
        """Processing time: TestStream's virtual clock, else the wall clock."""
        if self.sources:
            return next(iter(self.sources.values())).clock
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
        return wm

    # -- the loop ---------------------------------------------------------
    def run(self) -> None:
        while not self.cancelled.is_set():
            source_rows = {i: s.step_micro_batch(self._coalesce)
                           for i, s in self.sources.items() if not s.exhausted}
            moved = self._run_micro_batch(source_rows)
            done = all(s.exhausted for s in self.sources.values())
            if done and all(wm >= MAX_TIMESTAMP for wm in self.output_wm):
                return
            if done and not moved:
                _LOGGER.warning(
                    'Stream %s: sources exhausted, stages %s hold their output '
                    'watermarks below +inf; stopping.', self.job_id[:8],
                    [s.name for s, wm in zip(self.plan.stages, self.output_wm)
                     if wm < MAX_TIMESTAMP])
                return

    def _run_micro_batch(self, source_rows: dict[int, list]) -> bool:
        """Runs one micro-batch; returns whether anything ran or moved.

        Stages are built in plan order as lazy engine data; a keyed stage's
        task needs its watermarks, so when one reads (through stateless
        stages) from a keyed stage built but not yet run, those run first
        (``_harvest``: one job for all of them). The last job runs what is
        left and the leaves together: one job per micro-batch for a pipeline
        whose keyed stages do not follow each other.
        """
        before = (list(self.input_wm), list(self.output_wm))
        self._produced: dict[int, Any] = {}  # stage -> its data (lazy)
        self._pending: list[int] = []  # keyed stages built, not run yet
        self._settled: set[int] = set()  # watermarks final for this micro-batch
        self._carried: set[int] = set()  # results whose control rows have a reader
        self._cached: list = []
        self._reports: list[dict] = []
        ran = False
        for index, stage in enumerate(self.plan.stages):
            if stage.kind == p.TEST_STREAM_STAGE:
                rows = source_rows.get(index)
                if rows:
                    self._produced[index] = self.engine.rows(rows)
                source = self.sources[index]
                self.input_wm[index] = self.output_wm[index] = min(
                    (source.watermark(t) for t in range(len(stage.outputs))),
                    default=MAX_TIMESTAMP)
                self._settled.add(index)
                continue
            if stage.grouped or stage.stateful:
                if self._waits_for_pending(index):
                    self._harvest(final=False)
                ran |= self._keyed(index, stage)
                continue
            parts = self._inputs(index, stage)
            if not parts:
                continue
            data = parts[0] if len(parts) == 1 else self.engine.union(parts)
            if stage.kind == p.RESHUFFLE_STAGE:
                # As the batch executor: rows come in under tag 0, each
                # output port gets them under its tag.
                shuffled = self.engine.shuffle(data, e.SPREAD)
                result = shuffled if len(stage.outputs) == 1 else \
                    self.engine.union([
                        self.engine.select(shuffled, 0, tag, tag == 0)
                        for tag in range(len(stage.outputs))])
            else:
                result = self.engine.map_stage(data, self._task(stage))
            self._produced[index] = self._maybe_cache(index, result)
            ran = True
        self._harvest(final=True)
        for index in range(len(self.plan.stages)):
            self._settle(index)
        self._impulse_done = True
        for data in self._cached:
            self.engine.uncache(data)
        self._commit()  # then its metrics count as committed
        self.on_reports(self._reports)
        if self.after_micro_batch is not None:
            self.after_micro_batch(self.micro_batch)
        self.micro_batch += 1
        return (ran or any(source_rows.values())
                or (list(self.input_wm), list(self.output_wm)) != before)

    # -- building ---------------------------------------------------------
    def _task(self, stage: p.StagePlan, step: StreamingStep | None = None,
              state_files: StateFiles | None = None) -> StageTask:
        return StageTask(self.job_id, stage, (), streaming=step,
                         attempt_channel=self.attempt_channel,
                         state_files=state_files)

    def _writers(self, index: int, stage: p.StagePlan):
        for tag, port in enumerate(stage.inputs):
            if port.buffer_id == translations.IMPULSE_BUFFER:
                continue
            for writer, writer_tag in self._reads[(index, port.buffer_id)]:
                yield tag, writer, writer_tag

    def _maybe_cache(self, index: int, result: Any) -> Any:
        """A result read more than once, or read after the job that ran it
        (a keyed stage's), is cached for the micro-batch."""
        stage = self.plan.stages[index]
        if self._uses[index] > 1 or (
                self._uses[index] and (stage.grouped or stage.stateful)):
            result = self.engine.cache(result)
            self._cached.append(result)
        return result

    def _inputs(self, index: int, stage: p.StagePlan) -> list:
        """This micro-batch's input parts of a stage (empty: nothing to do).

        Each result's control rows go on with its first reader only; a keyed
        stage's are taken when it runs (``_harvest``)."""
        parts = []
        for tag, port in enumerate(stage.inputs):
            if port.buffer_id == translations.IMPULSE_BUFFER:
                if not self._impulse_done:
                    parts.append(self.engine.select(
                        self.engine.impulse(), 0, tag, False))
        for tag, writer, writer_tag in self._writers(index, stage):
            if writer not in self._produced:
                continue
            new_tag = 0 if stage.kind == p.RESHUFFLE_STAGE else tag
            w = self.plan.stages[writer]
            carry = writer not in self._carried and not (w.grouped or w.stateful)
            self._carried.add(writer)
            parts.append(self.engine.select(
                self._produced[writer], writer_tag, new_tag, carry))
        return parts

    def _waits_for_pending(self, index: int) -> bool:
        """Whether a stage's input watermark depends on a keyed stage built
        in this micro-batch and not run yet."""
        stage = self.plan.stages[index]
        for _, writer, _ in self._writers(index, stage):
            if writer in self._pending:
                return True
            w = self.plan.stages[writer]
            if writer not in self._settled and not (w.grouped or w.stateful) \
                    and self._waits_for_pending(writer):
                return True
        return False

    def _keyed(self, index: int, stage: p.StagePlan) -> bool:
        """Builds a keyed stage if it has new rows or due timers; else its
        watermarks settle at once."""
        parts = self._inputs(index, stage)
        for _, writer, _ in self._writers(index, stage):
            self._settle(writer)
        next_wm = self._next_input_wm(index, stage)
        summaries = self.summaries[index]
        now = self.now()
        due = {b for b, s in summaries.items()
               if s.event_timer <= next_wm or s.processing_timer <= now}
        if not parts and not due:
            self._settle(index)
            return False
        if due:
            parts.append(self.engine.rows(marker_rows(due)))
        data = parts[0] if len(parts) == 1 else self.engine.union(parts)
        step = StreamingStep(
            input_watermark=self.input_wm[index], next_input_watermark=next_wm,
            output_watermark=self.output_wm[index], processing_time=now)
        files = StateFiles(
            stage=stage.name,
            current=tuple(sorted(self.versions[index].items())),
            folder=self.store.state_path(index, self.micro_batch))
        result = self.engine.map_stage(
            self.engine.shuffle(data, e.BUCKETED),
            self._task(stage, step, files))
        self._produced[index] = self._maybe_cache(index, result)
        self._next_wm[index] = next_wm
        self._pending.append(index)
        return True

    # -- running ----------------------------------------------------------
    def _harvest(self, final: bool) -> None:
        """One job: runs the pending keyed stages (and, if ``final``, the
        leaves); takes their control rows: bundles' reports and the state
        buckets' new summaries and files."""
        datas = [self._produced[i] for i in self._pending]
        if final:
            datas += [self._produced[i] for i in self._produced
                      if self._uses[i] == 0 and i not in self._pending
                      and i not in self.sources]
        if datas:
            data = datas[0] if len(datas) == 1 else self.engine.union(datas)
            with self.engine.job(
                    'beam-pipeline-' + self.job_id[:8],
                    f'Beam stream {self.job_id[:8]} micro-batch '
                    f'{self.micro_batch}'):
                _, control = self.engine.collect(data, elements=False)
            by_stage: dict[int, list] = {}
            names = {s.name: i for i, s in enumerate(self.plan.stages)}
            for payload in control:
                if not payload:
                    continue
                decoded = report.decode(payload)
                if STATE_REPORT in decoded:
                    by_stage.setdefault(names[decoded['stage']], []).append(
                        decode_report(decoded))
                else:
                    self._reports.append(decoded)
            for index in self._pending:
                self._new_state(index, by_stage.get(index, []))
        for index in self._pending:
            self._settle(index)
        self._pending = []

    def _new_state(self, index: int, reports: list[dict]) -> None:
        summaries, versions = self.summaries[index], self.versions[index]
        for buckets in reports:
            for bucket, (summary, path) in buckets.items():
                if summary is None:
                    summaries.pop(bucket, None)
                    versions.pop(bucket, None)
                else:
                    summaries[bucket] = summary
                    versions[bucket] = path

    def _settle(self, index: int) -> None:
        """The stage's watermarks after this micro-batch (writers first)."""
        if index in self._settled:
            return
        stage = self.plan.stages[index]
        for _, writer, _ in self._writers(index, stage):
            self._settle(writer)
        next_wm = self._next_wm.pop(index, None)
        if next_wm is None:
            next_wm = self._next_input_wm(index, stage)
        holds = min((s.hold for s in self.summaries[index].values()),
                    default=MAX_TIMESTAMP)
        self.input_wm[index] = next_wm
        self.output_wm[index] = max(self.output_wm[index], min(next_wm, holds))
        self._settled.add(index)

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
            'sources': {str(i): {'position': s.position, 'clock': s.clock,
                                 'watermarks': {t: w.micros for t, w in
                                                s.watermarks.items()}}
                        for i, s in self.sources.items()},
        })
