"""Expiry of a stateful DoFn's user state by window (streaming).

A window's user state is garbage once the stage's input watermark reaches the
window's end plus the allowed lateness (Beam's garbage-collection time, as
Java's ``StatefulDoFnRunner`` cleans up with a timer at
``window.maxTimestamp() + allowedLateness``, firing when the watermark passes
it): ``StateExpiry.drop`` removes those entries from the key's ``StateServicer``
contents before they are written back, after the key's due timers fired (a
timer at the window's end still sees the state) and returns the
earliest expiry of what is kept; it joins the bucket's summary as an event-time
deadline, so the driver loads the bucket when the watermark passes it even if
no element or timer touches the key again: the checkpoint follows live state.

The window of an entry is the ``window`` field of its StateKey (bag, multimap,
ordered-list user state), decoded with the window coder of the ParDo's main
input; the global window never expires before +inf (where the loop keeps
nothing anyway). Each window's expiry is decoded once and kept, up to
``CACHED_WINDOWS`` windows: a processor lives as long as its Python worker,
and a stream meets new windows for as long as it runs (the cache starts
again when full).
"""

from __future__ import annotations

from typing import Optional

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

_STATEFUL_URNS = ('beam:transform:pardo:v1',)
CACHED_WINDOWS = 4096


class StateExpiry:
    def __init__(self, descriptor: beam_fn_api_pb2.ProcessBundleDescriptor):
        context = pipeline_context.PipelineContext(descriptor)
        # transform id -> (window coder impl, allowed lateness)
        self._by_transform: dict[str, tuple] = {}
        for transform_id, transform in descriptor.transforms.items():
            if transform.spec.urn not in _STATEFUL_URNS:
                continue
            payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
            if not payload.state_specs:
                continue
            main = [pc for name, pc in transform.inputs.items() if name not in payload.side_inputs]
            if not main:
                continue
            strategy_id = descriptor.pcollections[main[0]].windowing_strategy_id
            strategy = descriptor.windowing_strategies[strategy_id]
            coder = context.coders[strategy.window_coder_id].get_impl()
            windowing = context.windowing_strategies[strategy_id]
            self._by_transform[transform_id] = (coder, windowing.allowed_lateness)
        self._cache: dict[tuple[str, bytes], Optional[Timestamp]] = {}

    def _expiry(self, state_key: bytes) -> Optional[Timestamp]:
        """When the entry's window expires; None: never (or unknown)."""
        key = beam_fn_api_pb2.StateKey.FromString(state_key)
        kind = key.WhichOneof('type')
        part = getattr(key, kind)
        found = self._by_transform.get(getattr(part, 'transform_id', ''))
        if found is None or not getattr(part, 'window', b''):
            return None
        cached = (part.transform_id, part.window)
        if cached not in self._cache:
            if len(self._cache) >= CACHED_WINDOWS:
                self._cache.clear()
            coder, lateness = found
            window = coder.decode(part.window)
            self._cache[cached] = (
                None if isinstance(window, GlobalWindow) else window.end + lateness
            )
        return self._cache[cached]

    def drop(self, state: dict, ordered: dict, watermark: Timestamp) -> Timestamp:
        """Removes the entries of expired windows from ``state`` and
        ``ordered`` (a StateServicer's ``_state`` and ``_ordered_list_keys``);
        returns the earliest expiry of the entries of ``state`` kept (one
        pass: each entry's key is parsed once)."""
        earliest = MAX_TIMESTAMP
        for entries in (state, ordered):
            for state_key in list(entries):
                expiry = self._expiry(state_key)
                if expiry is None:
                    continue
                if watermark >= expiry:
                    del entries[state_key]
                elif entries is state and expiry < earliest:
                    earliest = expiry
        return earliest
