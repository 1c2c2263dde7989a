"""Side inputs: a PCollection materialized once on the driver, served as Beam state.

The layout is the one Beam's FnApiRunner serves from its StateServicer
(``IterableSideInput`` per window, ``MultimapSideInput`` per key and window, plus
the keys and keys-values views); values are grouped with Beam's own
``WindowGroupingBuffer``. The result is a tuple of (StateKey bytes, data) pairs
that travels with the consuming stage's StageTask.
"""

from __future__ import annotations

import struct
from typing import Iterable

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner.execution import WindowGroupingBuffer

from beam_spark_inproc.planning.plan import SideInput


def _state_key(kind: str, side_input: SideInput, window: bytes, **fields):
    """A StateKey of one side-input kind (``iterable_side_input`` ...)."""
    message = getattr(beam_fn_api_pb2.StateKey, ''.join(w.capitalize() for w in kind.split('_')))
    return beam_fn_api_pb2.StateKey(
        **{
            kind: message(
                transform_id=side_input.transform_id,
                side_input_id=side_input.tag,
                window=window,
                **fields,
            )
        }
    )


def state_entries(
    side_input: SideInput, coder, chunks: Iterable[bytes]
) -> list[tuple[bytes, bytes]]:
    """State entries serving one side input from its encoded elements.

    A MULTIMAP side input has three entries per key (the key's values, the
    key in the keys view, the key and its values in the keys-values view);
    the last two StateKeys are the same for every key of a window, so they are
    serialized once per window, and the first is one message whose ``key`` is
    set per key (100,000 keys: 2.0 CPU-s when each was a new message).
    """
    access = beam_runner_api_pb2.FunctionSpec(urn=side_input.access_pattern_urn)
    by_window = WindowGroupingBuffer(access, coder)
    for chunk in chunks:
        by_window.append(chunk)
    entries = []
    if access.urn == common_urns.side_inputs.ITERABLE.urn:
        for _, window, data, _ in by_window.encoded_items():
            entries.append(
                (_state_key('iterable_side_input', side_input, window).SerializeToString(), data)
            )
    elif access.urn == common_urns.side_inputs.MULTIMAP.urn:
        per_window: dict[bytes, tuple] = {}
        for key, window, data, count in by_window.encoded_items():
            if window not in per_window:
                per_window[window] = (
                    _state_key('multimap_side_input', side_input, window, key=b''),
                    _state_key('multimap_keys_side_input', side_input, window).SerializeToString(),
                    _state_key(
                        'multimap_keys_values_side_input', side_input, window
                    ).SerializeToString(),
                )
            values_key, keys_key, keys_values_key = per_window[window]
            values_key.multimap_side_input.key = key
            entries.append((values_key.SerializeToString(), data))
            entries.append((keys_key, key))
            entries.append((keys_values_key, key + struct.pack('>i', count) + data))
    else:
        raise ValueError(
            'Unknown side input access pattern %r for %s (side input %r).'
            % (access.urn, side_input.transform_id, side_input.tag)
        )
    return entries
