"""What the driver feeds into a stream: its sources' rows and its own rows.

The loop (``loop.StreamingExecutor``) steps its sources once per micro-batch
(``source.StreamSource``: TestStreams, and the runner-native sources the
runner gives as ``native_source``); the rows they return, a gate's released
main input (``side_inputs``) and a splittable DoFn's due residuals
(``residuals``) are rows the driver holds, and become engine data here.

**Spread.** ``(partitions, bytes)`` (``--spark_stream_spread_kb``): driver
rows of at least ``bytes`` are cut into that many consecutive parts, one task
per core, with no shuffle; smaller ones stay in one partition, so one task,
in order (Beam's tests compare small outputs in order). With a stateful DoFn
the driver's rows are spread as any other: each part holds consecutive rows,
and a ``BUCKETED`` shuffle keeps a key's rows in the order of their input
partitions and positions, so each key's elements still reach the DoFn in its
TestStream event's order (as on Beam's BundleBasedDirectRunner). The source
stage's one core had been on the critical path (docs/performance.md).
``stateful_whole`` (``--spark_stream_stateful_whole``) keeps them in one
partition in such a pipeline, for a busy cluster where the spread costs more
than it gains. Residuals are always spread (each is a restriction's work).

**Prefetch.** With ``prefetch`` (on Spark, whose jobs leave the driver
waiting; not on the debug engine, which runs them here) sources encode the
next micro-batch's rows, and make its engine data, in a thread while this
one's last job runs (``TestStreamSource.prefetch``). It starts once the last
job's DataFrames are built and its action is about to run
(``engine.collect``'s ``started``), not before the job's tags and query are
made: the prefetch thread's Python work would make each of those Py4J replies
wait for the GIL (~30 ms a micro-batch). For the same reason the stream's job
tag is set on the loop's thread once for the whole stream
(``StreamingExecutor.run``), not per job. With the prefetch, the next
micro-batch's steps from its source data that do not depend on its
watermarks (selects, stateless stages' ``map_stage``, the shuffle before a
keyed stage) are built in the prefetch thread while this one's job runs
(``prebuild``), not on the loop's path.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any
from typing import Callable

from beam_spark_inproc.execution.streaming.prebuild import Prebuilder
from beam_spark_inproc.execution.streaming.source import StreamSource
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.execution.streaming.store import stage_key
from beam_spark_inproc.execution.streaming.teststream_source import TestStreamSource
from beam_spark_inproc.execution.streaming.teststream_source import bundles_invisible
from beam_spark_inproc.planning import plan as p


class Feed:
    """The stream's sources by stage, and the driver's rows as engine data
    (see the module doc). ``engine``: the stream's engine, which this wraps
    in a ``Prebuilder`` when ``prefetch`` (``self.engine``: the one to use)."""

    def __init__(
        self,
        plan: p.SparkPlan,
        engine: Any,
        context,
        store: CheckpointStore,
        stable: Callable[[Any], bool],
        spread: tuple[int, int] = (1, 0),
        prefetch: bool = False,
        test_stream_values: dict | None = None,
        stateful_whole: bool = False,
        native_source: Callable | None = None,
    ):
        self.prefetch = prefetch
        self.prebuilder = None
        # Replayed by the prefetch at the last job (``_prebuild``).
        if prefetch:
            engine = self.prebuilder = Prebuilder(engine, stable)
        self.engine = engine
        self.spread = spread
        self._rows_spread = (
            (1, 0) if stateful_whole and any(s.stateful for s in plan.stages) else spread
        )
        self.sources = _sources(
            plan, engine, context, store, self._rows_spread, test_stream_values, native_source
        )
        self._coalesce = bundles_invisible(plan, context)

    def step(self) -> dict[int, list]:
        """Each source's rows for the next micro-batch (``StreamSource.
        step_micro_batch``), by stage."""
        return {
            i: source.step_micro_batch(self._coalesce)
            for i, source in self.sources.items()
            if not source.exhausted
        }

    @property
    def exhausted(self) -> bool:
        return all(source.exhausted for source in self.sources.values())

    def source_data(self, index: int, rows: list | None) -> tuple[Any, bool]:
        """Source ``index``'s data for this micro-batch (None: none), and
        whether the source made it (while the last micro-batch ran, if
        prefetched; a source whose rows never reach the driver makes all of
        it)."""
        made = self.sources[index].take_made()
        if made is not None:
            data = made
        elif rows:
            data = self.rows(rows)
        else:
            return None, False
        if self.prebuilder is not None:
            self.prebuilder.source(index, data)
        return data, made is not None

    def rows(self, rows: list, always: bool = False) -> Any:
        """Rows the driver made (source events, released main input, due
        residuals) as engine data: one partition, so one task; or, when they
        hold at least the spread threshold's bytes (``always``: residuals,
        each a restriction's work), consecutive parts over the run's
        parallelism, one task per core, with no shuffle. Each part keeps its
        rows' order; a TestStream event's elements below the threshold stay
        in one task, in order; in a pipeline with a stateful DoFn, all of
        them with ``stateful_whole`` (module doc)."""
        parts, min_bytes = self.spread if always else self._rows_spread
        if (
            parts > 1
            and min_bytes
            and len(rows) > 1
            and (always or sum(len(r[2]) for r in rows) >= min_bytes)
        ):
            return self.engine.rows(rows, parts)
        return self.engine.rows(rows)

    def next_micro_batch(self, micro_batch: int) -> Callable[[], None] | None:
        """What starts the prefetch of the micro-batch after ``micro_batch``
        when its last job is about to run (None: no prefetch)."""
        if not self.prefetch:
            return None

        def prefetch():
            make = self.rows
            if self.prebuilder is not None:
                self.prebuilder.finish(micro_batch)
            for index, source in self.sources.items():
                if self.prebuilder is not None:
                    make = functools.partial(self._prebuild, index, micro_batch + 1)
                source.prefetch(self._coalesce, make)

        return prefetch

    def finish(self, micro_batch: int) -> None:
        """The end of ``micro_batch``'s building (``Prebuilder.finish``)."""
        if self.prebuilder is not None:
            self.prebuilder.finish(micro_batch)

    def close(self) -> None:
        for source in self.sources.values():
            source.close()

    def _prebuild(self, index: int, micro_batch: int, rows: list) -> Any:
        """Source ``index``'s rows for ``micro_batch`` as engine data, and
        the last micro-batch's steps from them (``prebuild``): in the
        prefetch thread."""
        prebuilder = self.prebuilder
        assert prebuilder is not None  # a source's ``make`` only with one (``prefetch``)
        return prebuilder.prebuild(index, self.rows(rows), micro_batch)


def _sources(
    plan: p.SparkPlan,
    engine: Any,
    context,
    store: CheckpointStore,
    rows_spread: tuple[int, int],
    values: dict | None,
    native_source: Callable | None,
) -> dict[int, StreamSource]:
    """The plan's sources by stage: its TestStreams (``values``: their
    Python events when their element events are beside the plan,
    ``test_stream.elements_aside``; None: in the plan), and runner-native
    sources (a ReadFromSpark over a streaming DataFrame): ``native_source``
    (the runner's) gives the stage's source, or None for a native stage that
    is not one; each keeps its files under ``sources/<stage>`` of the
    checkpoint location."""
    sources: dict[int, StreamSource] = {}
    for i, stage in enumerate(plan.stages):
        if stage.kind != p.TEST_STREAM_STAGE:
            continue
        if values is not None and stage.labels[0] not in values:
            # Its element events would replay empty.
            raise RuntimeError(
                f'TestStream {stage.labels[0]!r}: its elements were set aside but not found'
            )
        sources[i] = TestStreamSource(
            stage, context, rows_spread, None if values is None else values[stage.labels[0]]
        )
    for i, stage in enumerate(plan.stages):
        if stage.kind == p.NATIVE_STAGE and native_source is not None:
            source = native_source(
                stage,
                engine,
                context,
                os.path.join(
                    store.root, 'sources', re.sub(r'[^\w.+-]', '_', stage_key(stage.name))
                ),
            )
            if source is not None:
                sources[i] = source
    return sources
