"""Stateful DoFns across micro-batches (streaming), one key at a time.

Rows arrive sorted by (key, tag), as in batch (``worker.batch.stateful``); a key's
``STATE_TAG`` row, first, holds what the stage kept for it after the last
micro-batch that touched it: its user state (the entries of the key's
``StateServicer``) and its pending timers. For each key:

1. state and pending timers are restored;
2. its new elements go to the BundleProcessor;
3. due timers fire, earliest first, with those they set: event-time timers up
   to the stage's input watermark after this micro-batch
   (``StreamingStep.next_input_watermark``), processing-time timers up to the
   micro-batch's processing time;
4. user state is committed; the state of windows that expired (their end
   plus allowed lateness passed by the input watermark, ``state_expiry``) is
   dropped; the rest is written back with the timers still pending, and the
   key's summary (the earliest output timestamp of its pending timers: the
   hold; its earliest event- and processing-time timers, the earliest expiry
   of its state counting as an event-time timer) joins its bucket's.

Unlike batch, the input is never complete before +inf: timers not yet due wait
for a later micro-batch.
"""

from __future__ import annotations

import itertools
import pickle
from typing import Callable
from typing import Iterator
from typing import cast

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner.worker_handlers import StateServicer
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.protocol.buckets import STATE_BUCKETS
from beam_spark_inproc.protocol.buckets import bucket_of
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import DATA
from beam_spark_inproc.protocol.rows import KEY
from beam_spark_inproc.protocol.rows import STATE_TAG
from beam_spark_inproc.protocol.rows import SUMMARY_TAG
from beam_spark_inproc.protocol.rows import TAG
from beam_spark_inproc.protocol.rows import column_slices
from beam_spark_inproc.protocol.state import Summary
from beam_spark_inproc.worker.batch.stateful import release_user_state
from beam_spark_inproc.worker.streaming.grouping import dumps
from beam_spark_inproc.worker.streaming.state_expiry import StateExpiry


def _due(queue, watermark: Timestamp, now: float):
    """Pops the earliest due timer as Elements.Timers, or None."""
    due = [
        slot
        for slot, timer in queue._pending.items()
        if (
            timer.fire_timestamp <= watermark
            if queue._event_time[slot[:2]]
            else float(timer.fire_timestamp) <= now
        )
    ]
    if not due:
        return None
    slot = min(due, key=lambda s: (not queue._event_time[s[:2]], queue._pending[s].fire_timestamp))
    keep = {s: t for s, t in queue._pending.items() if s != slot}
    queue._pending = {slot: queue._pending[slot]}
    timers = queue.pop()
    queue._pending = keep
    return timers


def _summary(queue) -> Summary:
    summary = Summary(keys=1)
    for slot, timer in queue._pending.items():
        hold = timer.hold_timestamp
        if hold is not None:
            summary.hold = min(summary.hold, Timestamp.of(hold))
        if queue._event_time[slot[:2]]:
            summary.event_timer = min(summary.event_timer, Timestamp.of(timer.fire_timestamp))
        else:
            summary.processing_timer = min(summary.processing_timer, float(timer.fire_timestamp))
    return summary


def renamed(
    aliases: dict[str, str], state: dict, ordered: dict, pending: dict
) -> tuple[dict, dict, dict]:
    """A key's state and timers as written under an earlier transform id of
    the stage's stateful DoFn (``aliases``: old id -> current id; an update
    renamed it), named by the current one."""

    def key(k: bytes) -> bytes:
        state_key = beam_fn_api_pb2.StateKey.FromString(k)
        inner = getattr(state_key, state_key.WhichOneof('type'))
        if getattr(inner, 'transform_id', None) in aliases:
            inner.transform_id = aliases[inner.transform_id]
            return state_key.SerializeToString()
        return k

    return (
        {key(k): v for k, v in state.items()},
        {key(k): v for k, v in ordered.items()},
        {
            (aliases.get(slot[0], slot[0]),) + tuple(slot[1:]): timer
            for slot, timer in pending.items()
        },
    )


def streaming_keyed_input_elements(task, entry, batches, forward: Callable) -> Iterator:
    """Elements and due timers for a streaming stateful stage (see module doc)."""
    ports = task.stage.inputs
    step = task.streaming
    buckets = task.state_files.buckets if task.state_files is not None else STATE_BUCKETS
    routing = entry.routing_state
    aliases = dict(task.state_files.aliases) if task.state_files is not None else {}
    queue = entry.timer_queue
    summaries: dict[int, Summary] = {}
    if entry.state_expiry is None:
        entry.state_expiry = StateExpiry(entry.processor.process_bundle_descriptor)
    expiry = entry.state_expiry

    # One servicer for the task's keys, emptied per key (``worker.key_state``
    # reads the current key's entries from it).
    servicer = StateServicer()
    # Never checkpointed, so Beam's ``_state`` is its plain dict (Beam types it
    # as that or a CopyOnWriteState).
    user_state = cast(dict, servicer._state)

    def rows():
        for columns in column_slices(batches, KEY, TAG, DATA):
            yield from zip(*columns)

    for key, key_rows in itertools.groupby(rows(), key=lambda r: r[0]):
        if key is None:
            for _, tag, data in key_rows:
                if tag == CONTROL_TAG:
                    forward(CONTROL_TAG, None, data)
            continue
        # What the last key kept was copied out (``state``, ``ordered``).
        user_state.clear()
        servicer._ordered_list_keys.clear()
        routing._user = servicer
        if queue is not None:
            queue.clear()
        for tag, port_rows in itertools.groupby(key_rows, key=lambda r: r[1]):
            if tag == STATE_TAG:
                for _, _, data in port_rows:
                    state, ordered, pending = pickle.loads(data)
                    if aliases:
                        state, ordered, pending = renamed(aliases, state, ordered, pending)
                    user_state.update(state)
                    servicer._ordered_list_keys.update(ordered)
                    if queue is not None:
                        queue._pending.update(pending)
                continue
            yield beam_fn_api_pb2.Elements.Data(
                transform_id=ports[tag].transform_id,
                data=b''.join(data for _, _, data in port_rows),
            )
        while (
            queue is not None
            and (timers := _due(queue, step.next_input_watermark, step.processing_time)) is not None
        ):
            yield timers
        for context in entry.user_state_contexts:
            context.commit()
        release_user_state(entry.user_state_contexts)
        pending = dict(queue._pending) if queue is not None else {}
        state = {k: v for k, v in user_state.items() if v}
        if step.next_input_watermark >= MAX_TIMESTAMP:
            continue  # the end of time: nothing is kept
        ordered = dict(servicer._ordered_list_keys)
        expires = expiry.drop(state, ordered, step.next_input_watermark)
        if not state and not pending:
            continue
        forward(STATE_TAG, key, dumps((state, ordered, pending)))
        number = bucket_of(key, buckets)
        bucket = summaries.get(number)
        if bucket is None:
            bucket = summaries[number] = Summary()
        if queue is None:  # the key's summary: its state's expiry
            bucket.keys += 1
            if expires < bucket.event_timer:
                bucket.event_timer = expires
            continue
        summary = _summary(queue)
        summary.event_timer = min(summary.event_timer, expires)
        bucket.add(summary)
    for number, summary in summaries.items():
        forward(SUMMARY_TAG, b'%d' % number, summary.encode())
