"""Beam semantics: the same pipeline on InProcessSparkRunner and on FnApiRunner.

One suite over every backend (fugue's shared ``ExecutionEngineTests``): each
test takes the ``backend`` fixture, a runner on classic Spark (the test run's
session) or in debug mode (the same plan and worker code in this process);
Spark Connect runs a selection of these scenarios (``SCENARIOS``, the ones that
cross what Connect changes: shuffles, side inputs, custom coders and windows)
in ``test_spark_connect.py``, whose one server serves the whole module. Tests
that measure Spark's own splitting and scale stay on classic Spark.

Every test builds one pipeline twice, once on the backend and once on FnApiRunner, writes its
output with
``WriteToText`` into the test's ``tmp_path`` (DoFns run in Spark's Python worker
processes, so nothing can be appended to a list of the test process) and
compares the sorted lines.

Each element is written as a deterministic string naming its window, timestamp
and pane. Where Beam leaves something up to the runner (the order of values in
a group), the string does not depend on it: grouped values are sorted. Related
scenarios share one pipeline as named branches (a Spark run costs seconds); a
difference is reported line by line with its branch name.

The DoFns and WindowFns below are module-level, so they are pickled by reference:
the Spark workers import this module, which works when the tests run from the
repository root (the workers' working directory is the driver's).
"""

from __future__ import annotations

import collections
import glob
import os
import random
import struct
import zlib

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.coders.coders import IntervalWindowCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import trigger
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


def run_on(runner, build_fn, out_dir, options=None) -> list[str]:
    """Builds ``build_fn(pipeline)`` (a PCollection of str), runs it, reads it back."""
    os.makedirs(out_dir, exist_ok=True)
    prefix = os.path.join(str(out_dir), 'out')
    with beam.Pipeline(runner=runner, options=PipelineOptions(**(options or {}))) as p:
        _ = build_fn(p) | 'Write' >> beam.io.WriteToText(prefix)
    return _read_lines(prefix)


BACKENDS = ['spark', 'debug']


def runner_for(backend: str, spark=None) -> InProcessSparkRunner:
    """A runner on ``backend``: 'spark' (``spark``, else the test run's
    session) or 'debug'."""
    if backend == 'debug':
        return InProcessSparkRunner(debug=True)
    if spark is None:
        from tests.conftest import shared_session

        spark = shared_session()
    return InProcessSparkRunner(spark=spark)


@pytest.fixture(params=BACKENDS)
def backend(request) -> InProcessSparkRunner:
    """The runner under test, once per backend."""
    if request.param == 'spark':
        return runner_for('spark', request.getfixturevalue('spark'))
    return runner_for(request.param)


def run_both(build_fn, tmp_path, runner=None, options=None) -> tuple[list[str], list[str]]:
    """Runs the pipeline on ``runner`` (an InProcessSparkRunner, by default
    on classic Spark) and on FnApiRunner.

    ``build_fn(pipeline)`` builds the pipeline and returns a PCollection of
    strings; ``options`` are PipelineOptions keyword arguments for both runs.
    Returns (runner lines, fn api lines), each sorted.
    """
    if not isinstance(runner, InProcessSparkRunner):
        runner = runner_for('spark', runner)  # None, or a SparkSession
    on_spark = run_on(runner, build_fn, tmp_path / 'spark', options)
    on_fnapi = run_on(FnApiRunner(), build_fn, tmp_path / 'fnapi', options)
    return on_spark, on_fnapi


def _difference(on_spark, on_fnapi) -> str:
    spark_only = collections.Counter(on_spark) - collections.Counter(on_fnapi)
    fnapi_only = collections.Counter(on_fnapi) - collections.Counter(on_spark)
    text = ['InProcessSparkRunner and FnApiRunner differ.']
    text += ['  only on Spark:   %s' % line for line in sorted(spark_only.elements())]
    text += ['  only on FnApi:   %s' % line for line in sorted(fnapi_only.elements())]
    return '\n'.join(text)


def assert_same(build_fn, tmp_path, runner, options=None) -> list[str]:
    """Runs on ``runner`` and on FnApiRunner; asserts the same (sorted) lines."""
    on_spark, on_fnapi = run_both(build_fn, tmp_path, runner, options)
    assert on_fnapi, 'the pipeline wrote nothing on FnApiRunner'
    assert on_spark == on_fnapi, _difference(on_spark, on_fnapi)
    return on_spark


class _Branch(beam.PTransform):
    def __init__(self, name, fn):
        super().__init__(name)
        self._name = name
        self._fn = fn

    def expand(self, pbegin):
        # Flatten needs one windowing for all its inputs (mixing window coders
        # fails on FnApiRunner too); the lines already name their windows.
        return (
            self._fn(pbegin)
            | 'Tag' >> beam.Map(lambda line, name=self._name: '%s| %s' % (name, line))
            | 'Rewindow' >> beam.WindowInto(GlobalWindows())
        )


def branches(**fns):
    """One pipeline running several independent scenarios.

    Each ``fns[name](pbegin)`` returns a PCollection of str; its lines come out
    prefixed with ``name|`` so a difference names its scenario. (A Spark run
    costs seconds, so related scenarios share a pipeline.)
    """

    def build(p):
        return [
            p | name >> _Branch(name, fn) for name, fn in fns.items()
        ] | 'Branches' >> beam.Flatten()

    return build


def of_branch(lines, name) -> list[str]:
    return [line[len(name) + 2 :] for line in lines if line.startswith(name + '| ')]


def show_window(w) -> str:
    if isinstance(w, GlobalWindow):
        return 'GW'
    if type(w) is IntervalWindow:
        return '[%d,%d)' % (w.start.micros, w.end.micros)
    return repr(w)


def show_pane(pane) -> str:
    return 'pane(first=%d,last=%d,timing=%d,index=%d,nonspec=%d)' % (
        pane.is_first,
        pane.is_last,
        pane.timing,
        pane.index,
        pane.nonspeculative_index,
    )


def show_value(value):
    """Deterministic form: iterables (e.g. grouped values) are sorted."""
    if isinstance(value, (list, tuple)) or (
        hasattr(value, '__iter__') and not isinstance(value, (str, bytes, dict))
    ):
        return sorted(repr(show_value(v)) for v in value)
    if isinstance(value, dict):
        return sorted((repr(k), repr(show_value(v))) for k, v in value.items())
    return value


class Show(beam.DoFn):
    """element -> 'value @ window ts=<micros> pane(...)'."""

    def __init__(self, fn=None, pane=True):
        self._fn = fn
        self._pane = pane

    def process(
        self,
        element,
        window=beam.DoFn.WindowParam,
        timestamp=beam.DoFn.TimestampParam,
        pane=beam.DoFn.PaneInfoParam,
    ):
        value = self._fn(element) if self._fn else element
        text = '%r @ %s ts=%d' % (value, show_window(window), timestamp.micros)
        if self._pane:
            text += ' ' + show_pane(pane)
        yield text


def show_group(kv):
    key, values = kv
    return key, sorted(values)


def to_timestamped(element):
    """(key, value, seconds) -> TimestampedValue((key, value), seconds)."""
    key, value, seconds = element
    return TimestampedValue((key, value), seconds)


def create_timestamped(p, elements, label):
    """A PCollection of (key, value) at the given timestamps (seconds)."""
    return p | label >> beam.Create(elements) | label + 'Stamp' >> beam.Map(to_timestamped)


# Keys a, b, c at timestamps spread over 0..45 s; values are distinct.
EVENTS = [
    ('a', 1, 0),
    ('a', 2, 1),
    ('a', 3, 4),
    ('a', 4, 9),
    ('a', 5, 10),
    ('a', 6, 12),
    ('a', 7, 31),
    ('a', 8, 33),
    ('a', 9, 45),
    ('b', 10, 2),
    ('b', 11, 3),
    ('b', 12, 15),
    ('b', 13, 26),
    ('b', 14, 27),
    ('c', 15, 7),
    ('c', 16, 40),
]


def events(p, label='Events'):
    return create_timestamped(p, EVENTS, label)


def gbk_shown(pcoll):
    return pcoll | 'Group' >> beam.GroupByKey() | 'ShowGroups' >> beam.ParDo(Show(show_group))


def combined_shown(pcoll):
    return pcoll | 'Sum' >> beam.CombinePerKey(sum) | 'ShowSums' >> beam.ParDo(Show())


# --------------------------------------------------------------------------
# Custom WindowFns and a custom window type
# --------------------------------------------------------------------------


class FixedAndNext(NonMergingWindowFn):
    """Each element goes to its fixed window of ``size`` seconds and the next one."""

    def __init__(self, size):
        self.size = Duration.of(size)

    def assign(self, context):
        start = context.timestamp - (context.timestamp % self.size)
        return [
            IntervalWindow(start, start + self.size),
            IntervalWindow(start + self.size, start + 2 * self.size),
        ]

    def get_window_coder(self):
        return IntervalWindowCoder()

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
        return [IntervalWindow(context.timestamp, context.timestamp + Duration.of(width))]

    def merge(self, merge_context):
        to_merge, end = [], None
        for w in sorted(merge_context.windows, key=lambda w: w.start):
            if to_merge and w.start < end:
                to_merge.append(w)
                end = max(end, w.end)
                continue
            if len(to_merge) > 1:
                merge_context.merge(to_merge, IntervalWindow(to_merge[0].start, end))
            to_merge, end = [w], w.end
        if len(to_merge) > 1:
            merge_context.merge(to_merge, IntervalWindow(to_merge[0].start, end))

    def is_merging(self):
        return True

    def get_window_coder(self):
        return IntervalWindowCoder()

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


class LabeledWindow(BoundedWindow):
    """A window type of our own: [start, end) plus a label."""

    def __init__(self, begin, end, label):
        super().__init__(end)
        self.begin = Timestamp.of(begin)
        self.label = label

    def __eq__(self, other):
        return (
            type(self) is type(other)
            and self.begin == other.begin
            and self.end == other.end
            and self.label == other.label
        )

    def __hash__(self):
        return hash((self.begin, self.end, self.label))

    def __repr__(self):
        return 'LabeledWindow(%d,%d,%s)' % (self.begin.micros, self.end.micros, self.label)


class LabeledWindowCoder(coders.Coder):
    """Encodes a LabeledWindow as two big-endian int64 micros + UTF-8 label."""

    def encode(self, w):
        return struct.pack('>qq', w.begin.micros, w.end.micros) + w.label.encode('utf-8')

    def decode(self, encoded):
        start, end = struct.unpack('>qq', encoded[:16])
        return LabeledWindow(
            Timestamp(micros=start), Timestamp(micros=end), encoded[16:].decode('utf-8')
        )

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
        return [LabeledWindow(start, start + self.size, 'even' if index % 2 == 0 else 'odd')]

    def get_window_coder(self):
        return LabeledWindowCoder()

    def __eq__(self, other):
        return type(self) is type(other) and self.size == other.size

    def __hash__(self):
        return hash((type(self), self.size))


# --------------------------------------------------------------------------
# GroupByKey / CombinePerKey over window functions
# --------------------------------------------------------------------------


def grouped_and_combined(windowfn=None, data=None, combine=True, **window_kwargs):
    """A branch: events (optionally windowed) -> GroupByKey and CombinePerKey.

    ``combine=False`` leaves out the CombinePerKey (each shuffle costs a
    Spark job).
    """

    def branch(p):
        kvs = create_timestamped(p, EVENTS if data is None else data, 'Events')
        if windowfn is not None:
            kvs = kvs | 'Window' >> beam.WindowInto(windowfn, **window_kwargs)
        if not combine:
            return gbk_shown(kvs)
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()

    return branch


def untimed_grouped_and_combined(p):
    kvs = p | 'Events' >> beam.Create([(k, v) for k, v, _ in EVENTS])
    return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()


class Point:
    """A key type with a coder of its own (registered below)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(self) is type(other) and (self.x, self.y) == (other.x, other.y)

    def __hash__(self):
        return hash((self.x, self.y))

    def __repr__(self):
        return 'Point(%d,%d)' % (self.x, self.y)


class PointCoder(coders.Coder):
    def encode(self, point):
        return struct.pack('>ii', point.x, point.y)

    def decode(self, encoded):
        return Point(*struct.unpack('>ii', encoded))

    def is_deterministic(self):
        return True

    def to_type_hint(self):
        return Point


coders.registry.register_coder(Point, PointCoder)


def odd_keys(p):
    # Keys whose encoding is empty (b'' and '' under bytes/str coders), and
    # keys that are equal in Python (0 == False == 0.0) but encode apart.
    strs = (
        p
        | 'EmptyStr' >> beam.Create([('', 1), ('', 2), ('a', 3)]).with_output_types(tuple[str, int])
        | 'GroupStr' >> beam.GroupByKey()
        | 'ShowStr' >> beam.ParDo(Show(show_group))
    )
    raw = (
        p
        | 'EmptyBytes'
        >> beam.Create([(b'', 1), (b'', 2), (b'\0', 3)]).with_output_types(tuple[bytes, int])
        | 'GroupBytes' >> beam.GroupByKey()
        | 'ShowBytes' >> beam.ParDo(Show(show_group))
    )
    mixed = (
        p
        | 'Mixed'
        >> beam.Create(
            [
                ('', 1),
                (None, 2),
                (0, 3),
                (False, 4),
                (0.0, 5),
                ((), 6),
                ('', 7),
                (0, 8),
                ((1, 'x'), 9),
                ((1, 'x'), 10),
            ]
        )
        | 'GroupMixed' >> beam.GroupByKey()
        | 'ShowMixed' >> beam.ParDo(Show(show_group))
    )
    return (strs, raw, mixed) | beam.Flatten()


def custom_key_coder(p):
    return (
        p
        | beam.Create(
            [(Point(1, 2), 'a'), (Point(1, 2), 'b'), (Point(2, 1), 'c')]
        ).with_output_types(tuple[Point, str])
        | beam.GroupByKey()
        | beam.ParDo(Show(show_group))
    )


def big_values(p):
    # 6 values of 1.5 MB under one key: more than a bundle's pieces (1 MB).
    return (
        p
        | beam.Create([('big', i) for i in range(6)])
        | beam.Map(lambda kv: (kv[0], str(kv[1]) * 1_500_000))
        | beam.GroupByKey()
        | beam.ParDo(Show(lambda kv: (kv[0], sorted((len(v), v[:1]) for v in kv[1]))))
    )


def test_global_window(backend, tmp_path):
    # Without and with element timestamps: one group per key at the end of
    # the global window. Edge-case keys, a custom key coder, big groups.
    lines = assert_same(
        branches(
            untimed=untimed_grouped_and_combined,
            timestamped=grouped_and_combined(combine=False),
            odd_keys=odd_keys,
            custom_key_coder=custom_key_coder,
            big_values=big_values,
        ),
        tmp_path,
        backend,
    )
    assert len(of_branch(lines, 'untimed')) == 6
    assert len(of_branch(lines, 'custom_key_coder')) == 2


def test_fixed_windows(backend, tmp_path):
    lines = assert_same(
        branches(
            fixed=grouped_and_combined(FixedWindows(10)),
        ),
        tmp_path,
        backend,
    )
    # a: 4 windows, b: 3, c: 2; each a group and a sum
    assert len(lines) == 2 * 9


def test_sliding_windows(backend, tmp_path):
    # Every element is in two windows (size 10, period 5).
    assert_same(
        branches(
            sliding=grouped_and_combined(SlidingWindows(10, 5)),
            sliding_offset=grouped_and_combined(SlidingWindows(10, 4, offset=1)),
        ),
        tmp_path,
        backend,
    )


def test_sessions(backend, tmp_path):
    rnd = random.Random(7)
    many = [('k%02d' % (i % 40), i, rnd.randrange(0, 200)) for i in range(2000)]
    lines = assert_same(
        branches(
            sessions=grouped_and_combined(Sessions(5)),
            # enough keys to spread over both shuffle partitions
            many_keys=grouped_and_combined(Sessions(3), many, combine=False),
        ),
        tmp_path,
        backend,
    )
    # Gap 5 s: a's 0,1,4 merge into [0, 9); 9,10,12 into [9, 17)...
    assert any(line.startswith("sessions| ('a', [1, 2, 3]) @ [0,9000000)") for line in lines), lines


def test_custom_non_merging_window_fn(backend, tmp_path):
    assert_same(
        branches(
            fixed_and_next=grouped_and_combined(FixedAndNext(10)),
        ),
        tmp_path,
        backend,
    )


def test_custom_merging_window_fn(backend, tmp_path):
    data = [
        ('a', 3, 0),  # [0, 3)
        ('a', 5, 2),  # [2, 7)  merges with the above
        ('a', 1, 7),  # [7, 8)  touches, no overlap
        ('a', 10, 20),  # [20, 30)
        ('a', 2, 29),  # [29, 31) merges
        ('b', 4, 1),  # [1, 5)
        ('b', 4, 6),  # [6, 10)
    ]
    lines = assert_same(
        branches(
            merging=grouped_and_combined(MergeOverlapping(), data),
        ),
        tmp_path,
        backend,
    )
    assert any("('a', [3, 5]) @ [0,7000000)" in line for line in lines), lines


def test_custom_window_type_and_coder(backend, tmp_path):
    lines = assert_same(
        branches(
            labeled=grouped_and_combined(LabeledWindows(10)),
        ),
        tmp_path,
        backend,
    )
    assert any('LabeledWindow(10000000,20000000,odd)' in line for line in lines), lines


# --------------------------------------------------------------------------
# Triggers, allowed lateness, timestamp combiners
# --------------------------------------------------------------------------

# In batch, Beam's trigger driver sees all elements of a key at once
# (``process_entire_key``), so a pane's content does not depend on the order
# in which a runner hands over the values.
TRIGGER_EVENTS = [
    (k, i, t)
    for i, (k, t) in enumerate(
        [('a', t) for t in (0, 1, 2, 3, 4, 11, 12, 13)]
        + [('b', t) for t in (5, 6, 7, 15, 16, 17, 18, 19)]
        + [('c', t) for t in (9,)]
    )
]


def triggered(windowfn, trigger_fn, mode, combine=False, **kwargs):
    """A branch: TRIGGER_EVENTS -> GroupByKey (and CombinePerKey).

    A count-based trigger keeps a CombinePerKey from being lifted, so it runs
    after the same GroupByKey: ``combine`` adds little and costs a shuffle.
    """

    def branch(p):
        kvs = create_timestamped(p, TRIGGER_EVENTS, 'Events') | beam.WindowInto(
            windowfn, trigger=trigger_fn, accumulation_mode=mode, **kwargs
        )
        if not combine:
            return gbk_shown(kvs)
        return (gbk_shown(kvs), combined_shown(kvs)) | beam.Flatten()

    return branch


def both_modes(windowfn, trigger_fn, combine=False, **kwargs):
    return branches(
        accumulating=triggered(windowfn, trigger_fn, ACCUMULATING, combine, **kwargs),
        discarding=triggered(windowfn, trigger_fn, DISCARDING, combine, **kwargs),
    )


def test_after_count(backend, tmp_path):
    # AfterCount alone finishes after one pane: Beam calls that unsafe.
    count = trigger.AfterCount(3)
    lines = assert_same(
        branches(
            global_accumulating=triggered(GlobalWindows(), count, ACCUMULATING),
            global_discarding=triggered(GlobalWindows(), count, DISCARDING),
            fixed_accumulating=triggered(FixedWindows(10), count, ACCUMULATING),
            fixed_discarding=triggered(FixedWindows(10), count, DISCARDING),
        ),
        tmp_path,
        backend,
        options={'allow_unsafe_triggers': True},
    )
    assert of_branch(lines, 'fixed_discarding')


def test_repeatedly_after_count(backend, tmp_path):
    lines = assert_same(
        both_modes(FixedWindows(10), trigger.Repeatedly(trigger.AfterCount(2))), tmp_path, backend
    )
    assert lines


def test_after_watermark_early_and_late(backend, tmp_path):
    lines = assert_same(
        both_modes(
            FixedWindows(10),
            trigger.AfterWatermark(early=trigger.AfterCount(2), late=trigger.AfterCount(1)),
            combine=True,
            allowed_lateness=Duration.of(5),
        ),
        tmp_path,
        backend,
    )
    # early panes (timing 0) and on-time panes (timing 1) both show up
    assert any('timing=0' in line for line in lines), lines
    assert any('timing=1' in line for line in lines), lines


def back_in_time(kv, timestamp=beam.DoFn.TimestampParam):
    key, values = kv
    yield TimestampedValue((key, sum(values)), timestamp - 25)


def late_data(p):
    # A first GroupByKey in 10 s windows emits at the end of each window; its
    # outputs are re-timestamped 25 s into the past (behind the end of their
    # new 5 s window + 1 s allowed lateness) and grouped again. Whatever
    # FnApiRunner keeps or drops in batch, the runner must keep or drop.
    kvs = events(p) | 'Fixed10' >> beam.WindowInto(
        FixedWindows(10), allowed_lateness=Duration.of(0)
    )
    first = kvs | 'First' >> beam.GroupByKey()
    second = (
        first
        | beam.FlatMap(back_in_time)
        | 'Fixed5'
        >> beam.WindowInto(
            FixedWindows(5),
            trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
            accumulation_mode=DISCARDING,
            allowed_lateness=Duration.of(1),
        )
        | 'Second' >> beam.GroupByKey()
        | 'ShowSecond' >> beam.ParDo(Show(show_group))
    )
    shown_first = first | 'ShowFirst' >> beam.ParDo(Show(show_group))
    return (shown_first, second) | beam.Flatten()


def test_allowed_lateness_and_late_data(backend, tmp_path):
    assert_same(
        branches(
            late=late_data,
            # lateness 0 and a late-firing trigger on the original timestamps
            zero_lateness=grouped_and_combined(
                FixedWindows(10),
                combine=False,
                trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                accumulation_mode=ACCUMULATING,
                allowed_lateness=Duration.of(0),
            ),
        ),
        tmp_path,
        backend,
    )


TIMESTAMP_COMBINERS = {
    'eow': TimestampCombiner.OUTPUT_AT_EOW,
    'earliest': TimestampCombiner.OUTPUT_AT_EARLIEST,
    'latest': TimestampCombiner.OUTPUT_AT_LATEST,
}
WINDOW_FNS = {
    'fixed': FixedWindows(10),
    'sliding': SlidingWindows(10, 5),
    'sessions': Sessions(4),
}


def test_timestamp_combiners(backend, tmp_path):
    # GroupByKey for each pair but the defaults the window tests cover (fixed
    # and sessions at the end of the window); CombinePerKey (combiner lifting:
    # partial combines carry timestamps) where elements are in several or
    # merged windows and the combiner is not the default.
    lines = assert_same(
        branches(
            **{
                '%s_%s' % (w, c): grouped_and_combined(
                    windowfn, timestamp_combiner=combiner, combine=w != 'fixed' and c != 'eow'
                )
                for w, windowfn in WINDOW_FNS.items()
                for c, combiner in TIMESTAMP_COMBINERS.items()
                if w == 'sliding' or c != 'eow'
            }
        ),
        tmp_path,
        backend,
    )
    # a's window [30, 40) holds 31 and 33: the group is stamped at 31 s
    assert "('a', [7, 8]) @ [30000000,40000000) ts=31000000" in '\n'.join(
        of_branch(lines, 'fixed_earliest')
    ), lines


# --------------------------------------------------------------------------
# Flatten, side inputs
# --------------------------------------------------------------------------


def flatten_of_coders(p):
    ints = p | 'Ints' >> beam.Create([('a', 1), ('b', 2), ('a', 3)]).with_output_types(
        tuple[str, int]
    )
    strs = p | 'Strs' >> beam.Create([('a', 'x'), ('c', 'y')]).with_output_types(tuple[str, str])
    anys = p | 'Anys' >> beam.Create([('b', 2.5), ('c', None)]).with_output_types(
        tuple[str, object]
    )
    merged = (ints, strs, anys) | beam.Flatten()
    return merged | beam.GroupByKey() | beam.ParDo(Show(show_value))


def flatten_of_windowed(p):
    # One input typed, one not (pickled/FastPrimitives coder), same windows.
    first = create_timestamped(p, EVENTS[:8], 'First') | 'Typed' >> beam.Map(
        lambda kv: kv
    ).with_output_types(tuple[str, int])
    second = create_timestamped(p, EVENTS[8:], 'Second') | 'Untyped' >> beam.Map(lambda kv: kv)
    merged = (first, second) | beam.Flatten() | beam.WindowInto(FixedWindows(10))
    return gbk_shown(merged)


def flatten_of_key_coders(p):
    # The same keys under different key coders: int keys, then Any keys.
    ints = p | 'IntKeys' >> beam.Create([(1, 'a'), (2, 'b')]).with_output_types(tuple[int, str])
    anys = p | 'AnyKeys' >> beam.Create([(1, 'c'), (2, 'd'), (3, 'e')]).with_output_types(
        tuple[object, str]
    )
    merged = (ints, anys) | beam.Flatten()
    return merged | beam.GroupByKey() | beam.ParDo(Show(show_value))


def flatten_of_groups(p):
    # Two GroupByKey outputs and a plain PCollection flattened straight into
    # one consumer: a stage reading two grouped inputs and an ungrouped one.
    kvs = create_timestamped(p, EVENTS, 'Events')
    fixed = kvs | 'Fixed' >> beam.WindowInto(FixedWindows(10)) | 'GroupFixed' >> beam.GroupByKey()
    scaled = (
        kvs
        | 'Fixed2' >> beam.WindowInto(FixedWindows(10))
        | 'Scale' >> beam.Map(lambda kv: (kv[0], kv[1] * 100))
        | 'GroupScaled' >> beam.GroupByKey()
    )
    plain = (
        kvs
        | 'PlainWindows' >> beam.WindowInto(FixedWindows(10))
        | 'AsLists' >> beam.Map(lambda kv: (kv[0], [kv[1]]))
    )
    return (
        (fixed, scaled, plain)
        | 'FlattenGroups' >> beam.Flatten()
        | 'ShowGroups' >> beam.ParDo(Show(show_group))
    )


def test_flatten_of_different_coders_into_group_by_key(backend, tmp_path):
    lines = assert_same(
        branches(
            values=flatten_of_coders,
            windowed=flatten_of_windowed,
            keys=flatten_of_key_coders,
            groups=flatten_of_groups,
        ),
        tmp_path,
        backend,
    )
    assert len(of_branch(lines, 'values')) == 3
    assert len(of_branch(lines, 'keys')) == 3, lines


def lookup_dict(key, side):
    yield '%s -> %r' % (key, show_value(side.get(key, [])))


def lookup_multimap(key, side):
    yield '%s -> %r' % (key, show_value(side[key]))


def gbk_as_side_input(p):
    kvs = p | 'Kvs' >> beam.Create([(k, v) for k, v, _ in EVENTS])
    grouped = kvs | beam.GroupByKey()
    keys = p | 'Keys' >> beam.Create(['a', 'b', 'c', 'd'])
    as_dict = keys | 'Dict' >> beam.FlatMap(lookup_dict, side=beam.pvalue.AsDict(grouped))
    as_multimap = keys | 'MultiMap' >> beam.FlatMap(
        lookup_multimap, side=beam.pvalue.AsMultiMap(grouped)
    )
    # the grouped output is also read as a main input (a second consumer)
    direct = grouped | 'Direct' >> beam.Map(lambda kv: 'direct %s %r' % (kv[0], sorted(kv[1])))
    return (as_dict, as_multimap, direct) | beam.Flatten()


def flatten_as_side_input(p):
    left = p | 'Left' >> beam.Create([1, 2, 3])
    right = p | 'Right' >> beam.Create([10, 20])
    third = p | 'Third' >> beam.Create(['x', 'y']) | beam.Map(lambda s: s * 2)
    both = (left, right, third) | 'Merge' >> beam.Flatten()
    main = p | 'Main' >> beam.Create(['m1', 'm2'])
    return main | beam.Map(
        lambda m, side: '%s %r' % (m, sorted(map(repr, side))), side=beam.pvalue.AsList(both)
    )


def test_side_inputs_from_group_by_key_and_flatten(backend, tmp_path):
    lines = assert_same(
        branches(
            gbk=gbk_as_side_input,
            flatten=flatten_as_side_input,
        ),
        tmp_path,
        backend,
    )
    assert len(of_branch(lines, 'gbk')) == 4 + 4 + 3
    assert len(of_branch(lines, 'flatten')) == 2


def side_lookup(kv, side_list, side_dict, side_single):
    key, value = kv
    return (key, value, sorted(side_list), sorted(side_dict.items()), side_single)


def fixed_reads_fixed(p):
    # Main input in 10 s windows reads side inputs in 30 s windows: each main
    # window sees the side window holding its end.
    main = events(p, 'Main') | 'MainWindows' >> beam.WindowInto(FixedWindows(10))
    side = create_timestamped(
        p, [('s%d' % t, t, t) for t in (1, 12, 29, 30, 44, 61)], 'Side'
    ) | 'SideWindows' >> beam.WindowInto(FixedWindows(30))
    side_values = side | beam.Values()
    # one value in [0, 30) only: other main windows see the default
    single = (
        p
        | 'Single' >> beam.Create([5])
        | 'SingleStamp' >> beam.Map(lambda x: TimestampedValue(x, x))
        | 'SingleWindows' >> beam.WindowInto(FixedWindows(30))
    )
    return (
        main
        | beam.Map(
            side_lookup,
            side_list=beam.pvalue.AsList(side_values),
            side_dict=beam.pvalue.AsDict(side),
            side_single=beam.pvalue.AsSingleton(single, default_value=-1),
        )
        | beam.ParDo(Show())
    )


def fixed_reads_sliding_group(p):
    # Side input = a GroupByKey in sliding windows, read from fixed windows.
    side = (
        events(p, 'SideEvents')
        | 'SideWindows' >> beam.WindowInto(SlidingWindows(20, 10))
        | 'SideGroup' >> beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: (k, sum(vs)))
    )
    main = (
        create_timestamped(p, [(k, None, t) for k in 'abcd' for t in (5, 25, 45)], 'Main')
        | beam.Keys()
        | 'MainWindows' >> beam.WindowInto(FixedWindows(10))
    )
    return (
        main | beam.Map(lambda k, d: (k, d.get(k)), d=beam.pvalue.AsDict(side)) | beam.ParDo(Show())
    )


def test_windowed_side_inputs(backend, tmp_path):
    lines = assert_same(
        branches(
            fixed=fixed_reads_fixed,
            sliding_group=fixed_reads_sliding_group,
        ),
        tmp_path,
        backend,
    )
    assert len(of_branch(lines, 'fixed')) == len(EVENTS)
    assert len(of_branch(lines, 'sliding_group')) == 12


def empty_count(p):
    empty = p | 'Empty' >> beam.Create([]).with_output_types(tuple[str, int])
    return empty | Count.Globally() | 'ShowCount' >> beam.ParDo(Show())


def empty_group(p):
    empty = p | 'Empty' >> beam.Create([]).with_output_types(tuple[str, int])
    return gbk_shown(empty)


def reshuffled(p):
    return (
        events(p) | beam.WindowInto(SlidingWindows(10, 5)) | beam.Reshuffle() | beam.ParDo(Show())
    )


def reshuffled_groups(p):
    # Panes of a GroupByKey's output survive a Reshuffle.
    return (
        events(p)
        | beam.WindowInto(
            FixedWindows(10),
            trigger=trigger.AfterWatermark(early=trigger.AfterCount(2)),
            accumulation_mode=DISCARDING,
        )
        | beam.GroupByKey()
        | beam.Reshuffle()
        | beam.ParDo(Show(show_group))
    )


def test_empty_inputs_and_reshuffle(backend, tmp_path):
    # Count.Globally of nothing is 0 (a default value, via a side input);
    # a GroupByKey of nothing is nothing; Reshuffle keeps windows/timestamps.
    lines = assert_same(
        branches(
            empty_count=empty_count,
            empty_group=empty_group,
            reshuffle=reshuffled,
            reshuffle_groups=reshuffled_groups,
        ),
        tmp_path,
        backend,
    )
    assert len(of_branch(lines, 'empty_count')) == 1
    assert len(of_branch(lines, 'reshuffle')) == 2 * len(EVENTS)


# --------------------------------------------------------------------------
# The scenarios Spark Connect runs (test_spark_connect.py)
# --------------------------------------------------------------------------

# What Connect changes is how rows move (Connect's DataFrame API for shuffles,
# unions and filters, side inputs shipped as artifacts, closures sent with each
# query), not Beam's semantics in the worker: these cross every such path once,
# as one pipeline (one Connect server serves the whole module).
SCENARIOS = {
    'sessions': grouped_and_combined(Sessions(5)),
    'custom_window_coder': grouped_and_combined(LabeledWindows(10)),
    'custom_key_coder': custom_key_coder,
    'repeatedly_after_count': triggered(
        FixedWindows(10), trigger.Repeatedly(trigger.AfterCount(2)), DISCARDING
    ),
    'gbk_as_side_input': gbk_as_side_input,
    'windowed_side_inputs': fixed_reads_sliding_group,
    'flatten_of_coders': flatten_of_coders,
    'reshuffle_groups': reshuffled_groups,
    'empty_count': empty_count,
}


def test_connect_scenarios_on_this_backend(backend, tmp_path):
    lines = assert_same(branches(**SCENARIOS), tmp_path, backend)
    assert {line.split('|')[0] for line in lines} == set(SCENARIOS)


# --------------------------------------------------------------------------
# Reading a large file; a large fan-out
# --------------------------------------------------------------------------

# ~62 MB. ReadFromText splits a file into bundles of 1000 * sqrt(size) bytes,
# here 8; the runner's Reshuffle spreads them over the partitions by a hash of
# their bytes (all 8 in one of 2 partitions: probability 1/128).
TEXT_LINES = 200_000


def _write_text_file(path) -> None:
    filler = 'abcdefghijklmnopqrstuvwxyz0123456789' * 9
    with open(path, 'w', encoding='utf-8') as f:
        for i in range(TEXT_LINES):
            # 309 bytes: index, a varying slice of the filler, a hash of i
            f.write('%08d %s %08x\n' % (i, filler[i % 36 :][:290], i * 2654435761 % (1 << 32)))


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
    assert os.path.getsize(path) > 55 << 20

    def build(p):
        per_task = (
            p | beam.io.ReadFromText(path) | beam.Map(_line_stats) | beam.CombinePerKey(_sum_tuples)
        )
        totals = (
            per_task
            | beam.Values()
            | beam.CombineGlobally(_sum_tuples)
            | beam.Map(lambda t: 'total %d %d %d %d' % t)
        )
        tasks = per_task | beam.Map(lambda kv: 'task %s %d' % (kv[0], kv[1][0]))
        return (totals, tasks) | beam.Flatten()

    on_spark, on_fnapi = run_both(build, tmp_path, spark)
    n = TEXT_LINES
    expected_total = 'total %d %d %d' % (n, n * (n - 1) // 2, (n - 1) * n * (2 * n - 1) // 6)
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
        return (
            p
            | beam.Create([n])
            | beam.FlatMap(lambda k: range(k))
            | Count.Globally()
            | beam.Map(str)
        )

    lines = run_on(InProcessSparkRunner(spark=spark), build, tmp_path / 'spark')
    assert lines == [str(n)]
