"""Stages run in the driver while Spark's session starts (``execution.small``,
``Cold``): a run with a session still to be made begins in the driver, starts
the session in the background when its work outgrows the driver's limits, and
hands the input not yet fed to Spark once the session is ready. Results as
computed by hand, whichever way the race goes.

The session's start is simulated on the test run's shared session
(``_SlowStart``: ready only a number of checks after ``start``), so that
each case decides when Spark becomes ready."""

from __future__ import annotations

import collections
import random
import time

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution import small
from beam_spark_inproc.spark import hand_over
from beam_spark_inproc.spark import session as spark_session

# Set by a DoFn running in the driver: the session is ready from then on.
_READY_NOW = {'flag': False}


class _SlowStart:
    """A ``LazySession`` stand-in: ``ready`` turns true ``checks`` looks
    after ``start`` (never, with None) or once ``_READY_NOW`` is set, and
    ``get`` makes it ready at once."""

    def __init__(self, spark, checks):
        self._spark = spark
        self._checks = checks
        self.started = False
        self._looks = 0
        self.got = False

    @property
    def ready(self) -> bool:
        if self.got or _READY_NOW['flag']:
            return True
        if self.started and self._checks is not None:
            self._looks += 1
            return self._looks > self._checks
        return False

    created = ready

    def start(self) -> None:
        self.started = True

    def get(self):
        self.got = True
        return self._spark


@pytest.fixture
def slow_start(spark, monkeypatch):
    """Runs a pipeline with a session that starts slowly; returns
    (the start, the engine) after the run. Each run in the driver is
    recorded in the engine's ``runs``: (stage input mode, 'whole', 'split'
    or 'dropped')."""
    made = {}
    original = small.SmallDataEngine.__init__
    run_here = small.SmallDataEngine._run_here

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.runs = []
        made['engine'] = self

    def recorded(self, data, task, cold=False):
        try:
            result, rest = run_here(self, data, task, cold)
        except BaseException:
            self.runs.append((task.stage.input_mode, 'dropped'))
            raise
        self.runs.append((task.stage.input_mode, 'whole' if rest is None else 'split'))
        return result, rest

    monkeypatch.setattr(small.SmallDataEngine, '__init__', init)
    monkeypatch.setattr(small.SmallDataEngine, '_run_here', recorded)
    monkeypatch.setitem(_READY_NOW, 'flag', False)

    def run(build, checks):
        start = _SlowStart(spark, checks)
        monkeypatch.setattr(spark_session, 'lazy_local_session', lambda *args: start)
        with beam.Pipeline(runner=InProcessSparkRunner(), argv=['--spark_master=local[2]']) as p:
            build(p)
        return start, made['engine']

    return run


def _costs(monkeypatch, starting: float, ready: float) -> None:
    """What a stage handed over costs (``hand_over``), whatever the machine's
    load: ``starting`` while the session is still to be made (0: the work
    starts it at once), ``ready`` once it is."""
    monkeypatch.setattr(hand_over, 'load_factor', lambda: 1.0)
    monkeypatch.setattr(hand_over, 'START_SECONDS', starting)
    monkeypatch.setattr(hand_over, 'FIRST_JOB_SECONDS', ready)
    monkeypatch.setattr(hand_over, 'JOB_SECONDS', ready)


def _lines(tmp_path, n: int):
    rng = random.Random(3)
    words = 'a quick brown fox jumps over the lazy dog'.split()
    lines = [' '.join(rng.choice(words) for _ in range(6)) for _ in range(n)]
    path = tmp_path / 'lines.txt'
    path.write_text('\n'.join(lines) + '\n')
    return str(path), collections.Counter(w for line in lines for w in line.split())


def _word_count(path, expected):
    def build(p):
        counts = (
            p
            | beam.io.ReadFromText(path)
            | beam.FlatMap(str.split)
            | beam.combiners.Count.PerElement()
        )
        assert_that(counts, equal_to(list(expected.items())))

    return build


def test_a_tiny_read_stays_in_the_driver_and_starts_nothing(slow_start, tmp_path):
    path, expected = _lines(tmp_path, 200)
    start, engine = slow_start(_word_count(path, expected), checks=None)
    assert not start.started and not start.got
    assert engine.stages_on_spark == 0 and engine.stages_split == 0


def test_a_read_begun_in_the_driver_hands_the_rest_to_spark_once_ready(
    slow_start, tmp_path, monkeypatch
):
    # Started by the first pieces; ready a few pieces after that; the rest
    # worth a hand-over however little of it there is.
    _costs(monkeypatch, starting=0.0, ready=0.0)
    path, expected = _lines(tmp_path, 40_000)
    start, engine = slow_start(_word_count(path, expected), checks=3)
    assert start.started and start.got
    assert engine.stages_split >= 1


def test_a_read_the_driver_would_soon_finish_ends_there_once_ready(
    slow_start, tmp_path, monkeypatch
):
    """The same read, Spark ready as early, but the rest of it would take
    the driver less than Spark's cost: it ends in the driver."""
    _costs(monkeypatch, starting=0.0, ready=3600.0)
    path, expected = _lines(tmp_path, 40_000)
    start, engine = slow_start(_word_count(path, expected), checks=3)
    assert start.started
    assert engine.stages_split == 0


def test_a_read_finished_before_spark_is_ready_never_waits_for_it(
    slow_start, tmp_path, monkeypatch
):
    _costs(monkeypatch, starting=0.0, ready=0.0)
    path, expected = _lines(tmp_path, 40_000)
    start, engine = slow_start(_word_count(path, expected), checks=None)
    # The work outgrew the limits, so the session was started, but the run
    # ended in the driver: no stage waited for it.
    assert start.started and not start.got
    assert engine.stages_on_spark == 0 and engine.stages_split == 0


def _ready_at_key_5(kv):
    if kv[0] == 5:
        _READY_NOW['flag'] = True  # Spark is ready mid-stage
    return range(kv[0] * 1000, kv[0] * 1000 + 1000)


def test_a_grouped_stage_begun_cold_ends_in_the_driver(slow_start, monkeypatch):
    """Rows grouped by key cannot be cut between two inputs: a GroupByKey's
    reading stage begun before Spark was ready runs to its end here although
    the session became ready meanwhile (its output within COLD_MAX_BYTES),
    past the (zero) cost that hands over a stage begun with Spark ready."""
    _costs(monkeypatch, starting=0.0, ready=0.0)

    def build(p):
        sums = (
            p
            | beam.Create([(k, k) for k in range(30)])
            | beam.GroupByKey()
            | beam.FlatMap(_ready_at_key_5)
            | beam.CombineGlobally(sum)
        )
        assert_that(sums, equal_to([sum(range(30_000))]))

    start, engine = slow_start(build, checks=None)
    assert start.started and _READY_NOW['flag']
    grouped = [outcome for mode, outcome in engine.runs if mode == 'grouped']
    assert grouped[0] == 'whole'  # GroupByKey, FlatMap: begun cold
    assert engine.stages_split == 0


def test_runs_of_one_process_share_the_session_start(spark, monkeypatch, tmp_path):
    """Every pipeline makes its own runner: the second run of a process finds
    the session the first one started (``lazy_local_session``), made once
    and warmed up once, and runs on it; results as computed by hand."""
    from pyspark.sql import SparkSession

    monkeypatch.setattr(spark_session, '_SHARED', None)
    # As in a new process: no session is active before the first run.
    monkeypatch.setattr(SparkSession, 'getActiveSession', classmethod(lambda cls: None))
    made, warmed = [], []
    monkeypatch.setattr(
        InProcessSparkRunner, 'session', lambda self, options=None: made.append(1) or spark
    )
    warm_up = spark_session.warm_up
    monkeypatch.setattr(spark_session, 'warm_up', lambda *args: warmed.append(1) or warm_up(*args))
    engines = []
    original = small.SmallDataEngine.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        engines.append(self)

    monkeypatch.setattr(small.SmallDataEngine, '__init__', init)
    _costs(monkeypatch, starting=0.0, ready=0.0)  # the read starts it
    path, expected = _lines(tmp_path, 2_000)
    for _ in range(2):
        with beam.Pipeline(runner=InProcessSparkRunner(), argv=['--spark_master=local[2]']) as p:
            _word_count(path, expected)(p)
        engines[-1]._spark_start.get()  # its start ends (and the warm-up)
        while not engines[-1]._spark_start.ready:
            time.sleep(0.05)
    assert made == [1] and warmed == [1]
    assert engines[0]._spark_start is engines[1]._spark_start
    assert engines[1].stages_on_spark + engines[1].stages_split >= 1


def test_a_stopped_session_is_started_anew(monkeypatch):
    from pyspark.sql import SparkSession

    class Session:
        def __init__(self):
            self._sc = type('Context', (), {'_jsc': object()})()

    monkeypatch.setattr(spark_session, '_SHARED', None)
    monkeypatch.setattr(SparkSession, 'getActiveSession', classmethod(lambda cls: None))
    first = spark_session.lazy_local_session(Session, 'local[2]', None)
    made = first.get()  # a stage of its run needed Spark
    assert first.ready
    assert spark_session.lazy_local_session(Session, 'local[2]', None) is first
    made._sc._jsc = None  # its user stopped it
    assert first.stopped
    second = spark_session.lazy_local_session(Session, 'local[2]', None)
    assert second is not first and not second.created
    assert spark_session.lazy_local_session(Session, 'yarn', None) is None


def _sluggish(x):
    time.sleep(0.1)  # a loaded machine's tiny stage: 0.5 s for five elements
    return x % 2, x


def test_a_slow_tiny_stage_starts_no_session_on_a_loaded_machine(slow_start, monkeypatch):
    """A tiny stage that takes 0.5 s in the driver, on a machine loaded 4 per
    core: the session's start and first job would cost far more than the
    stage, so none is started; the result is as computed by hand."""
    import os

    cores = len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, 'getloadavg', lambda: (4.0 * cores, 4.0 * cores, 4.0 * cores))

    def build(p):
        sums = p | beam.Create(list(range(5))) | beam.Map(_sluggish) | beam.CombinePerKey(sum)
        assert_that(sums, equal_to([(0, 6), (1, 4)]))

    start, engine = slow_start(build, checks=None)
    assert not start.started and not start.got
    assert engine.stages_on_spark == 0
