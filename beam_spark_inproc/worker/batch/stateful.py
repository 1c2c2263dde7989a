"""Stateful stages: one key at a time, with batch semantics for state and timers.

The stage's input is shuffled by key and sorted, so a task sees each key's rows
together. For each key, in one bundle:

1. its elements go to the BundleProcessor;
2. its input is then complete, so its input watermark is +inf: pending timers
   fire, event-time timers in timestamp order before processing-time ones, and
   timers set while firing join the queue, until none remain (a timer set again
   replaces the pending one, a cleared timer is dropped);
3. its user state can no longer be read and is released, so a task holds one
   key's state at a time whatever the number of keys.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Callable
from typing import Iterator
from typing import Optional

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner.worker_handlers import StateServicer
from apache_beam.runners.worker import bundle_processor
from apache_beam.runners.worker import sdk_worker

from beam_spark_inproc.planning.plan import StagePlan
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import DATA
from beam_spark_inproc.protocol.rows import KEY
from beam_spark_inproc.protocol.rows import TAG
from beam_spark_inproc.protocol.rows import column_slices

USER_STATE_TYPES = frozenset(
    [
        'bag_user_state',
        'multimap_user_state',
        'multimap_keys_user_state',
        'ordered_list_user_state',
        'runner',
    ]
)


class RoutingStateHandler(sdk_worker.StateHandler):
    """Side inputs from the stage's cached servicer; user state per bundle."""

    def __init__(self, side_inputs: StateServicer):
        self._side = side_inputs
        self._user = StateServicer()

    def new_bundle(self) -> None:
        self._user = StateServicer()

    def _for(self, state_key) -> StateServicer:
        return self._user if state_key.WhichOneof('type') in USER_STATE_TYPES else self._side

    def get_raw(self, state_key, continuation_token=None):
        return self._for(state_key).get_raw(state_key, continuation_token)

    def append_raw(self, state_key, data):
        return self._for(state_key).append_raw(state_key, data)

    def clear(self, state_key):
        return self._for(state_key).clear(state_key)

    @contextlib.contextmanager
    def process_instruction_id(self, bundle_id):
        yield

    def done(self) -> None:
        pass


class TimerQueue:
    """The current key's pending timers."""

    def __init__(self, stage: StagePlan, timer_coders: dict):
        self._event_time = {(t.transform_id, t.family_id): t.event_time for t in stage.timers}
        self._coders = timer_coders  # (transform, family) -> timer coder impl
        self._pending: dict = {}

    def add(self, transform_id: str, family_id: str, data: bytes) -> None:
        for timer in self._coders[(transform_id, family_id)].decode_all(data):
            slot = (transform_id, family_id, timer.dynamic_timer_tag, timer.windows[0])
            if timer.clear_bit:
                self._pending.pop(slot, None)
            else:
                self._pending[slot] = timer

    def pop(self) -> Optional[beam_fn_api_pb2.Elements.Timers]:
        if not self._pending:
            return None
        slot = min(
            self._pending,
            key=lambda s: (not self._event_time[s[:2]], self._pending[s].fire_timestamp),
        )
        timer = self._pending.pop(slot)
        transform_id, family_id = slot[:2]
        out = create_OutputStream()
        self._coders[(transform_id, family_id)].encode_to_stream(timer, out, True)
        return beam_fn_api_pb2.Elements.Timers(
            transform_id=transform_id, timer_family_id=family_id, timers=out.get()
        )

    def clear(self) -> None:
        self._pending.clear()


def keyed_input_elements(task, entry, batches, forward: Callable) -> Iterator:
    """Elements and timers for a stateful stage, key after key (see module doc)."""
    ports = task.stage.inputs

    def rows():
        for columns in column_slices(batches, KEY, TAG, DATA):
            yield from zip(*columns)

    queue = entry.timer_queue
    if queue is not None:
        queue.clear()
    for key, key_rows in itertools.groupby(rows(), key=lambda r: r[0]):
        for tag, port_rows in itertools.groupby(key_rows, key=lambda r: r[1]):
            if tag == CONTROL_TAG:
                for _, _, data in port_rows:
                    forward(CONTROL_TAG, None, data)
                continue
            yield beam_fn_api_pb2.Elements.Data(
                transform_id=ports[tag].transform_id,
                data=b''.join(data for _, _, data in port_rows),
            )
        if key is None:
            continue
        while queue is not None and (timers := queue.pop()) is not None:
            yield timers
        release_user_state(entry.user_state_contexts)


def release_user_state(contexts) -> None:
    """Drops the state objects of the key just finished (never read again)."""
    for context in contexts:
        context.reset()


class TrackedUserStateContext(bundle_processor.FnApiUserStateContext):
    """Beam's user state context, made reachable: DoOperation keeps its context
    in a Cython attribute Python cannot read, so contexts created while a stage's
    BundleProcessor is built are collected here (see ``collect_contexts``)."""

    _collector: Optional[list] = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if TrackedUserStateContext._collector is not None:
            TrackedUserStateContext._collector.append(self)


@contextlib.contextmanager
def collect_contexts() -> Iterator[list]:
    """The user state contexts of the BundleProcessors built inside the block."""
    collected: list = []
    TrackedUserStateContext._collector = collected
    original = bundle_processor.FnApiUserStateContext
    # mypy refuses assigning to a class; swapping Beam's is the point here.
    bundle_processor.FnApiUserStateContext = TrackedUserStateContext  # type: ignore[misc]
    try:
        yield collected
    finally:
        bundle_processor.FnApiUserStateContext = original  # type: ignore[misc]
        TrackedUserStateContext._collector = None
