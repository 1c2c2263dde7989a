"""Per-process cache of BundleProcessors, keyed by (job, stage).

A Spark Python worker runs one task at a time and is reused across tasks, so an
idle processor left here by one task serves the next task of the same stage.
A processor whose bundle failed is dropped, never reused (as Beam's SDK harness
does). Entries of other jobs are dropped when a new job shows up, so a
long-lived worker does not keep every pipeline it ever ran.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import threading
from typing import Any
from typing import Iterator
from typing import Optional

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.runners.portability.fn_api_runner.worker_handlers import FNAPI_RUNNER_CAPABILITIES
from apache_beam.runners.portability.fn_api_runner.worker_handlers import StateServicer
from apache_beam.runners.worker import bundle_processor
from apache_beam.runners.worker import sdk_worker
from apache_beam.runners.worker import statesampler
from apache_beam.runners.worker.statecache import StateCache

from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol.rows import key_extractor
from beam_spark_inproc.worker import assign_windows  # noqa: F401  (registers its URN)
from beam_spark_inproc.worker.batch.grouped_values import GroupedValuesStore
from beam_spark_inproc.worker.batch.grouping import GroupAlsoByWindow
from beam_spark_inproc.worker.batch.stateful import RoutingStateHandler
from beam_spark_inproc.worker.batch.stateful import TimerQueue
from beam_spark_inproc.worker.batch.stateful import collect_contexts
from beam_spark_inproc.worker.channel import ChannelFactory
from beam_spark_inproc.worker.key_state import KeyStateHandler
from beam_spark_inproc.worker.shipped import ShippedFile
from beam_spark_inproc.worker.streaming.grouping import StreamingGroupAlsoByWindow

# Beam's state cache weighs every cached value with objsize, which cost 75% of
# a stateful stage's time; state here is in-process already, and side inputs
# are cached per bundle by the DoFn runner: no cache.
_STATE_CACHE_BYTES = 0

# Beam's state sampler (the ``*_msecs`` execution-time metrics) runs a thread
# per bundle that sleeps up to ``sampling_period_ms`` (Beam's default 200) at
# a time, and the bundle's end joins it: a bundle of a second or more waited
# ~130 ms for it, one of 0.1-0.3 s (a micro-batch's) 10-30 ms, on the
# critical path of its task. A shorter period ends the wait sooner (and
# samples finer); the thread sleeps without the GIL.
SAMPLING_MS = 5


@contextlib.contextmanager
def _sampling_period(ms: int) -> Iterator[None]:
    """BundleProcessors built inside the block sample every ``ms`` at most."""
    original = statesampler.StateSampler

    class StateSampler(original):  # type: ignore[misc, valid-type]
        def __init__(self, prefix, counter_factory, sampling_period_ms=ms):
            super().__init__(prefix, counter_factory, sampling_period_ms)

    # mypy refuses assigning to a class; swapping Beam's is the point here.
    statesampler.StateSampler = StateSampler  # type: ignore[misc]
    try:
        yield
    finally:
        statesampler.StateSampler = original  # type: ignore[misc]


@dataclasses.dataclass
class Entry:
    key: tuple  # (job id, stage name[, side-input version])
    processor: bundle_processor.BundleProcessor
    factory: ChannelFactory
    state_handler: Any
    groupings: dict[str, GroupAlsoByWindow]
    outputs: dict[str, tuple[int, str, Optional[Any]]]
    grouped_values: GroupedValuesStore
    routing_state: Optional[RoutingStateHandler] = None
    timer_queue: Optional[TimerQueue] = None
    user_state_contexts: tuple = ()
    # Streaming stateful stages: when each window's user state expires
    # (``worker.streaming.state_expiry``), built on first use.
    state_expiry: Any = None


_lock = threading.Lock()
# Building a processor swaps two of Beam's module attributes for the time of the
# build (``collect_contexts``, ``_sampling_period``): builds in one process
# (the driver's debug engine or small data, two pipelines in two threads) take
# turns, so neither sees the other's swap nor puts back the wrong original.
_build_lock = threading.Lock()
_idle: dict[tuple[str, str], list[Entry]] = {}
_job: Optional[str] = None


def _build(task) -> Entry:
    stage: p.StagePlan = task.stage
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    servicer = StateServicer()
    for part in task.side_input_state:
        if isinstance(part, ShippedFile):  # large side inputs
            part = pickle.loads(part.read())
        for state_key, data in part:
            servicer.append_raw(beam_fn_api_pb2.StateKey.FromString(state_key), data)
    routing = RoutingStateHandler(servicer) if stage.stateful else None
    grouped_values = GroupedValuesStore(routing or servicer)
    # Large groups' values are written to the store (state-backed iterables).
    context = pipeline_context.PipelineContext(
        descriptor, iterable_state_write=grouped_values.write
    )
    state_handler: sdk_worker.CachingStateHandler = sdk_worker.GlobalCachingStateHandler(
        StateCache(_STATE_CACHE_BYTES), grouped_values
    )
    if routing is not None:
        # Bag user state straight from the key's entries (``worker.key_state``).
        state_handler = KeyStateHandler(state_handler, routing)
    factory = ChannelFactory()
    with _build_lock, collect_contexts() as contexts, _sampling_period(SAMPLING_MS):
        processor = bundle_processor.BundleProcessor(
            FNAPI_RUNNER_CAPABILITIES, descriptor, state_handler, factory
        )
    timer_queue = (
        TimerQueue(
            stage, {key: info.timer_coder_impl for key, info in processor.timers_info.items()}
        )
        if stage.timers
        else None
    )
    gabw = GroupAlsoByWindow if task.streaming is None else StreamingGroupAlsoByWindow
    groupings = {
        port.transform_id: gabw(port.grouping, context)
        for port in stage.inputs
        if port.grouping is not None
    }
    outputs = {}
    for tag, port in enumerate(stage.outputs):
        key_of = None
        if port.layout == p.KEYED_ELEMENTS:
            assert port.key_coder_id is not None  # the planner sets it for this layout
            coder = context.coders[port.key_coder_id]
            key_of = key_extractor(coder, coder.key_coder())
        outputs[port.transform_id] = (tag, port.layout, key_of)
    return Entry(
        _key(task),
        processor,
        factory,
        state_handler,
        groupings,
        outputs,
        grouped_values,
        routing,
        timer_queue,
        tuple(contexts),
    )


def _key(task) -> tuple:
    version = task.side_input_version
    return (task.job_id, task.stage.name) + ((version,) if version else ())


def acquire(task) -> Entry:
    global _job
    key = _key(task)
    with _lock:
        if _job != task.job_id:
            stale = [e for entries in _idle.values() for e in entries]
            _idle.clear()
            _job = task.job_id
        else:
            # Processors of the stage holding older side-input versions
            # (streaming) are not used again.
            stale = [
                e for k in [k for k in _idle if k[:2] == key[:2] and k != key] for e in _idle.pop(k)
            ]
        entries = _idle.get(key)
        entry = entries.pop() if entries else None
    for old in stale:
        _teardown(old)
    return entry if entry is not None else _build(task)


def release(entry: Entry) -> None:
    entry.processor.reset()
    with _lock:
        if entry.key[0] == _job:
            _idle.setdefault(entry.key, []).append(entry)
            return
    _teardown(entry)


def discard(entry: Entry) -> None:
    _teardown(entry)


def _teardown(entry: Entry) -> None:
    entry.grouped_values.reset()
    try:
        entry.processor.shutdown()
    except Exception:  # teardown errors must not hide the bundle's own error
        pass
