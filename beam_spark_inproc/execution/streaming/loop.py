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

import contextlib
import functools
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

from beam_spark_inproc.execution.streaming import restart
from beam_spark_inproc.execution.streaming.prebuild import Prebuilder
from beam_spark_inproc.execution.streaming.residuals import ResidualSchedule
from beam_spark_inproc.execution.streaming.restart import CommittedMetrics
from beam_spark_inproc.execution.streaming.side_inputs import SideInputGate
from beam_spark_inproc.execution.streaming.source import StreamSource
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.execution.streaming.test_stream import TestStreamSource
from beam_spark_inproc.execution.streaming.test_stream import bundles_invisible
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.execution.executor import reshuffle
from beam_spark_inproc.execution.executor import wire
from beam_spark_inproc.worker import logs
from beam_spark_inproc.worker import report
from beam_spark_inproc.worker.rows import SCHEDULED_TAG
from beam_spark_inproc.worker.stage_task import StageTask
from beam_spark_inproc.worker.streaming import STATE_BUCKETS
from beam_spark_inproc.worker.streaming import StreamingStep
from beam_spark_inproc.worker.streaming import bucket_count
from beam_spark_inproc.worker.streaming import Summary
from beam_spark_inproc.worker.streaming_state import STATE_REPORT
from beam_spark_inproc.worker.streaming_state import StateFiles
from beam_spark_inproc.worker.streaming_state import decode_report
from beam_spark_inproc.worker.streaming_state import marker_rows

_LOGGER = logging.getLogger(__name__)
# The prefetch of the next micro-batch (``StreamingExecutor.prefetch``)
# starts once this one's last job's DataFrames are built and its action is
# about to run (``engine.collect``'s ``started``), not before the job's tags
# and query are made: the prefetch thread's Python work would make each of
# those Py4J replies wait for the GIL (~30 ms a micro-batch). For the same
# reason the stream's job tag is set on the loop's thread once for the whole
# stream (``run``), not per job. With the prefetch, the next micro-batch's
# steps from its source data that do not depend on its watermarks (selects,
# stateless stages' ``map_stage``, the shuffle before a keyed stage) are
# built in the prefetch thread while this one's job runs
# (``execution.streaming.prebuild``), not on the loop's path.
#
# A stage's input from a writer whose rows are all of the one output it
# reads (a single-output TestStream; a single-output stateless stage whose
# control rows the reader carries on) is the writer's data itself, not a
# ``select`` that keeps every row (``_whole``): on Spark a ``filter`` fewer
# to analyse, plan and run per such input and micro-batch.


class StreamingExecutor:
    def __init__(self, plan: p.SparkPlan, engine: Any, job_id: str,
                 store: CheckpointStore, cancelled: threading.Event,
                 on_reports: Callable[[list[dict]], None],
                 after_micro_batch: Callable[[int], None] | None = None,
                 attempt_channel: tuple = (), runtime_options: tuple = (),
                 profile_dir: str = '', spread: tuple[int, int] = (1, 0),
                 prefetch: bool = False,
                 test_stream_values: dict | None = None,
                 stateful_whole: bool = False):
        self.plan = plan
        # Sources encode the next micro-batch's rows, and make its engine
        # data, in a thread while this one's last job runs
        # (``TestStreamSource.prefetch``, started when the job is about to
        # start: earlier, the thread's Python work slowed the building of
        # the job's DataFrames down, each Py4J reply waiting for the GIL):
        # on Spark, whose jobs leave the driver waiting; not on the debug
        # engine, which runs them here.
        self.prefetch = prefetch
        self._prebuilder = None
        # Replayed by the prefetch at the last job (``_prebuild``).
        if prefetch:
            engine = self._prebuilder = Prebuilder(
                engine, lambda task: any(
                    task is t for t in self._stateless.values()))
        # (partitions, bytes): driver rows of at least ``bytes`` are cut into
        # that many partitions (``_driver_rows``); (1, 0) keeps one.
        self.spread = spread
        self.profile_dir = profile_dir
        self.runtime_options = runtime_options
        self.engine = engine
        self.job_id = job_id
        self.store = store
        self.cancelled = cancelled
        self.on_reports = on_reports
        self.after_micro_batch = after_micro_batch
        self.attempt_channel = attempt_channel
        components = beam_runner_api_pb2.Components.FromString(plan.components)
        context = pipeline_context.PipelineContext(components)
        self._context = context
        self._reads, self._uses = wire(plan)
        self._next_wm: dict[int, Timestamp] = {}
        # Stages reading side inputs: their main input waits until ready.
        self.gates = {i: SideInputGate(stage, components, context,
                                       self._key_coders(i, stage))
                      for i, stage in enumerate(plan.stages) if stage.side_inputs}
        # With a stateful DoFn the driver's rows are spread as any other:
        # each part holds consecutive rows, and a ``BUCKETED`` shuffle keeps
        # a key's rows in the order of their input partitions and positions,
        # so each key's elements still reach the DoFn in its TestStream
        # event's order (as on Beam's BundleBasedDirectRunner). The source
        # stage's one core had been on the critical path (docs/performance.md).
        # ``stateful_whole`` (``--spark_stream_stateful_whole``) keeps them
        # in one partition in such a pipeline, for a busy cluster where the
        # spread costs more than it gains.
        self._rows_spread = (1, 0) if stateful_whole and any(
            s.stateful for s in plan.stages) else spread
        # A TestStream's Python events when its element events are beside
        # the plan (``test_stream.elements_aside``; None: in the plan).
        values = test_stream_values
        self.sources: dict[int, StreamSource] = {}
        for i, stage in enumerate(plan.stages):
            if stage.kind != p.TEST_STREAM_STAGE:
                continue
            if values is not None and stage.labels[0] not in values:
                # Its element events would replay empty.
                raise RuntimeError(f'TestStream {stage.labels[0]!r}: its '
                                   f'elements were set aside but not found')
            self.sources[i] = TestStreamSource(
                stage, context, self._rows_spread,
                None if values is None else values[stage.labels[0]])
        self._coalesce = bundles_invisible(plan, context)
        n = len(plan.stages)
        self.input_wm = [MIN_TIMESTAMP] * n
        self.output_wm = [MIN_TIMESTAMP] * n
        self.summaries: list[dict[int, Summary]] = [{} for _ in range(n)]
        self.versions: list[dict[int, str]] = [{} for _ in range(n)]
        # Each keyed stage's state bucket count (``worker.streaming``).
        self.buckets: list[int] = [STATE_BUCKETS] * n
        self.residuals = ResidualSchedule()  # splittable DoFns' (``residuals``)
        self.micro_batch = 0
        self._impulse_done = False
        self.committed_metrics = CommittedMetrics()  # restart.py
        # A gate's side inputs as its stage's tasks carry them, for its
        # version: made (and a large one written) when the value changes.
        self._side_parts: dict[str, tuple[int, tuple]] = {}
        self._side_files_read: set[str] = set()  # by this micro-batch
        self._stateless: dict[int, StageTask] = {}  # ``_stateless_task``

    def restore_stage(self, index: int, input_wm: Timestamp,
                      output_wm: Timestamp, buckets: int | None,
                      summaries: dict[int, Summary],
                      versions: dict[int, str]) -> None:
        """A stage's watermarks and state buckets as a commit record holds
        them (``restart.restore``); ``buckets`` None: the default count."""
        self.input_wm[index] = input_wm
        self.output_wm[index] = output_wm
        self.summaries[index] = summaries
        self.versions[index] = versions
        if buckets is not None:
            self.buckets[index] = buckets

    def resume_after(self, micro_batch: int) -> None:
        """The next micro-batch follows committed ``micro_batch`` (the
        impulse was fed in the first one)."""
        self.micro_batch = micro_batch + 1
        self._impulse_done = True

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
            return max(source.clock for source in self.sources.values())
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
        try:
            # Each micro-batch's ``_job`` then only describes its jobs; the
            # tag stays on this thread.
            with self.engine.job(self._tag, ''):
                self._loop()
        finally:
            for source in self.sources.values():
                source.close()

    def _loop(self) -> None:
        while not self.cancelled.is_set():
            source_rows = {i: source.step_micro_batch(self._coalesce)
                           for i, source in self.sources.items()
                           if not source.exhausted}
            moved = self._run_micro_batch(source_rows)
            exhausted = all(source.exhausted
                            for source in self.sources.values())
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
        delay: let the clock reach the earliest (TestStream's clock jumps), or
        on the wall clock the earliest processing-time timer if sooner."""
        due = self.residuals.next_due()
        if self.sources:
            for source in self.sources.values():
                source.clock = max(source.clock, due)
            return
        due = min(due, min((s.processing_timer for summaries in self.summaries
                            for s in summaries.values()), default=due))
        while not self.cancelled.is_set() and time.time() < due:
            self.cancelled.wait(min(due - time.time(), 0.1))

    def _run_micro_batch(self, source_rows: dict[int, list]) -> bool:
        """Runs one micro-batch; returns whether anything ran or moved.

        Stages are built in plan order as lazy engine data; a keyed stage's
        task needs its watermarks, so when one reads (through stateless
        stages) from a keyed stage built but not yet run, those run first
        (``_harvest``: one job for all of them). The last job runs what is
        left and the leaves together: one job per micro-batch for a pipeline
        whose keyed stages do not follow each other. A stage reading side
        inputs (its main input goes through the driver, ``side_inputs``) or
        running a splittable DoFn (its residuals go to the driver's schedule,
        ``residuals``) runs at once, in a job of its own.
        """
        self._now = self.now()
        before = (list(self.input_wm), list(self.output_wm))
        self._produced: dict[int, Any] = {}  # stage -> its data (lazy)
        self._pending: list[int] = []  # keyed stages built, not run yet
        self._settled: set[int] = set()  # watermarks final for this micro-batch
        self._carried: set[int] = set()  # results whose control rows have a reader
        self._harvested: set[int] = set()  # results whose control rows were taken
        self._cached: list = []
        self._reports: list[dict] = []
        self._state_reports: list[dict] = []
        ran = False
        for index, stage in enumerate(self.plan.stages):
            if stage.kind == p.TEST_STREAM_STAGE:
                rows = source_rows.get(index)
                source = self.sources[index]
                if rows:  # made while the last micro-batch ran, if prefetched
                    made = source.take_made()
                    self._produced[index] = (self._driver_rows(rows)
                                             if made is None else made)
                    if self._prebuilder is not None:
                        self._prebuilder.source(index, self._produced[index])
                self.input_wm[index] = self.output_wm[index] = min(
                    (source.watermark(t) for t in range(len(stage.outputs))),
                    default=MAX_TIMESTAMP)
                self._settled.add(index)
                continue
            eager = index in self.gates or bool(stage.split_input)
            if (stage.grouped or stage.stateful or eager) and \
                    self._waits_for_pending(index):
                self._harvest(final=False)
            parts = self._inputs(index, stage)
            if index in self.gates:
                parts = self._gate(index, stage, parts)
            due = (self.residuals.due(index, self._now) if stage.split_input
                   else [])
            if due:
                parts.append((None, self._driver_rows(due, always=True)))
            if stage.grouped or stage.stateful:
                ran |= self._keyed(index, stage, parts)
                continue
            if not parts:
                continue
            datas = [data for _, data in parts]
            data = datas[0] if len(datas) == 1 else self.engine.union(datas)
            if stage.kind == p.RESHUFFLE_STAGE:
                # As the batch executor (re-encoding, pane reset included).
                result = reshuffle(self.engine, stage, self._context, data)
            elif stage.split_input:
                result = self._splittable(index, stage, data)
            else:
                result = self.engine.map_stage(data, self._stateless_task(
                    index, stage))
            self._produced[index] = self._maybe_cache(index, result)
            ran = True
        prefetch = None
        if self.prefetch:  # the next micro-batch's
            def prefetch():
                make = self._driver_rows
                if self._prebuilder is not None:
                    self._prebuilder.finish(self.micro_batch)
                for index, source in self.sources.items():
                    if self._prebuilder is not None:
                        make = functools.partial(
                            self._prebuild, index, self.micro_batch + 1)
                    source.prefetch(self._coalesce, make)
        self._harvest(final=True, started=prefetch)
        for index in range(len(self.plan.stages)):
            self._settle(index)
        self._impulse_done = True
        if self._prebuilder is not None:
            self._prebuilder.finish(self.micro_batch)
        for data in self._cached:
            self.engine.uncache(data)
        self.committed_metrics.add(self._reports)  # in the commit record
        restart.commit(self)  # then its metrics count as committed
        self._drop_side_input_files()
        self.on_reports(self._reports)
        if self.after_micro_batch is not None:
            self.after_micro_batch(self.micro_batch)
        self.micro_batch += 1
        return (ran or any(source_rows.values())
                or (list(self.input_wm), list(self.output_wm)) != before)

    # -- building ---------------------------------------------------------
    def _prebuild(self, index: int, micro_batch: int, rows: list) -> Any:
        """Source ``index``'s rows for ``micro_batch`` as engine data, and
        the last micro-batch's steps from them (``prebuild``): in the
        prefetch thread."""
        return self._prebuilder.prebuild(index, self._driver_rows(rows),
                                         micro_batch)

    def _driver_rows(self, rows: list, always: bool = False) -> Any:
        """Rows the driver made (source events, released main input, due
        residuals) as engine data: one partition, so one task; or, when they
        hold at least the spread threshold's bytes (``always``: residuals,
        each a restriction's work), consecutive parts over the run's
        parallelism, one task per core, with no shuffle. Each part keeps its
        rows' order; a TestStream event's elements below the threshold stay
        in one task, in order (Beam's tests compare small outputs in order);
        in a pipeline with a stateful DoFn, all of them (``__init__``)."""
        parts, min_bytes = self.spread if always else self._rows_spread
        if parts > 1 and min_bytes and len(rows) > 1 and (
                always or sum(len(r[2]) for r in rows) >= min_bytes):
            return self.engine.rows(rows, parts)
        return self.engine.rows(rows)

    def _task(self, stage: p.StagePlan, step: StreamingStep | None = None,
              state_files: StateFiles | None = None,
              gate: SideInputGate | None = None) -> StageTask:
        side_inputs, version = (), 0
        if gate is not None:
            side_inputs, version = self._side_inputs(gate), gate.version
        return StageTask(self.job_id, stage, side_inputs, streaming=step,
                         attempt_channel=self.attempt_channel,
                         runtime_options=self.runtime_options,
                         side_input_version=version, state_files=state_files,
                         log_level=logs.driver_level(),
                         profile_dir=self.profile_dir)

    def _side_inputs(self, gate: SideInputGate) -> tuple:
        """What a task carries for the gate's side inputs: made again only
        when their value changed; a large one is a file under the checkpoint
        location (``store``), kept while a micro-batch may read it."""
        version, parts = self._side_parts.get(gate.stage.name, (None, ()))
        if version != gate.version:
            parts = tuple(self.engine.side_input(s, self.store.side_input_folder)
                          for s in gate.state())
            self._side_parts[gate.stage.name] = gate.version, parts
        self._side_files_read.update(_locations(parts))
        return parts

    def _drop_side_input_files(self) -> None:
        """After a commit: the side-input files neither this micro-batch read
        nor a later one may read are removed."""
        keep = self._side_files_read | {
            path for _, parts in self._side_parts.values()
            for path in _locations(parts)}
        self.store.remove_side_inputs(keep)
        self._side_files_read = set()

    def _stateless_task(self, index: int, stage: p.StagePlan) -> StageTask:
        """A stateless stage's task: the same object every micro-batch when
        the stage reads no side input (nothing in it changes), so the engine
        can reuse what it made of it (``SparkEngine.map_stage``)."""
        if index in self.gates:
            return self._task(stage, gate=self.gates[index])
        task = self._stateless.get(index)
        if task is None:
            task = self._stateless[index] = self._task(stage)
        return task

    def _step(self, index: int) -> StreamingStep:
        return StreamingStep(
            input_watermark=self.input_wm[index],
            next_input_watermark=self._next_wm[index],
            output_watermark=self.output_wm[index], processing_time=self._now)

    def _splittable(self, index: int, stage: p.StagePlan, data) -> Any:
        """Runs a splittable DoFn's stage now (a job): its self-checkpointed
        residuals go to the driver's schedule, its control rows are taken."""
        self._settle_writers(index, stage)
        self._next_wm[index] = self._next_input_wm(index, stage)
        # Cached even when nothing reads it (a leaf): the leaves' job would
        # run the DoFn again, and the stage's side effects twice.
        result = self.engine.cache(self.engine.map_stage(
            data, self._task(stage, self._step(index),
                             gate=self.gates.get(index))))
        self._cached.append(result)
        with self._job():
            scheduled, control = self.engine.collect(
                self.engine.select(result, SCHEDULED_TAG, 0, True))
        self._take(control)
        self._harvested.add(index)
        self.residuals.add(index, scheduled, self._now, self.output_wm[index])
        return result

    def _gate(self, index: int, stage: p.StagePlan, parts: list) -> list:
        """The main-input rows of a stage with side inputs that are ready now
        (``side_inputs``): the new ones join those pushed back before; each
        part is collected once (a job), its control rows taken."""
        gate = self.gates[index]
        # Before this micro-batch's elements: none is later than the input
        # watermark the stage had (the side inputs' included: conservative).
        gate.drop_expired(self.input_wm[index])
        for i, side_input in enumerate(stage.side_inputs):
            for writer, tag in self._reads[(index, side_input.buffer_id)]:
                if writer in self._produced:
                    with self._job():
                        chunks, control = self.engine.collect(self.engine.select(
                            self._produced[writer], tag, 0, self._carry(writer)))
                    self._take(control)
                    gate.add_side(i, chunks)
        for port, part in parts:
            with self._job():
                chunks, control = self.engine.collect(part)
            self._take(control)
            gate.add_main(port, chunks)
        self._settle_writers(index, stage)
        watermarks = [min((self._writer_wm(w, t) for w, t in
                           self._reads[(index, si.buffer_id)]),
                          default=MAX_TIMESTAMP) for si in stage.side_inputs]
        rows = gate.release(watermarks)
        return [(None, self._driver_rows(rows))] if rows else []

    def _writers(self, index: int, stage: p.StagePlan, side: bool = False):
        """(input port, writer, its output tag) of a stage's main inputs;
        with ``side``, its side inputs' writers too (port None)."""
        for tag, port in enumerate(stage.inputs):
            if port.buffer_id == translations.IMPULSE_BUFFER:
                continue
            for writer, writer_tag in self._reads[(index, port.buffer_id)]:
                yield tag, writer, writer_tag
        for side_input in stage.side_inputs if side else ():
            for writer, writer_tag in self._reads[(index, side_input.buffer_id)]:
                yield None, writer, writer_tag

    def _settle_writers(self, index: int, stage: p.StagePlan) -> None:
        for _, writer, _ in self._writers(index, stage, side=True):
            self._settle(writer)

    def _carry(self, writer: int) -> bool:
        """Whether a reader of ``writer`` carries its control rows on: the
        first reader of a result whose control rows nobody took."""
        w = self.plan.stages[writer]
        carry = writer not in self._carried and writer not in self._harvested \
            and not (w.grouped or w.stateful)
        self._carried.add(writer)
        return carry

    def _take(self, control: list) -> None:
        """Control rows that reached the driver: bundles' reports and keyed
        stages' state reports (``_harvest``)."""
        for payload in control:
            if payload:
                decoded = report.decode(payload)
                if STATE_REPORT in decoded:
                    self._state_reports.append(decoded)
                else:
                    self._reports.append(decoded)

    @property
    def _tag(self) -> str:
        return 'beam-pipeline-' + self.job_id[:8]

    @contextlib.contextmanager
    def _job(self):
        with self.engine.job(self._tag,
                             f'Beam stream {self.job_id[:8]} micro-batch '
                             f'{self.micro_batch}'):
            yield

    def _maybe_cache(self, index: int, result: Any) -> Any:
        """A result read more than once, or read after the job that ran it
        (a keyed stage's; a splittable stage's is always cached,
        ``_splittable``), is cached for the micro-batch."""
        stage = self.plan.stages[index]
        if self._uses[index] > 1 or (self._uses[index] and (
                stage.grouped or stage.stateful)):
            result = self.engine.cache(result)
            self._cached.append(result)
        return result

    def _inputs(self, index: int, stage: p.StagePlan) -> list:
        """This micro-batch's input parts of a stage, as (port, data) (empty:
        nothing to do).

        Each result's control rows go on with its first reader only; a keyed
        stage's are taken when it runs (``_harvest``)."""
        parts = []
        for tag, port in enumerate(stage.inputs):
            if port.buffer_id == translations.IMPULSE_BUFFER:
                if not self._impulse_done:
                    parts.append((tag, self.engine.select(
                        self.engine.impulse(), 0, tag, False)))
        for tag, writer, writer_tag in self._writers(index, stage):
            if writer not in self._produced:
                continue
            new_tag = 0 if stage.kind == p.RESHUFFLE_STAGE else tag
            carry = self._carry(writer)
            if self._whole(writer, writer_tag, new_tag, carry):
                parts.append((tag, self._produced[writer]))
                continue
            parts.append((tag, self.engine.select(
                self._produced[writer], writer_tag, new_tag, carry)))
        return parts

    def _whole(self, writer: int, tag: int, new_tag: int, carry: bool) -> bool:
        """Whether ``select(writer's data, tag, new_tag, carry)`` would keep
        every row as it is: the writer has the one output ``tag`` (=
        ``new_tag``), and either is a TestStream (driver rows, no control
        rows) or a stateless stage whose control rows the reader carries (a
        keyed or splittable stage's data holds rows of other tags too:
        state, summaries, residuals)."""
        w = self.plan.stages[writer]
        if tag != new_tag or len(w.outputs) != 1:
            return False
        if w.kind == p.TEST_STREAM_STAGE:
            return True
        return carry and w.kind == p.SDK_STAGE and not (
            w.grouped or w.stateful or w.split_input)

    def _waits_for_pending(self, index: int) -> bool:
        """Whether a stage's input watermark depends on a keyed stage built
        in this micro-batch and not run yet."""
        stage = self.plan.stages[index]
        for _, writer, _ in self._writers(index, stage, side=True):
            if writer in self._pending:
                return True
            w = self.plan.stages[writer]
            if writer not in self._settled and not (w.grouped or w.stateful) \
                    and self._waits_for_pending(writer):
                return True
        return False

    def _keyed(self, index: int, stage: p.StagePlan, parts: list) -> bool:
        """Builds a keyed stage if it has new rows or due timers; else its
        watermarks settle at once."""
        self._settle_writers(index, stage)
        next_wm = self._next_input_wm(index, stage)
        summaries = self.summaries[index]
        due = {b for b, s in summaries.items()
               if s.event_timer <= next_wm or s.processing_timer <= self._now}
        if not parts and not due:
            self._settle(index)
            return False
        datas = [data for _, data in parts]
        if due:
            datas.append(self.engine.rows(marker_rows(due)))
        data = datas[0] if len(datas) == 1 else self.engine.union(datas)
        self._next_wm[index] = next_wm
        files = StateFiles(
            stage=stage.name,
            current=tuple(sorted(self.versions[index].items())),
            folder=self.store.state_path(index, self.micro_batch),
            buckets=self.buckets[index])
        result = self.engine.map_stage(
            self.engine.shuffle(data, e.BUCKETED),
            self._task(stage, self._step(index), files, self.gates.get(index)))
        self._produced[index] = self._maybe_cache(index, result)
        self._pending.append(index)
        return True

    # -- running ----------------------------------------------------------
    def _harvest(self, final: bool,
                 started: Callable[[], None] | None = None) -> None:
        """One job: runs the pending keyed stages (and, if ``final``, the
        leaves); takes their control rows: bundles' reports and the state
        buckets' new summaries and files. ``started``: called when the job
        is about to run (at once if there is none)."""
        datas = [self._produced[i] for i in self._pending]
        if final:  # a leaf already run (an earlier harvest, a splittable
            # stage's job) is not run again: its side effects, its reports
            datas += [self._produced[i] for i in self._produced
                      if self._uses[i] == 0 and i not in self._pending
                      and i not in self.sources and i not in self._harvested]
        if datas:
            data = datas[0] if len(datas) == 1 else self.engine.union(datas)
            with self._job():
                _, control = self.engine.collect(data, elements=False,
                                                 started=started)
            self._take(control)
        elif started is not None:
            started()
        names = {s.name: i for i, s in enumerate(self.plan.stages)}
        updated = set()
        for decoded in self._state_reports:
            updated.add(names[decoded['stage']])
            self._new_state(names[decoded['stage']], decode_report(decoded))
        for index in updated:  # once every task's report is in
            self._split_buckets(index)
        self._state_reports = []
        for index in self._pending:
            self._settle(index)
        self._harvested.update(self._pending)
        self._pending = []

    def _new_state(self, index: int, buckets: dict) -> None:
        summaries, versions = self.summaries[index], self.versions[index]
        for bucket, (summary, path) in buckets.items():
            if summary is None:
                summaries.pop(bucket, None)
                versions.pop(bucket, None)
            else:
                summaries[bucket] = summary
                versions[bucket] = path

    def _split_buckets(self, index: int) -> None:
        """Doubles a stage's state buckets while it holds more keys per bucket
        than ``KEYS_PER_BUCKET``: bucket b of n becomes b, b + n, ... of the
        new count, each still read from b's file (whose rows carry their
        key's hash, so a reader takes its own half) until a micro-batch
        rewrites it; each half starts with b's summary (its hold and timers
        hold or run both halves; its keys are shared out)."""
        old = self.buckets[index]
        summaries = self.summaries[index]
        new = bucket_count(sum(s.keys for s in summaries.values()), old)
        if new == old:
            return
        versions, parts = self.versions[index], new // old
        self.summaries[index] = {
            b + i * old: Summary(-(-s.keys // parts), s.hold, s.event_timer,
                                 s.processing_timer)
            for b, s in summaries.items() for i in range(parts)}
        self.versions[index] = {b + i * old: path for b, path in versions.items()
                                for i in range(parts)}
        self.buckets[index] = new

    def _settle(self, index: int) -> None:
        """The stage's watermarks after this micro-batch (writers first)."""
        if index in self._settled:
            return
        stage = self.plan.stages[index]
        self._settle_writers(index, stage)
        next_wm = self._next_wm.pop(index, None)
        if next_wm is None:
            next_wm = self._next_input_wm(index, stage)
        holds = min((s.hold for s in self.summaries[index].values()),
                    default=MAX_TIMESTAMP)
        if index in self.gates:
            holds = min(holds, self.gates[index].hold)
        holds = min(holds, self.residuals.hold(index))
        self.input_wm[index] = next_wm
        self.output_wm[index] = max(self.output_wm[index], min(next_wm, holds))
        self._settled.add(index)


def _locations(parts: tuple) -> list[str]:
    return [part.location for part in parts
            if getattr(part, 'location', None) is not None]
