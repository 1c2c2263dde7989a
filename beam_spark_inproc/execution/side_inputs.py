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
    message = getattr(beam_fn_api_pb2.StateKey,
                      ''.join(w.capitalize() for w in kind.split('_')))
    return beam_fn_api_pb2.StateKey(**{kind: message(
        transform_id=side_input.transform_id, side_input_id=side_input.tag,
        window=window, **fields)})


def state_entries(side_input: SideInput, coder,
                  chunks: Iterable[bytes]) -> list[tuple[bytes, bytes]]:
    """State entries serving one side input from its encoded elements."""
    access = beam_runner_api_pb2.FunctionSpec(urn=side_input.access_pattern_urn)
    by_window = WindowGroupingBuffer(access, coder)
    for chunk in chunks:
        by_window.append(chunk)
    entries = []
    if access.urn == common_urns.side_inputs.ITERABLE.urn:
        for _, window, data, _ in by_window.encoded_items():
            entries.append((_state_key('iterable_side_input', side_input, window),
                            data))
    elif access.urn == common_urns.side_inputs.MULTIMAP.urn:
        for key, window, data, count in by_window.encoded_items():
            entries.append((_state_key('multimap_side_input', side_input, window,
                                       key=key), data))
            entries.append((_state_key('multimap_keys_side_input', side_input,
                                       window), key))
            entries.append((_state_key('multimap_keys_values_side_input',
                                       side_input, window),
                            key + struct.pack('>i', count) + data))
    else:
        raise ValueError(
            'Unknown side input access pattern %r for %s (side input %r).' %
            (access.urn, side_input.transform_id, side_input.tag))
    return [(k.SerializeToString(), v) for k, v in entries]
