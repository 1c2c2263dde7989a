"""A streaming GroupByKey with Beam's default trigger, its panes made without
Beam's trigger driver (``worker.streaming.default_trigger``), against Beam's
BundleBasedDirectRunner on the same TestStream: late data within and past the
allowed lateness (0 and more), several windows per key and per element, both
accumulation modes, the three portable timestamp combiners, a held-back
output watermark (late data in EARLY panes; where BundleBasedDirectRunner
stalls, against Beam's trigger driver on this runner).
Each record carries the pane's timing, index and non-speculative index (as
the next stage reads it), the window and the timestamp.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms import trigger
from apache_beam.transforms import window
from apache_beam.transforms.window import TimestampCombiner

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.worker.streaming import default_trigger
from tests.streaming import oracle

ACCUMULATING = trigger.AccumulationMode.ACCUMULATING
DISCARDING = trigger.AccumulationMode.DISCARDING


class _Indexes(beam.DoFn):
    """(key, the pane's non-speculative index) -> sorted values (the oracle
    records timing, index, window and timestamp)."""

    def process(self, kv, pane=beam.DoFn.PaneInfoParam):
        yield (kv[0], pane.nonspeculative_index), sorted(kv[1])


def _grouped(p, stream, windowfn, **kwargs):
    return (
        p
        | stream
        | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
        | beam.WindowInto(windowfn, **kwargs)
        | beam.GroupByKey()
        | beam.ParDo(_Indexes())
    )


def no_lateness(p):
    """Allowed lateness 0: an element at the watermark equal to its window's
    end is late but kept (a late pane, also the first of its window: 'c');
    one after it is dropped."""
    stream = (
        test_stream.TestStream()
        .add_elements([('a', 1), ('b', 2), ('a', 11)])
        .advance_watermark_to(5)
        .add_elements([('a', 3)])
        .advance_watermark_to(10)
        .add_elements([('a', 4), ('b', 9), ('a', 12), ('c', 7)])
        .advance_watermark_to(11)
        .add_elements([('a', 5), ('a', 15)])
        .advance_watermark_to(20)
        .advance_watermark_to_infinity()
    )
    return _grouped(p, stream, window.FixedWindows(10))


def _late_stream():
    return (
        test_stream.TestStream()
        .add_elements([('a', 1), ('a', 12), ('a', 25), ('b', 3)])
        .advance_watermark_to(12)
        .add_elements([('a', 2), ('a', 13), ('b', 7)])  # [0, 10) late
        .advance_watermark_to(15)
        .add_elements([('a', 4), ('b', 5), ('a', 8)])  # late again
        .advance_watermark_to(21)
        .add_elements([('a', 6), ('a', 14), ('b', 16)])  # 6: dropped
        .advance_watermark_to(35)
        .add_elements([('a', 27), ('b', 24)])  # late, within lateness
        .advance_watermark_to(50)
        .add_elements([('a', 29)])  # dropped
        .advance_watermark_to_infinity()
    )


def lateness_discarding(p):
    return _grouped(
        p,
        _late_stream(),
        window.FixedWindows(10),
        allowed_lateness=10,
        accumulation_mode=DISCARDING,
    )


def lateness_accumulating(p):
    return _grouped(
        p,
        _late_stream(),
        window.FixedWindows(10),
        allowed_lateness=10,
        accumulation_mode=ACCUMULATING,
    )


def earliest_discarding(p):
    return _grouped(
        p,
        _late_stream(),
        window.FixedWindows(10),
        allowed_lateness=10,
        accumulation_mode=DISCARDING,
        timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST,
    )


def latest_accumulating(p):
    return _grouped(
        p,
        _late_stream(),
        window.FixedWindows(10),
        allowed_lateness=10,
        accumulation_mode=ACCUMULATING,
        timestamp_combiner=TimestampCombiner.OUTPUT_AT_LATEST,
    )


def sliding_late(p):
    """Each element in two windows, one of them late."""
    return _grouped(
        p,
        _late_stream(),
        window.SlidingWindows(10, 5),
        allowed_lateness=5,
        accumulation_mode=ACCUMULATING,
    )


def held_output_watermark(p):
    """EARLIEST holds in long sliding windows keep the stage's output
    watermark before the short ones' ends: late data there fires EARLY panes
    after the on-time one, as Beam's driver does."""
    stream = (
        test_stream.TestStream()
        .add_elements([('a', 1), ('b', 2)])
        .advance_watermark_to(15)
        .add_elements([('a', 3)])
        .advance_watermark_to(25)
        .add_elements([('a', 4), ('b', 12)])
        .advance_watermark_to_infinity()
    )
    return _grouped(
        p,
        stream,
        window.SlidingWindows(40, 10),
        allowed_lateness=100,
        accumulation_mode=DISCARDING,
        timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST,
    )


def early_then_late(p):
    """A late element in a window that fired on time while another window's
    hold kept the output watermark before its end: an EARLY pane (no hold: its
    timestamp is behind the output watermark); once the holds are gone another
    late element: a LATE pane whose non-speculative index counts the EARLY
    one."""
    stream = (
        test_stream.TestStream()
        .add_elements([('a', 1), ('b', 2)])
        .advance_watermark_to(15)
        .add_elements([('a', 0.5)])
        .advance_watermark_to(25)
        .advance_watermark_to(45)
        .add_elements([('a', 0.7)])
        .advance_watermark_to_infinity()
    )
    return _grouped(
        p,
        stream,
        window.SlidingWindows(40, 10),
        allowed_lateness=100,
        accumulation_mode=DISCARDING,
        timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST,
    )


def two_holds(p):
    """A window holding the output watermark at two timestamps holds it at
    the earlier one: a later element between them keeps its timestamp (it is
    not behind the output watermark)."""
    stream = (
        test_stream.TestStream()
        .add_elements([('a', 1), ('b', 12)])
        .advance_watermark_to(5)
        .add_elements([('a', 3), ('b', 14)])
        .advance_watermark_to(6)
        .add_elements([('c', 2)])
        .advance_watermark_to(10)
        .add_elements([('c', 9)])  # late: no hold, the window's end
        .advance_watermark_to_infinity()
    )
    return _grouped(
        p,
        stream,
        window.FixedWindows(10),
        accumulation_mode=DISCARDING,
        timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST,
    )


PIPELINES = [
    no_lateness,
    lateness_discarding,
    lateness_accumulating,
    earliest_discarding,
    latest_accumulating,
    sliding_late,
    early_then_late,
    two_holds,
]
EARLY = 0


def _as_read(records: list) -> list:
    """BundleBasedDirectRunner's records as a stage after a GroupByKey reads
    them on a portable runner: Beam's PaneInfo encoding keeps no
    non-speculative index for an EARLY pane (it decodes as -1)."""
    return sorted(
        ((((r[0][0][0], -1), r[0][1]),) + r[1:] if r[3] == EARLY else r for r in records), key=repr
    )


@pytest.fixture
def fast_panes(monkeypatch) -> list:
    """Counts the keys the default-trigger path made panes for."""
    calls = []
    key_panes = default_trigger.DefaultTriggerPanes.key_panes

    def counted(self, *args, **kwargs):
        calls.append(args[0])
        return key_panes(self, *args, **kwargs)

    monkeypatch.setattr(default_trigger.DefaultTriggerPanes, 'key_panes', counted)
    return calls


@pytest.mark.parametrize('build', PIPELINES, ids=lambda b: b.__name__)
def test_same_panes_as_direct_runner(build, fast_panes):
    expected = _as_read(oracle.direct(build))
    assert len({record[3] for record in expected}) >= 2, (
        'the oracle has panes of one timing only: the test would prove little'
    )
    assert oracle.run(build, InProcessSparkRunner(debug=True)) == expected
    assert fast_panes, 'the default-trigger path was not taken'


def _trigger_driver_only(monkeypatch) -> None:
    """Every GroupByKey's panes from Beam's trigger driver, the path of the
    triggers ``default_trigger`` does not apply to."""
    monkeypatch.setattr(default_trigger, 'applies', lambda windowing: False)


def test_the_trigger_driver_gives_the_same_panes(monkeypatch, fast_panes):
    """The general path (Beam's driver) on the richest pipelines: the cases
    above are Beam's semantics on this runner, not just the fast path's."""
    _trigger_driver_only(monkeypatch)
    for build in (lateness_accumulating, sliding_late, early_then_late):
        expected = _as_read(oracle.direct(build))
        assert oracle.run(build, InProcessSparkRunner(debug=True)) == expected
    assert not fast_panes


def test_held_output_watermark_as_beams_trigger_driver(monkeypatch, fast_panes):
    """BundleBasedDirectRunner stalls on this pipeline ('Monitor task detected
    a pipeline stall', Beam 2.77): here the oracle is this runner's general
    path, Beam's own trigger driver, on the same micro-batches."""
    fast = oracle.run(held_output_watermark, InProcessSparkRunner(debug=True))
    assert fast_panes, 'the default-trigger path was not taken'
    ON_TIME = 1
    # (element ((key, non-speculative index), values), window, timestamp,
    # timing, index, is_first, is_last): late data in EARLY panes after an
    # ON_TIME one of the same key and window. (An EARLY pane's
    # non-speculative index does not survive Beam's PaneInfo encoding between
    # stages: the DoFn reads -1 whatever the GroupByKey gave.)
    on_time = {(r[0][0][0], r[1]) for r in fast if r[3] == ON_TIME}
    assert any(r[3] == EARLY and r[4] >= 1 and (r[0][0][0], r[1]) in on_time for r in fast), fast
    _trigger_driver_only(monkeypatch)
    calls = len(fast_panes)
    assert oracle.run(held_output_watermark, InProcessSparkRunner(debug=True)) == fast
    assert len(fast_panes) == calls


def test_other_triggers_and_merging_windows_keep_the_driver():
    def windowing(windowfn, **kwargs):
        return beam.WindowInto(windowfn, **kwargs).windowing

    assert default_trigger.applies(windowing(window.FixedWindows(10)))
    assert default_trigger.applies(
        windowing(
            window.SlidingWindows(10, 5),
            allowed_lateness=3,
            accumulation_mode=ACCUMULATING,
            timestamp_combiner=TimestampCombiner.OUTPUT_AT_LATEST,
        )
    )
    assert not default_trigger.applies(windowing(window.Sessions(10)))
    assert not default_trigger.applies(
        windowing(
            window.FixedWindows(10),
            trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
            accumulation_mode=DISCARDING,
        )
    )
    assert not default_trigger.applies(
        windowing(
            window.FixedWindows(10),
            trigger=trigger.Repeatedly(trigger.AfterWatermark()),
            accumulation_mode=DISCARDING,
        )
    )


def test_same_panes_as_direct_runner_on_spark(spark):
    expected = oracle.direct(lateness_accumulating)
    assert oracle.run(lateness_accumulating, InProcessSparkRunner(spark=spark)) == expected
