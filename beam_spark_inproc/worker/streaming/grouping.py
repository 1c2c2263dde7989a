"""GroupAlsoByWindow across micro-batches (streaming), inside the consuming stage.

A streaming stage that reads a GroupByKey gets, per key, its rows sorted by key
(the engine's ``BUCKETED`` shuffle): first the key's state row (``STATE_TAG``: what the stage
kept for the key after the last micro-batch that touched it, if any), then its
new elements. For each key, as Beam's BundleBasedDirectRunner does
(``_StreamingGroupAlsoByWindowEvaluator``), with Beam's own ``TriggerDriver``
over Beam's ``InMemoryUnmergedState``:

1. the new elements go to ``process_elements`` with the stage's watermarks as
   they were before this micro-batch (elements in flight hold the input
   watermark back): lateness is judged against the stage's own input watermark;
2. the input watermark then moves to where the upstream stages left it
   (``StreamingStep.next_input_watermark``) and the clock to the micro-batch's
   processing time: due timers fire (``process_timer``), in timestamp order,
   with the timers they set, until none is due;
3. windows past their end plus allowed lateness are dropped with their timers;
4. what is left is written back as the key's state row, and the key's
   watermark hold and earliest timers go into the summary of its state bucket
   (``SUMMARY_TAG``, one row per bucket and task), from which the driver knows
   the stage's hold and which buckets have due timers, without reading state.

Panes are encoded as ``KV<key, Iterable<value>>`` and fed to the stage's
bundle as the GroupByKey's output, as in batch.
"""

from __future__ import annotations

import itertools
import pickle
from typing import Callable
from typing import Iterator
from typing import Optional

import cloudpickle
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.transforms import trigger
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import BoundedWindow
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
from beam_spark_inproc.protocol.state import StreamingStep
from beam_spark_inproc.protocol.state import Summary
from beam_spark_inproc.worker.batch.grouping import GROUPS_BYTES
from beam_spark_inproc.worker.batch.grouping import GroupAlsoByWindow
from beam_spark_inproc.worker.streaming import default_trigger
from beam_spark_inproc.worker.streaming.default_trigger import DefaultTriggerPanes

# A key firing timers that set due timers again this many times is a bug.
_MAX_TIMER_ROUNDS = 100_000


class _Clock:
    def __init__(self):
        self.now = 0.0

    def time(self) -> float:
        return self.now


def dumps(value) -> bytes:
    """A key's state as bytes: plain pickle (elements, windows, timestamps,
    counts, timers), cloudpickle only for what plain pickle refuses (a class
    it cannot find by name, e.g. one shipped by value); ``pickle.loads``
    reads both."""
    try:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    except Exception:  # pylint: disable=broad-except
        return cloudpickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def dump_state(state: trigger.InMemoryUnmergedState) -> bytes:
    return dumps(
        (
            {w: dict(t) for w, t in state.timers.items() if t},
            {w: dict(s) for w, s in state.state.items()},
            dict(state.global_state),
        )
    )


def load_state(data: bytes) -> trigger.InMemoryUnmergedState:
    # Plain pickle reads cloudpickle's output too (cloudpickle is importable).
    timers, values, global_state = pickle.loads(data)
    state = trigger.InMemoryUnmergedState()
    state.timers.update(timers)
    for window, tags in values.items():
        state.state[window].update(tags)
    state.global_state.update(global_state)
    return state


def _is_empty(state: trigger.InMemoryUnmergedState) -> bool:
    return not any(state.timers.values()) and not any(
        value for tags in state.state.values() for value in tags.values()
    )


class StreamingGroupAlsoByWindow(GroupAlsoByWindow):
    """A GroupByKey's panes for one micro-batch, with state kept between them."""

    def __init__(self, grouping, context):
        super().__init__(grouping, context)
        self._windowing = context.windowing_strategies[grouping.windowing_strategy_id]
        self._clock = _Clock()
        self._driver = trigger.create_trigger_driver(self._windowing, False, clock=self._clock)
        if isinstance(self._driver, trigger.GeneralTriggerDriver):
            # Beam's driver wraps the state in a ``MergeableStateAdapter``
            # whatever the WindowFn; for a WindowFn that never merges, the
            # adapter maps each window to itself at a cost (a class built per
            # combining-state read, a window-id map kept per key forever).
            # Without it the state is keyed by the windows themselves, which
            # also lets ``_expire`` drop a window once it is past its end
            # plus allowed lateness.
            self._driver.is_merging = self._windowing.windowfn.is_merging()
        # Beam's default trigger without the driver (``worker.streaming.default_trigger``).
        self._default = (
            DefaultTriggerPanes(self._windowing)
            if grouping.default_trigger and default_trigger.applies(self._windowing)
            else None
        )

    def key_panes(
        self,
        key_bytes: bytes,
        state_data: Optional[bytes],
        datas: list[bytes],
        step: StreamingStep,
        out,
        summaries: dict[int, Summary],
        buckets: int = STATE_BUCKETS,
    ) -> Optional[bytes]:
        """Encodes the key's panes into ``out``; returns its new state (or None)."""
        if self._default is not None:
            encode = self._post_impl.encode_to_stream
            state, summary = self._default.key_panes(
                self._key_impl.decode(key_bytes),
                state_data,
                datas,
                self._pre_impl.decode_from_stream,
                step,
                lambda wv: encode(wv, out, True),
            )
            if state is not None:
                summaries.setdefault(bucket_of(key_bytes, buckets), Summary()).add(
                    Summary(1, *summary)
                )
            return state
        self._clock.now = step.processing_time
        key = self._key_impl.decode(key_bytes)
        state = (
            load_state(state_data) if state_data is not None else trigger.InMemoryUnmergedState()
        )
        encode = self._post_impl.encode_to_stream
        if datas:
            for wv in self._driver.process_elements(
                state, self._values(datas), step.output_watermark, step.input_watermark
            ):
                encode(wv.with_value((key, wv.value)), out, True)
        watermark = step.next_input_watermark
        for _ in range(_MAX_TIMER_ROUNDS):
            due, _ = state.get_timers(
                clear=True, watermark=watermark, processing_time=step.processing_time
            )
            if not due:
                break
            due.sort(key=lambda t: (t[1][2], t[1][1] != TimeDomain.WATERMARK))
            for window, (name, domain, timestamp, _tag) in due:
                for wv in self._driver.process_timer(
                    window, name, domain, timestamp, state, watermark
                ):
                    encode(wv.with_value((key, wv.value)), out, True)
        else:
            raise RuntimeError(
                f'GroupByKey {self._label!r}: timers of key {key!r} keep firing '
                f'at watermark {watermark}'
            )
        self._expire(state, watermark)
        if _is_empty(state):
            return None
        summary = summaries.setdefault(bucket_of(key_bytes, buckets), Summary())
        summary.add(_summary_of(state))
        return dump_state(state)

    def _expire(self, state, watermark: Timestamp) -> None:
        """Drops windows past their end plus allowed lateness that have no
        timer left (all at +inf).

        Such a window takes no more elements (Beam's driver ignores them) and
        nothing can fire it: dropping it cannot be seen. A window with a timer
        is kept until the timer fired (a processing-time trigger can fire
        after the window expired, as on Beam's DirectRunner). With a merging
        WindowFn the state is keyed by Beam's window ids, not windows, and is
        dropped at +inf only."""
        lateness = self._windowing.allowed_lateness
        for window in list(state.state):
            if watermark >= MAX_TIMESTAMP or (
                isinstance(window, BoundedWindow)
                and window.end < MAX_TIMESTAMP
                and watermark > window.end + lateness
                and not state.timers.get(window)
            ):
                state.state.pop(window, None)
                state.timers.pop(window, None)
        if watermark >= MAX_TIMESTAMP:
            state.timers.clear()
            state.global_state.clear()

    @property
    def _label(self) -> str:
        return getattr(self, 'label', '')


def _summary_of(state) -> Summary:
    event_timer, processing_timer = MAX_TIMESTAMP, float('inf')
    for timers in state.timers.values():
        for (_, domain, _), timestamp in timers.items():
            if domain == TimeDomain.WATERMARK:
                event_timer = min(event_timer, Timestamp.of(timestamp))
            else:
                processing_timer = min(processing_timer, float(timestamp))
    return Summary(1, state.get_earliest_hold(), event_timer, processing_timer)


def streaming_grouped_input_elements(task, entry, batches, forward: Callable) -> Iterator:
    """Elements for a streaming stage reading a GroupByKey (see module doc).

    Rows arrive sorted by (key, tag); rows without a key (control rows, other
    inputs) come first.
    """
    ports = task.stage.inputs
    step: StreamingStep = task.streaming
    buckets = task.state_files.buckets if task.state_files is not None else STATE_BUCKETS
    summaries: dict[int, Summary] = {}

    def rows():
        for columns in column_slices(batches, KEY, TAG, DATA):
            yield from zip(*columns)

    out = create_OutputStream()
    for key, key_rows in itertools.groupby(rows(), key=lambda r: r[0]):
        if key is None:
            for _, tag, data in key_rows:
                if tag == CONTROL_TAG:
                    forward(CONTROL_TAG, None, data)
                else:
                    yield beam_fn_api_pb2.Elements.Data(
                        transform_id=ports[tag].transform_id, data=data
                    )
            continue
        state_data = None
        by_port: dict[int, list[bytes]] = {}
        for _, tag, data in key_rows:
            if tag == STATE_TAG:
                state_data = data
            else:
                by_port.setdefault(tag, []).append(data)
        grouped = [i for i, port in enumerate(ports) if port.grouping is not None]
        tag = grouped[0]
        for other, datas in by_port.items():
            if other != tag:  # keyed rows of an input that is not grouped
                for data in datas:
                    yield beam_fn_api_pb2.Elements.Data(
                        transform_id=ports[other].transform_id, data=data
                    )
        gabw = entry.groupings[ports[tag].transform_id]
        new_state = gabw.key_panes(
            key, state_data, by_port.get(tag, []), step, out, summaries, buckets
        )
        if new_state is not None:
            forward(STATE_TAG, key, new_state)
        if out.size() >= GROUPS_BYTES:
            yield beam_fn_api_pb2.Elements.Data(
                transform_id=ports[tag].transform_id, data=out.get()
            )
            out = create_OutputStream()
    if out.size():
        grouped_ports = [p for p in ports if p.grouping is not None]
        yield beam_fn_api_pb2.Elements.Data(
            transform_id=grouped_ports[0].transform_id, data=out.get()
        )
    for bucket, summary in summaries.items():
        forward(SUMMARY_TAG, b'%d' % bucket, summary.encode())
