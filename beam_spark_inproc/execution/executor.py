"""Walks a SparkPlan against an engine (dask's get_async/get_sync pattern).

The executor knows Beam's buffers and stages; an engine knows how to move rows
(the primitives of ``execution.engine``). ``spark.engine.SparkEngine`` is the
real one; ``debug.engine`` runs the same tasks in the driver.

A stage is built from its input mode (``planning.plan.INPUT_MODES``, decided by
the planner): ``_SHUFFLES`` says which shuffle comes before its task; a
``SPLITTABLE`` stage may run in rounds.

Policy:
* every stage output read more than once (two consumers, a consumer and a side
  input, two outputs of one stage...) is cached, so its bundles run once
  (their side effects and metrics too);
* side inputs are collected to the driver once, just before their first consumer
  is built, and shipped with the consuming stage's task; a stage whose outputs
  are read only that way says so to the engine (``StageTask.collected``: small
  data in the driver then runs it there as long as it takes little time,
  whatever its output's size, since that output comes to the driver anyway);
* stages nobody reads are the leaves: they run together as one job at the end;
* a stage running a splittable DoFn whose input the driver holds starts with
  its restrictions cut into one equal part per core (``_splittable``); else it
  may run in rounds (``_rounds``): then it is executed eagerly, one job per
  round;
* every job (``_job``) is described by the Beam stages it runs, for the engine
  (Spark's job description) and the progress log (``progress``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import uuid
from typing import Any
from typing import Callable

from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.runners.portability.fn_api_runner import translations

from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.execution.engine import ArrowOutput
from beam_spark_inproc.execution.engine import Engine
from beam_spark_inproc.execution.progress import Progress
from beam_spark_inproc.execution.side_inputs import state_entries
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol import report
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import RESIDUAL_TAG
from beam_spark_inproc.worker import logs
from beam_spark_inproc.worker.recode import Recode
from beam_spark_inproc.worker.stage_task import StageTask

_LOGGER = logging.getLogger(__name__)


# The shuffle each input mode needs before the stage's task (none: as read).
_SHUFFLES = {
    p.PLAIN: None,
    p.SPLITTABLE: None,
    p.GROUPED: e.GROUP,
    p.STATEFUL: e.KEY_SORTED,
    p.ARROW: None,
}


def execute(
    plan: p.SparkPlan,
    engine: Engine,
    job_id: str | None = None,
    split_after: float = 0.0,
    split_ways: int = 2,
    profile_dir: str = '',
    after_job=None,
    attempt_channel: tuple = (),
    runtime_options: tuple = (),
    native=None,
) -> list[dict]:
    """Runs the plan; returns the reports of all bundles (see ``protocol.report``).

    ``split_after``/``split_ways``: runner-initiated splitting of splittable
    DoFn restrictions still running after that many seconds (0: off).
    ``profile_dir``: workers profile each bundle into it (``worker.profiling``).
    ``after_job``: called with each Spark job's reports when it ends (the
    metrics pusher, ``metrics.pusher``). ``attempt_channel``: where tasks send
    the metrics of attempts that do not commit (``worker.attempts``).
    ``runtime_options``: (name, value) pairs of the pipeline's options, which
    workers set for RuntimeValueProvider (``StageTask.runtime_options``).
    ``native``: ``native(executor, index, stage)`` runs a runner-native stage
    (``beam_spark_inproc.transforms.runtime.build``, which the runner passes).
    """
    executor = Executor(
        plan,
        engine,
        job_id or uuid.uuid4().hex,
        split_after,
        split_ways,
        profile_dir,
        runtime_options,
    )
    executor.native = native
    executor.after_job = after_job
    executor.attempt_channel = attempt_channel
    return executor.run()


def wire(plan: p.SparkPlan) -> tuple[dict[tuple[int, bytes], list], collections.Counter]:
    """(stage index, buffer id) -> writers [(stage index, tag)] it reads, and
    the number of reads of each stage's result.

    A buffer's writers are the stages that wrote it before the reader, in
    plan order; a stage that reads and writes the same buffer replaces it.
    A stage reading a buffer as main and as side input reads it twice.
    """
    reads: dict = {}
    uses: collections.Counter = collections.Counter()
    writers: dict[bytes, list[tuple[int, int]]] = collections.defaultdict(list)
    for i, stage in enumerate(plan.stages):
        consumed = [port.buffer_id for port in stage.inputs]
        consumed += [si.buffer_id for si in stage.side_inputs]
        for buffer_id in consumed:
            reads.setdefault((i, buffer_id), list(writers[buffer_id]))
            uses.update(w for w, _ in writers[buffer_id])
        inputs = {port.buffer_id for port in stage.inputs}
        for tag, port in enumerate(stage.outputs):
            if port.buffer_id in inputs:
                writers[port.buffer_id] = []
                inputs.discard(port.buffer_id)
            writers[port.buffer_id].append((i, tag))
    return reads, uses


def reshuffle(
    engine: Engine, stage: p.StagePlan, context: pipeline_context.PipelineContext, data: Any
) -> Any:
    """A RESHUFFLE_STAGE (batch and streaming): rows keep their bytes (tag 0);
    each output port gets them under its tag, re-encoded where its coder
    differs from the input's (a Reshuffle feeding a GroupByKey, whose input
    Beam gives a deterministic key coder) or its pane info is dropped
    (``StagePlan.reset_panes``)."""
    shuffled = engine.shuffle(data, e.SPREAD)
    input_coder = context.coders[stage.inputs[0].coder_id]
    parts = []
    for tag, port in enumerate(stage.outputs):
        part = shuffled if len(stage.outputs) == 1 else engine.select(shuffled, 0, tag, tag == 0)
        output_coder = context.coders[port.coder_id]
        if output_coder != input_coder or stage.reset_panes:
            part = engine.map_stage(part, Recode(input_coder, output_coder, stage.reset_panes))
        parts.append(part)
    return parts[0] if len(parts) == 1 else engine.union(parts)


class CarryOnce:
    """Which reader of a result carries its control rows (bundles' reports:
    metrics, warnings) on: the first one only, so they count once however
    many stages read the result (batch and streaming alike)."""

    def __init__(self):
        self._carried: set[int] = set()  # results whose control rows have a reader

    def first(self, writer: int) -> bool:
        """Whether this reader of ``writer``'s result is its first (and from
        now on, a later one is not)."""
        first = writer not in self._carried
        self._carried.add(writer)
        return first

    def add(self, writer: int) -> None:
        """``writer``'s control rows go on another way (with the result)."""
        self._carried.add(writer)

    def __contains__(self, writer: int) -> bool:
        """Whether ``writer``'s control rows have a reader already."""
        return writer in self._carried


class Executor:
    def __init__(
        self,
        plan: p.SparkPlan,
        engine: Engine,
        job_id: str,
        split_after: float = 0.0,
        split_ways: int = 2,
        profile_dir: str = '',
        runtime_options: tuple = (),
    ):
        self.plan = plan
        self.runtime_options = runtime_options
        self.profile_dir = profile_dir
        self.engine = engine
        self.job_id = job_id
        self.split_after = split_after
        self.split_ways = split_ways
        self._context = pipeline_context.PipelineContext(
            beam_runner_api_pb2.Components.FromString(plan.components)
        )
        self._results: dict[int, Any] = {}
        self._carried = CarryOnce()
        self._reports: list[bytes] = []
        self._side_inputs: dict[tuple, list[bytes]] = {}
        self._reads, self._uses = wire(plan)
        # Runner-native reads' source DataFrames and Arrow schemas, by stage
        # (``transforms.runtime``: a SparkSql over a read's output uses them).
        self.native_frames: dict[int, tuple] = {}
        self._ran: set[int] = set()  # stages whose results earlier jobs computed
        self.progress = Progress(plan, job_id)
        self.after_job: Callable[[list[dict]], None] | None = None
        self.attempt_channel: tuple = ()
        self.native: Callable | None = None  # runs NATIVE_STAGEs: see ``execute``

    def run(self) -> list[dict]:
        try:
            for index, stage in enumerate(self.plan.stages):
                result = self._build(index, stage)
                if self._uses[index] > 1:
                    result = self.engine.cache(result)
                self._results[index] = result
            leaves = [self._results[i] for i in range(len(self.plan.stages)) if self._uses[i] == 0]
            if leaves:
                with self._job(
                    [i for i in range(len(self.plan.stages)) if self._uses[i] == 0], 'leaves'
                ) as reports:
                    reports.extend(
                        self.engine.collect(self.engine.union(leaves), elements=False)[1]
                    )
        finally:
            self.engine.release()
        return [report.decode(r) for r in self._reports]

    def _upstream(self, roots: list[int]) -> list[int]:
        """The stages a job reading ``roots`` runs: those no earlier job ran."""
        todo, seen = list(roots), set()
        while todo:
            i = todo.pop()
            if i in seen or i in self._ran:
                continue
            seen.add(i)
            for port in self.plan.stages[i].inputs:
                todo.extend(w for w, _ in self._reads.get((i, port.buffer_id), ()))
        return sorted(seen)

    @contextlib.contextmanager
    def _job(self, roots: list[int], what: str):
        """Runs a Spark job under its Beam description; yields a list for the
        control rows it returns."""
        stages = self._upstream(roots)
        description = self.progress.describe(stages, what)
        self.progress.started(description)
        reports: list[bytes] = []
        with self.engine.job('beam-pipeline-' + self.job_id[:8], description):
            yield reports
        self._ran.update(stages)
        self._reports.extend(reports)
        decoded = [report.decode(r) for r in reports]
        report.relog(decoded)
        self.progress.done(description, decoded)
        if self.after_job is not None:
            self.after_job(decoded)

    def _read(self, index: int, buffer_id: bytes, new_tag: int) -> list:
        if buffer_id == translations.IMPULSE_BUFFER:
            return [self.engine.select(self.engine.impulse(), 0, new_tag, False)]
        parts = []
        for i, tag in self._reads[(index, buffer_id)]:
            carry = self._carried.first(i)
            parts.append(self.engine.select(self._results[i], tag, new_tag, carry))
        return parts

    # --- for runner-native stages (``beam_spark_inproc.transforms.runtime``) ---

    @property
    def parallelism(self) -> int:
        """The run's partitions per shuffle (also its split ways)."""
        return self.split_ways

    def coder(self, coder_id: str):
        """The pipeline's coder of that id."""
        return self._context.coders[coder_id]

    def native_input(self, index: int, tag: int) -> tuple[Any, Any]:
        """(rows of input port ``tag`` of stage ``index``, the control rows this
        stage must carry on, or None). A native stage consuming only the elements
        (a write, a SQL view) then reads the input twice, so it is cached."""
        port = self.plan.stages[index].inputs[tag]
        fresh = [i for i, _ in self._reads[(index, port.buffer_id)] if i not in self._carried]
        parts = self._read(index, port.buffer_id, 0)
        data = parts[0] if len(parts) == 1 else self.engine.union(parts)
        if not fresh:
            return data, None
        data = self.engine.cache(data)
        return data, self.engine.select(data, CONTROL_TAG, CONTROL_TAG, False)

    def native_writer(self, index: int, tag: int):
        """The stage writing input port ``tag`` of stage ``index`` when it is
        one stage's only output, else None."""
        port = self.plan.stages[index].inputs[tag]
        writers = self._reads.get((index, port.buffer_id), ())
        if len(writers) != 1:
            return None
        ((writer, out_tag),) = writers
        return writer if out_tag == 0 and len(self.plan.stages[writer].outputs) == 1 else None

    def job(self, roots: list[int], what: str):
        """A context running Spark jobs for stages ``roots`` (see ``_job``)."""
        return self._job(roots, what)

    def _arrow_source(self, index: int, stage: p.StagePlan) -> ArrowOutput:
        """An ``ARROW`` stage's input: its one writer's ``ArrowOutput``."""
        writers = self._reads[(index, stage.inputs[0].buffer_id)]
        ((writer, _),) = writers
        self._carried.add(writer)  # its control rows, if any, come with it
        return self._results[writer]

    def _input(self, index: int, stage: p.StagePlan) -> Any:
        """The stage's input rows, each port's under its tag (all under tag 0
        for a Reshuffle, whose rows keep their bytes)."""
        parts = []
        for tag, port in enumerate(stage.inputs):
            new_tag = 0 if stage.kind == p.RESHUFFLE_STAGE else tag
            parts.extend(self._read(index, port.buffer_id, new_tag))
        return parts[0] if len(parts) == 1 else self.engine.union(parts)

    def _build(self, index: int, stage: p.StagePlan) -> Any:
        if stage.kind == p.NATIVE_STAGE:
            # Runner-native transforms (ReadFromSpark, ...): by URN, see
            # ``beam_spark_inproc.transforms.runtime``.
            if self.native is None:
                raise ValueError(
                    f'Stage {stage.name!r} ({", ".join(stage.labels)}): a '
                    f'runner-native stage ({stage.native_urn}) and no handler '
                    'for runner-native stages given to the executor.'
                )
            return self.native(self, index, stage)
        arrow_input = control = None
        if stage.input_mode == p.ARROW:
            source = self._arrow_source(index, stage)
            data, arrow_input, control = source.data, source.rows, source.control
        else:
            data = self._input(index, stage)
        if stage.kind == p.RESHUFFLE_STAGE:
            return self._reshuffle(stage, data)
        shuffle = _SHUFFLES[stage.input_mode]
        if shuffle is not None:
            data = self.engine.shuffle(data, shuffle)
        task = StageTask(
            self.job_id,
            stage,
            self._side_input_state(index, stage),
            self.split_after,
            self.split_ways,
            self.profile_dir,
            self.attempt_channel,
            self.runtime_options,
            log_level=logs.driver_level(),
            arrow_input=arrow_input,
            collected=self._collected(index),
            working_directory=os.getcwd(),
        )
        if stage.input_mode == p.SPLITTABLE and self.split_after > 0:
            return self._splittable(index, data, task)
        result = self.engine.map_stage(data, task)
        if control is not None:  # upstream reports of the query feeding it
            result = self.engine.union([result, control])
        return result

    def _collected(self, index: int) -> bool:
        """Whether every read of stage ``index``'s outputs is a side input's
        (the output goes to the driver whole: ``_side_input_state``)."""
        reads = [
            (reader, buffer_id)
            for (reader, buffer_id), writers in self._reads.items()
            if any(w == index for w, _ in writers)
        ]
        return bool(reads) and all(
            buffer_id in {si.buffer_id for si in self.plan.stages[reader].side_inputs}
            and buffer_id not in {port.buffer_id for port in self.plan.stages[reader].inputs}
            for reader, buffer_id in reads
        )

    def _reshuffle(self, stage: p.StagePlan, data: Any) -> Any:
        return reshuffle(self.engine, stage, self._context, data)

    def _splittable(self, index: int, data: Any, task: StageTask) -> Any:
        """A splittable stage whose input the driver holds starts with its
        restrictions cut into one equal part per core
        (``engine.spread_restrictions``): if every cut was made, it runs as one
        round with no runner splitting; else in rounds (``_rounds``)."""
        spread = self.engine.spread_restrictions(data, task.stage, self.split_ways)
        if spread is not None:
            data, balanced = spread
            if balanced:
                return self.engine.map_stage(data, dataclasses.replace(task, split_after=0.0))
        return self._rounds(index, data, task)

    def _rounds(self, index: int, data: Any, task: StageTask) -> Any:
        """Runs a splittable stage in rounds: the first round's stragglers are
        split (see ``worker.sdf``), their residuals spread over all partitions
        as a second round (self-checkpoints stay within their task)."""
        rounds = []
        result = self.engine.map_stage(data, task)
        while True:
            result = self.engine.cache(result)
            rounds.append(result)
            residuals = self.engine.select(result, RESIDUAL_TAG, RESIDUAL_TAG, False)
            self._ran.discard(index)  # each round runs the stage again
            with self._job([index], f'splittable round {len(rounds)}'):
                split_off, _ = self.engine.collect(residuals)
            if not split_off:
                break
            _LOGGER.info(
                'Stage %r: round %d split off restrictions; running them as round %d',
                task.stage.name[-60:],
                len(rounds),
                len(rounds) + 1,
            )
            # The residuals are equal shares, one per core: splitting them again
            # would only add rounds.
            result = self.engine.map_stage(
                self.engine.shuffle(residuals, e.SPREAD), dataclasses.replace(task, split_after=0.0)
            )
        return rounds[0] if len(rounds) == 1 else self.engine.union(rounds)

    def _side_input_state(self, index: int, stage: p.StagePlan) -> tuple:
        """One part per side input: its state entries, or where the engine put
        them (``engine.side_input``)."""
        parts = []
        for side_input in stage.side_inputs:
            writers = tuple(self._reads[(index, side_input.buffer_id)])
            if writers not in self._side_inputs:
                chunks = []
                with self._job(
                    [w for w, _ in writers], f'side input {side_input.tag!r}'
                ) as reports:
                    for part in self._read(index, side_input.buffer_id, 0):
                        part_chunks, control = self.engine.collect(part)
                        chunks.extend(part_chunks)
                        reports.extend(control)
                self._side_inputs[writers] = chunks
            coder = self._context.coders[side_input.coder_id]
            parts.append(
                self.engine.side_input(
                    tuple(state_entries(side_input, coder, self._side_inputs[writers]))
                )
            )
        return tuple(parts)
