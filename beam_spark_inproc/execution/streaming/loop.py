"""The micro-batch loop: a stream as a sequence of ordinary batch jobs.

Each micro-batch takes the next source event (a TestStream event; the impulse
of bounded sources in the first one) and walks the plan's stages in order
(Beam's ``sort_stages`` order, producers first). For each stage:

* its **input watermark** after the micro-batch is the minimum of the output
  watermarks of the stages (and TestStream outputs) it reads, as they stand
  after this micro-batch's upstream work: a watermark step cascades through
  every stage in one micro-batch (``watermarks``);
* a stage reading a GroupByKey, or running a stateful DoFn, runs when it has
  new input or when one of its state buckets has a due timer (the summaries
  say which, ``buckets``; a marker row per due bucket makes it run): its input
  is shuffled ``BUCKETED`` and its task reads the current state of the
  buckets it meets and writes their new versions itself
  (``worker.streaming.state_io``), judges lateness against the stage's own input
  watermark before the micro-batch, then fires the timers up to the new one
  (``worker.streaming``); the buckets' new
  summaries and files come back as control rows and replace the old ones;
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

A commit record is written after every micro-batch (``restart``). The stream
is done when the sources are exhausted and every watermark is +inf (or nothing
moves any more). The engine does the work through its contract only
(``execution.engine``: ``rows``, ``map_stage``, ``shuffle``, ``union``,
``collect``...).

**Parts.** ``StreamingExecutor`` decides what runs when; what it keeps is in
named parts: the sources it steps (``source.StreamSource``), the per-stage
watermarks (``watermarks.Watermarks``), the state-bucket table
(``buckets.BucketTable``), one micro-batch's bookkeeping
(``micro_batch.MicroBatch``, made anew each time), the stage tasks and the
side-input values they carry (``tasks.StageTasks``), side-input gates
(``side_inputs``), splittable DoFns' residuals (``residuals``), and the commit
record that writes and restores them all (``restart``).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import threading
import time
from typing import Any, Callable

from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.execution.streaming import restart
from beam_spark_inproc.execution.streaming.buckets import BucketTable
from beam_spark_inproc.execution.streaming.drain import Drain
from beam_spark_inproc.execution.streaming.micro_batch import MicroBatch
from beam_spark_inproc.execution.streaming.prebuild import Prebuilder
from beam_spark_inproc.execution.streaming.residuals import ResidualSchedule
from beam_spark_inproc.execution.streaming.restart import CommittedMetrics
from beam_spark_inproc.execution.streaming.side_inputs import SideInputGate
from beam_spark_inproc.execution.streaming.source import StreamSource
from beam_spark_inproc.execution.streaming.spark_sinks import SparkStages
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.execution.streaming.store import stage_key
from beam_spark_inproc.execution.streaming.tasks import StageTasks
from beam_spark_inproc.execution.streaming.teststream_source import TestStreamSource
from beam_spark_inproc.execution.streaming.teststream_source import bundles_invisible
from beam_spark_inproc.execution.streaming.watermarks import Watermarks
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.execution.executor import reshuffle
from beam_spark_inproc.execution.executor import wire
from beam_spark_inproc.protocol.rows import SCHEDULED_TAG
from beam_spark_inproc.protocol.buckets import marker_rows

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
    """Runs a streaming plan as micro-batches on an engine (see the module
    doc): steps the sources, builds and runs each micro-batch's stages,
    settles the watermarks, commits."""

    def __init__(self, plan: p.SparkPlan, engine: Any, job_id: str,
                 store: CheckpointStore, cancelled: threading.Event,
                 on_reports: Callable[[list[dict]], None],
                 after_micro_batch: Callable[[int], None] | None = None,
                 attempt_channel: tuple = (), runtime_options: tuple = (),
                 profile_dir: str = '', spread: tuple[int, int] = (1, 0),
                 prefetch: bool = False,
                 test_stream_values: dict | None = None,
                 stateful_whole: bool = False, native=None,
                 native_source: Callable | None = None):
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
                engine, lambda task: self.tasks.stable(task))
        # (partitions, bytes): driver rows of at least ``bytes`` are cut into
        # that many partitions (``_driver_rows``); (1, 0) keeps one.
        self.spread = spread
        self.engine = engine
        self.job_id = job_id
        self.store = store
        self.cancelled = cancelled
        self.on_reports = on_reports
        self.after_micro_batch = after_micro_batch
        components = beam_runner_api_pb2.Components.FromString(plan.components)
        context = pipeline_context.PipelineContext(components)
        self._context = context
        self._reads, self._uses = wire(plan)
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
        # Runner-native sources (a ReadFromSpark over a streaming DataFrame):
        # ``native_source`` (the runner's) gives the stage's source, or None
        # for a native stage that is not one; each keeps its files under
        # ``sources/<stage>`` of the checkpoint location.
        for i, stage in enumerate(plan.stages):
            if stage.kind == p.NATIVE_STAGE and native_source is not None:
                source = native_source(stage, engine, context, os.path.join(
                    store.root, 'sources',
                    re.sub(r'[^\w.+-]', '_', stage_key(stage.name))))
                if source is not None:
                    self.sources[i] = source
        self._coalesce = bundles_invisible(plan, context)
        self.watermarks = Watermarks(plan, self._reads, self.sources,
                                     self._hold)
        self.buckets = BucketTable([stage.name for stage in plan.stages])
        self.residuals = ResidualSchedule()  # splittable DoFns' (``residuals``)
        self.drain = Drain(None if store.temporary else store.root)  # ``drain``
        self.tasks = StageTasks(job_id, engine, store, attempt_channel,
                                runtime_options, profile_dir)
        # WriteToSpark and SparkSql (``spark_sinks``; ``native``: the
        # runner's handler for them, ``transforms.stream_runtime``)
        self.spark_stages = SparkStages(plan, engine, store, context,
                                        self._job, native)
        self.micro_batch = 0
        self._impulse_done = False
        self.committed_metrics = CommittedMetrics()  # restart.py
        self._batch: MicroBatch | None = None  # the one running

    def resume_after(self, micro_batch: int) -> None:
        """The next micro-batch follows committed ``micro_batch`` (the
        impulse was fed in the first one); ``restart.restore`` has put the
        parts where its commit record left them."""
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

    def _hold(self, index: int) -> Timestamp:
        """What holds a stage's output watermark as it settles: its state
        buckets' holds, the elements its side-input gate pushed back, its
        pending residuals."""
        hold = self.buckets.hold(index)
        if index in self.gates:
            hold = min(hold, self.gates[index].hold)
        return min(hold, self.residuals.hold(index))

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
            self.drain.check(self)  # at the micro-batch boundary (``drain``)
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
            if done and self.watermarks.final:
                return
            if done and not moved:
                _LOGGER.warning(
                    'Stream %s: sources exhausted, stages %s hold their output '
                    'watermarks below +inf; stopping.', self.job_id[:8],
                    self.watermarks.held())
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
        due = min(due, self.buckets.next_processing_timer(due))
        while (not self.cancelled.is_set() and not self.drain.waiting()
               and time.time() < due):
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
        batch = self._batch = MicroBatch(self.now())
        before = self.watermarks.begin()
        ran = fed = False
        for index, stage in enumerate(self.plan.stages):
            if index in self.sources:
                rows = source_rows.get(index)
                source = self.sources[index]
                # Made while the last micro-batch ran, if prefetched; a
                # source whose rows never reach the driver makes all of it.
                made = source.take_made()
                if made is not None:
                    fed = True
                if rows or made is not None:
                    batch.produced[index] = (self._driver_rows(rows)
                                             if made is None else made)
                    if self._prebuilder is not None:
                        self._prebuilder.source(index, batch.produced[index])
                self.watermarks.settle_source(index)
                continue
            eager = (index in self.gates or bool(stage.split_input)
                     or stage.kind == p.NATIVE_STAGE)
            if (stage.grouped or stage.stateful or eager) and \
                    self._waits_for_pending(index):
                self._harvest(final=False)
            parts = self._inputs(index, stage)
            if index in self.gates:
                parts = self._gate(index, stage, parts)
            due = (self.residuals.due(index, batch.now) if stage.split_input
                   else [])
            if due:
                parts.append((None, self._driver_rows(due, always=True)))
            if stage.grouped or stage.stateful:
                ran |= self._keyed(index, stage, parts)
                continue
            if stage.kind == p.NATIVE_STAGE:
                ran |= self.spark_stages.run(index, stage, parts, batch,
                                             self.micro_batch)
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
                result = self.engine.map_stage(data, self.tasks.stateless(
                    index, stage, self.gates.get(index)))
            batch.produced[index] = self._maybe_cache(index, result)
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
            self.watermarks.settle(index)
        self._impulse_done = True
        if self._prebuilder is not None:
            self._prebuilder.finish(self.micro_batch)
        for data in batch.cached:
            self.engine.uncache(data)
        self.committed_metrics.add(batch.reports)  # in the commit record
        restart.commit(self)  # then its metrics count as committed
        self.tasks.drop_side_input_files()
        self.on_reports(batch.reports)
        if self.after_micro_batch is not None:
            self.after_micro_batch(self.micro_batch)
        self.micro_batch += 1
        return (ran or fed or any(source_rows.values())
                or self.watermarks.moved(before))

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

    def _splittable(self, index: int, stage: p.StagePlan, data) -> Any:
        """Runs a splittable DoFn's stage now (a job): its self-checkpointed
        residuals go to the driver's schedule, its control rows are taken."""
        batch = self._batch
        self.watermarks.fix_next(index)
        # Cached even when nothing reads it (a leaf): the leaves' job would
        # run the DoFn again, and the stage's side effects twice.
        result = self.engine.cache(self.engine.map_stage(
            data, self.tasks.task(self.drain.stage(index, stage),
                                  self.watermarks.step(index, batch.now),
                                  gate=self.gates.get(index))))
        batch.cached.append(result)
        with self._job():
            scheduled, control = self.engine.collect(
                self.engine.select(result, SCHEDULED_TAG, 0, True))
        batch.take(control)
        batch.harvested.add(index)
        self.residuals.add(index, scheduled, batch.now,
                           self.watermarks.output[index])
        return result

    def _gate(self, index: int, stage: p.StagePlan, parts: list) -> list:
        """The main-input rows of a stage with side inputs that are ready now
        (``side_inputs``): the new ones join those pushed back before; each
        part is collected once (a job), its control rows taken."""
        batch, gate = self._batch, self.gates[index]
        # Before this micro-batch's elements: none is later than the input
        # watermark the stage had (the side inputs' included: conservative).
        gate.drop_expired(self.watermarks.input[index])
        for i in range(len(stage.side_inputs)):
            for writer, tag in self.watermarks.side_input_writers(index, i):
                if writer in batch.produced:
                    with self._job():
                        chunks, control = self.engine.collect(self.engine.select(
                            batch.produced[writer], tag, 0, self._carry(writer)))
                    batch.take(control)
                    gate.add_side(i, chunks)
        for port, part in parts:
            with self._job():
                chunks, control = self.engine.collect(part)
            batch.take(control)
            gate.add_main(port, chunks)
        self.watermarks.settle_writers(index)
        rows = gate.release(self.watermarks.side_inputs(index))
        return [(None, self._driver_rows(rows))] if rows else []

    def _carry(self, writer: int) -> bool:
        """Whether a reader of ``writer`` carries its control rows on
        (``MicroBatch.carry``)."""
        w = self.plan.stages[writer]
        return self._batch.carry(writer, w.grouped or w.stateful)

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
        if stage.split_input:  # cached already (Spark warns of a second time)
            return result
        if self._uses[index] > 1 or (self._uses[index] and (
                stage.grouped or stage.stateful)):
            result = self.engine.cache(result)
            self._batch.cached.append(result)
        return result

    def _inputs(self, index: int, stage: p.StagePlan) -> list:
        """This micro-batch's input parts of a stage, as (port, data) (empty:
        nothing to do).

        Each result's control rows go on with its first reader only; a keyed
        stage's are taken when it runs (``_harvest``)."""
        produced = self._batch.produced
        parts = []
        for tag, port in enumerate(stage.inputs):
            if port.buffer_id == translations.IMPULSE_BUFFER:
                if not self._impulse_done:
                    parts.append((tag, self.engine.select(
                        self.engine.impulse(), 0, tag, False)))
        for tag, writer, writer_tag in self.watermarks.writers(index):
            if writer not in produced:
                continue
            new_tag = 0 if stage.kind == p.RESHUFFLE_STAGE else tag
            carry = self._carry(writer)
            if self._whole(writer, writer_tag, new_tag, carry):
                parts.append((tag, produced[writer]))
                continue
            parts.append((tag, self.engine.select(
                produced[writer], writer_tag, new_tag, carry)))
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
        for _, writer, _ in self.watermarks.writers(index, side=True):
            if writer in self._batch.pending:
                return True
            w = self.plan.stages[writer]
            if not self.watermarks.settled(writer) and not (
                    w.grouped or w.stateful) and self._waits_for_pending(writer):
                return True
        return False

    def _keyed(self, index: int, stage: p.StagePlan, parts: list) -> bool:
        """Builds a keyed stage if it has new rows or due timers; else its
        watermarks settle at once."""
        batch = self._batch
        next_wm = self.watermarks.fix_next(index)
        due = self.buckets.due(index, next_wm, batch.now)
        if not parts and not due:
            self.watermarks.settle(index)
            return False
        datas = [data for _, data in parts]
        if due:
            datas.append(self.engine.rows(marker_rows(due)))
        data = datas[0] if len(datas) == 1 else self.engine.union(datas)
        files = self.buckets.files(
            index, stage.name, self.store.state_path(index, self.micro_batch))
        result = self.engine.map_stage(
            self.engine.shuffle(data, e.BUCKETED),
            self.tasks.task(stage, self.watermarks.step(index, batch.now),
                            files, self.gates.get(index)))
        batch.produced[index] = self._maybe_cache(index, result)
        batch.pending.append(index)
        return True

    # -- running ----------------------------------------------------------
    def _harvest(self, final: bool,
                 started: Callable[[], None] | None = None) -> None:
        """One job: runs the pending keyed stages (and, if ``final``, the
        leaves); takes their control rows: bundles' reports and the state
        buckets' new summaries and files. ``started``: called when the job
        is about to run (at once if there is none)."""
        batch = self._batch
        datas = [batch.produced[i] for i in batch.pending]
        if final:  # a leaf already run (an earlier harvest, a splittable
            # stage's job) is not run again: its side effects, its reports
            datas += [batch.produced[i] for i in batch.produced
                      if self._uses[i] == 0 and i not in batch.pending
                      and i not in self.sources and i not in batch.harvested]
        if datas:
            data = datas[0] if len(datas) == 1 else self.engine.union(datas)
            with self._job():
                _, control = self.engine.collect(data, elements=False,
                                                 started=started)
            batch.take(control)
        elif started is not None:
            started()
        self.buckets.apply(batch.take_state_reports())
        for index in batch.pending:
            self.watermarks.settle(index)
        batch.harvested.update(batch.pending)
        batch.pending = []
