"""How a stage of a stream becomes engine data in a micro-batch.

The loop (``loop.StreamingExecutor``) walks the plan's stages in order and
decides what runs in which job; ``StageSteps`` builds each stage's result for
it, as lazy engine data, by kind:

* **inputs** (``inputs``): each writer's result as the stage reads it, a
  ``select`` of the port's tag; a result's control rows go on with its first
  reader only (``MicroBatch.carry``), a keyed stage's are taken when it runs.
  A stage's input from a writer whose rows are all of the one output it reads
  (a single-output TestStream; a single-output stateless stage whose control
  rows the reader carries on) is the writer's data itself, not a ``select``
  that keeps every row (``_whole``): on Spark a ``filter`` fewer to analyse,
  plan and run per such input and micro-batch;
* a **stateless** stage: ``map_stage`` with its task (a Reshuffle as the batch
  executor's ``reshuffle``);
* a **keyed** stage (reading a GroupByKey, or stateful), if it has new rows
  or due timers: its input and a marker row per due bucket (``buckets``)
  shuffled ``BUCKETED``, its task told its watermarks and state files; its
  job is the loop's (``StreamingExecutor._harvest``);
* a **splittable** stage runs at once, in a job of its own: its
  self-checkpointed residuals go to the driver's schedule (``residuals``);
* a stage reading **side inputs** gets its main input through the driver:
  collected, pushed back until the side inputs are ready, released as driver
  rows (``side_inputs``).

A result read more than once, or after the job that ran it, is cached for the
micro-batch (``cache``).
"""

from __future__ import annotations

from typing import Any
from typing import Callable
from typing import Mapping

from apache_beam.runners.portability.fn_api_runner import translations

from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.execution.executor import reshuffle
from beam_spark_inproc.execution.streaming.buckets import BucketTable
from beam_spark_inproc.execution.streaming.drain import Drain
from beam_spark_inproc.execution.streaming.feed import Feed
from beam_spark_inproc.execution.streaming.micro_batch import MicroBatch
from beam_spark_inproc.execution.streaming.residuals import ResidualSchedule
from beam_spark_inproc.execution.streaming.side_inputs import SideInputGate
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.execution.streaming.tasks import StageTasks
from beam_spark_inproc.execution.streaming.watermarks import Watermarks
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol.buckets import marker_rows
from beam_spark_inproc.protocol.rows import SCHEDULED_TAG


def key_coders(plan: p.SparkPlan, reads: dict, index: int, stage: p.StagePlan) -> dict[int, str]:
    """Input port -> its producers' key coder, for keyed input ports
    (``reads``: ``executor.wire``'s)."""
    found = {}
    for port_index, port in enumerate(stage.inputs):
        for writer, tag in reads.get((index, port.buffer_id), ()):
            out = plan.stages[writer].outputs[tag]
            if port.keyed and out.key_coder_id:
                found[port_index] = out.key_coder_id
    return found


class StageSteps:
    """Builds a stream's stages as engine data (see the module doc). The
    parts it reads and moves are the loop's (``loop.StreamingExecutor``);
    ``job``: a context for one of the stream's jobs; ``reads``, ``uses``:
    the plan's wiring (``executor.wire``)."""

    def __init__(
        self,
        plan: p.SparkPlan,
        context,
        reads: dict,
        uses: Mapping[int, int],
        job: Callable,
        *,
        engine: Any,
        feed: Feed,
        tasks: StageTasks,
        watermarks: Watermarks,
        buckets: BucketTable,
        residuals: ResidualSchedule,
        gates: dict[int, SideInputGate],
        drain: Drain,
        store: CheckpointStore,
    ):
        self.plan = plan
        self._context = context
        self._job = job
        self.reads, self.uses = reads, uses  # ``executor.wire``
        self.engine = engine
        self.feed = feed
        self.tasks = tasks
        self.watermarks = watermarks
        self.buckets = buckets
        self.residuals = residuals
        self.gates = gates
        self.drain = drain
        self.store = store

    # -- inputs -----------------------------------------------------------
    def inputs(self, batch: MicroBatch, index: int, stage: p.StagePlan, impulse: bool) -> list:
        """This micro-batch's input parts of a stage, as (port, data) (empty:
        nothing to do); ``impulse``: whether the impulse is fed (the first
        micro-batch).

        Each result's control rows go on with its first reader only; a keyed
        stage's are taken when it runs (``_harvest``)."""
        produced = batch.produced
        parts = []
        for tag, port in enumerate(stage.inputs):
            if port.buffer_id == translations.IMPULSE_BUFFER:
                if impulse:
                    parts.append((tag, self.engine.select(self.engine.impulse(), 0, tag, False)))
        for port_tag, writer, writer_tag in self.watermarks.writers(index):
            if writer not in produced:
                continue
            assert port_tag is not None  # main inputs only (no ``side``)
            new_tag = 0 if stage.kind == p.RESHUFFLE_STAGE else port_tag
            carry = self.carry(batch, writer)
            if self._whole(writer, writer_tag, new_tag, carry):
                parts.append((port_tag, produced[writer]))
                continue
            data = self.engine.select(produced[writer], writer_tag, new_tag, carry)
            parts.append((port_tag, data))
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
        return carry and w.kind == p.SDK_STAGE and not (w.grouped or w.stateful or w.split_input)

    def carry(self, batch: MicroBatch, writer: int) -> bool:
        """Whether a reader of ``writer`` carries its control rows on
        (``MicroBatch.carry``)."""
        w = self.plan.stages[writer]
        return batch.carry(writer, w.grouped or w.stateful)

    def cache(self, batch: MicroBatch, index: int, result: Any) -> Any:
        """A result read more than once, or read after the job that ran it
        (a keyed stage's; a splittable stage's is always cached,
        ``splittable``), is cached for the micro-batch."""
        stage = self.plan.stages[index]
        if stage.split_input:  # cached already (Spark warns of a second time)
            return result
        if self.uses[index] > 1 or (self.uses[index] and (stage.grouped or stage.stateful)):
            result = self.engine.cache(result)
            batch.cached.append(result)
        return result

    # -- stages -----------------------------------------------------------
    def unkeyed(self, batch: MicroBatch, index: int, stage: p.StagePlan, parts: list) -> Any:
        """The result of a stage that is not keyed: stateless, a Reshuffle,
        or splittable (``splittable``)."""
        datas = [data for _, data in parts]
        data = datas[0] if len(datas) == 1 else self.engine.union(datas)
        if stage.kind == p.RESHUFFLE_STAGE:
            # As the batch executor (re-encoding, pane reset included).
            result = reshuffle(self.engine, stage, self._context, data)
        elif stage.split_input:
            result = self.splittable(batch, index, stage, data)
        else:
            result = self.engine.map_stage(
                data, self.tasks.stateless(index, stage, self.gates.get(index))
            )
        return self.cache(batch, index, result)

    def keyed(
        self, batch: MicroBatch, index: int, stage: p.StagePlan, parts: list, micro_batch: int
    ) -> bool:
        """Builds a keyed stage if it has new rows or due timers; else its
        watermarks settle at once."""
        next_wm = self.watermarks.fix_next(index)
        due = self.buckets.due(index, next_wm, batch.now)
        if not parts and not due:
            self.watermarks.settle(index)
            return False
        datas = [data for _, data in parts]
        if due:
            datas.append(self.engine.rows(marker_rows(due)))
        data = datas[0] if len(datas) == 1 else self.engine.union(datas)
        files = self.buckets.files(index, stage.name, self.store.state_path(index, micro_batch))
        result = self.engine.map_stage(
            self.engine.shuffle(data, e.BUCKETED),
            self.tasks.task(
                stage, self.watermarks.step(index, batch.now), files, self.gates.get(index)
            ),
        )
        batch.produced[index] = self.cache(batch, index, result)
        batch.pending.append(index)
        return True

    def splittable(self, batch: MicroBatch, index: int, stage: p.StagePlan, data) -> Any:
        """Runs a splittable DoFn's stage now (a job): its self-checkpointed
        residuals go to the driver's schedule, its control rows are taken."""
        self.watermarks.fix_next(index)
        # Cached even when nothing reads it (a leaf): the leaves' job would
        # run the DoFn again, and the stage's side effects twice.
        result = self.engine.cache(
            self.engine.map_stage(
                data,
                self.tasks.task(
                    self.drain.stage(index, stage),
                    self.watermarks.step(index, batch.now),
                    gate=self.gates.get(index),
                ),
            )
        )
        batch.cached.append(result)
        with self._job():
            scheduled, control = self.engine.collect(
                self.engine.select(result, SCHEDULED_TAG, 0, True)
            )
        batch.take(control)
        batch.harvested.add(index)
        self.residuals.add(index, scheduled, batch.now, self.watermarks.output[index])
        return result

    def gate(self, batch: MicroBatch, index: int, stage: p.StagePlan, parts: list) -> list:
        """The main-input rows of a stage with side inputs that are ready now
        (``side_inputs``): the new ones join those pushed back before; each
        part is collected once (a job), its control rows taken."""
        gate = self.gates[index]
        # Before this micro-batch's elements: none is later than the input
        # watermark the stage had (the side inputs' included: conservative).
        gate.drop_expired(self.watermarks.input[index])
        for i in range(len(stage.side_inputs)):
            for writer, tag in self.watermarks.side_input_writers(index, i):
                if writer in batch.produced:
                    with self._job():
                        chunks, control = self.engine.collect(
                            self.engine.select(
                                batch.produced[writer], tag, 0, self.carry(batch, writer)
                            )
                        )
                    batch.take(control)
                    gate.add_side(i, chunks)
        for port, part in parts:
            with self._job():
                chunks, control = self.engine.collect(part)
            batch.take(control)
            gate.add_main(port, chunks)
        self.watermarks.settle_writers(index)
        rows = gate.release(self.watermarks.side_inputs(index))
        return [(None, self.feed.rows(rows))] if rows else []
