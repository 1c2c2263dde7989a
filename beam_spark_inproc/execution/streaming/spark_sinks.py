"""Runner-native stages in the micro-batch loop: WriteToSpark and SparkSql.

The loop hands such a stage its micro-batch's input parts (``run``), after
the keyed stages it reads from have run (it is an eager stage, like a
side-input gate: its input must be whole). Here the input is unioned and
cached for the micro-batch, its control rows (upstream bundles' reports)
become the stage's result, a leaf the micro-batch's last job collects, and
the Spark work is the runner's handler's (``transforms.stream_runtime``,
handed over as the batch executor gets ``transforms.runtime.build``):

* WriteToSpark writes the input at once (a job of its own) and exactly once
  per micro-batch id (the handler's protocol);
* SparkSql's result (lazy rows, in the windows its columns name) is cached
  with the control rows and read by the next stages as any stage's output.

What a stream cannot run is refused before it starts (``problem``, from
``planning.native_streaming``).
"""

from __future__ import annotations

import json
from typing import Any
from typing import Callable

from beam_spark_inproc.errors import Problem
from beam_spark_inproc.execution.streaming.store import stage_key
from beam_spark_inproc.planning import native
from beam_spark_inproc.planning import native_streaming
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol.rows import CONTROL_TAG


def problem(stage: p.StagePlan) -> Problem | None:
    """Why a runner-native stage cannot run in a stream, or None."""
    found = native_streaming.stream_problem(stage.native_urn, stage.native_payload)
    if found is None:
        return None
    reason, remedy = found
    kind = native.kind(stage.native_urn, json.loads(stage.native_payload))
    return Problem(', '.join(stage.labels), stage.native_urn, '', f'{kind}: {reason}', remedy)


class SparkStages:
    """Runs a stream's runner-native stages in the loop (see the module doc).

    ``native(engine, coders, root, job)``: the runner's handler factory (an
    object whose ``run(stage, key, data, micro_batch)`` does the Spark work),
    made when a plan has such a stage."""

    def __init__(
        self,
        plan: p.SparkPlan,
        engine: Any,
        store: Any,
        context: Any,
        job: Callable,
        native: Callable | None,
    ):
        self._engine = engine
        self._handler: Any = None  # ``native``'s, when the plan has such stages
        if any(s.kind == p.NATIVE_STAGE for s in plan.stages):
            if native is None:
                raise ValueError(
                    'A stream with runner-native stages and no handler for them given to the loop.'
                )
            self._handler = native(engine, context.coders, store.root, job)

    def run(
        self, index: int, stage: p.StagePlan, parts: list, batch: Any, micro_batch: int
    ) -> bool:
        """Builds (a write: runs) the stage for this micro-batch; returns
        whether it had input."""
        if not parts:
            return False
        datas = [data for _, data in parts]
        data = datas[0] if len(datas) == 1 else self._engine.union(datas)
        data = self._engine.cache(data)  # used, then its control rows read
        batch.cached.append(data)
        control = self._engine.select(data, CONTROL_TAG, CONTROL_TAG, False)
        result = self._handler.run(stage, stage_key(stage.name), data, micro_batch)
        if result is not None:  # a query's rows, read by the next stages
            result = self._engine.cache(self._engine.union([result, control]))
            batch.cached.append(result)
        batch.produced[index] = control if result is None else result
        return True
