"""Per-stage watermarks of the micro-batch loop (Beam's rules, kept in the driver).

For each stage of the plan:

* its **input watermark** is the minimum of the output watermarks of what it
  reads, main and side inputs alike: the stages that write the buffers it
  reads (``executor.wire``), or a source's output watermark
  (``source.StreamSource.watermark``). The impulse is not a watermark: it is
  fed once, in the first micro-batch.
* its **output watermark** is min(input watermark, holds), never moving back.
  What holds it is the loop's business (``StreamingExecutor._hold``): the
  earliest hold of a keyed stage's state buckets (buffered panes, pending
  timers' output timestamps, ``buckets``), the elements a side-input gate
  pushed back (``side_inputs``), a splittable DoFn's pending residuals
  (``residuals``).

**Settling.** Within a micro-batch a stage's watermarks are *settled* once:
after its writers' (``settle`` settles them first, recursively), with the
writers' watermarks as they stand after this micro-batch's upstream work, so
a watermark step cascades through every stage in one micro-batch. A keyed or
splittable stage's task needs its new input watermark before it runs
(``StreamingStep.next_input_watermark``): ``fix_next`` takes it then, and
``settle`` uses that one (the writers cannot move again in the micro-batch).
A source's stage settles at its source's watermarks (``settle_source``).
"""

from __future__ import annotations

from typing import Callable
from typing import Iterator
from typing import Mapping

from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.execution.streaming.source import StreamSource
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol.state import StreamingStep


class Watermarks:
    """The input and output watermark of every stage, and which of them are
    settled in the current micro-batch.

    ``reads``: (stage, buffer id) -> its writers [(stage, output tag)]
    (``executor.wire``); ``sources``: the loop's sources by stage;
    ``hold``: a stage -> the earliest of what holds its output watermark
    when it settles (``MAX_TIMESTAMP``: nothing)."""

    def __init__(
        self,
        plan: p.SparkPlan,
        reads: dict,
        sources: Mapping[int, StreamSource],
        hold: Callable[[int], Timestamp],
    ):
        self._plan = plan
        self._reads = reads
        self._sources = sources
        self._hold = hold
        n = len(plan.stages)
        self.input = [MIN_TIMESTAMP] * n
        self.output = [MIN_TIMESTAMP] * n
        # Input watermarks a stage's task was given (``fix_next``), until it
        # settles; and the stages settled in this micro-batch.
        self._next: dict[int, Timestamp] = {}
        self._settled: set[int] = set()

    def restore(self, index: int, input_wm: Timestamp, output_wm: Timestamp) -> None:
        """A stage's watermarks as a commit record holds them."""
        self.input[index] = input_wm
        self.output[index] = output_wm

    def begin(self) -> tuple[list, list]:
        """A new micro-batch: nothing settled yet. Returns the watermarks as
        they stand (``moved`` compares them after it)."""
        self._settled = set()
        return list(self.input), list(self.output)

    def moved(self, before: tuple[list, list]) -> bool:
        return (list(self.input), list(self.output)) != before

    @property
    def final(self) -> bool:
        """Whether every stage's output watermark is +inf."""
        return all(wm >= MAX_TIMESTAMP for wm in self.output)

    def held(self) -> list[str]:
        """The stages whose output watermark is below +inf, by their
        transforms' labels."""
        from beam_spark_inproc.execution.streaming.progress import display_name

        return [
            display_name(s) for s, wm in zip(self._plan.stages, self.output) if wm < MAX_TIMESTAMP
        ]

    # -- wiring -----------------------------------------------------------
    def writers(self, index: int, side: bool = False) -> Iterator[tuple[int | None, int, int]]:
        """(input port, writer, its output tag) of a stage's main inputs;
        with ``side``, its side inputs' writers too (port None)."""
        stage = self._plan.stages[index]
        for tag, port in enumerate(stage.inputs):
            if port.buffer_id == translations.IMPULSE_BUFFER:
                continue
            for writer, writer_tag in self._reads[(index, port.buffer_id)]:
                yield tag, writer, writer_tag
        for side_input in stage.side_inputs if side else ():
            for writer, writer_tag in self._reads[(index, side_input.buffer_id)]:
                yield None, writer, writer_tag

    def side_input_writers(self, index: int, side_input: int) -> list:
        """[(writer, its output tag)] of a stage's ``side_input``-th side
        input."""
        stage = self._plan.stages[index]
        return self._reads[(index, stage.side_inputs[side_input].buffer_id)]

    # -- watermarks -------------------------------------------------------
    def writer(self, stage: int, tag: int) -> Timestamp:
        """The output watermark of ``stage``'s output ``tag`` as it stands."""
        source = self._sources.get(stage)
        if source is not None:
            return source.watermark(tag)
        return self.output[stage]

    def next_input(self, index: int) -> Timestamp:
        """A stage's input watermark from its writers' as they stand."""
        wm = MAX_TIMESTAMP
        for _, writer, tag in self.writers(index, side=True):
            wm = min(wm, self.writer(writer, tag))
        return wm

    def side_inputs(self, index: int) -> list[Timestamp]:
        """The watermark of each of a stage's side inputs as it stands."""
        return [
            min(
                (self.writer(w, t) for w, t in self.side_input_writers(index, i)),
                default=MAX_TIMESTAMP,
            )
            for i in range(len(self._plan.stages[index].side_inputs))
        ]

    def fix_next(self, index: int) -> Timestamp:
        """A stage's input watermark after this micro-batch, taken when its
        task is built (writers settled first); ``settle`` keeps it."""
        self.settle_writers(index)
        self._next[index] = self.next_input(index)
        return self._next[index]

    def step(self, index: int, processing_time: float) -> StreamingStep:
        """What a stage's task is told of time (after ``fix_next``)."""
        return StreamingStep(
            input_watermark=self.input[index],
            next_input_watermark=self._next[index],
            output_watermark=self.output[index],
            processing_time=processing_time,
        )

    def settled(self, index: int) -> bool:
        return index in self._settled

    def settle_writers(self, index: int) -> None:
        for _, writer, _ in self.writers(index, side=True):
            self.settle(writer)

    def settle(self, index: int) -> None:
        """The stage's watermarks after this micro-batch (writers first)."""
        if index in self._settled:
            return
        self.settle_writers(index)
        next_wm = self._next.pop(index, None)
        if next_wm is None:
            next_wm = self.next_input(index)
        self.input[index] = next_wm
        self.output[index] = max(self.output[index], min(next_wm, self._hold(index)))
        self._settled.add(index)

    def settle_source(self, index: int) -> None:
        """A source's stage: its watermarks are its outputs' earliest."""
        source = self._sources[index]
        self.input[index] = self.output[index] = min(
            (source.watermark(t) for t in range(len(self._plan.stages[index].outputs))),
            default=MAX_TIMESTAMP,
        )
        self._settled.add(index)
