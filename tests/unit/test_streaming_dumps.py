"""A streaming key's state pickles with plain pickle, and with cloudpickle only
where plain pickle refuses; ``pickle.loads`` reads both."""

from __future__ import annotations

import pickle

from apache_beam.transforms import trigger
from apache_beam.transforms import window

from beam_spark_inproc.worker.streaming.grouping import dump_state
from beam_spark_inproc.worker.streaming.grouping import dumps
from beam_spark_inproc.worker.streaming.grouping import load_state


def test_plain_values_use_plain_pickle():
    value = {'key': [1, 2.5, b'x'], 'window': window.IntervalWindow(0, 10)}
    assert dumps(value) == pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    assert pickle.loads(dumps(value)) == value


def test_a_class_pickle_cannot_find_falls_back_to_cloudpickle():
    class Local:  # not reachable by name: plain pickle refuses it
        def __init__(self, n):
            self.n = n

    data = dumps([Local(3)])
    assert pickle.loads(data)[0].n == 3


def test_trigger_state_round_trip():
    state = trigger.InMemoryUnmergedState()
    w = window.IntervalWindow(0, 10)
    state.set_timer(w, 'end', trigger.TimeDomain.WATERMARK, w.end)
    state.add_state(w, trigger._ListStateTag('elements'), 'v')
    back = load_state(dump_state(state))
    assert back.timers == {w: {('end', trigger.TimeDomain.WATERMARK, ''): w.end}}
    assert back.state[w]['elements'] == ['v']
