"""Beam semantics: the same pipeline on InProcessSparkRunner and on FnApiRunner.

Every test builds one pipeline twice, once per runner, writes its output with
``WriteToText`` into the test's ``tmp_path`` (DoFns run in Spark's Python worker
processes, so nothing can be appended to a list of the test process) and
compares the sorted lines.

Each element is written as a deterministic string naming its window, timestamp
and pane where they matter. Where Beam leaves something up to the runner (the
order of values in a group, and therefore which elements an early, count-based
trigger firing sees), the pipelines are built so that the output does not depend
on it: values of a triggered key are all equal, and only pane sizes are written.

The DoFns and WindowFns below are module-level, so they are pickled by reference:
the Spark workers import this module, which works when the tests run from the
repository root (the workers' working directory is the driver's).
"""
from __future__ import annotations

import glob
import os
import random
import struct
import zlib

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import trigger
from apache_beam.transforms import window
from apache_beam.transforms.combiners import Count
from apache_beam.transforms.core import WindowFn
from apache_beam.transforms.window import BoundedWindow
from apache_beam.transforms.window import FixedWindows
from apache_beam.transforms.window import GlobalWindow
from apache_beam.transforms.window import GlobalWindows
from apache_beam.transforms.window import IntervalWindow
from apache_beam.transforms.window import NonMergingWindowFn
from apache_beam.transforms.window import Sessions
from apache_beam.transforms.window import SlidingWindows
from apache_beam.transforms.window import TimestampCombiner
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc import InProcessSparkRunner

ACCUMULATING = trigger.AccumulationMode.ACCUMULATING
DISCARDING = trigger.AccumulationMode.DISCARDING


# --------------------------------------------------------------------------
# Harness
# --------------------------------------------------------------------------

def _read_lines(prefix: str) -> list[str]:
    lines = []
    for name in sorted(glob.glob(prefix + '*')):
        with open(name, encoding='utf-8') as f:
            lines.extend(line.rstrip('\n') for line in f)
    return sorted(lines)


def run_on(runner, build_fn, out_dir) -> list[str]:
    """Builds ``build_fn(pipeline)`` (a PCollection of str), runs it, reads it back."""
    os.makedirs(out_dir, exist_ok=True)
    prefix = os.path.join(str(out_dir), 'out')
    with beam.Pipeline(runner=runner) as p:
        _ = build_fn(p) | 'Write' >> beam.io.WriteToText(prefix)
    return _read_lines(prefix)


def run_both(build_fn, tmp_path, spark=None) -> tuple[list[str], list[str]]:
    """Runs the pipeline on InProcessSparkRunner and on FnApiRunner.

    ``build_fn(pipeline)`` builds the pipeline and returns a PCollection of
    strings. Returns (spark lines, fn api lines), each sorted.
    """
    if spark is None:
        from tests.conftest import shared_session
        spark = shared_session()
    on_spark = run_on(InProcessSparkRunner(spark=spark), build_fn,
                      tmp_path / 'spark')
    on_fnapi = run_on(FnApiRunner(), build_fn, tmp_path / 'fnapi')
    return on_spark, on_fnapi


def assert_same(build_fn, tmp_path, spark) -> list[str]:
    on_spark, on_fnapi = run_both(build_fn, tmp_path, spark)
    assert on_fnapi, 'the pipeline wrote nothing on FnApiRunner'
    assert on_spark == on_fnapi
    return on_spark


def show_window(w) -> str:
    if isinstance(w, GlobalWindow):
        return 'GW'
    if type(w) is IntervalWindow:
        return '[%d,%d)' % (w.start.micros, w.end.micros)
    return repr(w)


def show_pane(pane) -> str:
    return 'pane(first=%d,last=%d,timing=%d,index=%d,nonspec=%d)' % (
        pane.is_first, pane.is_last, pane.timing, pane.index,
        pane.nonspeculative_index)


def show_value(value):
    """Deterministic form: iterables (e.g. grouped values) are sorted."""
    if isinstance(value, (list, tuple)) or (
            hasattr(value, '__iter__') and not isinstance(
                value, (str, bytes, dict))):
        return sorted(repr(show_value(v)) for v in value)
    if isinstance(value, dict):
        return sorted((repr(k), repr(show_value(v))) for k, v in value.items())
    return value


class Show(beam.DoFn):
    """element -> 'value @ window ts=<micros> pane(...)'."""

    def __init__(self, fn=None, pane=True):
        self._fn = fn
        self._pane = pane

    def process(self, element, window=beam.DoFn.WindowParam,
                timestamp=beam.DoFn.TimestampParam,
                pane=beam.DoFn.PaneInfoParam):
        value = self._fn(element) if self._fn else element
        text = '%r @ %s ts=%d' % (value, show_window(window), timestamp.micros)
        if self._pane:
            text += ' ' + show_pane(pane)
        yield text


def show_group(kv):
    key, values = kv
    return key, sorted(values)


def show_group_size(kv):
    """For triggered groups: a count-based firing sees arbitrary elements."""
    key, values = kv
    return key, len(list(values))


def to_timestamped(element):
    """(key, value, seconds) -> TimestampedValue((key, value), seconds)."""
    key, value, seconds = element
    return TimestampedValue((key, value), seconds)


def create_timestamped(p, elements, label):
    """A PCollection of (key, value) at the given timestamps (seconds)."""
    return (p | label >> beam.Create(elements)
            | label + 'Stamp' >> beam.Map(to_timestamped))


# Keys a, b, c at timestamps spread over 0..45 s; values are distinct.
EVENTS = [
    ('a', 1, 0), ('a', 2, 1), ('a', 3, 4), ('a', 4, 9), ('a', 5, 10),
    ('a', 6, 12), ('a', 7, 31), ('a', 8, 33), ('a', 9, 45),
    ('b', 10, 2), ('b', 11, 3), ('b', 12, 15), ('b', 13, 26), ('b', 14, 27),
    ('c', 15, 7), ('c', 16, 40),
]


def events(p, label='Events'):
    return create_timestamped(p, EVENTS, label)


def gbk_shown(pcoll):
    return (pcoll | 'Group' >> beam.GroupByKey()
            | 'ShowGroups' >> beam.ParDo(Show(show_group)))


def combined_shown(pcoll):
    return (pcoll | 'Sum' >> beam.CombinePerKey(sum)
            | 'ShowSums' >> beam.ParDo(Show()))


# --------------------------------------------------------------------------
# Custom WindowFns and a custom window type
# --------------------------------------------------------------------------

class FixedAndNext(NonMergingWindowFn):
    """Each element goes to its fixed window of ``size`` seconds and the next one."""

    def __init__(self, size):
        self.size = Duration.of(size)

    def assign(self, context):
        start = context.timestamp - (context.timestamp % self.size)
        return [IntervalWindow(start, start + self.size),
                IntervalWindow(start + self.size, start + 2 * self.size)]

    def get_window_coder(self):
        return coders.IntervalWindowCoder()

    def __eq__(self, other):
        return type(self) is type(other) and self.size == other.size

    def __hash__(self):
        return hash((type(self), self.size))


class MergeOverlapping(WindowFn):
    """Element (k, v) at t gets [t, t + v seconds); overlapping windows merge.

    Like Sessions, but the width comes from the element and the class is not
    one Beam knows (no standard URN: it travels pickled).
    """

    def assign(self, context):
        _, width = context.element
        return [IntervalWindow(context.timestamp,
                               context.timestamp + Duration.of(width))]

    def merge(self, merge_context):
        to_merge, end = [], None
        for w in sorted(merge_context.windows, key=lambda w: w.start):
            if to_merge and w.start < end:
                to_merge.append(w)
                end = max(end, w.end)
                continue
            if len(to_merge) > 1:
                merge_context.merge(
                    to_merge, IntervalWindow(to_merge[0].start, end))
            to_merge, end = [w], w.end
        if len(to_merge) > 1:
            merge_context.merge(to_merge, IntervalWindow(to_merge[0].start, end))

    def is_merging(self):
        return True

    def get_window_coder(self):
        return coders.IntervalWindowCoder()

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


class LabeledWindow(BoundedWindow):
    """A window type of our own: [start, end) plus a label."""

    def __init__(self, start, end, label):
        super().__init__(end)
        self.start = Timestamp.of(start)
        self.label = label

    def __eq__(self, other):
        return (type(self) is type(other) and self.start == other.start
                and self.end == other.end and self.label == other.label)

    def __hash__(self):
        return hash((self.start, self.end, self.label))

    def __repr__(self):
        return 'LabeledWindow(%d,%d,%s)' % (
            self.start.micros, self.end.micros, self.label)


class LabeledWindowCoder(coders.Coder):
    """Encodes a LabeledWindow as two big-endian int64 micros + UTF-8 label."""

    def encode(self, w):
        return struct.pack('>qq', w.start.micros, w.end.micros) + \
            w.label.encode('utf-8')

    def decode(self, encoded):
        start, end = struct.unpack('>qq', encoded[:16])
        return LabeledWindow(Timestamp(micros=start), Timestamp(micros=end),
                             encoded[16:].decode('utf-8'))

    def is_deterministic(self):
        return True

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


class LabeledWindows(NonMergingWindowFn):
    """Fixed windows of ``size`` seconds, labeled 'even'/'odd' by index."""

    def __init__(self, size):
        self.size = Duration.of(size)

    def assign(self, context):
        start = context.timestamp - (context.timestamp % self.size)
        index = start.micros // self.size.micros
        return [LabeledWindow(start, start + self.size,
                              'even' if index % 2 == 0 else 'odd')]

    def get_window_coder(self):
        return LabeledWindowCoder()

    def __eq__(self, other):
        return type(self) is type(other) and self.size == other.size

    def __hash__(self):
        return hash((type(self), self.size))


# --------------------------------------------------------------------------
# GroupByKey / CombinePerKey over window functions
# --------------------------------------------------------------------------

def test_global_window(spark, tmp_path):
    def build(p):
        kvs = p | beam.Create([(k, v) for k, v, _ in EVENTS])
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()
    lines = assert_same(build, tmp_path, spark)
    assert len(lines) == 6


def test_global_window_with_timestamps(spark, tmp_path):
    # Timestamped elements in the global window: the group is at the end of
    # the global window, whatever the element timestamps.
    def build(p):
        kvs = events(p)
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()
    assert_same(build, tmp_path, spark)


def test_fixed_windows(spark, tmp_path):
    def build(p):
        kvs = events(p) | beam.WindowInto(FixedWindows(10))
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()
    lines = assert_same(build, tmp_path, spark)
    assert len(lines) == 2 * 10


def test_sliding_windows(spark, tmp_path):
    def build(p):
        kvs = events(p) | beam.WindowInto(SlidingWindows(10, 4))
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()
    assert_same(build, tmp_path, spark)


def test_sessions(spark, tmp_path):
    # Gap 5 s: a's 0,1,4,9,10,12 merge into one session, 31,33 into another...
    def build(p):
        kvs = events(p) | beam.WindowInto(Sessions(5))
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()
    lines = assert_same(build, tmp_path, spark)
    assert any("('a', [1, 2, 3, 4, 5, 6]) @ [0,17000000)" in line
               for line in lines), lines


def test_sessions_many_keys(spark, tmp_path):
    # Enough keys that they spread over both shuffle partitions.
    def build(p):
        rnd = random.Random(7)
        data = [('k%02d' % (i % 40), i, rnd.randrange(0, 200))
                for i in range(2000)]
        kvs = (create_timestamped(p, data, 'Events')
               | beam.WindowInto(Sessions(3)))
        return (kvs | beam.CombinePerKey(sum)
                | beam.ParDo(Show()))
    assert_same(build, tmp_path, spark)


def test_custom_non_merging_window_fn(spark, tmp_path):
    def build(p):
        kvs = events(p) | beam.WindowInto(FixedAndNext(10))
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()
    assert_same(build, tmp_path, spark)


def test_custom_merging_window_fn(spark, tmp_path):
    def build(p):
        kvs = create_timestamped(p, [
            ('a', 3, 0),    # [0, 3)
            ('a', 5, 2),    # [2, 7)  merges with the above
            ('a', 1, 7),    # [7, 8)  touches, no overlap
            ('a', 10, 20),  # [20, 30)
            ('a', 2, 29),   # [29, 31) merges
            ('b', 4, 1),    # [1, 5)
            ('b', 4, 6),    # [6, 10)
        ], 'Events') | beam.WindowInto(MergeOverlapping())
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()
    lines = assert_same(build, tmp_path, spark)
    assert any("('a', [3, 5]) @ [0,7000000)" in line for line in lines), lines


def test_custom_window_type_and_coder(spark, tmp_path):
    def build(p):
        kvs = events(p) | beam.WindowInto(LabeledWindows(10))
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()
    lines = assert_same(build, tmp_path, spark)
    assert any('LabeledWindow(10000000,20000000,odd)' in line
               for line in lines), lines


# --------------------------------------------------------------------------
# Triggers, allowed lateness, timestamp combiners
# --------------------------------------------------------------------------

# Triggered keys: all values of a key are equal, so a pane's content is fixed
# by its size whatever order the runner feeds the group in.
TRIGGER_EVENTS = (
    [('a', 1, t) for t in (0, 1, 2, 3, 4, 11, 12, 13)]
    + [('b', 1, t) for t in (5, 6, 7, 15, 16, 17, 18, 19)]
    + [('c', 1, t) for t in (9,)])


def triggered(p, windowfn, trigger_fn, mode, **kwargs):
    kvs = create_timestamped(p, TRIGGER_EVENTS, 'Events') | beam.WindowInto(
        windowfn, trigger=trigger_fn, accumulation_mode=mode, **kwargs)
    grouped = (kvs | beam.GroupByKey()
               | 'ShowGroups' >> beam.ParDo(Show(show_group_size)))
    combined = (kvs | beam.CombinePerKey(sum)
                | 'ShowSums' >> beam.ParDo(Show()))
    return (grouped, combined) | beam.Flatten()


@pytest.mark.parametrize('mode', [ACCUMULATING, DISCARDING],
                         ids=['accumulating', 'discarding'])
def test_after_count(spark, tmp_path, mode):
    def build(p):
        return triggered(p, GlobalWindows(), trigger.AfterCount(3), mode)
    assert_same(build, tmp_path, spark)


@pytest.mark.parametrize('mode', [ACCUMULATING, DISCARDING],
                         ids=['accumulating', 'discarding'])
def test_repeatedly_after_count(spark, tmp_path, mode):
    def build(p):
        return triggered(p, FixedWindows(10),
                         trigger.Repeatedly(trigger.AfterCount(2)), mode)
    lines = assert_same(build, tmp_path, spark)
    assert any('index=2' in line for line in lines), lines


@pytest.mark.parametrize('mode', [ACCUMULATING, DISCARDING],
                         ids=['accumulating', 'discarding'])
def test_after_watermark_early_and_late(spark, tmp_path, mode):
    def build(p):
        return triggered(
            p, FixedWindows(10),
            trigger.AfterWatermark(early=trigger.AfterCount(2),
                                   late=trigger.AfterCount(1)),
            mode, allowed_lateness=Duration.of(5))
    lines = assert_same(build, tmp_path, spark)
    # early panes (timing 0) and on-time panes (timing 1) both show up
    assert any('timing=0' in line for line in lines), lines
    assert any('timing=1' in line for line in lines), lines


def test_allowed_lateness_and_late_data(spark, tmp_path):
    # A first GroupByKey in 10 s windows emits at the end of each window; the
    # outputs are re-timestamped into the past (before the end of their new
    # 5 s window + 1 s lateness) and grouped again. In batch every element is
    # processed before the watermark moves, so whatever FnApiRunner keeps or
    # drops is what the runner must keep or drop.
    def back_in_time(kv, timestamp=beam.DoFn.TimestampParam):
        key, values = kv
        yield TimestampedValue((key, sum(values)), timestamp - 25)

    def build(p):
        kvs = events(p) | 'Fixed10' >> beam.WindowInto(
            FixedWindows(10), allowed_lateness=Duration.of(0))
        first = kvs | 'First' >> beam.GroupByKey()
        second = (first | beam.FlatMap(back_in_time)
                  | 'Fixed5' >> beam.WindowInto(
                      FixedWindows(5),
                      trigger=trigger.AfterWatermark(
                          late=trigger.AfterCount(1)),
                      accumulation_mode=DISCARDING,
                      allowed_lateness=Duration.of(1))
                  | 'Second' >> beam.GroupByKey()
                  | 'ShowSecond' >> beam.ParDo(Show(show_group)))
        shown_first = first | 'ShowFirst' >> beam.ParDo(Show(show_group))
        return (shown_first, second) | beam.Flatten()
    assert_same(build, tmp_path, spark)


@pytest.mark.parametrize('combiner', [
    TimestampCombiner.OUTPUT_AT_EOW,
    TimestampCombiner.OUTPUT_AT_EARLIEST,
    TimestampCombiner.OUTPUT_AT_LATEST,
], ids=['eow', 'earliest', 'latest'])
@pytest.mark.parametrize('windowfn', [
    FixedWindows(10), SlidingWindows(10, 5), Sessions(4)],
    ids=['fixed', 'sliding', 'sessions'])
def test_timestamp_combiners(spark, tmp_path, combiner, windowfn):
    def build(p):
        kvs = events(p) | beam.WindowInto(windowfn, timestamp_combiner=combiner)
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()
    lines = assert_same(build, tmp_path, spark)
    if combiner == TimestampCombiner.OUTPUT_AT_EARLIEST and (
            windowfn == FixedWindows(10)):
        # a's window [30, 40) holds 31 and 33: the group is stamped at 31 s
        assert any("('a', [7, 8]) @ [30000000,40000000) ts=31000000" in line
                   for line in lines), lines


# --------------------------------------------------------------------------
# Flatten, side inputs
# --------------------------------------------------------------------------

def test_flatten_of_different_coders_into_group_by_key(spark, tmp_path):
    def build(p):
        ints = (p | 'Ints' >> beam.Create([('a', 1), ('b', 2), ('a', 3)])
                .with_output_types(tuple[str, int]))
        strs = (p | 'Strs' >> beam.Create([('a', 'x'), ('c', 'y')])
                .with_output_types(tuple[str, str]))
        anys = (p | 'Anys' >> beam.Create([('b', 2.5), ('c', None)])
                .with_output_types(tuple[str, object]))
        merged = (ints, strs, anys) | beam.Flatten()
        return merged | beam.GroupByKey() | beam.ParDo(Show(show_value))
    lines = assert_same(build, tmp_path, spark)
    assert len(lines) == 3


def test_flatten_of_windowed_inputs_into_group_by_key(spark, tmp_path):
    # One input typed, one untyped (pickled/FastPrimitives coder), same windows.
    def build(p):
        first = (create_timestamped(p, EVENTS[:8], 'First')
                 | 'Typed' >> beam.Map(lambda kv: kv).with_output_types(
                     tuple[str, int]))
        second = (create_timestamped(p, EVENTS[8:], 'Second')
                  | 'Untyped' >> beam.Map(lambda kv: kv))
        merged = ((first, second) | beam.Flatten()
                  | beam.WindowInto(FixedWindows(10)))
        return gbk_shown(merged)
    assert_same(build, tmp_path, spark)


def lookup_dict(key, side):
    yield '%s -> %r' % (key, show_value(side.get(key, [])))


def lookup_multimap(key, side):
    yield '%s -> %r' % (key, show_value(side[key]))


def test_group_by_key_feeds_side_input(spark, tmp_path):
    def build(p):
        kvs = p | 'Kvs' >> beam.Create([(k, v) for k, v, _ in EVENTS])
        grouped = kvs | beam.GroupByKey()
        keys = p | 'Keys' >> beam.Create(['a', 'b', 'c', 'd'])
        as_dict = keys | 'Dict' >> beam.FlatMap(
            lookup_dict, side=beam.pvalue.AsDict(grouped))
        as_multimap = keys | 'MultiMap' >> beam.FlatMap(
            lookup_multimap, side=beam.pvalue.AsMultiMap(grouped))
        # the grouped output is also read as a main input (a second consumer)
        direct = grouped | 'Direct' >> beam.Map(
            lambda kv: 'direct %s %r' % (kv[0], sorted(kv[1])))
        return (as_dict, as_multimap, direct) | beam.Flatten()
    lines = assert_same(build, tmp_path, spark)
    assert len(lines) == 4 + 4 + 3


def test_flatten_feeds_side_input(spark, tmp_path):
    def build(p):
        left = p | 'Left' >> beam.Create([1, 2, 3])
        right = p | 'Right' >> beam.Create([10, 20])
        third = (p | 'Third' >> beam.Create(['x', 'y'])
                 | beam.Map(lambda s: s * 2))
        both = (left, right, third) | 'Merge' >> beam.Flatten()
        main = p | 'Main' >> beam.Create(['m1', 'm2'])
        return main | beam.Map(
            lambda m, side: '%s %r' % (m, sorted(map(repr, side))),
            side=beam.pvalue.AsList(both))
    lines = assert_same(build, tmp_path, spark)
    assert len(lines) == 2


def side_lookup(kv, side_list, side_dict):
    key, value = kv
    return (key, value, sorted(side_list), sorted(side_dict.items()))


def test_windowed_side_inputs(spark, tmp_path):
    # Main input in 10 s windows reads side inputs in 30 s windows: each main
    # window sees the side window holding its end.
    def build(p):
        main = events(p, 'Main') | 'MainWindows' >> beam.WindowInto(
            FixedWindows(10))
        side = (create_timestamped(
            p, [('s%d' % t, t, t) for t in (1, 12, 29, 30, 44, 61)], 'Side')
            | 'SideWindows' >> beam.WindowInto(FixedWindows(30)))
        side_values = side | beam.Values()
        return (main
                | beam.Map(side_lookup,
                           side_list=beam.pvalue.AsList(side_values),
                           side_dict=beam.pvalue.AsDict(side))
                | beam.ParDo(Show()))
    lines = assert_same(build, tmp_path, spark)
    assert len(lines) == len(EVENTS)


def test_windowed_side_input_from_group_by_key(spark, tmp_path):
    # Side input = a GroupByKey in sliding windows, read from fixed windows.
    def build(p):
        side = (events(p, 'SideEvents')
                | 'SideWindows' >> beam.WindowInto(SlidingWindows(20, 10))
                | 'SideGroup' >> beam.GroupByKey()
                | beam.MapTuple(lambda k, vs: (k, sum(vs))))
        main = (create_timestamped(
            p, [(k, None, t) for k in 'abcd' for t in (5, 25, 45)], 'Main')
            | beam.Keys()
            | 'MainWindows' >> beam.WindowInto(FixedWindows(10)))
        return (main
                | beam.Map(lambda k, d: (k, d.get(k)),
                           d=beam.pvalue.AsDict(side))
                | beam.ParDo(Show()))
    assert_same(build, tmp_path, spark)


def test_empty_inputs(spark, tmp_path):
    # Count.Globally of nothing is 0 (a default value, via a side input);
    # a GroupByKey of nothing is nothing.
    def build(p):
        empty = p | 'Empty' >> beam.Create([]).with_output_types(
            tuple[str, int])
        counted = empty | Count.Globally() | 'ShowCount' >> beam.ParDo(Show())
        grouped = gbk_shown(empty)
        return (counted, grouped) | beam.Flatten()
    lines = assert_same(build, tmp_path, spark)
    assert len(lines) == 1


def test_reshuffle_keeps_windows_and_timestamps(spark, tmp_path):
    def build(p):
        return (events(p) | beam.WindowInto(SlidingWindows(10, 5))
                | beam.Reshuffle() | beam.ParDo(Show(pane=False)))
    assert_same(build, tmp_path, spark)


# --------------------------------------------------------------------------
# Reading a large file; a large fan-out
# --------------------------------------------------------------------------

TEXT_LINES = 120_000  # ~36 MB: ReadFromText splits it into several bundles


def _write_text_file(path) -> None:
    filler = 'abcdefghijklmnopqrstuvwxyz0123456789' * 9
    with open(path, 'w', encoding='utf-8') as f:
        for i in range(TEXT_LINES):
            # ~310 bytes: index, a varying slice of the filler, a checksum field
            f.write('%08d %s %08x\n' % (i, filler[i % 36:][:290], i * 2654435761 % (1 << 32)))


def _line_stats(line):
    """(partition tag, (count, sum i, sum i*i, sum crc32)) of one line."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    where = 'p%d' % ctx.partitionId() if ctx is not None else 'local'
    i = int(line[:8])
    return where, (1, i, i * i, zlib.crc32(line.encode('utf-8')))


def _sum_tuples(tuples):
    totals = [0, 0, 0, 0]
    for t in tuples:
        for j, x in enumerate(t):
            totals[j] += x
    return tuple(totals)


def test_read_from_text_splits_and_reads_each_line_once(spark, tmp_path):
    path = str(tmp_path / 'input.txt')
    _write_text_file(path)
    assert os.path.getsize(path) > 30 << 20

    def build(p):
        per_task = (p | beam.io.ReadFromText(path)
                    | beam.Map(_line_stats)
                    | beam.CombinePerKey(_sum_tuples))
        totals = (per_task | beam.Values()
                  | beam.CombineGlobally(_sum_tuples)
                  | beam.Map(lambda t: 'total %d %d %d %d' % t))
        tasks = per_task | beam.Map(lambda kv: 'task %s %d' % (kv[0], kv[1][0]))
        return (totals, tasks) | beam.Flatten()

    on_spark, on_fnapi = run_both(build, tmp_path, spark)
    n = TEXT_LINES
    expected_total = 'total %d %d %d' % (
        n, n * (n - 1) // 2, (n - 1) * n * (2 * n - 1) // 6)
    totals = [line for line in on_spark if line.startswith('total ')]
    assert len(totals) == 1 and totals[0].startswith(expected_total + ' ')
    # the same lines (count and checksum) as FnApiRunner reads
    assert totals == [line for line in on_fnapi if line.startswith('total ')]
    # read by several Spark tasks
    tasks = [line for line in on_spark if line.startswith('task ')]
    assert len(tasks) > 1, on_spark
    assert sum(int(line.split()[2]) for line in tasks) == n


def test_fan_out_two_million_then_count(spark, tmp_path):
    n = 2_000_000

    def build(p):
        return (p | beam.Create([n])
                | beam.FlatMap(range)
                | Count.Globally()
                | beam.Map(str))
    lines = run_on(InProcessSparkRunner(spark=spark), build, tmp_path / 'spark')
    assert lines == [str(n)]
