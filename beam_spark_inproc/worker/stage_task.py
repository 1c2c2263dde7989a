"""StageTask: the function each fused stage gives to ``DataFrame.mapInArrow``.

Per partition holding elements it runs one Beam bundle (an empty partition
runs none: ``rows.holding_elements``):

1. take a BundleProcessor for (job, stage) from this process's cache (building it
   costs 5-30 ms; Spark reuses Python workers, so later tasks find it ready);
2. run ``process_bundle`` in a helper thread that pulls the partition's rows
   (grouping them first for a GroupByKey input) and pushes output rows into a
   small bounded queue;
3. yield the queued Arrow batches to Spark as they come, so neither the inputs nor
   the outputs of a bundle are ever held whole;
4. on success ``reset()`` the processor and return it to the cache; on failure drop
   it and re-raise the user's exception with its traceback.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import queue
import threading
import time
from typing import Any
from typing import Iterator
from typing import Optional

import pyarrow as pa
from apache_beam.options.value_provider import RuntimeValueProvider
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils import windowed_value
from apache_beam.utils.timestamp import MIN_TIMESTAMP

from beam_spark_inproc.compat import versions
from beam_spark_inproc.compat.python import add_note
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.planning.plan import StagePlan
from beam_spark_inproc.protocol import report
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import DATA
from beam_spark_inproc.protocol.rows import KEY
from beam_spark_inproc.protocol.rows import RESIDUAL_TAG
from beam_spark_inproc.protocol.rows import SCHEDULED_TAG
from beam_spark_inproc.protocol.rows import TAG
from beam_spark_inproc.protocol.rows import BatchBuilder
from beam_spark_inproc.protocol.rows import column_slices
from beam_spark_inproc.protocol.rows import holding_elements
from beam_spark_inproc.protocol.state import StateFiles
from beam_spark_inproc.protocol.state import StreamingStep
from beam_spark_inproc.worker import attempts
from beam_spark_inproc.worker import capture
from beam_spark_inproc.worker import directory
from beam_spark_inproc.worker import gc_epochs
from beam_spark_inproc.worker import logs
from beam_spark_inproc.worker import processors
from beam_spark_inproc.worker import profiling
from beam_spark_inproc.worker import sdf
from beam_spark_inproc.worker.batch.stateful import keyed_input_elements
from beam_spark_inproc.worker.channel import InProcessDataChannel
from beam_spark_inproc.worker.streaming.grouping import streaming_grouped_input_elements
from beam_spark_inproc.worker.streaming.state_io import with_state_io
from beam_spark_inproc.worker.streaming.stateful import streaming_keyed_input_elements

_QUEUE_BATCHES = 2
_POLL_SECONDS = 0.5
_instruction_ids = itertools.count()
# A driver-side caller (``execution.small``) may set ``started.callback`` on its
# own thread: it is called with each bundle's BundleProcessor before the
# bundle's helper thread starts (the caller counts the elements the bundle
# moves, between the inputs it feeds it).
started = threading.local()


@dataclasses.dataclass(frozen=True)
class StageTask:
    job_id: str
    stage: StagePlan
    # One part per side input: its (serialized StateKey, encoded values) pairs,
    # or a shipped file holding them pickled (``worker.shipped.ShippedFile``).
    side_input_state: tuple = ()
    # Runner-initiated SDF splitting (stages with ``split_input``): split a
    # bundle still running after this many seconds (0: never) into this many parts.
    split_after: float = 0.0
    split_ways: int = 2
    # ``--spark_profile_dir``: profile each bundle into this worker-side folder.
    profile_dir: str = ''
    # (host, port, token) of the driver's attempt channel (``worker.attempts``):
    # where an attempt that does not commit sends its metrics; () for none.
    attempt_channel: tuple = ()
    # The pipeline's options as (name, value) pairs, for RuntimeValueProvider
    # (``runtime_options``).
    runtime_options: tuple = ()
    # A streaming micro-batch's watermarks and clock (``protocol.state``).
    streaming: Optional[StreamingStep] = None
    # Streaming: the version of ``side_input_state`` (it grows between
    # micro-batches); a cached BundleProcessor serves one version only.
    side_input_version: int = 0
    # (driver pid, level): workers log at the driver's level (``logs``).
    log_level: tuple = ()
    # ``plan.ARROW`` stages: ``arrow_input.rows(batch, row_type)`` makes a
    # source batch's columns into Beam rows (``transforms.convert.ArrowRows``,
    # which the worker does not import).
    arrow_input: Any = None
    # A streaming keyed stage: where its task reads and writes its state
    # (``worker.streaming.state_io``); None: the state comes and goes as rows.
    state_files: Optional[StateFiles] = None
    # Batch: every output of the stage is read only as a side input, i.e.
    # collected to the driver whole (``execution.executor``); small data in
    # the driver (``execution.small``) then limits its run there by time only.
    collected: bool = False
    # The driver's working directory: relative local paths read and written by
    # the stage resolve there (``worker.directory``).
    working_directory: str = ''
    # The driver's (Python, Beam, PySpark) versions, set by the Spark engine: a
    # worker with others fails the task before its first bundle
    # (``compat.versions.check``); () in the driver.
    versions: tuple = ()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return run_bundle(self, batches)


def _plain_input_elements(task: StageTask, entry, batches, forward) -> Iterator:
    """Elements.Data for the bundle, a slice of the partition's rows at a time.

    Control rows (reports of upstream tasks) are handed to ``forward``.
    """
    ports = task.stage.inputs
    for data, tags in column_slices(batches, DATA, TAG):
        if len(ports) == 1 and tags[0] == tags[-1] == 0 and min(tags) == 0:
            yield beam_fn_api_pb2.Elements.Data(
                transform_id=ports[0].transform_id, data=b''.join(data)
            )
            continue
        by_port: dict[int, list[bytes]] = {}
        for tag, d in zip(tags, data):
            if tag == CONTROL_TAG:
                forward(CONTROL_TAG, None, d)
            else:
                by_port.setdefault(tag, []).append(d)
        for tag, pieces in by_port.items():
            yield beam_fn_api_pb2.Elements.Data(
                transform_id=ports[tag].transform_id, data=b''.join(pieces)
            )


def _element_input_elements(task: StageTask, entry, batches, forward) -> Iterator:
    """One element per Data message (a splittable stage: the SDK counts them),
    including residual rows of an earlier round (keyed by their input)."""
    ports = task.stage.inputs
    for columns in column_slices(batches, TAG, KEY, DATA):
        for tag, key, data in zip(*columns):
            if tag == CONTROL_TAG:
                forward(CONTROL_TAG, None, data)
            elif tag == RESIDUAL_TAG:
                yield beam_fn_api_pb2.Elements.Data(transform_id=key.decode(), data=data)
            else:
                yield beam_fn_api_pb2.Elements.Data(transform_id=ports[tag].transform_id, data=data)


def _grouped_input_elements(task: StageTask, entry, batches, forward) -> Iterator:
    """Rows sorted by (tag, key): grouped ports go through GroupAlsoByWindow."""
    ports = task.stage.inputs

    def rows():
        for columns in column_slices(batches, TAG, KEY, DATA):
            yield from zip(*columns)

    for tag, port_rows in itertools.groupby(rows(), key=lambda r: r[0]):
        if tag == CONTROL_TAG:
            for _, _, data in port_rows:
                forward(CONTROL_TAG, None, data)
            continue
        port = ports[tag]
        if port.grouping is None:
            for piece in port_rows:
                yield beam_fn_api_pb2.Elements.Data(transform_id=port.transform_id, data=piece[2])
            continue
        gabw = entry.groupings[port.transform_id]
        for encoded in gabw.grouped((key, data) for _, key, data in port_rows):
            yield beam_fn_api_pb2.Elements.Data(transform_id=port.transform_id, data=encoded)


def _arrow_input_elements(task: StageTask, entry, batches, forward) -> Iterator:
    """A runner-native read's own Arrow batches (``plan.ARROW``): each batch's
    columns become Beam rows in bulk, handed straight to the stage's input
    operation in the global window, as the read's ``ToBeamRows`` would have
    encoded them and the input operation decoded them: nothing is encoded.

    Consumers that take batches (Beam's batched DoFns) get them as batches
    instead (``_batch_consumers``): the source's Arrow batches joined, or a
    file's row groups, up to ``transforms.batches.MAX_ROWS``/``MAX_BYTES``."""
    op = entry.processor.ops[task.stage.inputs[0].transform_id]
    coder = op.windowed_coder.wrapped_value_coder
    # The type the stage's RowCoder decodes to, as on any other input.
    row_type = coder.to_type_hint() if hasattr(coder, 'schema') else None
    windows, micros = (GlobalWindow(),), MIN_TIMESTAMP.micros
    source, receiver = task.arrow_input, op.receivers[0]
    consumers = _consumers(entry.processor, task.stage.inputs[0].transform_id)
    batched = _batch_consumers(source, consumers, row_type)
    if not batched:  # every consumer takes elements: Beam's own receiver
        # ``op.output(wv)`` is ``receivers[0].receive(wv)``; the loop runs in
        # C (map, deque): no Python frame per element.
        receive, create = receiver.receive, windowed_value.create  # 4x WindowedValue(...)
        sink: collections.deque = collections.deque(maxlen=0)
        drain = sink.extend
        for batch in batches:
            rows = source.rows(batch, row_type)
            drain(
                map(receive, map(create, rows, itertools.repeat(micros), itertools.repeat(windows)))
            )
        yield from ()
        return
    elementwise = [c for c in consumers if c not in batched]
    counter, create = receiver.opcounter, windowed_value.create
    template = windowed_value.HomogeneousWindowedBatch.of(
        None, MIN_TIMESTAMP, windows, windowed_value.PANE_INFO_UNKNOWN
    )
    # Large batches (a file's row groups; Spark's batches joined), capped.
    for data in source.batched_data(batches):
        n = data.num_rows
        for consumer, make in batched.items():
            consumer.process_batch(template.with_values(make(data)))
        if elementwise:
            for row in source.data_rows(data, row_type):
                value = create(row, micros, windows)
                for consumer in elementwise:
                    consumer.process(value)
        # The PCollection's element count and sampled size, as Beam's
        # consumer set counts a batch (``update_from_batch``).
        counter.element_counter.update(n)
        counter.mean_byte_counter.update_n(data.nbytes / n, n)
    yield from ()


def _consumers(processor, transform_id: str) -> list:
    """The operations reading the output of ``transform_id`` as their main
    input, as Beam's BundleProcessor wires them (its consumer sets keep them
    out of Python's reach)."""
    transforms = processor.process_bundle_descriptor.transforms
    (pcoll_id,) = transforms[transform_id].outputs.values()
    found = []
    for tid, transform in transforms.items():
        side = ()
        if transform.spec.urn == common_urns.primitives.PAR_DO.urn:
            side = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload).side_inputs
        if any(pcoll == pcoll_id and tag not in side for tag, pcoll in transform.inputs.items()):
            found.append(processor.ops[tid])
    return found


def _batch_consumers(source, consumers, row_type) -> dict:
    """{consumer: data batch -> its batch} for the consumers of a source's
    batches that take batches: those that require them (Beam's own
    ``produce_batch`` over the rows where ``source`` cannot build the batch
    column by column), and those that take either where it can."""
    batched = {}
    for consumer in consumers:
        preference = consumer.get_batching_preference()
        converter = consumer.get_input_batch_converter()
        if not preference.supports_batches or converter is None:
            continue
        make, columnar = source.batch_maker(converter, row_type)
        if columnar or not preference.supports_elements:
            batched[consumer] = make
    return batched


# How a partition's rows become the bundle's input, per input mode (decided by
# the planner; the executor shuffled the rows to match).
_INPUTS = {
    p.PLAIN: _plain_input_elements,
    p.GROUPED: _grouped_input_elements,
    p.STATEFUL: keyed_input_elements,
    p.SPLITTABLE: _element_input_elements,
    p.ARROW: _arrow_input_elements,
}
# A streaming micro-batch (``task.streaming``): state and timers kept between
# micro-batches come in with the rows (``worker.streaming``).
_STREAMING_INPUTS = {
    **_INPUTS,
    p.GROUPED: streaming_grouped_input_elements,
    p.STATEFUL: streaming_keyed_input_elements,
}


class _Cancelled(Exception):
    """Raised in a bundle's helper thread where it hands over output that
    nobody will read any more (Spark, or the driver, stopped reading)."""

    def __init__(self, message: str = 'bundle cancelled: its output is no longer read'):
        # A message: Beam's DoFnRunner re-raises an exception leaving a DoFn
        # as ``type(exn)(exn.args[0] + annotation)``, keeping its type.
        super().__init__(message)


def _not_cancelled(record: logging.LogRecord) -> bool:
    """Beam's DoFnRunner logs every exception leaving a DoFn; a cancelled
    bundle's is no error of the user's."""
    return not (record.exc_info and isinstance(record.exc_info[1], _Cancelled))


logging.getLogger('apache_beam.runners.common').addFilter(_not_cancelled)


def _recording(inputs: Iterator, transform_id: str, fed: list, splitter) -> Iterator:
    """Passes elements through, remembering those fed to ``transform_id`` and
    telling the splitter when each one starts."""
    for element in inputs:
        if isinstance(element, beam_fn_api_pb2.Elements.Data) and (
            element.transform_id == transform_id
        ):
            fed.append(element.data)
            splitter.element_started()
        yield element


def run_bundle(task: StageTask, batches) -> Iterator[pa.RecordBatch]:
    """The task's output batches; its bundles run in a helper thread."""
    if task.versions:
        versions.check(task.versions)
    gc_epochs.EPOCHS.task_started()
    try:
        with directory.driver_directory(task.working_directory):
            yield from _run_task(task, batches)
    finally:
        gc_epochs.EPOCHS.task_finished()


def _run_task(task: StageTask, batches) -> Iterator[pa.RecordBatch]:
    times = profiling.task_times(task.stage.name)
    if times is not None:
        batches = _counted(batches, times)
    control: list = []
    if task.stage.input_mode == p.ARROW:  # a source's batches: no control rows
        batches = _holding_rows(batches)
    else:
        batches, control = holding_elements(batches)
    if batches is None:  # no elements: no bundle, control rows go on
        passed: list = []
        builder = BatchBuilder(passed.append)
        for row in control:
            builder.add(*row)
        builder.flush()
        yield from passed
        if times is not None:
            times.finish()
        return
    # As Beam's SDK harness does: value providers read inside DoFns (also in
    # their setup, while the processor is built) see the pipeline's options.
    RuntimeValueProvider.set_runtime_options(dict(task.runtime_options))
    logs.apply(task.log_level)
    if times is not None:
        times.mark('first_batch')
    entry = processors.acquire(task)
    if times is not None:
        times.mark('processor_ready')
    yield from _Bundles(task, entry, times).outputs(batches)


def _counted(batches, times) -> Iterator[pa.RecordBatch]:
    """The input batches, counted into ``times`` (task timing only:
    ``profiling.task_times``)."""
    for batch in batches:
        times.add('input_batches', 1)
        times.add('input_rows', batch.num_rows)
        yield batch


def _first_marked(inputs: Iterator, times) -> Iterator:
    """The bundle's inputs, marking when the first one is handed over."""
    first = True
    for element in inputs:
        if first:
            times.mark('first_element')
            first = False
        yield element


def _holding_rows(batches) -> Optional[Iterator]:
    """The batches (those read so far put back in front) if one has a row."""
    held = []
    for batch in batches:
        held.append(batch)
        if batch.num_rows:
            return itertools.chain(held, batches)
    return None


class _Bundles:
    """One task's bundles: a helper thread runs them and puts their output
    batches into a small bounded queue (then ``done``, or the exception that
    ended them); ``outputs`` hands the batches to Spark as they come."""

    def __init__(self, task: StageTask, entry: processors.Entry, times=None):
        self.task = task
        self.entry = entry
        self.times = times  # ``profiling.TaskTimes`` or None
        self.out: queue.Queue = queue.Queue(maxsize=_QUEUE_BATCHES)
        self.done = object()
        self.cancelled = threading.Event()
        self.builder = BatchBuilder(self.put)
        # This attempt's metrics, for the attempt channel if it does not commit:
        # the finished bundles' infos, and whether one is under way.
        self.attempt: dict = {'infos': [], 'in_bundle': False}

    def put(self, item) -> None:
        while True:
            if self.cancelled.is_set():
                raise _Cancelled()
            try:
                self.out.put(item, timeout=_POLL_SECONDS)
                return
            except queue.Full:
                continue

    def drained(self) -> None:
        """Waits until the consuming thread has handed every queued batch to Spark."""
        while self.out.unfinished_tasks:
            if self.cancelled.is_set():
                raise _Cancelled()
            time.sleep(0.005)

    def one_bundle(self, inputs: Iterator) -> list:
        """Runs one bundle; reports it; returns its residuals."""
        task, entry, builder = self.task, self.entry, self.builder
        attempt = self.attempt
        if entry.routing_state is not None:
            entry.routing_state.new_bundle()
        splitter = None
        fed: list = []
        if task.stage.split_input and task.split_after > 0:
            splitter = sdf.RunnerSplitter(
                entry.processor, task.stage.split_input, task.split_after, task.split_ways
            )
            inputs = _recording(inputs, task.stage.split_input, fed, splitter)
        entry.factory.current = InProcessDataChannel(
            inputs, builder.add, entry.outputs, entry.timer_queue.add if entry.timer_queue else None
        )
        instruction_id = 'bundle-%d' % next(_instruction_ids)
        attempt['in_bundle'] = True
        with capture.capture_warnings() as caught, capture.capture_logs(task.log_level) as logged:
            with entry.state_handler.process_instruction_id(instruction_id, []):
                if splitter:
                    splitter.start(instruction_id)
                try:
                    residuals, finalize = entry.processor.process_bundle(instruction_id)
                finally:
                    if splitter:
                        splitter.stop()
                    entry.grouped_values.reset()
            if splitter:
                for input_id, data in splitter.residual_rows(fed):
                    builder.add(RESIDUAL_TAG, input_id, data)
            if finalize:
                # Bundle finalization runs once Spark has taken every output
                # row of the bundle (callback errors are logged by the SDK).
                builder.flush()
                self.drained()
                entry.processor.finalize_bundle()
        # ``caught`` is complete only once the capture has ended.
        infos = entry.processor.monitoring_infos()
        payload = report.encode(
            task.stage.name, warnings=caught, monitoring_infos=infos, logs=logged
        )
        if task.attempt_channel:
            attempt['infos'].extend(info.SerializeToString() for info in infos)
        attempt['in_bundle'] = False
        if payload:
            builder.add(CONTROL_TAG, None, payload)
        return residuals

    def work(self, batches) -> None:
        """The helper thread: the partition's bundle, then any self-checkpointed
        SDF restrictions, each round a new bundle after the delay asked."""
        task, entry = self.task, self.entry
        profile = (
            profiling.BundleProfile(task.profile_dir, task.stage.name) if task.profile_dir else None
        )
        times, thread_cpu = self.times, time.thread_time()
        try:
            read = (_INPUTS if task.streaming is None else _STREAMING_INPUTS)[task.stage.input_mode]
            if task.state_files is not None:
                read = with_state_io(read)
            inputs = read(task, entry, batches, self.builder.add)
            if times is not None:
                inputs = _first_marked(inputs, times)
            residuals = self.one_bundle(inputs)
            if times is not None:
                times.mark('bundle_done')
            if task.streaming is not None:
                # The stream's driver schedules them (``sdf.scheduled``).
                for residual in residuals:
                    self.builder.add(SCHEDULED_TAG, None, sdf.scheduled(entry, residual))
                residuals = []
            while residuals:
                entry.processor.reset()
                sdf.wait_for(residuals)
                residuals = self.one_bundle(sdf.residual_inputs(entry, residuals))
            self.builder.flush()
            self.put(self.done)
        except _Cancelled:
            pass
        except BaseException as e:  # handed to the consuming thread
            try:
                self.put(e)
            except _Cancelled:
                pass
        finally:
            if times is not None:
                times.add('bundle_thread_cpu', time.thread_time() - thread_cpu)
            if profile:
                profile.finish()

    def outputs(self, batches) -> Iterator[pa.RecordBatch]:
        thread = threading.Thread(
            target=self.work,
            args=(batches,),
            name='beam-bundle-%s' % self.task.stage.name,
            daemon=True,
        )
        callback = getattr(started, 'callback', None)
        if callback is not None:
            callback(self.entry.processor)
        thread.start()
        ok = False
        try:
            while True:
                item = self.out.get()
                if item is self.done:
                    self.out.task_done()
                    break
                if isinstance(item, BaseException):
                    stage = self.task.stage
                    failure = report.Failure.of(item, stage)
                    # For a reader of the exception itself (debug mode):
                    add_note(
                        item,
                        '[beam stage] %s | transforms: %s' % (stage.name, ', '.join(stage.labels)),
                    )
                    # The driver renders the user's error from this record.
                    add_note(item, failure.note())
                    raise item
                if self.times is not None:
                    self.times.add('output_batches', 1)
                    self.times.add('output_rows', item.num_rows)
                yield item
                self.out.task_done()  # Spark has taken the batch and asks for more
            ok = True
        finally:
            self.cancelled.set()
            thread.join()
            if self.times is not None:
                self.times.finish()
            self.entry.factory.current = None
            if ok:
                processors.release(self.entry)
            else:
                # The bundle raised, or Spark stopped reading (a failure
                # elsewhere in the task): Spark will not commit this attempt's
                # control rows. (The executor reads every task it runs to
                # its end, so a task that succeeds never lands here.)
                if self.task.attempt_channel:
                    _report_attempt(self.task, self.entry, self.attempt)
                processors.discard(self.entry)


def _report_attempt(task: StageTask, entry, attempt: dict) -> None:
    """Sends the metrics of an attempt Spark will not commit (``worker.attempts``)."""
    infos = list(attempt['infos'])
    if attempt['in_bundle']:
        try:  # the unfinished bundle's metrics so far
            infos.extend(i.SerializeToString() for i in entry.processor.monitoring_infos())
        except Exception:
            pass
    attempts.send(task.attempt_channel, task.stage.name, infos)
