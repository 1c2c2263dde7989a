"""``execution.side_inputs.state_entries``: the StateKeys and data a side input
is served from, against StateKeys built one message per entry as Beam's
FnApiRunner builds them (``fn_runner._store_side_inputs_in_state``), for
iterable and multimap side inputs over several windows."""

from __future__ import annotations

import struct

from apache_beam.coders import coders
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.transforms.window import IntervalWindow
from apache_beam.utils.windowed_value import WindowedValue

from beam_spark_inproc.execution.side_inputs import state_entries
from beam_spark_inproc.planning.plan import SideInput

WINDOWS = [IntervalWindow(0, 10), IntervalWindow(10, 20)]
KV = coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder()])
CODER = coders.WindowedValueCoder(KV, coders.IntervalWindowCoder())


def _elements():
    out = create_OutputStream()
    impl = CODER.get_impl()
    for i in range(50):
        window = WINDOWS[i % 2]
        impl.encode_to_stream(WindowedValue((f'k{i % 7}', i), window.start, [window]), out, True)
    return out.get()


def _expected_multimap(side_input):
    """One StateKey message per entry; values grouped per (key, window) in
    input order."""
    groups: dict = {}
    for i in range(50):
        groups.setdefault((f'k{i % 7}', WINDOWS[i % 2]), []).append(i)
    window_coder = coders.IntervalWindowCoder()
    entries = []
    for (key, window), values in groups.items():
        w = window_coder.encode(window)
        k = coders.StrUtf8Coder().get_impl().encode_nested(key)
        data = b''.join(coders.VarIntCoder().get_impl().encode_nested(v) for v in values)
        fields = dict(transform_id=side_input.transform_id, side_input_id=side_input.tag, window=w)
        entries.append(
            (
                beam_fn_api_pb2.StateKey(
                    multimap_side_input=beam_fn_api_pb2.StateKey.MultimapSideInput(key=k, **fields)
                ).SerializeToString(),
                data,
            )
        )
        entries.append(
            (
                beam_fn_api_pb2.StateKey(
                    multimap_keys_side_input=beam_fn_api_pb2.StateKey.MultimapKeysSideInput(
                        **fields
                    )
                ).SerializeToString(),
                k,
            )
        )
        entries.append(
            (
                beam_fn_api_pb2.StateKey(
                    multimap_keys_values_side_input=(
                        beam_fn_api_pb2.StateKey.MultimapKeysValuesSideInput(**fields)
                    )
                ).SerializeToString(),
                k + struct.pack('>i', len(values)) + data,
            )
        )
    return entries


def test_multimap_entries_over_two_windows():
    side_input = SideInput(
        'Lookup', 'side0', b'buffer', common_urns.side_inputs.MULTIMAP.urn, 'coder'
    )
    got = state_entries(side_input, CODER, [_elements()])
    assert got == _expected_multimap(side_input)
    assert len(got) == 3 * 14  # 7 keys x 2 windows


def test_iterable_entries_per_window():
    side_input = SideInput(
        'Lookup', 'side0', b'buffer', common_urns.side_inputs.ITERABLE.urn, 'coder'
    )
    got = state_entries(side_input, CODER, [_elements()])
    window_coder = coders.IntervalWindowCoder()
    expected = []
    for window in WINDOWS:
        key = beam_fn_api_pb2.StateKey(
            iterable_side_input=beam_fn_api_pb2.StateKey.IterableSideInput(
                transform_id='Lookup', side_input_id='side0', window=window_coder.encode(window)
            )
        ).SerializeToString()
        data = b''.join(
            KV.get_impl().encode_nested((f'k{i % 7}', i))
            for i in range(50)
            if WINDOWS[i % 2] == window
        )
        expected.append((key, data))
    assert got == expected
