"""Starts a stream: checkpoint store, engine primitives, loop thread, result."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any
from typing import Callable

from beam_spark_inproc.execution.streaming import restart
from beam_spark_inproc.execution.streaming.loop import StreamingExecutor
from beam_spark_inproc.execution.streaming.progress import StreamProgress
from beam_spark_inproc.execution.streaming.result import StreamingPipelineResult
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.execution.streaming.update import Owner
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol import report

_LOGGER = logging.getLogger(__name__)


def run_stream(
    plan: p.SparkPlan,
    engine: Any,
    job_id: str,
    checkpoint_location: str | None,
    translate: Callable[[BaseException], BaseException],
    run_metrics,
    after_micro_batch: Callable[[int], None] | None = None,
    settings: Callable[[], Any] = contextlib.nullcontext,
    runtime_options: tuple = (),
    profile_dir: str = '',
    spread: tuple[int, int] = (1, 0),
    prefetch: bool = False,
    test_stream_values: dict | None = None,
    stateful_whole: bool = False,
    cancel: Callable[[], None] | None = None,
    settle: Callable[..., Any] | None = None,
    transform_name_mapping: dict[str, str] | None = None,
    drained_plan: Callable[[], p.SparkPlan] | None = None,
    native=None,
    native_source: Callable | None = None,
) -> StreamingPipelineResult:
    """Returns at once; the micro-batches run in a driver thread.

    ``run_metrics``: the run's ``metrics.RunMetrics`` (its attempt channel
    goes to every task). ``settings``: entered while the loop runs (the
    runtime SQL settings on a user's session, ``spark.session``).
    ``runtime_options``: the pipeline's options for RuntimeValueProvider in
    workers (``StageTask.runtime_options``). ``profile_dir``: workers profile
    each bundle into it (``worker.profiling``). ``spread``: (partitions,
    bytes) for the driver's rows (``stateful_whole``: one partition in a
    pipeline with a stateful DoFn); ``prefetch``: sources encode the next
    micro-batch while one runs (``StreamingExecutor``).
    ``test_stream_values``: TestStreams' Python events by label, their
    element events empty in the plan (``teststream_source.elements_aside``).
    ``cancel``: interrupts the stream's running Spark jobs (a stop);
    ``settle``: waits for their tasks to end (before the process exits).
    ``drained_plan``: the pipeline planned with ``is_drain`` (``drain``).
    ``transform_name_mapping``: old -> new labels of stateful transforms an
    update renamed (``update``).
    ``native``: makes the handler of runner-native stages (``spark_sinks``).
    ``native_source``: the source of a runner-native stage that is one
    (``StreamingExecutor``)."""
    try:
        # Refusals (another pipeline's state, a drained stream) first,
        # with the folder untouched (``store.admit``).
        store = CheckpointStore(
            plan, checkpoint_location, Owner(plan, transform_name_mapping or {})
        )
    except BaseException:
        run_metrics.close()
        engine.release()
        raise
    result = StreamingPipelineResult(run_metrics)
    result.label = f'Stream {store.stream_id}'
    # Taken at each commit, published after it (``progress``).
    progress = StreamProgress(plan, store.stream_id, run_metrics.pusher.set_gauges)
    executor = StreamingExecutor(
        plan,
        progress.time_jobs(engine),
        job_id,
        store,
        result.cancelled,
        progress.after_commit(result.add_reports),
        after_micro_batch,
        run_metrics.channel,
        runtime_options,
        profile_dir,
        spread,
        prefetch,
        test_stream_values,
        stateful_whole,
        native,
        native_source=native_source,
    )
    executor.progress = progress
    result.executor = executor
    executor.drain.replan = drained_plan

    def body() -> None:
        try:
            if store.resume is not None:  # this pipeline ran here before
                restart.restore(executor, store.resume)
                result.add_reports(
                    executor.committed_metrics.restore(store.resume.get('metrics', {}))
                )
                progress.resume(executor, store.resume)
                # Said at WARNING: a restart is news to whoever runs it.
                _LOGGER.warning(
                    '%s',
                    restart.describe(
                        executor,
                        store.resume,
                        store.committed_at(store.resume['micro_batch']),
                        time.time(),
                    ),
                )
            with settings():
                executor.run()
            executor.drain.finish(executor.micro_batch)
        finally:
            try:
                engine.release()
            finally:
                store.close()
        report.rewarn(result.reports)
        _LOGGER.info('Stream %s: %d micro-batches', store.stream_id, executor.micro_batch)

    result.start(body, translate, cancel, settle)
    return result
