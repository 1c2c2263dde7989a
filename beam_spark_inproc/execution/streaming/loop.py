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
named parts: the sources it steps and the driver's rows as engine data
(``feed.Feed``, over ``source.StreamSource``), how each kind of stage is built
(``steps.StageSteps``), the per-stage
watermarks (``watermarks.Watermarks``), the state-bucket table
(``buckets.BucketTable``), one micro-batch's bookkeeping
(``micro_batch.MicroBatch``, made anew each time), the stage tasks and the
side-input values they carry (``tasks.StageTasks``), side-input gates
(``side_inputs``), splittable DoFns' residuals (``residuals``), and the commit
record that writes and restores them all (``restart``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any
from typing import Callable

from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.execution.executor import wire
from beam_spark_inproc.execution.streaming import restart
from beam_spark_inproc.execution.streaming.buckets import BucketTable
from beam_spark_inproc.execution.streaming.drain import Drain
from beam_spark_inproc.execution.streaming.feed import Feed
from beam_spark_inproc.execution.streaming.micro_batch import MicroBatch
from beam_spark_inproc.execution.streaming.progress import StreamProgress
from beam_spark_inproc.execution.streaming.residuals import ResidualSchedule
from beam_spark_inproc.execution.streaming.restart import CommittedMetrics
from beam_spark_inproc.execution.streaming.side_inputs import SideInputGate
from beam_spark_inproc.execution.streaming.source import StreamSource
from beam_spark_inproc.execution.streaming.spark_sinks import SparkStages
from beam_spark_inproc.execution.streaming.steps import StageSteps
from beam_spark_inproc.execution.streaming.steps import key_coders
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.execution.streaming.tasks import StageTasks
from beam_spark_inproc.execution.streaming.watermarks import Watermarks
from beam_spark_inproc.planning import plan as p

_LOGGER = logging.getLogger(__name__)


class StreamingExecutor:
    """Runs a streaming plan as micro-batches on an engine (see the module
    doc): steps the sources, builds and runs each micro-batch's stages,
    settles the watermarks, commits."""

    progress: StreamProgress  # the stream's published progress (set by ``run``)

    def __init__(
        self,
        plan: p.SparkPlan,
        engine: Any,
        job_id: str,
        store: CheckpointStore,
        cancelled: threading.Event,
        on_reports: Callable[[list[dict]], None],
        after_micro_batch: Callable[[int], None] | None = None,
        attempt_channel: tuple = (),
        runtime_options: tuple = (),
        profile_dir: str = '',
        spread: tuple[int, int] = (1, 0),
        prefetch: bool = False,
        test_stream_values: dict | None = None,
        stateful_whole: bool = False,
        native=None,
        native_source: Callable | None = None,
    ):
        self.plan = plan
        self.job_id = job_id
        # How the stream is named to a person: the same on every run of its
        # checkpoint location (``store.admit``).
        self.stream_id: str = getattr(store, 'stream_id', None) or job_id[:8]
        self.store = store
        self.cancelled = cancelled
        self.on_reports = on_reports
        self.after_micro_batch = after_micro_batch
        components = beam_runner_api_pb2.Components.FromString(plan.components)
        context = pipeline_context.PipelineContext(components)
        # The sources and the driver's rows (``feed``: spread, prefetch); its
        # engine is the stream's (with ``prefetch``, a ``Prebuilder``).
        self.feed = Feed(
            plan,
            engine,
            context,
            store,
            lambda task: self.tasks.stable(task),
            spread,
            prefetch,
            test_stream_values,
            stateful_whole,
            native_source,
        )
        self.engine = engine = self.feed.engine
        self.sources: dict[int, StreamSource] = self.feed.sources
        reads, uses = wire(plan)
        # Stages reading side inputs: their main input waits until ready.
        self.gates = {
            i: SideInputGate(stage, components, context, key_coders(plan, reads, i, stage))
            for i, stage in enumerate(plan.stages)
            if stage.side_inputs
        }
        self.watermarks = Watermarks(plan, reads, self.sources, self._hold)
        self.buckets = BucketTable([stage.name for stage in plan.stages])
        self.residuals = ResidualSchedule()  # splittable DoFns' (``residuals``)
        self.drain = Drain(None if store.temporary else store.root)  # ``drain``
        self.tasks = StageTasks(
            job_id, engine, store, attempt_channel, runtime_options, profile_dir
        )
        self.steps = StageSteps(
            plan,
            context,
            reads,
            uses,
            self._job,
            engine=engine,
            feed=self.feed,
            tasks=self.tasks,
            watermarks=self.watermarks,
            buckets=self.buckets,
            residuals=self.residuals,
            gates=self.gates,
            drain=self.drain,
            store=store,
        )
        # WriteToSpark and SparkSql (``spark_sinks``; ``native``: the
        # runner's handler for them, ``transforms.stream_runtime``)
        self.spark_stages = SparkStages(plan, engine, store, context, self._job, native)
        self.micro_batch = 0
        self._impulse_done = False
        self.committed_metrics = CommittedMetrics()  # restart.py
        self._batch: MicroBatch | None = None  # the one running
        # Whether a micro-batch runs now (``micro_batch``: its number), or
        # the loop is between two (what a stop says, ``result``).
        self.in_micro_batch = False

    def resume_after(self, micro_batch: int) -> None:
        """The next micro-batch follows committed ``micro_batch`` (the
        impulse was fed in the first one); ``restart.restore`` has put the
        parts where its commit record left them."""
        self.micro_batch = micro_batch + 1
        self._impulse_done = True

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
            self.feed.close()

    def _loop(self) -> None:
        while not self.cancelled.is_set():
            self.drain.check(self)  # at the micro-batch boundary (``drain``)
            rows = self.feed.step()
            if self.cancelled.is_set():  # a stop while the sources stepped:
                return  # nothing of it is committed, a restart steps again
            self.in_micro_batch = True
            try:
                moved = self._run_micro_batch(rows)
            finally:
                self.in_micro_batch = False
            exhausted = self.feed.exhausted
            if exhausted and not moved and self.residuals.pending:
                self._wait_for_residuals()
                continue
            done = exhausted and not self.residuals.pending
            if done and self.watermarks.final:
                return
            if done and not moved:
                _LOGGER.warning(
                    'Stream %s: sources exhausted, stages %s hold their output '
                    'watermarks below +inf; stopping.',
                    self.stream_id,
                    self.watermarks.held(),
                )
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
        while not self.cancelled.is_set() and not self.drain.waiting() and time.time() < due:
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
                data, made = self.feed.source_data(index, source_rows.get(index))
                fed |= made
                if data is not None:
                    batch.produced[index] = data
                self.watermarks.settle_source(index)
                continue
            eager = index in self.gates or bool(stage.split_input) or stage.kind == p.NATIVE_STAGE
            if (stage.grouped or stage.stateful or eager) and self._waits_for_pending(index):
                self._harvest(final=False)
            parts = self.steps.inputs(batch, index, stage, not self._impulse_done)
            if index in self.gates:
                parts = self.steps.gate(batch, index, stage, parts)
            due = self.residuals.due(index, batch.now) if stage.split_input else []
            if due:
                parts.append((None, self.feed.rows(due, always=True)))
            if stage.grouped or stage.stateful:
                ran |= self.steps.keyed(batch, index, stage, parts, self.micro_batch)
                continue
            if stage.kind == p.NATIVE_STAGE:
                ran |= self.spark_stages.run(index, stage, parts, batch, self.micro_batch)
                continue
            if not parts:
                continue
            batch.produced[index] = self.steps.unkeyed(batch, index, stage, parts)
            ran = True
        # The next micro-batch's prefetch starts as the last job does.
        self._harvest(final=True, started=self.feed.next_micro_batch(self.micro_batch))
        for index in range(len(self.plan.stages)):
            self.watermarks.settle(index)
        self._impulse_done = True
        self.feed.finish(self.micro_batch)
        for data in batch.cached:
            self.engine.uncache(data)
        self.committed_metrics.add(batch.reports)  # in the commit record
        restart.commit(self)  # then its metrics count as committed
        self.tasks.drop_side_input_files()
        self.on_reports(batch.reports)
        if self.after_micro_batch is not None:
            self.after_micro_batch(self.micro_batch)
        self.micro_batch += 1
        return ran or fed or any(source_rows.values()) or self.watermarks.moved(before)

    # -- running ----------------------------------------------------------
    @property
    def _tag(self) -> str:
        return 'beam-pipeline-' + self.job_id[:8]

    @contextlib.contextmanager
    def _job(self):
        with self.engine.job(
            self._tag, f'Beam stream {self.stream_id} micro-batch {self.micro_batch}'
        ):
            yield

    def _waits_for_pending(self, index: int) -> bool:
        """Whether a stage's input watermark depends on a keyed stage built
        in this micro-batch and not run yet."""
        batch = self._batch
        assert batch is not None  # asked while a micro-batch is built
        for _, writer, _ in self.watermarks.writers(index, side=True):
            if writer in batch.pending:
                return True
            w = self.plan.stages[writer]
            if (
                not self.watermarks.settled(writer)
                and not (w.grouped or w.stateful)
                and self._waits_for_pending(writer)
            ):
                return True
        return False

    def _harvest(self, final: bool, started: Callable[[], None] | None = None) -> None:
        """One job: runs the pending keyed stages (and, if ``final``, the
        leaves); takes their control rows: bundles' reports and the state
        buckets' new summaries and files. ``started``: called when the job
        is about to run (at once if there is none)."""
        batch = self._batch
        assert batch is not None  # a harvest is of the running micro-batch
        datas = [batch.produced[i] for i in batch.pending]
        if final:  # a leaf already run (an earlier harvest, a splittable
            # stage's job) is not run again: its side effects, its reports
            datas += [
                batch.produced[i]
                for i in batch.produced
                if self.steps.uses[i] == 0
                and i not in batch.pending
                and i not in self.sources
                and i not in batch.harvested
            ]
        if datas:
            data = datas[0] if len(datas) == 1 else self.engine.union(datas)
            with self._job():
                _, control = self.engine.collect(data, elements=False, started=started)
            batch.take(control)
        elif started is not None:
            started()
        self.buckets.apply(batch.take_state_reports())
        for index in batch.pending:
            self.watermarks.settle(index)
        batch.harvested.update(batch.pending)
        batch.pending = []
