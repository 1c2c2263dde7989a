"""A stateful stage's bag user state served from the current key's entries.

Beam's user state (bag, combining, set, read-modify-write: every kind built on
a ``bag_user_state`` key) calls its ``CachingStateHandler`` to read, extend
and clear. Through Beam's ``GlobalCachingStateHandler`` each call passed the
runner's layers (``GroupedValuesStore``, ``RoutingStateHandler``) to a
``StateServicer`` (a lock, the key's state type asked at each layer, a
``StateResponse`` proto per append built twice): ~40 us of CPU per key and
micro-batch in the stateful benchmark, about half of it these layers.

``KeyStateHandler`` answers those calls itself from the current key's
``StateServicer`` entries (``RoutingStateHandler._user``: per key in
streaming, per bundle in batch), in the servicer's own layout (the serialized
``StateKey`` -> a list of encoded chunks), so what is restored and written
back, and checkpoints, are unchanged. Every other key (ordered list and map
state, side inputs, grouped values) goes down Beam's handler and those layers.
"""

from __future__ import annotations

from apache_beam.runners.worker import sdk_worker

# Values of a state up to this many encoded bytes are decoded at once into a
# list; a larger state is decoded as it is iterated (as Beam's handler does).
_LIST_BYTES = 64 << 10


class _Done:
    """A state call's answer, already done (Beam's ``_Future.done()`` waits
    on a ``threading.Event`` at each ``get``)."""

    def get(self, timeout=None):
        return None

    def wait(self, timeout=None):
        return True


_DONE = _Done()


class KeyStateHandler(sdk_worker.CachingStateHandler):
    """Bag user state from ``routing``'s current servicer; the rest from
    ``other`` (Beam's handler over the runner's layers)."""

    def __init__(self, other: sdk_worker.CachingStateHandler, routing):
        self._other = other
        self._routing = routing

    def process_instruction_id(self, bundle_id, cache_tokens):
        return self._other.process_instruction_id(bundle_id, cache_tokens)

    def blocking_get(self, state_key, coder):
        if not state_key.HasField('bag_user_state'):
            return self._other.blocking_get(state_key, coder)
        chunks = self._routing._user._state.get(state_key.SerializeToString())
        if not chunks:
            return ()
        data = chunks[0] if len(chunks) == 1 else b''.join(chunks)
        if len(data) > _LIST_BYTES:
            return _Lazy(coder, data)
        return list(coder.decode_all(data))

    def extend(self, state_key, coder, elements):
        if not state_key.HasField('bag_user_state'):
            return self._other.extend(state_key, coder, elements)
        data = coder.encode_all(elements)
        if data:
            self._routing._user._state[state_key.SerializeToString()].append(data)
        return _DONE

    def clear(self, state_key):
        if not state_key.HasField('bag_user_state'):
            return self._other.clear(state_key)
        self._routing._user._state.pop(state_key.SerializeToString(), None)
        return _DONE

    def done(self) -> None:
        self._other.done()


class _Lazy:
    """A large state's values, decoded each time they are iterated."""

    def __init__(self, coder, data: bytes):
        self._coder = coder
        self._data = data

    def __iter__(self):
        return self._coder.decode_all(self._data)
