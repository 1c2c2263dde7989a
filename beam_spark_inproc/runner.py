"""InProcessSparkRunner: Beam pipeline -> check -> plan -> Spark DataFrames."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING
from typing import Callable
from typing import ContextManager
from typing import Optional
from typing import cast

# First: a Beam outside the supported range stops here, in one line, before any
# of its internals are imported (compat.beam.SUPPORTED).
from beam_spark_inproc.compat import beam as beam_compat  # isort: skip
from apache_beam.options.pipeline_options import GoogleCloudOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import PortableOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.value_provider import StaticValueProvider
from apache_beam.options.value_provider import ValueProvider
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.pipeline_utils import merge_common_environments
from apache_beam.runners.pipeline_utils import merge_superset_dep_environments
from apache_beam.runners.pipeline_utils import validate_pipeline_graph
from apache_beam.runners.runner import PipelineRunner
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms import environments

from beam_spark_inproc import capabilities
from beam_spark_inproc import errors
from beam_spark_inproc import interrupts
from beam_spark_inproc import metrics
from beam_spark_inproc.errors import PipelineExecutionError
from beam_spark_inproc.options import SparkRunnerOptions
from beam_spark_inproc.options import parse_conf
from beam_spark_inproc.options import py_files
from beam_spark_inproc.planning.native import NATIVE_URNS
from beam_spark_inproc.planning.planner import plan_pipeline
from beam_spark_inproc.protocol import report
from beam_spark_inproc.result import SparkPipelineResult

if TYPE_CHECKING:
    from beam_spark_inproc.execution.engine import Engine

_LOGGER = logging.getLogger(__name__)
# Set by ``python -m beam_spark_inproc explain``: describe the plan, run nothing.
EXPLAIN_ENV = 'BEAM_SPARK_INPROC_EXPLAIN'
# Environments that run DoFns in the runner's own Python process (URN prefix).
EMBEDDED_PYTHON_PREFIX = 'beam:env:embedded_python'
# TestStream elements set aside by this thread's ``run_pipeline`` (values).
_ASIDE = threading.local()


class PipelineCancelled(Exception):
    """Stops a cancelled run between Spark jobs (``SparkPipelineResult.cancel``)."""


class Explained(BaseException):
    """Raised instead of running when explaining (stops the user's script)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


class InProcessSparkRunner(PipelineRunner):
    """Runs Beam Python pipelines on Spark, executing DoFns in Spark's Python workers.

    ``spark``: a SparkSession to use, or a ``spark.session.OnDemandSession``
    (made when a stage first needs Spark); by default the active session, or
    one the runner creates from ``SparkRunnerOptions`` (and stops never: a
    created local session is kept for the next pipeline of this process).
    ``is_drain``: run as a drained pipeline: splittable DoFns truncate their
    restrictions (as Beam's FnApiRunner(is_drain=True) does).
    ``debug`` (or ``--inproc_debug``): run the same plan and worker code in this
    process without Spark (see ``debug``).
    """

    # The runner-native transforms' URNs this runner runs as stages of their
    # own (``beam_spark_inproc.transforms`` asks a pipeline's runner this).
    native_urns = NATIVE_URNS

    def __init__(self, spark=None, is_drain: bool = False, debug: bool = False):
        super().__init__()
        self._spark = spark
        self._is_drain = is_drain
        self._debug = debug

    def default_environment(self, options: PipelineOptions):
        warn_unused_environment(options)
        return environments.EmbeddedPythonEnvironment.default()

    def _lazy_session(self, options: PipelineOptions):
        """A ``LazySession`` where this runner would create a local session
        (none given, none active, a local master) or was given an
        ``OnDemandSession`` of a local master: else None."""
        from beam_spark_inproc.spark import session

        if isinstance(self._spark, session.OnDemandSession):
            return self._spark.lazy if self._spark.cores is not None else None
        if self._spark is not None:
            return None
        opts = options.view_as(SparkRunnerOptions)

        return session.lazy_local_session(
            functools.partial(self.session, options), opts.spark_master, opts.spark_remote
        )

    def session(self, options: Optional[PipelineOptions] = None):
        """The SparkSession this runner runs on (created on first use)."""
        from beam_spark_inproc.spark.session import OnDemandSession

        if isinstance(self._spark, OnDemandSession):
            return self._spark.get()
        if self._spark is None:
            from beam_spark_inproc.spark import session

            opts = (options or PipelineOptions()).view_as(SparkRunnerOptions)
            self._spark, _ = session.get_or_create(
                opts.spark_master, opts.spark_remote, parse_conf(opts.spark_conf)
            )
            # A Spark context made on the main thread installs PySpark's
            # SIGINT handler: a run waiting now keeps SIGINT its own.
            interrupts.reclaim()
        return self._spark

    def run_pipeline(self, pipeline, options: PipelineOptions):
        """Beam's ``run_pipeline`` (the pipeline proto, then
        ``run_portable_pipeline``) with TestStreams' elements beside the proto
        (``streaming.teststream_source.elements_aside``) and
        ``WatchFilePattern``'s start time fixed in the driver
        (``io.watch_file_pattern``)."""
        from beam_spark_inproc.execution.streaming.teststream_source import elements_aside

        pinned: ContextManager = contextlib.nullcontext()
        if 'apache_beam.ml.inference.utils' in sys.modules:
            # Only a pipeline that imported it can have WatchFilePattern.
            from beam_spark_inproc.io.watch_file_pattern import start_pinned

            pinned = start_pinned(pipeline)
        with elements_aside(pipeline) as events, pinned:
            # For ``_run_stream`` below ``run_portable_pipeline``, which
            # Beam's ``run_pipeline`` calls with the proto alone.
            _ASIDE.values = events
            try:
                return super().run_pipeline(pipeline, options)
            finally:
                _ASIDE.values = None

    def run_portable_pipeline(
        self, pipeline: beam_runner_api_pb2.Pipeline, options: PipelineOptions
    ) -> SparkPipelineResult:
        validate_pipeline_graph(pipeline)
        from beam_spark_inproc.execution.streaming import support

        streaming = support.is_streaming(pipeline, options.view_as(StandardOptions).streaming)
        capabilities.check(pipeline)
        pipeline = merge_common_environments(merge_superset_dep_environments(pipeline))
        plan = plan_pipeline(
            pipeline,
            self._is_drain,
            reshuffle_keeps_panes=beam_compat.reshuffle_keeps_panes(options),
            streaming=streaming,
        )
        if streaming:
            support.check(plan, pipeline)
        if os.environ.get(EXPLAIN_ENV):
            from beam_spark_inproc.planning.describe import describe

            raise Explained(describe(plan, pipeline))
        opts = options.view_as(SparkRunnerOptions)
        parse_conf(opts.spark_conf)  # bad flags fail before Spark starts
        extra_py_files = py_files(opts.spark_py_files)
        if streaming:
            # A checkpoint this run must refuse (another pipeline's, an
            # incompatible update, a drained stream) is read before Spark
            # starts, and left as it is.
            _admit_stream(plan, options)

        if opts.spark_split_after_seconds < 0:
            raise ValueError(
                '--spark_split_after_seconds must be >= 0 (0 turns runner '
                f'splitting off), got {opts.spark_split_after_seconds}.'
            )
        if opts.spark_stream_spread_kb < 0:
            raise ValueError(
                "--spark_stream_spread_kb must be >= 0 (0 keeps a micro-batch's "
                f'driver rows in one partition), got {opts.spark_stream_spread_kb}.'
            )
        from beam_spark_inproc.execution.executor import execute

        job_id = uuid.uuid4().hex
        metrics.sinks_from(options)  # bad --metrics_sink URLs fail before Spark starts
        attempt_host = cancel = settle = spark = None
        # Whether the run has Spark jobs to cancel now (Ctrl-C).
        on_spark: Callable[[], bool] = _never
        engine: Engine
        parallelism: int
        # A failure's clear error where Spark's workers cannot run the tasks
        # (none in debug mode).
        diagnose: Optional[Callable[[Exception], Optional[Exception]]] = None
        settings: Callable[[], ContextManager] = contextlib.nullcontext
        debug = self._debug or opts.inproc_debug
        if debug:
            from beam_spark_inproc.debug.engine import LocalEngine

            parallelism = opts.spark_parallelism or 2
            # Spark work of runner-native transforms (ReadFromSpark, ...) runs
            # on a local session, made only if the pipeline has them.
            engine = LocalEngine(parallelism, session=functools.partial(self.session, options))
        else:
            from beam_spark_inproc.planning.plan import NATIVE_STAGE
            from beam_spark_inproc.spark import cancel as spark_cancel
            from beam_spark_inproc.spark import session as spark_session
            from beam_spark_inproc.spark.engine import SparkEngine

            # Native stages (ReadFromSpark, ...) need DataFrames throughout.
            small = (
                opts.spark_small_data_kb > 0
                and not streaming
                and not any(s.kind == NATIVE_STAGE for s in plan.stages)
            )
            lazy = self._lazy_session(options) if small else None
            if lazy is None:
                spark = self.session(options)
                parallelism = spark_session.parallelism(spark, opts.spark_parallelism)
                from beam_spark_inproc.spark import workers

                problem = workers.known_problem(spark)
                if problem is not None:
                    raise problem

                def get_spark(ready=spark):
                    return ready

                attempt_host = spark_session.callback_host(spark)
            else:
                # A local session the runner creates, once a stage needs
                # Spark: its cores and callback address are known up front.
                cores = getattr(lazy, 'cores', None) or spark_session.local_parallelism(
                    opts.spark_master
                )
                assert cores is not None  # a lazy session is a local master's
                parallelism = opts.spark_parallelism or cores
                get_spark = lazy.get
                attempt_host = '127.0.0.1'

            def diagnose(error):
                if lazy is not None and not lazy.created:
                    return None
                from beam_spark_inproc.spark import workers

                return workers.explain_missing_modules(error, get_spark())

            def make_engine():
                return SparkEngine(
                    get_spark(),
                    parallelism,
                    job_id,
                    extra_py_files,
                    int(opts.spark_inline_side_input_mb * (1 << 20)),
                )

            # The runtime SQL settings the runner relies on, on a user's
            # session too (its values come back afterwards).
            def settings():
                return spark_session.runtime_settings(
                    get_spark(), keep=parse_conf(opts.spark_conf), shuffle_partitions=parallelism
                )

            if small:
                from beam_spark_inproc.execution.small import SmallDataEngine
                from beam_spark_inproc.spark.hand_over import SparkHandOver

                # The engine contract but for what only native stages and
                # streams use, which never run on it (``small``).
                engine = cast(
                    'Engine',
                    SmallDataEngine(
                        SparkHandOver(get_spark, make_engine, parallelism, start=lazy),
                        max_bytes=int(opts.spark_small_data_kb * 1024),
                        settings=settings,
                        spark_start=lazy,
                    ),
                )
                settings = contextlib.nullcontext  # entered by the engine
            else:
                engine = make_engine()
            tag = 'beam-pipeline-' + job_id[:8]

            def has_session(lazy=lazy) -> bool:
                return lazy is None or lazy.created

            on_spark = has_session

            def cancel():
                if on_spark():
                    spark_cancel.cancel_tag(get_spark(), tag)

            def settle(stop: Optional[threading.Event] = None) -> bool:
                if on_spark():
                    return spark_cancel.wait_for_tasks_to_end(get_spark(), stop=stop)
                return True

        if streaming:
            return self._run_stream(
                pipeline,
                plan,
                engine,
                job_id,
                options,
                attempt_host,
                settings,
                parallelism,
                spark,
                cancel,
                settle,
            )
        run_metrics = metrics.start(options, job_id, attempt_host)
        result = SparkPipelineResult(PipelineState.RUNNING, live=run_metrics.live)
        result.label = f'Pipeline {job_id[:8]}'
        if settle is not None:
            result.tasks_end_seconds = spark_tasks_end_seconds()
        # Where a synchronous run is (what a second Ctrl-C does).
        settling = threading.Event()

        def on_first_interrupt() -> None:
            """The first Ctrl-C of a synchronous run (``interrupts``): its
            Spark jobs are cancelled (from another thread); stages running
            in this process are interrupted as Python does."""
            result.interrupted.set()
            result.cancel_requested.set()
            if cancel is not None and on_spark():
                interrupts.say(
                    f'{result.label}: Ctrl-C: cancelling its Spark jobs, then waiting up to '
                    f'{spark_tasks_end_seconds():.0f} s for their tasks to end; Ctrl-C again '
                    'to skip the wait'
                )
                interrupts.in_thread(cancel, 'beam-cancel')
                return
            interrupts.say(
                f'{result.label}: Ctrl-C: interrupting its stage running in this process'
            )
            raise KeyboardInterrupt

        def on_second_interrupt() -> None:
            result.stop_waiting.set()
            if settling.is_set():
                interrupts.say(f'{result.label}: not waiting for its cancelled tasks to end')
                return
            # Still inside a Spark call the cancel has not ended.
            raise KeyboardInterrupt

        def after_job(reports: list[dict]) -> None:
            run_metrics.pusher.after_job(reports)
            if result.cancel_requested.is_set():
                raise PipelineCancelled(f'Pipeline {job_id[:8]} was cancelled.')

        def run() -> None:
            start = time.monotonic()
            try:
                if result.interrupted.is_set():
                    raise PipelineCancelled(f'Pipeline {job_id[:8]} was cancelled.')
                with settings():
                    reports = execute(
                        plan,
                        engine,
                        job_id,
                        split_after=opts.spark_split_after_seconds,
                        split_ways=parallelism,
                        profile_dir=os.path.abspath(opts.spark_profile_dir)
                        if opts.spark_profile_dir
                        else '',
                        after_job=after_job,
                        attempt_channel=run_metrics.channel,
                        runtime_options=runtime_options(options),
                        native=_native_stage,
                    )
            except BaseException as e:
                interrupt: Optional[BaseException] = interruption(e)
                if interrupt is None and result.interrupted.is_set():
                    interrupt = interrupts.interrupted(
                        f'{result.label.lower()} cancelled by Ctrl-C'
                    )
                state = (
                    PipelineState.CANCELLED
                    if result.cancel_requested.is_set() or interrupt is not None
                    else PipelineState.FAILED
                )
                error = e
                if interrupt is not None:
                    # Ctrl-C: the run's Spark jobs stop, and the user sees
                    # the interrupt, not the job failures it caused. Their
                    # tasks end before it goes on: an interpreter exiting
                    # under them stops the JVM while they end, which prints
                    # Spark's task errors after the interrupt.
                    settling.set()
                    quietly(cancel)
                    ended = quietly(
                        None if settle is None else functools.partial(settle, result.stop_waiting)
                    )
                    if interrupts.is_interrupted(interrupt):
                        interrupt = interrupts.interrupted(
                            f'{result.label.lower()} cancelled by Ctrl-C: its Spark jobs '
                            + (
                                'were cancelled and their tasks ended'
                                if ended is not False
                                else 'were cancelled (their tasks may still be ending)'
                            )
                        )
                    error = interrupt
                elif isinstance(e, Exception) and state == PipelineState.FAILED:
                    # Workers that cannot import Beam: one clear error.
                    error = (diagnose and diagnose(e)) or translate_error(e, plan)
                result.finished(state, error)
                run_metrics.finish(state)
                if error is e:
                    raise
                raise error from None
            report.rewarn(reports)
            _LOGGER.info(
                'Pipeline %s: %d stages in %.2f s',
                job_id[:8],
                len(plan.stages),
                time.monotonic() - start,
            )
            result.finished(PipelineState.DONE)
            run_metrics.finish(PipelineState.DONE)
            if result.interrupted.is_set():  # Ctrl-C came as it ended
                raise interrupts.interrupted(f'{result.label.lower()} ended (DONE) as Ctrl-C came')

        if not options.view_as(StandardOptions).no_wait_until_finish:
            # Ctrl-C is the run's while it runs (``interrupts``).
            with interrupts.owned(on_first_interrupt, on_second_interrupt):
                run()
            return result

        def run_quietly() -> None:
            try:
                run()
            except BaseException:  # kept in the result for wait_until_finish
                pass

        thread = threading.Thread(
            target=run_quietly, daemon=True, name='beam-pipeline-' + job_id[:8]
        )
        result.running(thread, cancel)
        thread.start()
        return result

    def _run_stream(
        self,
        pipeline,
        plan,
        engine,
        job_id: str,
        options,
        attempt_host: str | None,
        settings,
        parallelism: int,
        spark=None,
        cancel=None,
        settle=None,
    ):
        """A stream: the micro-batch loop on a driver thread (returns at once),
        with the runtime SQL settings the runner relies on (``settings``) while
        it runs, and the pipeline's options for RuntimeValueProvider."""
        from beam_spark_inproc.execution.streaming.run import run_stream

        opts = options.view_as(SparkRunnerOptions)
        mapping = _name_mapping(options)
        return run_stream(
            plan,
            engine,
            job_id,
            options.view_as(SparkRunnerOptions).checkpoint_location,
            lambda e: translate_error(e, plan),
            metrics.start(options, job_id, attempt_host),
            settings=settings,
            runtime_options=runtime_options(options),
            profile_dir=os.path.abspath(opts.spark_profile_dir) if opts.spark_profile_dir else '',
            spread=(parallelism, int(opts.spark_stream_spread_kb * 1024)),
            prefetch=spark is not None,
            test_stream_values=getattr(_ASIDE, 'values', None),
            stateful_whole=opts.spark_stream_stateful_whole,
            cancel=cancel,
            settle=settle,
            transform_name_mapping=mapping,
            native=_native_stream,
            native_source=_native_source,
            drained_plan=functools.partial(
                plan_pipeline,
                pipeline,
                True,
                reshuffle_keeps_panes=beam_compat.reshuffle_keeps_panes(options),
                streaming=True,
            ),
        )


def _never() -> bool:
    return False


def _name_mapping(options: PipelineOptions) -> dict[str, str]:
    """An update's transform name mapping: Beam's (Dataflow's) option, then ours."""
    from beam_spark_inproc.execution.streaming.update import parse_mapping

    return parse_mapping(
        options.view_as(GoogleCloudOptions).transform_name_mapping,
        options.view_as(SparkRunnerOptions).spark_transform_name_mapping,
    )


def _admit_stream(plan, options: PipelineOptions) -> None:
    """Raises what the stream's checkpoint location refuses, reading it only
    (``execution.streaming.store.admit``): before the session is made."""
    location = options.view_as(SparkRunnerOptions).checkpoint_location
    mapping = _name_mapping(options)  # a bad mapping fails here too
    if not location:
        return
    from beam_spark_inproc.execution.streaming.store import admit
    from beam_spark_inproc.execution.streaming.update import Owner

    admit(plan, location, Owner(plan, mapping))


def _native_stage(executor, index: int, stage):
    """Runs a runner-native stage (ReadFromSpark, WriteToSpark, SparkSql): the
    transforms' own handler for its URN, loaded when a plan has one."""
    from beam_spark_inproc.transforms import runtime

    return runtime.build(executor, index, stage)


def _native_stream(engine, coders, root: str, job):
    """The handler of a stream's runner-native stages (WriteToSpark, SparkSql):
    the transforms' own, loaded when a plan has one."""
    from beam_spark_inproc.transforms import runtime

    return runtime.stream_stages(engine, coders, root, job)


def _native_source(stage, engine, context, folder: str):
    """The stream source of a runner-native stage that is one (ReadFromSpark
    over a streaming DataFrame), else None: the transforms' own, loaded when a
    stream has one."""
    from beam_spark_inproc.transforms import runtime

    return runtime.stream_source(stage, engine, context, folder)


def warn_unused_environment(options: PipelineOptions) -> None:
    """One warning line when ``--environment_type`` asks for an environment
    (DOCKER, PROCESS, EXTERNAL, LOOPBACK) that this runner does not use."""
    kind = options.view_as(PortableOptions).environment_type
    if kind and not kind.startswith(EMBEDDED_PYTHON_PREFIX):
        _LOGGER.warning(
            '--environment_type=%s is not used: InProcessSparkRunner runs '
            "DoFns in Spark's Python workers (the driver's interpreter on a "
            "local master, the executors' Python on a cluster); drop the flag, "
            'and install dependencies there or ship them with --spark_py_files.',
            kind,
        )


def interruption(error: BaseException) -> Optional[KeyboardInterrupt]:
    """The KeyboardInterrupt behind ``error``, if any: Ctrl-C during a Spark
    action raises it in pyspark's signal handler, and the action then fails
    with a Py4J error (the cancelled job) chained to it."""
    seen = set()
    link: Optional[BaseException] = error
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return None


def quietly(step):
    """Runs ``step`` of stopping an interrupted run (cancel its Spark jobs,
    wait for their tasks to end) if there is one, and returns what it
    returns (None when it failed or there is none): an interrupt must not
    turn into a failure to cancel, and another Ctrl-C ends the wait."""
    if step is None:
        return None
    try:
        return step()
    except KeyboardInterrupt:
        return None
    except Exception:
        _LOGGER.debug('Could not stop the Spark jobs', exc_info=True)
        return None


def spark_tasks_end_seconds() -> float:
    """How long an interrupted run waits for its cancelled tasks to end."""
    from beam_spark_inproc.spark.cancel import TASKS_END_SECONDS

    return TASKS_END_SECONDS


def runtime_options(options: PipelineOptions) -> tuple:
    """The options a RuntimeValueProvider reads in workers: those set, by
    name, with a value provider's value where it has one (as Beam's SDK
    harness gets them from the job's options)."""
    pairs = []
    for name, value in sorted(options.get_all_options(drop_default=True).items()):
        if isinstance(value, StaticValueProvider):
            value = value.value
        elif isinstance(value, ValueProvider):
            continue  # not given: the provider's default applies
        pairs.append((name, value))
    return tuple(pairs)


def _remedy(worker_error: str) -> str:
    """``errors.remedy``'s line followed by a newline, or ''."""
    line = errors.remedy(worker_error)
    return line + '\n' if line else ''


def translate_error(error: BaseException, plan) -> BaseException:
    """A Spark-wrapped worker failure -> PipelineExecutionError naming the transform.

    Rendered from the failure record the bundle sent (``protocol.report.Failure``):
    the message starts with the transform that failed (Beam's own
    ``[while running '...']`` annotation names it; without one, the stage's
    transforms) and the stage's position in the plan, and ends with the
    worker's Python traceback. A failure outside any bundle (a task that could
    not even unpickle) has no record: its PySpark text is shown as it is.
    """
    try:
        from pyspark.errors import PythonException
    except ImportError:  # pragma: no cover
        return error
    notes = getattr(error, '__notes__', None)  # Python 3.11's, or set on 3.10
    if isinstance(error, PythonException):
        text = str(error)
        from beam_spark_inproc.compat import versions

        mismatch = versions.from_worker_error(text)
        if mismatch is not None:
            return mismatch
    elif notes:
        # A stage run in the driver (``execution.small``): the same record, on the
        # exception itself.
        text = '\n'.join(notes)
    else:
        return error
    failure = report.Failure.find(text)
    if failure is None and not isinstance(error, PythonException):
        return error
    if failure is None:
        start = text.find('Traceback (most recent call last)')
        traceback_text = (text[start:] if start >= 0 else text).rstrip()
        lines = traceback_text.strip().splitlines()
        return PipelineExecutionError(
            f'A Beam transform failed (an unknown stage): '
            f'{lines[-1].strip() if lines else "unknown error"}\n'
            f'{_remedy(traceback_text)}\n'
            f'Worker traceback:\n{traceback_text}',
            worker_traceback=traceback_text,
        )
    names = [s.name for s in plan.stages]
    where = (
        f'stage {names.index(failure.stage) + 1} of {len(names)}'
        if failure.stage in names
        else 'an unknown stage'
    )
    failing = failure.transform or ', '.join(failure.labels)
    subject = f'Beam transform {failing!r}' if failing else 'A Beam transform'
    traceback_text = failure.traceback.rstrip()
    return PipelineExecutionError(
        f'{subject} failed ({where}): {failure.summary()}\n'
        f'{_remedy(failure.summary() + traceback_text)}\n'
        f'Worker traceback:\n{traceback_text}',
        stage=failure.stage,
        labels=failure.labels,
        worker_traceback=traceback_text,
        failure=failure,
    )
