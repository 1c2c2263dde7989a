"""Batch semantics Beam's own tests and Nexmark found missing.

Each test runs on the debug engine and on Spark (``engine``), against
FnApiRunner where it can run the pipeline, else against results computed by
hand from Beam's model.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import typing
from unittest import mock

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from apache_beam.transforms import trigger
from apache_beam.transforms import window
from apache_beam.transforms.window import IntervalWindow
from apache_beam.transforms.window import TimestampedValue

from beam_spark_inproc import InProcessSparkRunner
from tests.integration.test_semantics import run_on


@pytest.fixture(params=['debug'])
def engine(request):
    """A factory of runners on one engine: the debug engine, and Spark where
    Spark runs something of its own (``both``)."""
    if request.param == 'debug':
        return lambda: InProcessSparkRunner(debug=True)
    spark = request.getfixturevalue('spark')
    return lambda: InProcessSparkRunner(spark=spark)


# -- 1. no bundle for an empty partition ------------------------------------


class CountInFinishBundle(beam.DoFn):
    """Emits, in finish_bundle, how many elements its bundle had."""

    def start_bundle(self):
        self.count = 0

    def process(self, element):
        self.count += 1

    def finish_bundle(self):
        yield window.GlobalWindows.windowed_value(self.count)


both = pytest.mark.parametrize('engine', ['debug', 'spark'], indirect=True)


@both
def test_empty_partitions_run_no_bundle(engine):
    # Impulse: one bundle (Spark gave its one row defaultParallelism
    # partitions); after a GroupByKey with one key: bundles only where the key
    # is (the other shuffle partitions are empty).
    with beam.Pipeline(runner=engine()) as p:
        from_impulse = p | beam.Impulse() | 'AfterImpulse' >> beam.ParDo(CountInFinishBundle())
        assert_that(from_impulse, equal_to([1]), label='CheckImpulse')
        grouped = (
            p
            | beam.Create([1, 2, 3])
            | beam.Map(lambda x: ('k', x))
            | beam.GroupByKey()
            | 'Grouped' >> beam.ParDo(CountInFinishBundle())
        )
        assert_that(grouped, equal_to([1]), label='CheckGrouped')


# -- 2. Reshuffle in front of a GroupByKey ----------------------------------


class Key(typing.NamedTuple):
    a: int
    b: str


def _reshuffled_groups(p):
    named = (
        p
        | 'Named' >> beam.Create([1, 2, 3, 4])
        | 'KeyNamed' >> beam.Map(lambda x: (Key(x % 2, 'x'), x))
        | 'ReshuffleNamed' >> beam.Reshuffle()
        | 'GroupNamed' >> beam.GroupByKey()
        | 'ShowNamed' >> beam.Map(lambda kv: 'named %s %s' % (tuple(kv[0]), sorted(kv[1])))
    )
    sessions = (
        p
        | 'Timed' >> beam.Create([1, 2, 3, 20])
        | 'Stamp' >> beam.Map(lambda x: TimestampedValue(('k', x), x))
        | beam.WindowInto(window.Sessions(5))
        | 'ReshuffleSessions' >> beam.Reshuffle()
        | 'GroupSessions' >> beam.GroupByKey()
        | 'ShowSessions' >> beam.ParDo(_ShowWindow())
        | 'Global' >> beam.WindowInto(window.GlobalWindows())
    )
    return (named, sessions) | beam.Flatten()


class _ShowWindow(beam.DoFn):
    def process(self, kv, w=beam.DoFn.WindowParam):
        yield 'sessions %s %s' % (w, sorted(kv[1]))


@both  # the re-encoding is a step of its own on Spark
def test_reshuffle_before_group_by_key_recodes(engine, tmp_path):
    # Beam gives the GroupByKey's input (the Reshuffle's output) a deterministic
    # key coder: the Reshuffle's bytes must be re-encoded, not forwarded.
    on_runner = run_on(engine(), _reshuffled_groups, tmp_path / 'runner')
    expected = run_on(FnApiRunner(), _reshuffled_groups, tmp_path / 'fnapi')
    assert on_runner == expected and len(expected) == 4


class _ShowPane(beam.DoFn):
    def process(self, element, pane=beam.DoFn.PaneInfoParam):
        yield '%s %s' % (element, pane)


def _panes_after_reshuffle(p):
    return (
        p
        | beam.Create([('a', 1), ('a', 2), ('b', 3)])
        | beam.GroupByKey()  # its outputs have an ON_TIME pane
        | beam.MapTuple(lambda k, vs: '%s %s' % (k, sorted(vs)))
        | beam.Reshuffle()
        | beam.ParDo(_ShowPane())
    )


@pytest.mark.parametrize('version', [None, '2.60.0'])
def test_reshuffle_pane_info_follows_compat_version(engine, tmp_path, version):
    options = {'update_compatibility_version': version} if version else {}
    # Beam pickles pipelines older than 2.68 with dill (not a dependency);
    # Beam's own ReshuffleTest patches the same switch.
    with mock.patch('apache_beam.coders.coders._should_force_use_dill', return_value=True):
        on_runner = run_on(engine(), _panes_after_reshuffle, tmp_path / 'runner', options)
        expected = run_on(FnApiRunner(), _panes_after_reshuffle, tmp_path / 'fnapi', options)
    assert on_runner == expected and len(expected) == 2


def _streamed_panes_after_reshuffle(p):
    return (
        p
        | TestStream()
        .add_elements([('a', 1), ('a', 2)])
        .advance_watermark_to(20)
        .add_elements([('b', 3)])
        .advance_watermark_to_infinity()
        | beam.WindowInto(window.FixedWindows(10))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: '%s %s' % (k, sorted(vs)))
        | beam.Reshuffle()
        | beam.ParDo(_ShowPane())
    )


_STREAMED: list[str] = []  # in-driver runners only (the debug engine, Beam's)


def _record(line: str) -> None:
    _STREAMED.append(line)


@pytest.mark.parametrize('version', [None, '2.64.0'])
def test_streaming_reshuffle_pane_info_follows_compat_version(version):
    # The streaming loop ran Reshuffle without the batch executor's re-encoding
    # and pane reset: ON_TIME panes came out of a 2.64 pipeline's Reshuffle.
    def run(runner):
        del _STREAMED[:]
        options = PipelineOptions(streaming=True, update_compatibility_version=version)
        # Beam pickles pipelines older than 2.68 with dill (not a dependency);
        # Beam's own ReshuffleTest patches the same switch.
        with mock.patch('apache_beam.coders.coders._should_force_use_dill', return_value=True):
            with beam.Pipeline(runner=runner, options=options) as p:
                _ = _streamed_panes_after_reshuffle(p) | beam.Map(_record)
        return sorted(_STREAMED)

    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

    expected = run(BundleBasedDirectRunner())
    assert run(InProcessSparkRunner(debug=True)) == expected
    assert len(expected) == 2
    assert all(('UNKNOWN' in line) == bool(version) for line in expected), expected


class _CountTo(beam.DoFn, beam.RestrictionProvider):
    """A splittable DoFn with side inputs: ``n`` -> n lines naming them."""

    def initial_restriction(self, n):
        return OffsetRange(0, n)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, n, restriction):
        return restriction.size()

    def process(self, n, names, offset, tracker=beam.DoFn.RestrictionParam()):
        i = tracker.current_restriction().start
        while tracker.try_claim(i):
            yield '%s %d' % (names[n], offset + i)
            i += 1


def _splittable_with_side_inputs(p):
    names = p | 'Names' >> beam.Create([{2: 'two', 3: 'three'}])
    offset = p | 'Offset' >> beam.Create([100])
    return (
        p
        | beam.Create([2, 3])
        | beam.ParDo(
            _CountTo(), names=beam.pvalue.AsSingleton(names), offset=beam.pvalue.AsSingleton(offset)
        )
    )


@both
def test_splittable_dofn_reshuffle_leaves_side_inputs_alone(engine, tmp_path):
    # Beam's expand_sdf puts a Reshuffle in front of the Process transform that
    # copies the ParDo's inputs, side inputs included: the Reshuffle must move
    # the main input only (it mixed the side inputs' elements into it:
    # "'dict' object has no attribute ...", as beam.dataframe.io's reads did).
    on_runner = run_on(engine(), _splittable_with_side_inputs, tmp_path / 'runner')
    expected = run_on(FnApiRunner(), _splittable_with_side_inputs, tmp_path / 'fnapi')
    assert on_runner == expected and len(expected) == 5


# -- 3. value providers ----------------------------------------------------


class _ValueOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_value_provider_argument('--greeting', default='hello')


def test_runtime_value_provider_in_workers(engine):
    # Built without the option: a RuntimeValueProvider, read inside a DoFn
    # (and its setup). Its value: the option the pipeline runs with, else its
    # default (as Beam's SDK harness serves them).
    greeting = _ValueOptions([]).greeting
    assert isinstance(greeting, beam.options.value_provider.RuntimeValueProvider)

    class Greet(beam.DoFn):
        def setup(self):
            self.at_setup = greeting.get()

        def process(self, name):
            yield '%s %s %s' % (self.at_setup, greeting.get(), name)

    for args, word in (([], 'hello'), (['--greeting', 'hi'], 'hi')):
        with beam.Pipeline(runner=engine(), options=_ValueOptions(args)) as p:
            out = p | beam.Create(['ann']) | beam.ParDo(Greet())
            assert_that(out, equal_to(['%s %s ann' % (word, word)]))


def _log_each(x):
    logging.getLogger('user.dofn').info('logged in a DoFn: %s', x)
    return x


@both
def test_dofn_log_records_reach_the_driver_once(engine):
    # Beam's FnApiRunner relays its SDK workers' records to the runner's
    # logging (Fn API logging service); Spark's Python workers logged to their
    # own stderr only (snippets_test ValueProviderInfoTest looks for them with
    # assertLogs). In debug mode the DoFn logs in the driver: once, not twice.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)  # the driver's level goes to the workers
    try:
        with LogCapture() as seen:
            with beam.Pipeline(runner=engine()) as p:
                _ = p | beam.Create([1, 2, 3]) | beam.Map(_log_each)
    finally:
        root.setLevel(level)
    messages = [r.getMessage() for r in seen.records if r.name == 'user.dofn']
    assert sorted(messages) == ['logged in a DoFn: %d' % i for i in (1, 2, 3)]


def _fail_with(x, side):
    raise ValueError('main input failed after its side input ran')


@both
def test_log_records_of_jobs_before_a_failure_reach_the_driver(engine):
    # A side input is its own Spark job, ending before the stage that reads
    # it fails: its records are logged as that job ends, not lost with the
    # pipeline (they were relayed only when a pipeline succeeded).
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    try:
        with LogCapture() as seen, pytest.raises(Exception, match='side input ran'):
            with beam.Pipeline(runner=engine()) as p:
                side = p | 'Side' >> beam.Create([1, 2]) | beam.Map(_log_each)
                _ = p | 'Main' >> beam.Create([0]) | beam.Map(_fail_with, beam.pvalue.AsList(side))
    finally:
        root.setLevel(level)
    messages = [r.getMessage() for r in seen.records if r.name == 'user.dofn']
    assert sorted(messages) == ['logged in a DoFn: %d' % i for i in (1, 2)]


class LogCapture(logging.Handler):
    """The records the driver's root logger handles while active."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def __enter__(self):
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger().removeHandler(self)


# -- 4. custom window types -------------------------------------------------


class TaggedWindow(IntervalWindow):
    """An interval window with a tag of its own (a user window type)."""

    def __init__(self, start, end, tag):
        super().__init__(start, end)
        self.tag = tag

    def __eq__(self, other):
        return (
            type(self) is type(other)
            and self.start == other.start
            and self.end == other.end
            and self.tag == other.tag
        )

    def __hash__(self):
        return hash((self.start, self.end, self.tag))

    def __repr__(self):
        return 'TaggedWindow(%s, %s, %s)' % (self.start, self.end, self.tag)


class TaggedWindowCoder(beam.coders.Coder):
    def encode(self, w):
        return beam.coders.PickleCoder().encode((w.start, w.end, w.tag))

    def decode(self, data):
        return TaggedWindow(*beam.coders.PickleCoder().decode(data))

    def is_deterministic(self):
        return True


class TaggedSessions(window.WindowFn):
    """Sessions (gap 5) that merge only windows of the same tag (value % 2)."""

    def assign(self, context):
        return [TaggedWindow(context.timestamp, context.timestamp + 5, context.element[1] % 2)]

    def merge(self, merge_context):
        by_tag: dict = {}
        for w in sorted(merge_context.windows, key=lambda w: w.start):
            runs = by_tag.setdefault(w.tag, [])
            if runs and w.start < runs[-1][-1].end:
                runs[-1].append(w)
            else:
                runs.append([w])
        for tag, runs in by_tag.items():
            for run in runs:
                if len(run) > 1:
                    merge_context.merge(
                        run, TaggedWindow(min(w.start for w in run), max(w.end for w in run), tag)
                    )

    def get_window_coder(self):
        return TaggedWindowCoder()


class _ShowTagged(beam.DoFn):
    def process(self, kv, w=beam.DoFn.WindowParam):
        yield '%s %s %s' % (kv[0], w, sorted(kv[1]))


def test_merging_custom_window_type(engine, tmp_path):
    # FnApiRunner keeps such windows opaque and cannot merge them: expected
    # from the WindowFn's definition.
    def build(p):
        return (
            p
            | beam.Create([1, 2, 3, 4, 12, 30])
            | beam.Map(lambda x: TimestampedValue(('k', x), x))
            | beam.WindowInto(TaggedSessions())
            | beam.GroupByKey()
            | beam.ParDo(_ShowTagged())
        )

    assert run_on(engine(), build, tmp_path) == sorted(
        [
            'k TaggedWindow(Timestamp(1), Timestamp(8), 1) [1, 3]',
            'k TaggedWindow(Timestamp(2), Timestamp(9), 0) [2, 4]',
            'k TaggedWindow(Timestamp(12), Timestamp(17), 0) [12]',
            'k TaggedWindow(Timestamp(30), Timestamp(35), 0) [30]',
        ]
    )


# -- 5. processing-time triggers in batch ------------------------------------


def test_processing_time_trigger_fires_at_end_of_input(engine, tmp_path):
    # FnApiRunner fails ("'NoneType' object has no attribute 'time'"); in batch
    # processing time ends with the input: one pane per key with all of it.
    def build(p):
        return (
            p
            | beam.Create(['a', 'b', 'b', 'c', 'c', 'c'])
            | beam.WindowInto(
                window.GlobalWindows(),
                trigger=trigger.Repeatedly(trigger.AfterProcessingTime(10)),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
                allowed_lateness=0,
            )
            | beam.combiners.Count.PerElement()
            | beam.ParDo(_ShowPane())
        )

    lines = run_on(engine(), build, tmp_path)
    assert [line.split(' PaneInfo')[0] for line in lines] == ["('a', 1)", "('b', 2)", "('c', 3)"]
    assert all('timing: EARLY' in line for line in lines), lines


# -- 7. workers that cannot import Beam ---------------------------------------


def test_workers_without_beam_get_a_clear_error(tmp_path):
    # A user's own session whose workers run a Python without Beam: its own
    # process (one SparkContext per process).
    bare = _python_without_beam()
    if bare is None:
        pytest.skip('no Python without apache_beam on this machine to run the workers with')
    script = tmp_path / 'bare_workers.py'
    script.write_text(
        textwrap.dedent("""
        import sys
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master('local[1]')
                 .config('spark.ui.enabled', 'false').getOrCreate())
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions
        from beam_spark_inproc import InProcessSparkRunner
        # The workers are under test: this tiny stage on Spark, not in the
        # driver (execution.small).
        on_spark = PipelineOptions(['--spark_small_data_kb=0'])
        for attempt in range(2):
            try:
                with beam.Pipeline(runner=InProcessSparkRunner(spark=spark),
                                   options=on_spark) as p:
                    p | beam.Create([1, 2]) | beam.Map(print)
                print('RAN')
            except Exception as e:
                print('ERROR', type(e).__name__, str(e).replace(chr(10), ' '))
    """)
    )
    env = dict(os.environ, PYSPARK_PYTHON=bare)
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=os.getcwd(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in done.stdout.splitlines() if line.startswith('ERROR')]
    assert len(errors) == 2, done.stdout + done.stderr[-3000:]
    for line in errors:
        assert line.startswith('ERROR WorkerEnvironmentError'), line
        assert bare in line or os.path.realpath(bare) in line or 'Python workers run /' in line, (
            line
        )
        assert 'apache_beam' in line and 'PYSPARK_PYTHON' in line, line
        assert sys.executable in line, line


def _python_without_beam():
    for candidate in ('/usr/bin/python3', '/usr/local/bin/python3'):
        if not os.path.exists(candidate):
            continue
        try:
            check = subprocess.run(
                [candidate, '-c', 'import sys; print(sys.version_info[:2]);import apache_beam'],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except OSError:
            continue
        same_minor = check.stdout.strip() == str(tuple(sys.version_info[:2]))
        if check.returncode != 0 and same_minor:
            return candidate
    return None
