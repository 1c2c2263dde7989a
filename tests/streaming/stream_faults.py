"""Faults inside a stream's stateful stage, for ``tests/cluster/test_stream_faults``
(a Python worker dies, an executor JVM is killed; ``local-cluster``).

A stateful DoFn like ``test_triggers.stateful_timers``'s injects the fault the
first time (a marker file, created atomically, across processes) it fires
key 'a''s timer: mid-bundle, after its state was read and before the new
state is written. Spark retries the task; the micro-batch's outputs, state and
metrics are those of the successful attempt only.
"""

from __future__ import annotations

import os
import signal

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_stream import TestStream

from tests.cluster.test_faults import _executor_jvm
from tests.cluster.test_faults import _first_time
from tests.streaming import oracle
from tests.streaming.test_triggers import BufferUntilTimer
from tests.streaming.test_triggers import _timestamped


class FaultyBuffer(BufferUntilTimer):
    """``test_triggers.BufferUntilTimer`` with a fault before its timer's
    flush (after the state was read into the bundle, before it is written)."""

    def __init__(self, fault: str, marker: str):
        self._fault, self._marker = fault, marker
        self.fired = Metrics.counter('stream_faults', 'fired')

    def _before_flush(self, key) -> None:
        self.fired.inc()
        if self._fault and key == 'a' and _first_time(self._marker):
            if self._fault == 'exit':
                os._exit(3)
            if self._fault == 'kill_executor':
                os.kill(_executor_jvm(), signal.SIGKILL)
                os._exit(3)


def build(fault: str = '', marker: str = '', reshuffle: bool = True):
    def pipeline(p):
        stream = (
            TestStream()
            .add_elements([('a', 1), ('b', 2), ('c', 4)])
            .advance_watermark_to(5)
            .add_elements([('a', 3), ('c', 8)])
            .advance_watermark_to(11)
            .add_elements([('a', 12), ('b', 13)])
            .advance_watermark_to_infinity()
        )
        out = _timestamped(p, stream) | beam.ParDo(FaultyBuffer(fault, marker))
        # Reshuffle: the records are written by a stage of their own, from the
        # stateful stage's committed output (a sink fused into the faulty task
        # would write the dead attempt's records too: at-least-once).
        return out | beam.Reshuffle() if reshuffle else out

    return pipeline


def _values(records: list) -> list:
    """(element, window, timestamp): Reshuffle keeps these, not the pane."""
    return sorted((r[:3] for r in records), key=repr)


def check(runner, fault: str, marker: str) -> None:
    """The faulty run's records and committed metrics equal the fault-free
    run's on Beam's BundleBasedDirectRunner (without the Reshuffle: the
    DirectRunner drops a timer's output behind a later stage, see
    docs/streaming.md)."""
    expected = _values(oracle.direct(build(reshuffle=False)))
    assert len(expected) == 5  # a, b, c in [0, 10), a, b in [10, 20)
    results: list = []
    got = _values(oracle.run(build(fault, marker), runner, results=results))
    assert os.path.exists(marker), 'the fault was never injected'
    [fired] = results[0].metrics().query(MetricsFilter().with_name('fired'))['counters']
    assert fired.committed == len(expected), fired
    assert fired.attempted >= fired.committed, fired
    assert got == expected, (got, expected)
