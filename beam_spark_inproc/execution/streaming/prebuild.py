"""The next micro-batch's stateless steps built ahead, in the prefetch thread.

On Spark every DataFrame step (``filter``, ``mapInArrow``, the ``BUCKETED``
shuffle's ``withColumn``/``repartition``/``sortWithinPartitions``/``drop``)
is a new Dataset the JVM analyses while the driver waits for its Py4J reply:
~20-40 ms a micro-batch on the loop's path before each job
(docs/performance.md). Most of these steps do not depend on the
micro-batch's watermarks: a source's rows, their select, a stateless
stage's ``map_stage`` (the same task object every micro-batch,
``tasks.StageTasks.stateless``) and the shuffle in front of a keyed
stage. Only the keyed stage's own task carries the micro-batch's watermarks
and state files.

``Prebuilder`` wraps the engine. It records, per micro-batch, the steps the
loop takes from each source's data (``select``, ``map_stage`` with a task the
loop marks stable, ``shuffle``), each as (its input's reference, the step,
its arguments); the prefetch thread, once it has made the next micro-batch's
source data, replays the last micro-batch's recipe on it, and the loop's
same calls in the next micro-batch take the results built then (the same
input object, step and arguments: a DataFrame step is a pure function of
them). A step the recipe does not have, a union (due timers' marker rows),
a cached result or a new task: built by the loop as before. Engine data are
immutable, so a result built ahead and not asked for is simply dropped.
"""

from __future__ import annotations

import logging
import threading
from typing import Any
from typing import Callable

_LOGGER = logging.getLogger(__name__)

# ('source', stage index) or the index of an earlier step of the recipe
Ref = Any


class Prebuilder:
    """An engine (``execution.engine``) whose ``select``, ``map_stage`` and
    ``shuffle`` on data derived from a source's take results built ahead
    (``prebuild``); everything else is the engine's."""

    def __init__(self, engine: Any, stable: Callable[[Any], bool]):
        self._engine = engine
        self._stable = stable  # whether a task is the same every micro-batch
        self._lock = threading.Lock()
        # This micro-batch's: id(data) -> (data, its reference), and the
        # recipe being recorded; the last complete one (``finish``).
        self._refs: dict[int, tuple[Any, Ref]] = {}
        self._recording: list[tuple[Ref, str, tuple]] = []
        self._recipe: list[tuple[Ref, str, tuple]] = []
        # (id(input), step, key) -> (input, result, micro-batch built for)
        self._built: dict[tuple, tuple[Any, Any, int]] = {}
        self._finished = -1
        self.hits = self.misses = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    # -- the loop's side ------------------------------------------------------
    def source(self, index: int, data: Any) -> None:
        """``data`` is source stage ``index``'s for this micro-batch."""
        self._refs[id(data)] = data, ('source', index)

    def finish(self, micro_batch: int) -> None:
        """The end of a micro-batch's building: its recipe is the one the
        prefetch replays; what was built for it and not taken is dropped.
        Once per micro-batch (the first call counts)."""
        if self._finished == micro_batch:
            return
        self._finished = micro_batch
        self._recipe, self._recording = self._recording, []
        self._refs = {}
        with self._lock:
            self._built = {k: v for k, v in self._built.items() if v[2] > micro_batch}

    def select(self, data, tag: int, new_tag: int, control: bool):
        return self._step(data, 'select', (tag, new_tag, control))

    def map_stage(self, data, task):
        if not self._stable(task):
            return self._engine.map_stage(data, task)
        return self._step(data, 'map_stage', (task,))

    def shuffle(self, data, how: str):
        return self._step(data, 'shuffle', (how,))

    def _step(self, data, step: str, args: tuple):
        known = self._refs.get(id(data))
        key = (id(data), step, _key(args))
        with self._lock:
            built = self._built.pop(key, None)
        if built is not None and built[0] is data:
            result = built[1]
            self.hits += 1
        else:
            result = getattr(self._engine, step)(data, *args)
            if known is not None:
                self.misses += 1
        if known is not None and known[0] is data:
            self._recording.append((known[1], step, args))
            self._refs[id(result)] = result, len(self._recording) - 1
        return result

    # -- the prefetch thread's side ------------------------------------------
    def prebuild(self, index: int, data: Any, micro_batch: int) -> Any:
        """Replays the last recipe's steps from source ``index`` on ``data``
        (the source's data for ``micro_batch``); returns ``data``."""
        values: dict[Ref, Any] = {('source', index): data}
        for position, (ref, step, args) in enumerate(list(self._recipe)):
            given = values.get(ref)
            if given is None:
                continue
            try:
                result = getattr(self._engine, step)(given, *args)
            except Exception:  # noqa: BLE001 - the loop's own call raises it
                _LOGGER.debug('Prebuilding %s failed', step, exc_info=True)
                break
            values[position] = result
            with self._lock:
                self._built[(id(given), step, _key(args))] = (given, result, micro_batch)
        return data


def _key(args: tuple) -> tuple:
    """Arguments as a dict key: a task by identity."""
    return tuple(a if isinstance(a, (int, str, bool)) else id(a) for a in args)
