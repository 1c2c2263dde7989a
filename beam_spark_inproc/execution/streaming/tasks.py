"""The stage tasks of a stream, and the side-input values they carry.

Every stage runs in the workers as a ``StageTask`` (``worker.stage_task``),
told of time (``StreamingStep``: the stage's watermarks before and after the
micro-batch, the processing time) and, for a keyed stage, of its state files
(``buckets``). Two things are kept across micro-batches here:

* a **stateless** stage reading no side input gets the same task object every
  micro-batch (nothing in it changes), so the engine can reuse what it made of
  it (``SparkEngine.map_stage``) and the prefetch thread can build its step
  ahead (``prebuild``: ``stable``);
* a stage reading side inputs carries their values as its gate released them
  (``side_inputs.SideInputGate.state``), made again only when their value
  changed (the gate's version); a large one is a file under the checkpoint
  location (``store``) that the engine wrote, kept while a micro-batch may
  read it and removed after the commit of one that no longer does.
"""

from __future__ import annotations

import os
from typing import Any

from beam_spark_inproc.execution.streaming.side_inputs import SideInputGate
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol.state import StateFiles
from beam_spark_inproc.protocol.state import StreamingStep
from beam_spark_inproc.worker import logs
from beam_spark_inproc.worker.stage_task import StageTask


class StageTasks:
    """Makes the stream's stage tasks; keeps the stateless ones and the side
    inputs' values as tasks carry them."""

    def __init__(
        self,
        job_id: str,
        engine: Any,
        store: CheckpointStore,
        attempt_channel: tuple = (),
        runtime_options: tuple = (),
        profile_dir: str = '',
    ):
        self.job_id = job_id
        self.engine = engine
        self.store = store
        self.attempt_channel = attempt_channel
        self.runtime_options = runtime_options
        self.profile_dir = profile_dir
        self._stateless: dict[int, StageTask] = {}  # ``stateless``
        # A gate's side inputs as its stage's tasks carry them, for its
        # version: made (and a large one written) when the value changes.
        self._side_parts: dict[str, tuple[int, tuple]] = {}
        self._side_files_read: set[str] = set()  # by this micro-batch

    def task(
        self,
        stage: p.StagePlan,
        step: StreamingStep | None = None,
        state_files: StateFiles | None = None,
        gate: SideInputGate | None = None,
    ) -> StageTask:
        side_inputs, version = (), 0
        if gate is not None:
            side_inputs, version = self._side_inputs(gate), gate.version
        return StageTask(
            self.job_id,
            stage,
            side_inputs,
            streaming=step,
            attempt_channel=self.attempt_channel,
            runtime_options=self.runtime_options,
            side_input_version=version,
            state_files=state_files,
            log_level=logs.driver_level(),
            profile_dir=self.profile_dir,
            working_directory=os.getcwd(),
        )

    def stateless(
        self, index: int, stage: p.StagePlan, gate: SideInputGate | None = None
    ) -> StageTask:
        """A stateless stage's task: the same object every micro-batch when
        the stage reads no side input (``gate`` None)."""
        if gate is not None:
            return self.task(stage, gate=gate)
        task = self._stateless.get(index)
        if task is None:
            task = self._stateless[index] = self.task(stage)
        return task

    def stable(self, task: Any) -> bool:
        """Whether ``task`` is a stateless stage's, the same every
        micro-batch (``prebuild``)."""
        return any(task is t for t in self._stateless.values())

    def _side_inputs(self, gate: SideInputGate) -> tuple:
        """What a task carries for the gate's side inputs: made again only
        when their value changed; a large one is a file under the checkpoint
        location (``store``), kept while a micro-batch may read it."""
        version, parts = self._side_parts.get(gate.stage.name, (None, ()))
        if version != gate.version:
            parts = tuple(
                self.engine.side_input(s, self.store.side_input_folder) for s in gate.state()
            )
            self._side_parts[gate.stage.name] = gate.version, parts
        self._side_files_read.update(_locations(parts))
        return parts

    def drop_side_input_files(self) -> None:
        """After a commit: the side-input files neither this micro-batch read
        nor a later one may read are removed."""
        keep = self._side_files_read | {
            path for _, parts in self._side_parts.values() for path in _locations(parts)
        }
        self.store.remove_side_inputs(keep)
        self._side_files_read = set()


def _locations(parts: tuple) -> list[str]:
    return [part.location for part in parts if getattr(part, 'location', None) is not None]
